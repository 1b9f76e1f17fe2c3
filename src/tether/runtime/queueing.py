"""The manager's room for queueing and steering (`SessionManager.start`): a prompt is checked, then queued
behind the session's run in progress (in order), steered into it, or refused when another process holds the
session; a worker task per session runs what waits, one run after another, publishing their events and
telling the activity feed where the session stands after each; a session nothing uses any longer is let go
of (the latest `RECENT_SESSIONS` remembered)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import replace

from ..errors import InvalidInput, SessionBusy, TetherError
from ..events import Done, Error, live_number
from ..messages import Message
from ..store.records import SessionInfo
from .activity import SessionCreated, SessionUpdated, StatusChanged
from .journal import stray_number
from .launch import LaunchedRun, check_request, open_run
from .manager_base import ManagerBase, RunHandle, Status, _Approver, _Session

log = logging.getLogger("tether.runtime")

PEER_WAIT = 3600.0
"""Seconds a prompt to a session that another process of the service runs (`mesh`: a worker, a node) waits
for that run's lease before its own run gives up (busy)."""
RECENT_SESSIONS = 256
"""Sessions that nothing runs, waits for or follows any longer, kept (their last event number and latest run
starts and ends) for a subscriber that comes just after a run: the least recently used are forgotten."""


class Queueing(ManagerBase):
    """Prompts in, runs out (see the module docstring)."""

    async def start(
        self,
        session_id: str | None,
        prompt: str | Message | None,
        *,
        steer: bool = False,
        queue: bool = True,
        directory: str | os.PathLike[str] | None = None,
        info: SessionInfo | None = None,
        **fields: object,
    ) -> RunHandle:
        """Run `prompt` in the session (None: a new one in `directory`; a None prompt continues where the
        session stopped). A session with a run in progress gets the prompt queued behind it, in order, or,
        with `steer`, read by that run at its next step; with `queue=False` (and no `steer`) a session that
        a run of this process holds is refused; one that another process holds always is (`SessionBusy`,
        naming the holder: a prompt is never taken to be dropped when its run cannot have the lease).
        `info`, the session's row as the caller just read it, spares reading it again. The handle says
        what was done with the prompt (`queued`, `steered`). Every option
        is checked first (`check_request`): a bad one raises and nothing is queued. Returns the prompt's
        handle, whose `after` is the event number to follow the session from to see this prompt's run.
        Unless the defaults or `fields` name an `approver`, a call that must be asked about waits for
        `answer`."""
        if self._closing:
            raise InvalidInput("the session manager is shutting down")
        waits_for_peer = False
        if session_id is not None:
            if info is None or info.id != session_id:
                info = await self.store.get_session(session_id)  # SessionNotFound now, not when the run starts
            here = self._sessions.get(session_id)
            if here is None or not (here.run is not None or here.waiting):
                busy = await self._busy(session_id)  # never queued to be dropped when the run starts
                if busy is not None:
                    if not queue or self.mesh is None or not await self.mesh.claimed_elsewhere(session_id):
                        raise busy
                    # another worker (or node) of this service runs it: the prompt's run waits for its lease
                    fields.setdefault("wait", PEER_WAIT)
                    waits_for_peer = True
            elif not queue and not steer:
                raise SessionBusy(session_id, "a run in this process", pid=os.getpid(), host=socket.gethostname())
        approver: _Approver | None = None
        if "pacer" not in fields and self.defaults.pacer is None and self.pacer is not None:
            fields["pacer"] = self.pacer
        if "mcp" not in fields and self.defaults.mcp is None and self.mcp.manager is not None:
            fields["mcp"] = self.mcp.manager
        if "approver" not in fields and self.defaults.approver is None:
            approver = _Approver(self, session_id or "")
            fields["approver"] = approver
        request = replace(
            self.defaults,
            prompt=prompt,
            session=session_id,
            continue_last=False,
            directory=directory if directory is not None else self.defaults.directory,
            **fields,  # type: ignore[arg-type]
        )
        plan = check_request(request, self.config, resolve=self.resolve)
        first: LaunchedRun | None = None
        if session_id is None:  # the new session is made now, so that its id can be given back
            first = await open_run(self.store, plan)
            info = first.session.info
            session_id = info.id
            plan = replace(plan, request=replace(plan.request, session=session_id))
            if approver is not None:
                approver.root = session_id
            await self.announce(SessionCreated(session=info))
        assert info is not None  # read above, or the new session's
        entry = self._entry(session_id)
        handle = RunHandle(session_id, prompt, after=self._position(entry, info), plan=plan, info=info)
        if steer and entry.run is not None and prompt is not None:
            entry.run.steer(prompt)
            entry.riders.append(handle)
            handle.steered = True
            return handle
        entry.waiting.append(handle)
        if entry.run is not None or len(entry.waiting) > 1 or waits_for_peer:
            handle.queued = True
            await self.activity.publish(StatusChanged(session_id=session_id, status="queued"))
        if entry.worker is None or entry.worker.done():
            entry.worker = asyncio.get_running_loop().create_task(
                self._work(entry, first), name=f"tether session {session_id}"
            )
        return handle

    def _entry(self, session_id: str) -> _Session:
        entry = self._sessions.get(session_id)
        if entry is None:
            entry = self._recent.pop(session_id, None) or _Session(session_id)
            self._sessions[session_id] = entry
        return entry

    def _let_go(self, entry: _Session) -> None:
        """Forget a session nothing runs, waits for or follows: a long-lived manager (a server) keeps only the
        sessions in use, not every one it ever touched. What it knew is in the store."""
        in_use = entry.run is not None or entry.waiting or entry.subscribers or entry.riders
        if in_use or self._sessions.get(entry.session_id) is not entry:
            return
        del self._sessions[entry.session_id]
        entry.worker = None
        self._recent[entry.session_id] = entry
        while len(self._recent) > RECENT_SESSIONS:
            self._recent.popitem(last=False)

    async def _work(self, entry: _Session, first: LaunchedRun | None) -> None:
        """Run the session's waiting prompts one after another, publishing their events."""
        mesh = self.mesh
        try:
            while True:
                if mesh is not None:  # the other processes know who runs it (and take it over if this one dies)
                    await mesh.run_started(entry.session_id)
                try:
                    await self._run_waiting(entry, first)
                finally:
                    first = None
                    if mesh is not None:
                        await asyncio.shield(mesh.run_ended(entry.session_id))
                if not entry.waiting:  # else a prompt came while the claim was given back: run it too
                    break
        finally:
            self._let_go(entry)  # no await between the last look at `waiting` and this

    async def _run_waiting(self, entry: _Session, first: LaunchedRun | None) -> None:
        while entry.waiting:
            handle = entry.waiting[0]
            outcome: Done | Error | None = None
            ended: SessionInfo | None = None
            try:
                launched, first = first or await open_run(self.store, handle.plan, info=handle.info), None
                handle.info = None  # a later run of the session reads it afresh
                entry.run = launched.run
                await self.activity.publish(StatusChanged(session_id=entry.session_id, status="running"))
                async for event in launched.events():
                    self._publish(entry, event)
                    if isinstance(event, Done | Error) and event.session_id == entry.session_id:
                        outcome = event
                ended = launched.session.info  # as the run left it (it kept its row up to date)
            except asyncio.CancelledError:
                outcome = await self._cancelled(entry)
                self._publish(entry, outcome)
                for left in [handle, *entry.riders, *entry.waiting]:
                    self._finish(entry, left, outcome)
                entry.riders.clear()
                raise
            except SessionBusy as busy:
                outcome = await self._failed(entry, busy.code, str(busy))
            except TetherError as exc:
                outcome = await self._failed(entry, exc.code, str(exc))
            except Exception as exc:  # a bug in a run must not take the other sessions down with it
                log.exception("run of session %s failed", entry.session_id)
                outcome = await self._failed(entry, "internal", repr(exc))
            finally:
                entry.run = None
                for key in [k for k in self._given if k[0] == entry.session_id]:
                    del self._given[key]  # answers its run did not ask for (the rules decided first)
            self._finish(entry, handle, outcome)
            for rider in entry.riders:
                self._finish(entry, rider, outcome)
            entry.riders.clear()
            await self._announce(entry.session_id, ended)

    async def _announce(self, session_id: str, info: SessionInfo | None = None) -> None:
        """Tell the activity feed where a session stands after a run, and its row as the run left it (`info`,
        the run's own, when it ended here: nothing is read then)."""
        status: Status
        try:
            if info is None:
                info = await self.store.get_session(session_id)
                status = await self.status(session_id)
            else:
                here = self._sessions.get(session_id)
                status = "queued" if here is not None and here.waiting else "idle"
                status = "paused" if status == "idle" and info.state == "paused" else status
            await self.announce(SessionUpdated(session=info))
            await self.activity.publish(StatusChanged(session_id=session_id, status=status))
        except TetherError:  # deleted meanwhile, or a store that fails: the feed is a courtesy
            log.debug("could not announce session %s", session_id, exc_info=True)

    async def _failed(self, entry: _Session, code: str, message: str) -> Error:
        """The end of a run that failed before it ended itself, numbered as a live event after the last."""
        try:
            n = await stray_number(self.store, entry.session_id, entry.last_n)
        except TetherError:
            n = entry.last_n + 1
        return Error(session_id=entry.session_id, n=n, code=code, message=message)

    async def _cancelled(self, entry: _Session) -> Error:
        """The end the manager gives a run whose task it cancelled (the run gives none): numbered after the
        run's last event and reserved as its own are, so that subscribers who saw that event take it."""
        if entry.run is not None and entry.run.state is not None:
            return await entry.run.stopped("cancelled", "cancelled")
        n = await stray_number(self.store, entry.session_id, entry.last_n)
        return Error(session_id=entry.session_id, n=n, code="cancelled", message="cancelled")

    def _finish(self, entry: _Session, handle: RunHandle, outcome: Done | Error | None) -> None:
        if entry.waiting and entry.waiting[0] is handle:
            entry.waiting.popleft()
        elif handle in entry.waiting:
            entry.waiting.remove(handle)
        if not handle._done.done():
            handle._done.set_result(
                outcome or Error(session_id=entry.session_id, n=entry.last_n, code="internal", message="no result")
            )

    async def resume(self, session_id: str, prompt: str | Message | None = None) -> RunHandle:
        """Go on with a paused (or stopped) session: a run that picks up where it stopped."""
        return await self.start(session_id, prompt)

    def running(self) -> list[str]:
        """The sessions with a run in progress in this process."""
        return [sid for sid, entry in self._sessions.items() if entry.run is not None]

    async def position(self, session_id: str) -> int:
        """The event number to follow the session after to see all that happens from now on."""
        info = await self.store.get_session(session_id)
        entry = self._sessions.get(session_id) or self._recent.get(session_id)
        return entry.last_n if entry is not None and entry.last_n else live_number(info.last_seq, 0) - 1

    @staticmethod
    def _position(entry: _Session, info: SessionInfo) -> int:
        if not entry.last_n:  # a session this manager does not follow (or has let go of): where it stands,
            # after its last entry's durable events and before the live ones of the run to come
            entry.last_n = live_number(info.last_seq, 0) - 1
        return entry.last_n
