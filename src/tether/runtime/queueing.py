"""The manager's room for queueing and steering (`SessionManager.start`): a prompt is checked, then queued
behind the session's run in progress (in order), steered into it, or refused when another process holds the
session; a worker task per session runs what waits, one run after another, publishing their events and
telling the activity feed where the session stands after each; a session nothing uses any longer is let go
of (the latest `RECENT_SESSIONS` remembered).

A queued prompt is written to the store's durable queue before `start` returns (`queued.py`; unless its
request holds what no other process could rebuild, a program's own tools or callbacks): `entry.waiting` is
this process's copy of it. A prompt for a session that another process of the service runs (`mesh`) is
queued there and that process woken through the relay; it runs the prompt after its run in progress. The
worker reads the store's queue after its runs when the relay (or a takeover) says another process queued
something, and once more after it gave its claim back (`peers.py`: the queue read back, and what a dead
process left). A run takes a queued prompt under the session's lease (`queued.admit`), so it runs once
wherever it is."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from ..errors import InvalidInput, SessionBusy, TetherError
from ..events import Done, Error, Event, live_number
from ..messages import Message
from ..store.records import SessionInfo
from . import queued
from .activity import SessionCreated, SessionUpdated, StatusChanged
from .journal import stray_number
from .launch import LaunchedRun, check_request, open_run
from .lease import WouldWait
from .manager_base import RunHandle, Status, _Approver, _Opening, _Session
from .peers import PEER_WAIT, Peers

log = logging.getLogger("tether.runtime")

RECENT_SESSIONS = 256
"""Sessions that nothing runs, waits for or follows any longer, kept (their last event number and latest run
starts and ends) for a subscriber that comes just after a run: the least recently used are forgotten."""


class Queueing(Peers):
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
        pacer = self.defaults.pacer or self.pacer
        if pacer is not None:  # a burst of prompts takes turns too: each one's first event out before the next
            await pacer.turn(first=True)
        if self._closing:
            raise InvalidInput("the session manager is shutting down")
        settings = queued.wire_settings(fields) if prompt is not None and not steer else None
        forward = local = line_up = behind = False
        place: str | None = None
        if session_id is not None:
            if info is None or info.id != session_id:
                info = await self.store.get_session(session_id)  # SessionNotFound now, not when the run starts
            here = self._sessions.get(session_id)
            local = here is not None and (here.run is not None or bool(here.waiting))
            if not local:
                route = await self._route(session_id, prompt, settings, fields, queue=queue, steer=steer)
                settings, forward, place, behind, line_up = route
            elif not queue and not steer:
                raise SessionBusy(session_id, "a run in this process", pid=os.getpid(), host=socket.gethostname())
        durable = settings is not None and (forward or local or line_up or place is not None)
        if durable or (self.mesh is not None and session_id is not None):
            # its run waits for the lease: another process of the service may take the session in between
            # (a prompt to it as it looked idle here), and the prompt is not to be dropped for that
            fields.setdefault("wait", PEER_WAIT)
        approver = self._run_fields(session_id, fields)
        request = replace(
            self.defaults,
            prompt=prompt,
            session=session_id,
            continue_last=False,
            directory=directory if directory is not None else self.defaults.directory,
            **fields,  # type: ignore[arg-type]
        )
        with self._placing(session_id, place):
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
        if durable and settings is not None and prompt is not None:
            with self._placing(session_id, place):
                item = await self.store.enqueue_prompt(session_id, queued.encode(prompt, settings))  # before the 202
            self._durable(handle, item.id)
            if place is not None:
                if await self._placed(entry, handle, item.id, behind=behind):
                    return handle
                forward = True  # its run began there meanwhile: queued for that run
            if line_up:  # behind prompts queued in the store for the session, which this process runs now
                handle.queued = True
                entry.waiting.append(handle)
                await self.activity.publish(StatusChanged(session_id=session_id, status="queued"))
                await self.pull_queued(session_id)
                return handle
            if forward and self.mesh is not None:
                handle.queued = True
                self._forwarded[(session_id, item.id)] = handle  # before its run can end there
                await self.mesh.queued(session_id, item.id)  # its runner is woken...
                if await self.mesh.claimed_elsewhere(session_id):  # ...unless its run ended meanwhile: then here
                    await self.activity.publish(StatusChanged(session_id=session_id, status="queued"))
                    return handle
                self._forwarded.pop((session_id, item.id), None)
        entry.waiting.append(handle)
        if entry.run is not None or len(entry.waiting) > 1 or forward:
            handle.queued = True
            await self.activity.publish(StatusChanged(session_id=session_id, status="queued"))
        # (a worker that is ending its last run looks at `waiting` again before it ends: it goes on with this)
        idle = entry.opening is None and entry.run is None and not self._closing
        if idle and not handle.queued and handle.queued_id is None:  # opened here, up to its first event
            await self._begin(entry, handle, first)
            await asyncio.sleep(0)  # the worker has taken the run over before the caller can cancel it
            return handle
        if entry.worker is None or entry.worker.done():
            entry.worker = asyncio.get_running_loop().create_task(
                self._work(entry, first), name=f"tether session {session_id}"
            )
        return handle

    async def _open_now(self, entry: _Session, handle: RunHandle, opened: _Opening) -> None:
        """Open the prompt's run on the caller's task, up to its first event, which the followers get now;
        the session's worker goes on with it (`opened`). Under many runs a new task's first turn comes a
        pass of the loop later, and the run's start was one pass of all the others' work behind the
        prompt. A failure, or a lease to wait for, is left to the worker: it reports it, or waits, as for
        any run."""
        try:
            if self.mesh is not None:
                await self.mesh.run_started(entry.session_id)
                opened.claimed = True
            launched = opened.launched or await open_run(self.store, handle.plan, info=handle.info)
            opened.launched = launched
            if handle.queued_id is not None:  # (a placed prompt's)
                launched.run.admit = functools.partial(queued.admit, self.store, entry.session_id, handle.queued_id)
            handle.info = None  # a later run of the session reads it afresh
            entry.run = launched.run
            launched.run.open_now = True
            events = launched.events()
            running = StatusChanged(session_id=entry.session_id, status="running")
            try:
                first = await anext(events)
            except WouldWait:  # the generator is done: the worker begins the run again, and waits
                await self.activity.publish(running)
                return
            except Exception:
                await self.activity.publish(running)
                raise
            finally:
                launched.run.open_now = False
            opened.events, opened.first = events, first
            self._publish(entry, first)
            # the feed says so after the run's first event, which its followers wait for (the feed's record is a
            # store write)
            await self.activity.publish(running)
        except Exception as exc:  # the worker reports it as the run's end (`_run_waiting`)
            opened.failure = exc
        except asyncio.CancelledError:  # the request went away halfway: the worker ends the run
            opened.failure = TetherError("the run's start was interrupted")
            raise

    def _run_fields(self, session_id: str | None, fields: dict[str, Any]) -> _Approver | None:
        """Add what this manager gives every run it starts to `fields`: its pacer, its MCP servers, and (unless
        the defaults name one) an approver that waits for `answer`, which is returned."""
        if "pacer" not in fields and self.defaults.pacer is None and self.pacer is not None:
            fields["pacer"] = self.pacer
        if "mcp" not in fields and self.defaults.mcp is None and self.mcp.manager is not None:
            fields["mcp"] = self.mcp.manager
        approver: _Approver | None = None
        if "approver" not in fields and self.defaults.approver is None:
            approver = _Approver(self, session_id or "")
            fields["approver"] = approver
        return approver

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
        """Run the session's waiting prompts one after another, publishing their events; then what other
        processes queued for it meanwhile (`entry.pull`). A run that a prompt's task opened (`_open_now`,
        `entry.opening`) is gone on with."""
        mesh = self.mesh
        try:
            while True:
                opening = entry.opening
                claimed = opening is not None and opening.done() and opening.result().claimed
                if mesh is not None and not claimed:
                    # the other processes know who runs it (and take it over if this one dies)
                    await mesh.run_started(entry.session_id)
                try:
                    while True:
                        await self._run_waiting(entry, first)
                        first = None
                        if not entry.pull:
                            break
                        await self._pull(entry)
                finally:
                    first = None
                    if mesh is not None:  # (unless a prompt's task opened a new run and claimed it again)
                        await asyncio.shield(mesh.run_ended(entry.session_id, again=lambda: entry.opening is not None))
                if mesh is not None and not entry.waiting:
                    # a prompt queued by another process as the claim went: that process saw the claim (so
                    # it left the prompt to this one) and posted to the relay before it looked
                    with contextlib.suppress(TetherError):
                        await mesh.sync()
                    if entry.pull:
                        await self._pull(entry)
                if not entry.waiting:  # else a prompt came while the claim was given back: run it too
                    break
        finally:
            self._let_go(entry)  # no await between the last look at `waiting` and this

    async def _run_waiting(self, entry: _Session, first: LaunchedRun | None) -> None:
        while entry.waiting:
            if entry.pull and first is None and entry.opening is None:
                await self._pull(entry)  # queued elsewhere meanwhile: it may come before some held here
            handle = entry.waiting[0]
            outcome: Done | Error | None = None
            ended: SessionInfo | None = None
            try:
                opened: _Opening | None = None
                if entry.opening is not None:  # the first waiting: its prompt's task opens its run, or did
                    opened = await entry.opening
                    entry.opening = None
                events: AsyncIterator[Event]
                if opened is not None and opened.failure is not None:
                    if opened.events is not None:
                        await opened.events.aclose()  # type: ignore[attr-defined]
                    raise opened.failure
                if opened is not None and opened.launched is not None:
                    launched, first = opened.launched, None
                    events = opened.events if opened.events is not None else launched.events()
                    if isinstance(opened.first, Done | Error) and opened.first.session_id == entry.session_id:
                        outcome = opened.first
                else:
                    launched, first = first or await open_run(self.store, handle.plan, info=handle.info), None
                    handle.info = None  # a later run of the session reads it afresh
                    if handle.queued_id is not None:
                        launched.run.admit = functools.partial(
                            queued.admit, self.store, entry.session_id, handle.queued_id
                        )
                    entry.run = launched.run
                    await self.activity.publish(StatusChanged(session_id=entry.session_id, status="running"))
                    events = launched.events()
                async for event in events:
                    self._publish(entry, event)
                    if isinstance(event, Done | Error) and event.session_id == entry.session_id:
                        outcome = event
                ended = launched.session.info  # as the run left it (it kept its row up to date)
            except asyncio.CancelledError:
                outcome = await self._cancelled(entry)
                self._publish(entry, outcome)
                for left in [handle, *entry.riders, *entry.waiting]:
                    self._finish(entry, left, outcome)
                    if left.queued_id is not None and self.mesh is not None and not self._closing:
                        self.mesh.ran(entry.session_id, left.queued_id, outcome)  # (another process may wait)
                entry.riders.clear()
                raise  # the durable queue keeps what waited: `cancel` drops it, a shutdown leaves it
            except queued.PromptTaken:  # another process ran it, or runs it: its result comes through the relay
                entry.run = None
                self._leave_to_others(entry, handle)
                continue
            except SessionBusy as busy:
                entry.run = None
                mesh = self.mesh
                if handle.queued_id is not None and mesh is not None and await mesh.claimed_elsewhere(entry.session_id):
                    self._leave_to_others(entry, handle)  # its runner runs the queue after its run
                    continue
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
            if handle.queued_id is not None:
                await self._taken(entry.session_id, handle.queued_id, outcome)
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
                if here is not None and here.run is not None:  # a prompt's task opened the next run already
                    status = "running"
                elif here is not None and here.waiting:
                    status = "queued"
                else:
                    status = "paused" if info.state == "paused" else "idle"
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
