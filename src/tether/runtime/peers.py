"""The manager's room for the prompts that other processes share (`SessionManager`, with `queueing.py`): the
store's durable queue read back (`pull_queued`, and `recover_queued` for what a dead process left), a prompt
queued for a run another process of the service holds and the end of that run heard through the relay
(`ran_elsewhere`), and a queued prompt's row dropped once its run ended here (`_taken`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import TetherError
from ..events import Done, Error
from ..store.records import QueuedPrompt
from . import queued
from .launch import LaunchedRun, LaunchPlan, check_request
from .manager_base import ManagerBase, RunHandle, _Approver, _Session

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
