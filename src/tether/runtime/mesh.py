"""`Mesh`: a `SessionManager` among the other processes that share its store (the workers of `tether serve
--workers N`, the nodes of a service on one PostgreSQL), through the store's relay (`store/relay.py`).

Out: every event a run of this manager publishes (live ones too) is posted to the relay, what piles up in
one pass of the event loop in one write, while another peer lives; so are the approval requests its runs
wait on (and their settling), and the claim of each session it runs. In: a follower here of a session that
another peer runs gets that run's events as they are posted (`SessionManager.relayed`), woken by the relay
rather than by polling the journal; an answer, a cancel or a pause posted for a session run here reaches
its run; the approval requests other peers' runs wait on are listed here and answered through the relay.

Queued prompts: a prompt for a session another peer runs is queued in the store's durable queue by the
peer that got it, which posts a "queued" row naming the session: the runner reads the queue after its run in
progress (no lease polling), and posts a "ran" row with the outcome of each queued prompt's run, for the
peer that queued it. The runner gives its claim back only after reading the relay once more, and the
queuing peer looks at the claim after posting, so a prompt queued as the run ends is run by one of them
(the lease and `queued.admit` make it exactly one).

Placement: a prompt for a session no process runs goes where the runs are fewest, among this process's
siblings (the workers of the same `tether serve --workers N`, whose kernel spreads connections, not runs: one
client's keep-alive connection brings all its prompts to one worker). The peer that got it queues it durably,
as for a forwarded prompt, and posts a "place" row naming the sibling, which runs the session's queue (unless
by then another process runs the session: that one runs the queue). A later prompt for the session goes the
same way while that run has not started; one that comes to another process finds the first in the store's
queue and lines up behind it there. Prompts not taken up within `PLACE_WAIT` (their sibling died, or lags;
looked at each heartbeat), while no process holds the session's lease, are run by the peer that placed them
(the queue's rows and the lease let one process run each, in order, should the sibling still come to them).
The load of a sibling is what it last said (a "load" row, added to what it posts whenever the sessions it
runs or is about to run changed, and posted when it meets a new sibling), with the sessions placed with it
whose runs have not started.

Takeover: a peer that died (SIGKILL, a lost machine) leaves its run claims; once a session's lease is free
(at once for a dead process of this host, after its expiry for another host's) the first live peer to take
the claim resumes the session: the run picks up from the journal (a tool call cut off is marked
interrupted, never run again; a request that waited for approval is asked again)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from ..errors import SessionNotFound, TetherError
from ..events import Done, Error, Event, RunStarted, event_json
from ..store.relay import HEARTBEAT, KEEP, POLL, Peer, Relay, RelayPost, RelayRow
from .activity import Activity, ApprovalPending, ApprovalSettled
from .lease import live_lease
from .permission import Answer, ApprovalRequest

if TYPE_CHECKING:
    from .manager import SessionManager

log = logging.getLogger("tether.runtime")

PRUNE_EVERY = 10
"""Heartbeats between two prunings of the relay's old rows."""
PLACE_MARGIN = 3
"""Runs this process must have above a sibling's for a prompt to go there (fewer: placements back and forth
as the loads, each said a little late, go up and down)."""
PLACE_WAIT = 2.0
"""Seconds a placed prompt's run may take to start on its sibling before the peer that placed it runs it."""

_events = msgspec.json.Decoder(Event)
_pending = msgspec.json.Decoder(ApprovalPending)
_settled = msgspec.json.Decoder(ApprovalSettled)
_answers = msgspec.json.Decoder(Answer)
_encode = msgspec.json.Encoder()


