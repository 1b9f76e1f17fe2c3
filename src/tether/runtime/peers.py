"""The manager's room for the prompts that other processes share (`SessionManager`, with `queueing.py`): the
store's durable queue read back (`pull_queued`, and `recover_queued` for what a dead process left), a prompt
queued for a run another process of the service holds and the end of that run heard through the relay
(`ran_elsewhere`), a queued prompt's row dropped once its run ended here (`_taken`); and where a prompt for a
session that no run here has goes (`_route`: forwarded to the run of another process, placed with a sibling
worker that runs fewer, lined up behind what the store's queue holds, or run here), a placed prompt's run
opened where it was placed (`run_placed`), taken back (`take_back`) or cancelled (`_drop_placed`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import SessionBusy, TetherError
from ..events import Done, Error
from ..store.records import QueuedPrompt
from . import queued
from .launch import LaunchedRun, LaunchPlan, check_request
from .manager_base import ManagerBase, RunHandle, _Approver, _Opening, _Session

log = logging.getLogger("tether.runtime")

PEER_WAIT = 3600.0
"""Seconds a prompt to a session that another process of the service runs (`mesh`: a worker, a node) waits
for that run's lease before its own run gives up (busy), when it cannot be queued durably there (a request
with a program's own tools or callbacks, a steer)."""
OUTCOMES_KEPT = 256
"""The ends of runs elsewhere that no handle here waited for yet, kept at most (the latest)."""


