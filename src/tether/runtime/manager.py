"""`SessionManager`: many sessions driven by one process. Prompts to a session run one after another (or are
steered into the run in progress), each run holding the session's lease; any number of subscribers follow a
session's events, each through a bounded buffer, and one that falls behind is brought back through the
journal (`replay_events`) rather than held in memory; runs are cancelled, paused and resumed here or, through
the store, in another process; a call that needs a person's yes waits until `answer` (from any task) gives
one, and a request left by a stopped process is answered by resuming its session; `exclusive` holds an idle
session for an edit outside a run; `activity` is the feed of what happens to the sessions (created, updated,
deleted, status); `shutdown` ends them all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Literal

from ..config import Config
from ..errors import InvalidInput, SessionBusy, SessionNotFound, TetherError, UnknownName
from ..events import Done, Error, Event, RunStarted, live_number
from ..ids import new_id
from ..messages import Message
from ..store.protocols import Store
from ..store.records import UNSET, SessionInfo
from .activity import (
    Activity,
    ActivityFeed,
    ApprovalPending,
    ApprovalSettled,
    SessionCreated,
    SessionDeleted,
    SessionUpdated,
    StatusChanged,
)
from .approvals import journaled_requests
from .configuration import load_config
from .journal import replay_events
from .launch import LaunchedRun, LaunchPlan, Resolver, RunRequest, check_request, open_run
from .lease import live_lease
from .loop import AgentRun
from .mcp import ProcessServers
from .pacing import Pacer
from .permission import Answer, ApprovalRequest

log = logging.getLogger("tether.runtime")

Status = Literal["idle", "queued", "running", "waiting_for_approval", "paused", "busy_elsewhere"]
"""Where a session stands: nothing running; prompts waiting in this process; a run here; a run here (or one
that stopped) waiting for a person's decision on a tool call (`approvals`, `answer`); paused (a run stopped
at a step and resumes on demand); run by another process (its lease says)."""

SUBSCRIBER_BUFFER = 1024
"""Events a subscriber may fall behind by before it is moved to reading the journal."""
SUBSCRIBER_BATCH = 256
"""The most events `subscribe_batches` gives at once."""

WATCH_INTERVAL = 0.5
"""How often a followed session that no run of this manager has is looked at for what another process
appended (`_watch`)."""

STORE_WATCH_INTERVAL = 1.0
"""How often the store is looked at for sessions other processes changed, while the activity feed is
followed (`follow_activity`)."""

WATCHED_FOR = 5.0
"""Seconds a session changed by another process is looked at for its status after its last change."""

RECENT_SESSIONS = 256
"""Sessions that nothing runs, waits for or follows any longer, kept (their last event number and latest run
starts and ends) for a subscriber that comes just after a run: the least recently used are forgotten."""


@dataclass
class RunHandle:
    """A prompt given to `start`: which session, where its events start (`after`: subscribe after it to see
    them all), and `result()`, the `Done` or `Error` of the run that took it, once that has ended."""

    session_id: str
    prompt: str | Message | None
    after: int
    plan: LaunchPlan = field(repr=False)
    _done: asyncio.Future[Done | Error] = field(
        repr=False, default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def result(self) -> Done | Error:
        return await asyncio.shield(self._done)

    @property
    def finished(self) -> bool:
        return self._done.done()


class _Subscriber:
    """One follower of a session: a bounded queue of live events, and whether it overflowed."""

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=size)
        self.overflowed = False
        self.closed = False

    def close(self) -> None:
        """End the subscription (the manager shuts down): wakes it, to return."""
        self.closed = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)

    def offer(self, event: Event) -> None:
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.read_journal()  # the journal has what it misses (its durable events); memory stays put

    def read_journal(self) -> None:
        """Have the subscriber read what it has not had from the journal (it fell behind, or another
        process appended): wakes it."""
        if self.overflowed:
            return
        self.overflowed = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


@dataclass
class _Session:
    """What the manager keeps of one session: its prompts waiting, the run in progress and the prompts
    steered into it, its subscribers."""

    session_id: str
    waiting: deque[RunHandle] = field(default_factory=deque)
    run: AgentRun | None = None
    riders: list[RunHandle] = field(default_factory=list)
    worker: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None
    """Follows the journal for the subscribers while no run of this manager has the session (`_watch`)."""
    subscribers: set[_Subscriber] = field(default_factory=set)
    last_n: int = 0
    boundaries: deque[Event] = field(default_factory=lambda: deque(maxlen=4))
    """The latest runs' starts and ends (live events): what a subscriber brought back through the journal
    must not miss, or it would not know a run ended."""


@dataclass
class _Asked:
    """An approval request a run of this manager waits on: `root` is the session the manager runs (a
    sub-agent's request comes through its parent's run)."""

    request: ApprovalRequest
    root: str
    answer: asyncio.Future[Answer]


class _Approver:
    """The approver of one session's runs: asks through the manager, which knows the session once it exists."""

    def __init__(self, manager: SessionManager, root: str) -> None:
        self.manager = manager
        self.root = root

    async def __call__(self, request: ApprovalRequest) -> Answer:
        return await self.manager._ask(request, self.root)