def parent_of(pid: int) -> int | None:
    """The parent process id of a process of this machine, or None (gone, unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def same_supervisor(host: str, supervisor: int | None = None) -> Callable[[Peer], bool]:
    """Whether a peer is another worker of the `tether serve --workers N` this process is a worker of: one of
    this host whose parent is `supervisor` (this process's parent by default; a supervisor forks only
    workers). Outside a supervisor's workers (`TETHER_WORKER` unset), no peer is: another server over the
    same store may have another configuration, and a node of another host other directories."""
    if supervisor is None:
        if "TETHER_WORKER" not in os.environ:
            return lambda peer: False
        supervisor = os.getppid()
    me = os.getpid()
    return lambda peer: peer.host == host and peer.pid != me and parent_of(peer.pid) == supervisor


@dataclass
class _Placed:
    """Prompts for a session placed with a sibling whose run has not started yet (queued ids, in order)."""

    peer: str
    at: float
    prompts: list[int] = field(default_factory=list)


class Mesh:
    """See the module docstring. `start` joins the relay and starts following it; `stop` leaves it.
    `sibling` says which peers take placed runs (`same_supervisor` by default)."""

    def __init__(self, manager: SessionManager, relay: Relay, *, sibling: Callable[[Peer], bool] | None = None) -> None:
        self.manager = manager
        self.relay = relay
        self._sibling = sibling
        self.siblings: set[str] = set()
        """The live peers that take placed runs (as of the last heartbeat)."""
        self._judged: dict[str, bool] = {}
        self._meeting: asyncio.Task[None] | None = None
        self._heard_of: set[str] = set()
        self.loads: dict[str, int] = {}
        """The sessions each sibling runs or is about to, as it last said (a "load" row with what it posts)."""
        self._told = 0
        """The load this peer last said."""
        self._placing: dict[str, _Placed] = {}
        """Sessions whose prompts were placed with a sibling that has not started their run yet."""
        self._placed_tasks: set[asyncio.Task[None]] = set()
        self.others: set[str] = set()
        """The other peers that live (as of the last heartbeat): events are posted only while there is one."""
        self.asked: dict[tuple[str, str], tuple[ApprovalPending, str]] = {}
        """Approval requests other peers' runs wait on, with the peer."""
        self.remote_runs: dict[str, str] = {}
        """Sessions whose run another peer publishes here (from its `RunStarted` to its end), with the peer."""
        self._out: list[RelayPost] = []
        self._flusher: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._last = 0
        """The id of the last relay row read."""
        self._reading = asyncio.Lock()

    async def start(self) -> None:
        await self.relay.join()
        if self._sibling is None:
            self._sibling = same_supervisor(getattr(self.relay, "host", ""))
        self._met(await self.relay.heartbeat())
        self._last = await self.relay.last_id()
        self.relay.on_rows(self._rows_came)
        await self.relay.post([RelayPost("hello", "", 0, b"{}")])
        self.manager.activity.on_publish = self._recorded
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._follow(), name="tether-mesh-follow"),
            loop.create_task(self._beat(), name="tether-mesh-heartbeat"),
        ]

    async def stop(self) -> None:
        self._closing = True
        self.relay.on_rows(None)
        tasks = [*self._tasks, *self._placed_tasks, *([self._meeting] if self._meeting is not None else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._flusher is not None:
            with contextlib.suppress(asyncio.CancelledError, TetherError):
                await self._flusher
        await self.relay.close()

    # --- out ---------------------------------------------------------------------------------------

    def event(self, session_id: str, event: Event) -> None:
        """An event a run of this manager published to the followers of `session_id`."""
        if self.others:
            self._post(RelayPost("event", session_id, event.n, event_json(event)))

    def approval(self, item: ApprovalPending | ApprovalSettled) -> None:
        """An approval request a run of this manager waits on, or one that no longer waits."""
        if isinstance(item, ApprovalPending):
            self._post(RelayPost("pending", item.root_id, 0, _encode.encode(item)))
        else:
            self._post(RelayPost("settled", item.session_id, 0, _encode.encode(item)))

    def _recorded(self, activity: Activity) -> None:
        """An activity this process recorded in the store's change feed: the others' followers read it."""
        if self.others:
            self._post(RelayPost("change", "", activity.n, b"{}"))

    def waits_elsewhere(self, session_id: str, call_id: str) -> bool:
        return (session_id, call_id) in self.asked

    def requests(self, session_id: str | None) -> list[ApprovalRequest]:
        """The requests other peers' runs wait on (of every session, or of `session_id` and its sub-agents)."""
        return [
            item.request
            for item, _ in self.asked.values()
            if session_id is None or session_id in (item.root_id, item.request.session_id)
        ]

    def waits_for_approval(self, session_id: str) -> bool:
        return any(item.root_id == session_id for item, _ in self.asked.values())

    async def answer(self, session_id: str, call_id: str, answer: Answer) -> None:
        """Send `answer` to the peer whose run waits on the request."""
        self._post(RelayPost("answer", session_id, 0, _encode.encode([call_id, answer])))
        await self._drain()

    async def control(self, session_id: str, what: str) -> None:
        """Ask the peer that runs the session to cancel or pause it now (the lease carries it too, slower)."""
        self._post(RelayPost("cancel" if what == "cancel" else "pause", session_id, 0, b"{}"))
        await self._drain()

    def relays(self, session_id: str) -> bool:
        """Whether another peer's run of the session publishes its events here now (the journal need not
        be watched for it)."""
        return session_id in self.remote_runs

    async def run_started(self, session_id: str) -> None:
        try:
            await self.relay.claim_run(session_id)
        except TetherError:
            log.warning("could not claim the run of session %s in the relay", session_id, exc_info=True)

    async def claimed_elsewhere(self, session_id: str) -> bool:
        """Whether a live peer claims the session's run: its events come through the relay, in order (a
        follower here must not read the journal ahead of them)."""
        try:
            peer = await self.relay.claimant(session_id)
        except TetherError:
            return False
        return peer is not None and peer != self.relay.peer and peer in self.others

    async def queued(self, session_id: str, prompt_id: int) -> None:
        """A prompt this peer queued durably for the session another peer runs: wake that peer."""
        self._post(RelayPost("queued", session_id, prompt_id, b"{}"))
        await self._drain()

    def ran(self, session_id: str, prompt_id: int, outcome: Done | Error) -> None:
        """A queued prompt's run ended here: the peer that queued it may wait for how."""
        if self.others:
            self._post(RelayPost("ran", session_id, prompt_id, event_json(outcome)))

    def placed_with(self, session_id: str) -> str | None:
        """The sibling prompts for the session were placed with, whose run has not started yet (the next prompt
        goes there too, behind them)."""
        placed = self._placing.get(session_id)
        return placed.peer if placed is not None else None

    def placement(self, session_id: str, load: int) -> str | None:
        """The sibling that should run a prompt for the session, which no process runs, when this process has
        `load` runs: the one with the fewest runs if it has `PLACE_MARGIN` fewer (ties: any of them); None: run
        it here. The choice holds from now (a prompt for the session that comes before `place` follows it);
        `unplace` lets it go if the prompt could not be queued."""
        live = [p for p in self.siblings if p in self.others]
        if not live or load < PLACE_MARGIN:
            return None
        loads = Counter({p: self.loads.get(p, 0) for p in live})
        loads.update(placed.peer for placed in self._placing.values())
        fewest = min(loads[p] for p in live)
        if load - fewest < PLACE_MARGIN:
            return None
        peer = random.choice([p for p in live if loads[p] == fewest])
        self._placing[session_id] = _Placed(peer, time.monotonic())
        return peer

    def unplace(self, session_id: str) -> None:
        placed = self._placing.get(session_id)
        if placed is not None and not placed.prompts:
            del self._placing[session_id]

    async def place(self, session_id: str, prompt_id: int) -> bool:
        """A prompt this peer queued durably for the session, which `placement` (or `placed_with`) chose a
        sibling for: wake that sibling, which runs the session's queue. False: the sibling's run of the
        session began meanwhile (or the placement was taken back): nothing was posted."""
        placed = self._placing.get(session_id)
        if placed is None:
            return False
        placed.prompts.append(prompt_id)
        try:  # now, not with the next pass's rows (a pass of a busy loop is milliseconds): its order with them
            # matters to no one
            body = _encode.encode((placed.peer, time.time()))
            await self.relay.post([RelayPost("place", session_id, prompt_id, body)])
        except TetherError:
            log.warning("could not place a prompt of session %s: it runs here after PLACE_WAIT", session_id)
        return True

    def cancel_placed(self, session_id: str) -> list[int]:
        """Forget the session's placement whose run has not started (a cancel): the queued ids placed."""
        placed = self._placing.pop(session_id, None)
        return placed.prompts if placed is not None else []

    async def _placed_late(self) -> None:
        """Run here the prompts placed with a sibling that has not started their run within `PLACE_WAIT`, or
        that died: unless a process holds the session's lease by now (it started; its `RunStarted` is on its
        way). The sibling may still come to them: the queue's rows and the lease let one run each, in order."""
        now = time.monotonic()
        for sid, placed in list(self._placing.items()):
            if placed.peer in self.others and now - placed.at <= PLACE_WAIT:
                continue
            if self.manager._closing:
                return  # (the store's queue keeps them for the next start)
            if await live_lease(self.manager.store, sid) is not None:
                continue  # (its run's RunStarted is on its way; or an edit holds the session: look again)
            if self._placing.pop(sid, None) is not placed:
                continue  # (its run started meanwhile)
            log.info("session %s: peer %s did not take up the prompts placed with it: they run here", sid, placed.peer)
            for prompt_id in placed.prompts:
                self.manager.take_back(sid, prompt_id)

    async def run_ended(self, session_id: str, *, again: Callable[[], bool] | None = None) -> None:
        """Give the session's claim back once the run's last events are posted; unless `again()` says by then
        that a new run of it began here (a prompt's task opened it and claimed it meanwhile)."""
        await self._drain()  # the run's last events are posted before its claim goes
        if again is not None and again():
            return
        try:
            await self.relay.release_run(session_id)
        except TetherError:
            log.warning("could not release the run of session %s in the relay", session_id, exc_info=True)

    def _post(self, row: RelayPost) -> None:
        self._out.append(row)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush(), name="tether-mesh-flush")

    async def _flush(self) -> None:
        # a task's first step runs in the loop's next pass: what the pass that made it published is all here
        while self._out:
            rows, self._out = self._out, []
            if self.siblings:  # they place runs by it: said as it changes, with what goes out anyway
                load = self.manager.load()
                if load != self._told:
                    self._told = load
                    rows.append(RelayPost("load", "", load, b"{}"))
            try:
                await self.relay.post(rows)
            except TetherError:
                log.warning("could not post %d rows to the relay", len(rows), exc_info=True)

    async def _drain(self) -> None:
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    # --- in ----------------------------------------------------------------------------------------

    async def _follow(self) -> None:
        while not self._closing:
            await self.relay.wait(POLL)
            try:
                await self.sync()
            except TetherError:
                log.warning("could not read the relay", exc_info=True)
                await asyncio.sleep(POLL)

    async def sync(self) -> None:
        """Read what the relay holds now and hand it on (the follower calls this when woken; the manager
        before it reads a journal that another process changed: what that process posted first comes
        first)."""
        async with self._reading:
            while True:
                rows = self.relay.rows_here(self._last)  # what the wake-ups brought, then the file (or database):
                read = not rows  # a wake-up lost leaves a gap the wake-ups after it cannot show
                if read:
                    rows = await self.relay.rows_after(self._last)
                self._take(rows)
                if read and len(rows) < 1000:
                    return

    def _rows_came(self) -> bool:
        """A wake-up brought rows (called from its callback): those that follow on from the last row read are
        handed on now, a pass of the loop before the follower's task would; unless a read of the relay is
        under way (what it reads comes first: False, and the follower's task reads them after it)."""
        if self._reading.locked() or self._closing:
            return False
        self._take(self.relay.rows_here(self._last))
        return True

    def _take(self, rows: list[RelayRow]) -> None:
        """Rows read, in order, after the last one: the others' handed on (this peer's own only counted)."""
        for row in rows:
            self._last = row.id
            if row.origin != self.relay.peer:
                if row.origin not in self._judged and row.origin not in self._heard_of:
                    self._heard_of.add(row.origin)  # (once: one gone may have left rows)
                    if self._meeting is None and not self._closing:
                        self._meeting = asyncio.get_running_loop().create_task(self._meet(), name="tether-mesh-meet")
                self.others.add(row.origin)  # it lives: it just wrote
                self._receive(row)

    def _receive(self, row: RelayRow) -> None:
        manager = self.manager
        try:
            if row.kind == "event":
                event = _events.decode(row.body)
                if event.session_id == row.session_id:
                    if isinstance(event, RunStarted):
                        self.remote_runs[row.session_id] = row.origin
                        self._placing.pop(row.session_id, None)  # began there (or elsewhere: it reads the queue)
                    elif isinstance(event, Done | Error):
                        self.remote_runs.pop(row.session_id, None)
                manager.relayed(row.session_id, event)
            elif row.kind == "pending":
                # (the activity feed has it from the store's change feed, where its process published it)
                pending = _pending.decode(row.body)
                self.asked[(pending.request.session_id, pending.request.call_id)] = (pending, row.origin)
            elif row.kind == "settled":
                settled = _settled.decode(row.body)
                self.asked.pop((settled.session_id, settled.call_id), None)
            elif row.kind == "change":
                manager.activity.poke()
            elif row.kind == "queued":
                manager.queued_elsewhere(row.session_id)
            elif row.kind == "load":
                self.loads[row.origin] = row.n
            elif row.kind == "place":
                peer, at = msgspec.json.decode(row.body, type=tuple[str, float])
                if peer == self.relay.peer:
                    task = asyncio.get_running_loop().create_task(self._placed_here(row.session_id, at))
                    self._placed_tasks.add(task)
                    task.add_done_callback(self._placed_tasks.discard)
                else:  # (a run of the session here reads the queue after it: the placed prompt waits there)
                    manager.queued_elsewhere(row.session_id)
            elif row.kind == "ran":
                outcome = _events.decode(row.body)
                if isinstance(outcome, Done | Error):
                    manager.ran_elsewhere(row.session_id, row.n, outcome)
            elif row.kind == "answer":
                call_id, answer = msgspec.json.decode(row.body, type=tuple[str, Answer])
                manager.answer_here(row.session_id, call_id, answer)
            elif row.kind in ("cancel", "pause") and row.session_id in manager.running():
                action = manager.cancel if row.kind == "cancel" else manager.pause
                asyncio.get_running_loop().create_task(action(row.session_id))
        except msgspec.ValidationError:
            log.warning("a relay row of kind %s could not be read (another version of tether?)", row.kind)

    async def _placed_here(self, session_id: str, at: float) -> None:
        """Run the session's queue, where a sibling placed a prompt (at `at`, this host's clock): unless this
        one is stopping (the store's queue keeps it), or it comes late (`PLACE_WAIT` / 2: the sibling may have
        taken it back) and another process claims or holds the session (that one runs the queue). In time,
        a claim or lease is that of the run before, ending (its `Done` is out before its lease goes): the
        run waits for it."""
        manager = self.manager
        if manager._closing:
            return
        try:
            if time.time() - at > PLACE_WAIT / 2:
                entry = manager._sessions.get(session_id)
                idle = entry is None or entry.worker is None or entry.worker.done()
                if idle and (await self.claimed_elsewhere(session_id) or await live_lease(manager.store, session_id)):
                    return
            await manager.run_placed(session_id)
        except TetherError:
            log.warning("could not run the prompt placed here for session %s", session_id, exc_info=True)

    # --- who lives ---------------------------------------------------------------------------------

    async def _meet(self) -> None:
        """A peer this one does not know yet wrote (one that just started): who it is, now rather than at
        the next heartbeat (a new worker takes placed runs at once)."""
        try:
            self._met(await self.relay.heartbeat())
        except TetherError:
            log.warning("the relay's heartbeat failed", exc_info=True)
        finally:
            self._meeting = None

    def _met(self, peers: list[Peer]) -> None:
        """The peers a heartbeat found alive: the others, and which of them are siblings."""
        self.others = {p.peer for p in peers}
        judge = self._sibling or (lambda peer: False)
        self._judged = {p.peer: self._judged[p.peer] if p.peer in self._judged else judge(p) for p in peers}
        siblings = {peer for peer, sibling in self._judged.items() if sibling}
        if siblings - self.siblings and not self._closing:  # a new one knows nothing of this one's load yet
            self._told = self.manager.load()
            self._post(RelayPost("load", "", self._told, b"{}"))
        self.siblings = siblings
        for gone in self.loads.keys() - siblings:
            del self.loads[gone]
        self._heard_of -= self._judged.keys()

    async def _beat(self) -> None:
        beats = 0
        while not self._closing:
            await asyncio.sleep(HEARTBEAT)
            beats += 1
            try:
                self._met(await self.relay.heartbeat())
            except TetherError:
                log.warning("the relay's heartbeat failed", exc_info=True)
            try:
                await self._placed_late()
                for key in [k for k, (_, peer) in self.asked.items() if peer not in self.others]:
                    del self.asked[key]  # its run is gone with its peer: the journal keeps the request
                for sid in [s for s, peer in self.remote_runs.items() if peer not in self.others]:
                    del self.remote_runs[sid]
                await self._take_over()
                if beats % PRUNE_EVERY == 0:
                    await self.relay.prune(time.time() - KEEP)
            except TetherError:
                log.warning("the mesh's work after its heartbeat failed", exc_info=True)

    async def _take_over(self) -> None:
        """Resume the sessions whose runs died with their peer, once their lease is free."""
        if self.manager._closing:
            return
        for orphan in await self.relay.orphans():
            sid = orphan.session_id
            if sid in self.manager.running() or await live_lease(self.manager.store, sid) is not None:
                continue  # the lease still holds: its holder may live yet (it expires if not)
            if not await self.relay.take_run(orphan):
                continue  # another peer took it first
            log.info("session %s: resuming the run of peer %s, which is gone", sid, orphan.peer)
            try:
                await self.manager.start(sid, None)
                await self.manager.pull_queued(sid)  # then the prompts it had queued, once each
            except SessionNotFound:
                await self.relay.release_run(sid)
            except TetherError:
                log.warning("could not resume session %s", sid, exc_info=True)
                await self.relay.release_run(sid)