class Peers(ManagerBase):
    """The durable queue and the runs of other processes (see the module docstring)."""

    if TYPE_CHECKING:  # queueing.py

        async def _work(self, entry: _Session, first: LaunchedRun | None) -> None: ...

        async def _open_now(self, entry: _Session, handle: RunHandle, opened: _Opening) -> None: ...

        def _run_fields(self, session_id: str | None, fields: dict[str, Any]) -> _Approver | None: ...

    @staticmethod
    def _durable(handle: RunHandle, prompt_id: int) -> None:
        """Make `handle` the run of the queued row `prompt_id`: its prompt journaled with the row's id."""
        assert handle.prompt is not None
        handle.queued_id = prompt_id
        request = replace(handle.plan.request, prompt=queued.tagged(handle.prompt, prompt_id))
        handle.plan = replace(handle.plan, request=request)

    async def recover_queued(self) -> int:
        """Run what the store's durable queue holds for sessions no live process of the service runs (a
        process killed with prompts queued); returns how many sessions were taken up."""
        try:
            sessions = await self.store.queued_sessions()
        except TetherError:
            log.warning("could not read the queued prompts", exc_info=True)
            return 0
        taken = 0
        for sid in sessions:
            if self.mesh is not None and await self.mesh.claimed_elsewhere(sid):
                continue  # its runner reads the queue itself (and a takeover does if it dies)
            taken += await self.pull_queued(sid)
        return taken

    async def pull_queued(self, session_id: str) -> bool:
        """Have this process run the session's queued prompts: after the run in progress here, or now."""
        entry = self._entry(session_id)
        if entry.worker is not None and not entry.worker.done():
            entry.pull = True
            return True
        await self._pull(entry)
        if not entry.waiting:
            self._let_go(entry)
            return False
        entry.worker = asyncio.get_running_loop().create_task(
            self._work(entry, None), name=f"tether session {session_id}"
        )
        return True

    async def _route(
        self,
        session_id: str,
        prompt: object,
        settings: dict[str, Any] | None,
        fields: dict[str, Any],
        *,
        queue: bool,
        steer: bool,
    ) -> tuple[dict[str, Any] | None, bool, str | None, bool, bool]:
        """Where a prompt for a session that no run of this process has (or waits for) goes: (its settings,
        whether it is forwarded to the run of another process, the sibling it is placed with, whether it
        waits behind prompts placed there, whether it lines up here behind prompts the store's queue holds).
        Raises `SessionBusy` where it must not wait. A prompt that waits for a lease here gets `wait` in
        `fields`."""
        busy = await self._busy(session_id)  # never queued to be dropped when the run starts
        mesh = self.mesh
        pending = mesh.placed_with(session_id) if mesh is not None and busy is None else None
        if pending is not None:  # placed from here with a sibling that has not started it: behind it
            if not queue and not steer:
                raise SessionBusy(session_id, f"a run placed with worker {pending}", host=socket.gethostname())
            if settings is None and prompt is not None:  # a steer: no run to steer yet, so queued
                settings = queued.wire_settings(fields)
            if settings is not None:
                return settings, False, pending, True, False
            fields.setdefault("wait", PEER_WAIT)  # (a continuation: it runs here after it, under the lease)
            return settings, False, None, False, False
        if busy is not None:
            if not queue or mesh is None or not await mesh.claimed_elsewhere(session_id):
                raise busy
            if settings is None:  # what cannot be queued there waits here for that run's lease
                fields.setdefault("wait", PEER_WAIT)
            return settings, True, None, False, False  # another worker (or node) runs it: queued for that run
        if settings is None or mesh is None or not queue:
            return settings, False, None, False, False
        if await self.store.queued_prompts(session_id):  # placed by another process, left by one that died
            return settings, False, None, False, True
        return settings, False, mesh.placement(session_id, self.load()), False, False

    @contextlib.contextmanager
    def _placing(self, session_id: str | None, place: str | None) -> Iterator[None]:
        """Until the prompt is queued: a failure lets go of the sibling `_route` chose for it (`place`)."""
        try:
            yield
        except BaseException:
            if place is not None and session_id is not None and self.mesh is not None:
                self.mesh.unplace(session_id)  # (no prompt went there)
            raise

    async def _placed(self, entry: _Session, handle: RunHandle, prompt_id: int, *, behind: bool) -> bool:
        """Wake the sibling the queued prompt `prompt_id` is placed with (`_route`); False: that sibling's run of
        the session began meanwhile (the prompt is then queued for it, as a forwarded one is)."""
        assert self.mesh is not None
        self._forwarded[(entry.session_id, prompt_id)] = handle  # its end comes back as a forwarded one's does
        if not await self.mesh.place(entry.session_id, prompt_id):
            self._forwarded.pop((entry.session_id, prompt_id), None)
            return False
        handle.queued = behind
        self._let_go(entry)
        return True

    async def run_placed(self, session_id: str) -> None:
        """Run the session's queue, in which another worker placed a prompt (`mesh`): its first prompt's run
        opened on this task up to its first event, as that of a prompt that came here is (`start`: under many
        runs, a task more is a pass of the loop more before it), and the session's worker goes on; behind
        the run in progress here, if any, after it."""
        entry = self._entry(session_id)
        if entry.worker is not None and not entry.worker.done():
            entry.pull = True
            return
        await self._pull(entry)
        pacer = self.defaults.pacer or self.pacer
        if pacer is not None and entry.waiting:
            await pacer.turn(first=True)
        if entry.opening is not None or (entry.worker is not None and not entry.worker.done()):
            return  # a prompt that came meanwhile began the session's work: it runs what waits
        if not entry.waiting or entry.run is not None or self._closing:
            self._let_go(entry)
            return
        await self._begin(entry, entry.waiting[0], None)

    async def _begin(self, entry: _Session, handle: RunHandle, first: LaunchedRun | None) -> None:
        """Open `handle`'s run on this task (`_open_now`), then have the session's worker go on with it."""
        loop = asyncio.get_running_loop()
        opening = entry.opening = loop.create_future()
        opened = _Opening(first)
        try:
            await self._open_now(entry, handle, opened)
        finally:
            opening.set_result(opened)  # for the worker: a new one, or one ending its last run
            if entry.worker is None or entry.worker.done():
                entry.worker = loop.create_task(self._work(entry, None), name=f"tether session {entry.session_id}")

    def take_back(self, session_id: str, prompt_id: int) -> None:
        """A prompt this process placed with another (`mesh.placement`) whose run did not start there in time:
        run it here (its queued row decides who runs it, under the lease, should that process come to it)."""
        handle = self._forwarded.pop((session_id, prompt_id), None)
        if handle is None or handle.finished or self._closing:
            return
        entry = self._entry(session_id)
        if all(h.queued_id != prompt_id for h in entry.waiting):
            entry.waiting.append(handle)
        if entry.worker is None or entry.worker.done():
            entry.worker = asyncio.get_running_loop().create_task(
                self._work(entry, None), name=f"tether session {session_id}"
            )

    async def _drop_placed(self, session_id: str, prompt_ids: list[int]) -> None:
        """A cancel of prompts this process placed with another, whose run has not started: their rows go
        (a run that comes to one finds it gone), and their handles end cancelled."""
        for prompt_id in prompt_ids:
            with contextlib.suppress(TetherError):
                await self.store.drop_prompt(session_id, prompt_id)
            cancelled = Error(session_id=session_id, n=0, code="cancelled", message="cancelled before its run began")
            self.ran_elsewhere(session_id, prompt_id, cancelled)  # (its handle ends as that of one run elsewhere)

    def load(self) -> int:
        """The sessions this process runs, or is about to (a run opening, prompts waiting)."""
        return sum(1 for e in self._sessions.values() if e.run is not None or e.opening is not None or e.waiting)

    def queued_elsewhere(self, session_id: str) -> None:
        """Another process queued a prompt for a session (the relay says): read the queue after the run in
        progress, if this process runs it (else that process found no runner and runs it itself)."""
        entry = self._sessions.get(session_id)
        if entry is not None and entry.worker is not None and not entry.worker.done():
            entry.pull = True

    def ran_elsewhere(self, session_id: str, prompt_id: int, outcome: Done | Error) -> None:
        """The run of a prompt this process queued for another ended there."""
        handle = self._forwarded.pop((session_id, prompt_id), None)
        if handle is None:  # (a run here that lost the prompt to that one may come to ask: `_leave_to_others`)
            self._ran[(session_id, prompt_id)] = outcome
            while len(self._ran) > OUTCOMES_KEPT:
                self._ran.popitem(last=False)
        elif not handle._done.done():
            handle._done.set_result(outcome)

    async def _pull(self, entry: _Session) -> None:
        """Add the session's durably queued prompts that this process does not hold yet to its waiting ones."""
        entry.pull = False
        try:
            items = await self.store.queued_prompts(entry.session_id)
            known = {h.queued_id for h in entry.waiting}
            fresh = [item for item in items if item.id not in known]
            info = await self.store.get_session(entry.session_id) if fresh and not entry.last_n else None
        except TetherError:
            log.warning("could not read the queued prompts of session %s", entry.session_id, exc_info=True)
            return
        for item in fresh:
            plan = await self._queued_plan(item)
            if any(h.queued_id == item.id for h in entry.waiting):
                continue  # (another pull of the session, while this one read, took it)
            if plan is not None:
                after = self._position(entry, info) if info is not None else entry.last_n
                handle = RunHandle(entry.session_id, plan.request.prompt, after=after, plan=plan, queued=True)
                handle.queued_id = item.id
                entry.waiting.append(handle)
        if fresh:  # the durably queued ones in the store's order, the others where they were
            places = [i for i, h in enumerate(entry.waiting) if h.queued_id is not None]
            ordered = sorted((entry.waiting[i] for i in places), key=lambda h: h.queued_id or 0)
            for i, h in zip(places, ordered, strict=True):
                entry.waiting[i] = h

    async def _queued_plan(self, item: QueuedPrompt) -> LaunchPlan | None:
        """The checked request of a queued row; None (and the row dropped, said in the log) when it cannot
        run any longer: its body unreadable by this version, an option that the configuration no longer has."""
        try:
            prompt, fields = queued.decode(item)
            self._run_fields(item.session_id, fields)
            fields["wait"] = PEER_WAIT  # as when it was queued
            request = replace(self.defaults, prompt=prompt, session=item.session_id, continue_last=False, **fields)
            return check_request(request, self.config, resolve=self.resolve)
        except (msgspec.DecodeError, msgspec.ValidationError, TetherError, TypeError) as exc:
            log.warning("session %s: dropped queued prompt %d, which cannot run: %s", item.session_id, item.id, exc)
            with contextlib.suppress(TetherError):
                await self.store.drop_prompt(item.session_id, item.id)
            return None

    def _leave_to_others(self, entry: _Session, handle: RunHandle) -> None:
        if entry.waiting and entry.waiting[0] is handle:
            entry.waiting.popleft()
        assert handle.queued_id is not None
        if self.mesh is None:
            self._finish(entry, handle, Error(session_id=entry.session_id, n=entry.last_n, code="taken",
                                              message="the queued prompt was run by another process"))  # fmt: skip
        else:
            self._forwarded[(entry.session_id, handle.queued_id)] = handle
            ran = self._ran.pop((entry.session_id, handle.queued_id), None)
            if ran is not None:
                self.ran_elsewhere(entry.session_id, handle.queued_id, ran)

    async def _taken(self, session_id: str, prompt_id: int, outcome: Done | Error | None) -> None:
        """A queued prompt's run ended: its row goes (a crash before this leaves a row whose prompt is
        journaled: the next `admit` drops it), and the process that queued it hears how it ended."""
        try:
            await self.store.drop_prompt(session_id, prompt_id)
        except TetherError:
            log.warning("session %s: could not drop queued prompt %d", session_id, prompt_id, exc_info=True)
        if self.mesh is not None and outcome is not None:
            self.mesh.ran(session_id, prompt_id, outcome)