class SessionManager:
    """Drives many sessions in one process over one store (see the module docstring). `request` gives the
    defaults of every run (tools, step limit, workspace); `config` is read from the tether home unless
    given; `resolve` turns a model name into a provider (the registry's, unless a test or a server gives
    its own). Its runs share a `Pacer` unless `pace` is False: when many are ready at once, a few go on per
    pass of the event loop, which keeps serving requests and streams meanwhile."""

    def __init__(
        self,
        store: Store,
        *,
        config: Config | None = None,
        defaults: RunRequest | None = None,
        resolve: Resolver | None = None,
        subscriber_buffer: int = SUBSCRIBER_BUFFER,
        pace: bool = True,
    ) -> None:
        self.store = store
        self.config = config if config is not None else load_config()
        self.defaults = defaults or RunRequest(None)
        self.resolve = resolve
        self.subscriber_buffer = subscriber_buffer
        self._sessions: dict[str, _Session] = {}
        self._recent: OrderedDict[str, _Session] = OrderedDict()
        self._closing = False
        self._asked: dict[tuple[str, str], _Asked] = {}
        self._given: dict[tuple[str, str], Answer] = {}
        """Answers given for requests that no run of this manager waited on (a stopped run's): the run that
        resumes the session takes them when it asks again."""
        self.activity = ActivityFeed()
        """What happens to the sessions this manager touches: followed by a server's `/events` through
        `follow_activity`, which adds what other processes do to the store."""
        self._store_watch: asyncio.Task[None] | None = None
        self.mcp = ProcessServers(self.config)
        """The process's MCP servers, shared by its runs; looked at, added and removed while they go on."""
        self.pacer = Pacer() if pace else None
        """Turns for this manager's runs, so that many at once do not stall the loop they share with a
        server's requests and streams (`pacing`)."""

    # --- running -----------------------------------------------------------------------------------

    async def start(
        self,
        session_id: str | None,
        prompt: str | Message | None,
        *,
        steer: bool = False,
        queue: bool = True,
        directory: str | os.PathLike[str] | None = None,
        **fields: object,
    ) -> RunHandle:
        """Run `prompt` in the session (None: a new one in `directory`; a None prompt continues where the
        session stopped). A session with a run in progress gets the prompt queued behind it, in order, or,
        with `steer`, read by that run at its next step; with `queue=False` (and no `steer`) a session that
        a run holds, here or in another process, is refused (`SessionBusy`, naming the holder). Every option
        is checked first (`check_request`): a bad one raises and nothing is queued. Returns the prompt's
        handle, whose `after` is the event number to follow the session from to see this prompt's run.
        Unless the defaults or `fields` name an `approver`, a call that must be asked about waits for
        `answer`."""
        if self._closing:
            raise InvalidInput("the session manager is shutting down")
        if session_id is not None:
            info = await self.store.get_session(session_id)  # SessionNotFound now, not when the run starts
            if not queue and not steer:
                busy = await self._busy(session_id)
                if busy is not None:
                    raise busy
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
            self.activity.publish(SessionCreated(session=info))
        entry = self._entry(session_id)
        handle = RunHandle(session_id, prompt, after=self._position(entry, info), plan=plan)
        if steer and entry.run is not None and prompt is not None:
            entry.run.steer(prompt)
            entry.riders.append(handle)
            return handle
        entry.waiting.append(handle)
        if entry.run is not None or len(entry.waiting) > 1:
            self.activity.publish(StatusChanged(session_id=session_id, status="queued"))
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
        try:
            await self._run_waiting(entry, first)
        finally:
            self._let_go(entry)

    async def _run_waiting(self, entry: _Session, first: LaunchedRun | None) -> None:
        while entry.waiting:
            handle = entry.waiting[0]
            outcome: Done | Error | None = None
            try:
                launched, first = first or await open_run(self.store, handle.plan), None
                entry.run = launched.run
                self.activity.publish(StatusChanged(session_id=entry.session_id, status="running"))
                async for event in launched.events():
                    self._publish(entry, event)
                    if isinstance(event, Done | Error) and event.session_id == entry.session_id:
                        outcome = event
            except asyncio.CancelledError:
                outcome = Error(
                    session_id=entry.session_id, n=self._next_n(entry), code="cancelled", message="cancelled"
                )
                self._publish(entry, outcome)
                for left in [handle, *entry.riders, *entry.waiting]:
                    self._finish(entry, left, outcome)
                entry.riders.clear()
                raise
            except SessionBusy as busy:
                outcome = Error(session_id=entry.session_id, n=entry.last_n, code=busy.code, message=str(busy))
            except TetherError as exc:
                outcome = Error(session_id=entry.session_id, n=entry.last_n, code=exc.code, message=str(exc))
            except Exception as exc:  # a bug in a run must not take the other sessions down with it
                log.exception("run of session %s failed", entry.session_id)
                outcome = Error(session_id=entry.session_id, n=entry.last_n, code="internal", message=repr(exc))
            finally:
                entry.run = None
                for key in [k for k in self._given if k[0] == entry.session_id]:
                    del self._given[key]  # answers its run did not ask for (the rules decided first)
            self._finish(entry, handle, outcome)
            for rider in entry.riders:
                self._finish(entry, rider, outcome)
            entry.riders.clear()
            await self._announce(entry.session_id)

    async def _announce(self, session_id: str) -> None:
        """Tell the activity feed where a session stands after a run, and its row as the run left it."""
        try:
            info = await self.store.get_session(session_id)
            self.activity.publish(SessionUpdated(session=info))
            self.activity.publish(StatusChanged(session_id=session_id, status=await self.status(session_id)))
        except TetherError:  # deleted meanwhile, or a store that fails: the feed is a courtesy
            log.debug("could not announce session %s", session_id, exc_info=True)

    @staticmethod
    def _next_n(entry: _Session) -> int:
        """A number for an end the manager gives a run (its task was cancelled, so the run gives none): the
        run's next live number, so that subscribers who saw the run's last event do not take it for one they
        already had."""
        state = entry.run.state if entry.run is not None else None
        return state.journal.next_number() if state is not None else entry.last_n + 1

    def _finish(self, entry: _Session, handle: RunHandle, outcome: Done | Error | None) -> None:
        if entry.waiting and entry.waiting[0] is handle:
            entry.waiting.popleft()
        elif handle in entry.waiting:
            entry.waiting.remove(handle)
        if not handle._done.done():
            handle._done.set_result(
                outcome or Error(session_id=entry.session_id, n=entry.last_n, code="internal", message="no result")
            )

    # --- following ---------------------------------------------------------------------------------

    def _publish(self, entry: _Session, event: Event) -> None:
        if event.session_id != entry.session_id:
            # a sub-agent's event, passed on by the run: its numbers are its own session's; those who
            # follow the child itself get it too
            child = self._sessions.get(event.session_id)
            if child is not None:
                self._publish(child, event)
        else:
            entry.last_n = max(entry.last_n, event.n)
            if isinstance(event, RunStarted | Done | Error):
                entry.boundaries.append(event)
        for subscriber in entry.subscribers:
            subscriber.offer(event)

    async def subscribe(self, session_id: str, after: int | None = None) -> AsyncIterator[Event]:
        """The session's events as they come. With `after`, first the durable events numbered after it,
        from the journal; a subscriber that falls more than the buffer behind is brought back the same way:
        no durable event is missed or repeated, and nothing waits on a slow subscriber. The events of the
        session's sub-agents (`task`) come as they happen, with their own `session_id` and numbers; a
        replay brings back only the session's own (the children's are in their own journals)."""
        batches = self.subscribe_batches(session_id, after)
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await batches.aclose()  # now, not when the collector finds it: it takes the subscriber off

    async def subscribe_batches(
        self, session_id: str, after: int | None = None, *, most: int = SUBSCRIBER_BATCH
    ) -> AsyncGenerator[list[Event], None]:
        """`subscribe`, in batches: each one the events ready at once (one, or those queued behind it;
        a replay from the journal `most` at a time), so that a follower that writes to a socket writes
        what piled up in one go instead of one write per event."""
        await self.store.get_session(session_id)  # SessionNotFound before anything else
        entry = self._entry(session_id)
        subscriber = _Subscriber(self.subscriber_buffer)
        entry.subscribers.add(subscriber)
        if entry.watcher is None or entry.watcher.done():
            entry.watcher = asyncio.create_task(self._watch(entry), name=f"tether-watch-{session_id}")
        last = entry.last_n if after is None else after
        try:
            replay = after is not None
            while True:
                if replay or subscriber.overflowed:
                    subscriber.overflowed = False  # from here on it queues again; the journal fills the gap
                    replay = False
                    batch: list[Event] = []
                    async for event in self._catch_up(entry, last):
                        last = event.n
                        batch.append(event)
                        if len(batch) >= most:
                            yield batch
                            batch = []
                    if batch:
                        yield batch
                    continue
                queued = await subscriber.queue.get()
                batch = []
                while True:
                    if subscriber.closed:
                        return
                    if queued is not None:  # None: a wake-up to catch up
                        if queued.session_id != session_id:  # a sub-agent's, numbered in its own session
                            batch.append(queued)
                        elif queued.n > last:  # else already given (a replay overtook the queue)
                            last = queued.n
                            batch.append(queued)
                    if len(batch) >= most or subscriber.overflowed or subscriber.queue.empty():
                        break
                    queued = subscriber.queue.get_nowait()
                if batch:
                    yield batch
        finally:
            entry.subscribers.discard(subscriber)
            if entry.worker is None or entry.worker.done():
                self._let_go(entry)

    def _runs_here(self, entry: _Session) -> bool:
        return entry.run is not None or bool(entry.waiting) or (entry.worker is not None and not entry.worker.done())

    async def _watch(self, entry: _Session) -> None:
        """While the session has subscribers, look at its journal every `WATCH_INTERVAL` when no run of this
        manager has it: a run of another process (a `tether run` beside a server) appends there, and the
        subscribers read what it appended (its durable events: messages, tool calls and results; the live
        ones, text deltas and run boundaries, stay in that process)."""
        seen: int | None = None
        while entry.subscribers and not self._closing:
            if self._runs_here(entry):
                seen = None  # this manager's run publishes its own events
            else:
                try:
                    last_seq = (await self.store.get_session(entry.session_id)).last_seq
                except TetherError:
                    return  # deleted (its subscribers end with the deletion) or the store is closing
                if seen is not None and last_seq > seen and not self._runs_here(entry):
                    for subscriber in list(entry.subscribers):
                        subscriber.read_journal()
                seen = last_seq
            await asyncio.sleep(WATCH_INTERVAL)

    def follow_activity(self, after: int | None = None) -> AsyncIterator[Activity]:
        """The activity feed (`ActivityFeed.follow`), with what other processes do to the store's sessions
        (a `tether run` beside a server, an import) told as it is seen (`_watch_store`)."""
        if self._store_watch is None or self._store_watch.done():
            watch = self._watch_store(since=time.time())
            self._store_watch = asyncio.create_task(watch, name="tether-watch-store")
        return self.activity.follow(after)

    async def _watch_store(self, since: float) -> None:
        """While the feed has followers, look at the most recently updated sessions every
        `STORE_WATCH_INTERVAL`: a session changed by no run of this manager is told (`SessionCreated` or
        `SessionUpdated`, then its `StatusChanged`), and a session another process runs is looked at until its
        run ends (the lease is given back with no change to the session's row). What this manager did
        itself may be told twice; a deletion by another process is not seen (its listing is)."""
        known: OrderedDict[str, tuple[float, int]] = OrderedDict()
        told: dict[str, Status] = {}
        watched: dict[str, float] = {}
        """Sessions whose status is looked at on every look: those changed lately (a run elsewhere takes the
        lease just after it creates or appends) and those run elsewhere (until the lease is given back)."""
        first = True
        while not self._closing:
            if not first:
                await asyncio.sleep(STORE_WATCH_INTERVAL)
                if not self.activity.followed:
                    return
            now = time.time()
            try:
                page = await self.store.list_sessions(parent_id=UNSET, limit=50)
                for info in reversed(page.items):  # oldest change first
                    mark = (info.updated_at, info.last_seq)
                    if known.get(info.id) == mark:
                        continue
                    is_new = info.id not in known
                    known[info.id] = mark
                    known.move_to_end(info.id)
                    entry = self._sessions.get(info.id)
                    if (first and info.updated_at < since) or (entry is not None and self._runs_here(entry)):
                        continue
                    created = is_new and info.created_at >= since
                    self.activity.publish(SessionCreated(session=info) if created else SessionUpdated(session=info))
                    watched[info.id] = now
                for sid, changed in list(watched.items()):
                    entry = self._sessions.get(sid)
                    if entry is not None and self._runs_here(entry):
                        del watched[sid]  # this manager tells its own run's statuses
                        continue
                    status = await self.status(sid)
                    if status != told.get(sid):
                        told[sid] = status
                        self.activity.publish(StatusChanged(session_id=sid, status=status))
                    if status == "busy_elsewhere":
                        watched[sid] = now
                    elif now - changed > WATCHED_FOR:
                        del watched[sid]
                        told.pop(sid, None)
            except SessionNotFound as gone:
                watched.pop(gone.session_id, None)  # deleted while looked at: the next look does not list it
            except TetherError:
                return  # the store is closing
            while len(known) > 1000:
                known.popitem(last=False)
            first = False

    async def _catch_up(self, entry: _Session, after: int) -> AsyncIterator[Event]:
        """The durable events after `after` from the journal, with the run starts and ends since (live
        events, kept apart for this) in their places. The boundaries are looked at again before each event:
        a run that goes on while the journal is read publishes its start before it appends what follows."""
        given = after
        async for event in replay_events(self.store, entry.session_id, after):
            for boundary in sorted((b for b in entry.boundaries if given < b.n < event.n), key=lambda b: b.n):
                yield boundary
            yield event
            given = event.n
        for boundary in sorted((b for b in entry.boundaries if b.n > given), key=lambda b: b.n):
            yield boundary

    # --- control -----------------------------------------------------------------------------------

    async def cancel(self, session_id: str) -> bool:
        """Stop the session's run now, and drop the prompts waiting behind it: the partial answer is kept, its
        unfinished tool calls marked aborted (their commands killed), the lease released. A run in another
        process is asked through the store. False when nothing was running."""
        entry = self._sessions.get(session_id)
        if entry is not None and entry.worker is not None and not entry.worker.done():
            entry.worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await entry.worker
            await self._announce(session_id)  # the cancelled worker could not: the feed said "running" still
            return True
        return await self.store.request_lease(session_id, "cancel") is not None

    async def pause(self, session_id: str) -> bool:
        """Stop the session's run at its next step (a checkpoint; the session marked paused); `resume`, or
        any later prompt, goes on. A run in another process is asked through the store."""
        entry = self._sessions.get(session_id)
        if entry is not None and entry.run is not None:
            entry.run.pause()
            return True
        return await self.store.request_lease(session_id, "pause") is not None

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

    async def status(self, session_id: str) -> Status:
        entry = self._sessions.get(session_id)
        if entry is not None and entry.run is not None:
            waits = any(a.root == session_id or a.request.session_id == session_id for a in self._asked.values())
            return "waiting_for_approval" if waits else "running"
        if entry is not None and entry.waiting:
            return "queued"
        info = await self.store.get_session(session_id)
        if await live_lease(self.store, session_id) is not None:
            return "busy_elsewhere"
        if await journaled_requests(self.store, session_id):
            return "waiting_for_approval"  # a run stopped while it waited: resuming it asks again
        return "paused" if info.state == "paused" else "idle"

    # --- approvals ---------------------------------------------------------------------------------

    async def _ask(self, request: ApprovalRequest, root: str) -> Answer:
        key = (request.session_id, request.call_id)
        given = self._given.pop(key, None)
        if given is not None:
            return given
        asked = _Asked(request, root, asyncio.get_running_loop().create_future())
        self._asked[key] = asked
        self.activity.publish(ApprovalPending(request=request, root_id=root))
        self.activity.publish(StatusChanged(session_id=root, status="waiting_for_approval"))
        given_answer: Answer | None = None
        try:
            given_answer = await asked.answer
            return given_answer
        finally:
            if self._asked.get(key) is asked:
                del self._asked[key]
            approved = given_answer.approved if given_answer is not None else None
            self.activity.publish(
                ApprovalSettled(session_id=request.session_id, call_id=request.call_id, approved=approved)
            )
            entry = self._sessions.get(root)
            if entry is not None and entry.run is not None:
                self.activity.publish(StatusChanged(session_id=root, status=await self.status(root)))

    async def approvals(self, session_id: str | None = None) -> list[ApprovalRequest]:
        """The approval requests that wait for an answer: those the runs of this manager wait on (of every
        session, or of `session_id` and its sub-agents), in the order they were made; with `session_id`,
        also those its journal holds from a run that stopped while it waited (another process's, or one
        before a restart), when no run here or elsewhere has the session now."""
        waiting = [
            a.request
            for a in self._asked.values()
            if session_id is None or session_id in (a.root, a.request.session_id)
        ]
        if session_id is None or waiting:
            return waiting
        entry = self._sessions.get(session_id)
        if entry is not None and (entry.run is not None or entry.waiting):
            return []
        if await live_lease(self.store, session_id) is not None:
            return []
        return await journaled_requests(self.store, session_id)

    async def answer(self, session_id: str, call_id: str, answer: Answer) -> RunHandle | None:
        """Answer the approval request of tool call `call_id` in `session_id` (a sub-agent's session for its
        requests), from any task. A run of this manager waiting on it goes on (None is returned); a request
        that a stopped run left in the journal is answered by resuming the session, whose run asks again
        and takes this answer (its handle is returned). `InvalidInput` when no such request waits;
        `SessionBusy` when another process runs the session (answer it there)."""
        asked = self._asked.get((session_id, call_id))
        if asked is not None:
            if not asked.answer.done():
                asked.answer.set_result(answer)
            return None
        await self.store.get_session(session_id)  # SessionNotFound first
        journaled = [r.call_id for r in await self.approvals(session_id)]
        if call_id not in journaled:
            entry = self._sessions.get(session_id)
            lease = await live_lease(self.store, session_id)
            if lease is not None and (entry is None or entry.run is None):
                raise lease.busy()
            raise UnknownName(f"no approval request for the call {call_id} waits in session {session_id}")
        self._given[(session_id, call_id)] = answer
        return await self.start(session_id, None)

    async def _busy(self, session_id: str) -> SessionBusy | None:
        """Who holds the session, as the error to give someone who wants it now; None when it is free."""
        lease = await live_lease(self.store, session_id)
        if lease is not None:
            return lease.busy()
        entry = self._sessions.get(session_id)
        if entry is not None and (entry.run is not None or entry.waiting):
            return SessionBusy(session_id, "a run starting in this process", pid=os.getpid(), host=socket.gethostname())
        return None

    @contextlib.asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[None]:
        """Hold an idle session for an edit outside a run (a revert, a title, a compaction, a delete): its
        lease is taken for the edit, so that no run starts meanwhile, here or in another process. A session
        that a run holds or waits for is refused with `SessionBusy`, naming the holder."""
        busy = await self._busy(session_id)
        if busy is not None:
            raise busy
        holder = new_id("edit")
        await self.store.acquire_lease(session_id, holder, ttl=60.0, pid=os.getpid(), host=socket.gethostname())
        try:
            yield
        finally:
            with contextlib.suppress(TetherError):  # a deleted session has no lease left to give back
                await self.store.release_lease(session_id, holder)

    async def delete(self, session_id: str) -> list[str]:
        """Delete an idle session and its child sessions (`SessionBusy` while a run holds it)."""
        async with self.exclusive(session_id):
            deleted = await self.store.delete_session(session_id)
        for sid in deleted:
            self._sessions.pop(sid, None)
        self.activity.publish(SessionDeleted(session_id=session_id, deleted=deleted))
        return deleted

    async def shutdown(self, *, wait: float = 0.0) -> None:
        """Take no more prompts; give the runs in progress `wait` seconds to finish, then cancel them (each
        keeps what it did and releases its lease); drop what is still waiting; then end every subscription
        (each has had the runs' last events) and the activity feed's followers."""
        self._closing = True
        workers = [e.worker for e in self._sessions.values() if e.worker is not None and not e.worker.done()]
        if workers and wait > 0:
            await asyncio.wait(workers, timeout=wait)
        for worker in workers:
            if not worker.done():
                worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        for entry in self._sessions.values():
            for subscriber in entry.subscribers:
                subscriber.close()
            if entry.watcher is not None:
                entry.watcher.cancel()
        if self._store_watch is not None:
            self._store_watch.cancel()
        await self.mcp.close()
        self.activity.close()
