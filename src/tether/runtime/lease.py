"""A run's hold on its session: the lease taken before the run's first append, renewed while it runs and
given back when it ends, so that two runs never write one session at once, in one process or many. A run
whose holder died is free again once its lease expires. What another process asks of the run (cancel,
pause) waits in the lease and reaches the run within `POLL` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ..errors import LeaseLost, SessionBusy, StoreError, TetherError
from ..ids import new_id
from ..store.protocols import Leases
from ..store.records import Lease, LeaseRequest

log = logging.getLogger("tether.runtime")

DEFAULT_TTL = 30.0
"""Seconds a run's lease lasts unless renewed: how long a session stays busy after its holder died."""
POLL = 0.5
"""Seconds between the run's looks at its lease: a request from another process reaches it within this."""
WAIT_POLL = 0.05
"""Seconds between the tries of a run that waits for its session's lease (`LeaseTerms.wait`): a prompt given
to one worker of a server while another worker's run ends starts within this of that end."""


class WouldWait(Exception):
    """The lease is held by another run and the terms say to wait for it, which the caller said not to do
    (`RunLease.acquire(wait=False)`). Not a `TetherError`: it never leaves the runtime."""

    def __init__(self, busy: SessionBusy) -> None:
        super().__init__(str(busy))
        self.busy = busy


@dataclass(frozen=True)
class LeaseTerms:
    """How a run holds its session: `ttl` seconds at a time, renewed at a third of it; and how long to wait
    for a session another run holds (`wait`: None, not at all: `SessionBusy` at once)."""

    ttl: float = DEFAULT_TTL
    wait: float | None = None

    def __post_init__(self) -> None:
        if not 1.0 <= self.ttl <= 24 * 3600:
            raise ValueError(f"a lease lasts from 1 second to a day, not {self.ttl!r}")


def process_alive(pid: int) -> bool:
    """Whether a process with this id lives on this machine (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ", 1)[1][:1] != b"Z"
    except OSError:
        return True  # no /proc to look in: alive, as far as we can tell


async def live_lease(store: Leases, session_id: str) -> Lease | None:
    """The session's lease, unless its holder is a process of this machine that is gone (its lease would
    be taken over at once: the session is not busy)."""
    lease = await store.get_lease(session_id)
    if lease is not None and lease.pid is not None and lease.host == socket.gethostname():
        return None if not process_alive(lease.pid) else lease
    return lease


class RunLease:
    """The lease of one run over one session (see the module docstring). `acquire` takes it (waiting, when
    the terms say so, with `on_wait` told who holds it); `watch` keeps it, calling `on_request` with what
    another process asked and `on_lost` when the lease is no longer the run's; `release` gives it back."""

    def __init__(self, store: Leases, session_id: str, holder: str, terms: LeaseTerms) -> None:
        self.store = store
        self.session_id = session_id
        self.holder = holder
        self.terms = terms
        self.lease: Lease | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def acquire(self, on_wait: Callable[[SessionBusy], None] | None = None, *, wait: bool = True) -> Lease:
        """Take the session's lease, waiting for it as the terms say; with `wait` False, a lease the terms
        would wait for raises `WouldWait` instead (one they would not wait for is a `SessionBusy`)."""
        deadline = None if self.terms.wait is None else time.monotonic() + self.terms.wait
        told = False
        dead: str | None = None
        host = socket.gethostname()
        while True:
            try:
                self.lease = await self.store.acquire_lease(
                    self.session_id, self.holder, ttl=self.terms.ttl, pid=os.getpid(), host=host, take_from=dead
                )
                return self.lease
            except SessionBusy as busy:
                if busy.host == host and busy.pid is not None and not process_alive(busy.pid):
                    # a holder on this machine whose process is gone (killed, crashed): no need to wait
                    # for its lease to expire
                    log.info("session %s: taking over from run %s, whose process is gone", self.session_id, busy.holder)
                    dead = busy.holder
                    continue
                if deadline is None or time.monotonic() >= deadline:
                    raise
                if not wait:
                    raise WouldWait(busy) from None
                if on_wait is not None and not told:
                    on_wait(busy)
                    told = True
                left = busy.expires_at - time.time() if busy.expires_at is not None else POLL
                await asyncio.sleep(min(max(left, WAIT_POLL), WAIT_POLL, max(deadline - time.monotonic(), WAIT_POLL)))

    def watch(self, on_request: Callable[[LeaseRequest], None], on_lost: Callable[[LeaseLost], None]) -> None:
        """Keep the lease in the background: renewed every third of its life, looked at every `POLL`."""
        self._task = asyncio.get_running_loop().create_task(self._keep(on_request, on_lost))

    async def _keep(self, on_request: Callable[[LeaseRequest], None], on_lost: Callable[[LeaseLost], None]) -> None:
        renewed = time.monotonic()
        seen: LeaseRequest | None = self.lease.request if self.lease is not None else None
        if seen is not None:
            on_request(seen)
        while True:
            await asyncio.sleep(POLL)
            if self._stopping:
                return
            try:
                if time.monotonic() - renewed >= self.terms.ttl / 3:
                    lease: Lease | None = await self.store.renew_lease(self.session_id, self.holder, ttl=self.terms.ttl)
                    renewed = time.monotonic()
                else:
                    lease = await self.store.get_lease(self.session_id)
                    if lease is None or lease.holder != self.holder:
                        # expired or taken: renewing says which, with the holder named
                        lease = await self.store.renew_lease(self.session_id, self.holder, ttl=self.terms.ttl)
                        renewed = time.monotonic()
            except LeaseLost as lost:
                on_lost(lost)
                return
            except StoreError:  # a store that fails now and then: the lease lives on until it expires
                log.warning("could not look at the lease of session %s", self.session_id, exc_info=True)
                continue
            if self._stopping:
                return
            self.lease = lease
            if lease is not None and lease.request is not None and lease.request != seen:
                seen = lease.request
                on_request(seen)

    async def release(self) -> None:
        if self._task is not None:
            # the flag, not only the cancel: on Python 3.11 a cancel that comes as the pool hands the keeper a
            # connection is lost inside `asyncio.wait_for` (psycopg_pool waits with it), and a keeper that
            # only a cancel stops would renew the lease for ever while this waits for it
            self._stopping = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.store.release_lease(self.session_id, self.holder)
        except StoreError:  # it expires on its own; the run's own error, if any, matters more
            log.warning("could not release the lease of session %s", self.session_id, exc_info=True)


EDIT_TTL = 60.0
"""Seconds an edit's hold on a session lasts unless renewed (it is, while the edit goes on)."""


@contextlib.asynccontextmanager
async def held_for_edit(store: Leases, session_id: str, *, what: str = "edit") -> AsyncIterator[Lease]:
    """Hold an idle session for an edit outside a run (a delete, a revert, a compaction, a title), so that no
    run starts on it meanwhile, in this process or another: its lease, taken at once and renewed while the
    edit lasts (a compaction by a model may take minutes), given back after. A session a live run holds is
    refused with `SessionBusy`, naming the run; one whose holder on this machine is gone is taken over."""
    hold = RunLease(store, session_id, new_id(what), LeaseTerms(ttl=EDIT_TTL))
    lease = await hold.acquire()
    hold.watch(
        lambda request: None, lambda lost: log.warning("session %s: the edit's hold was lost: %s", session_id, lost)
    )
    try:
        yield lease
    finally:
        with contextlib.suppress(TetherError):  # a deleted session has no lease left to give back
            await hold.release()
