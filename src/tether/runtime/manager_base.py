"""What the rooms of `SessionManager` share (`manager.py`): the state of each session in use (`_Session`), a
prompt's handle (`RunHandle`), a subscriber's bounded queue, an approval request a run waits on, and
`ManagerBase`, the attributes every room reads and the methods one room calls in another."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from ..config import Config
from ..errors import SessionBusy
from ..events import Done, Error, Event, live_number
from ..messages import Message
from ..store.protocols import Store
from ..store.records import SessionInfo
from .activity import Activity, ActivityFeed, ApprovalPending, ApprovalSettled
from .launch import LaunchedRun, LaunchPlan, Resolver, RunRequest
from .loop import AgentRun
from .mcp import ProcessServers
from .pacing import Pacer
from .permission import Answer, ApprovalRequest

Status = Literal["idle", "queued", "running", "waiting_for_approval", "paused", "busy_elsewhere"]
"""Where a session stands: nothing running; prompts waiting in this process; a run here; a run here (or one
that stopped) waiting for a person's decision on a tool call (`approvals`, `answer`); paused (a run stopped
at a step and resumes on demand); run by another process (its lease says)."""

SUBSCRIBER_BUFFER = 1024
"""Events a subscriber may fall behind by before it is moved to reading the journal."""


@dataclass
class RunHandle:
    """A prompt given to `start`: which session, where its events start (`after`: subscribe after it to see
    them all), and `result()`, the `Done` or `Error` of the run that took it, once that has ended."""

    session_id: str
    prompt: str | Message | None
    after: int
    plan: LaunchPlan = field(repr=False)
    queued: bool = False
    """The prompt waits behind a run of this process (or a prompt queued before it)."""
    steered: bool = False
    """The prompt went to the run in progress, which reads it at its next step."""
    queued_id: int | None = None
    """The prompt's row in the store's durable queue (`PromptQueue`), when it was queued there: it outlives
    this process, and runs once, here or in whichever process runs the session next."""
    info: SessionInfo | None = field(default=None, repr=False)
    """The session's row as `start` knew it (its run opens the session from it instead of reading it)."""
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
class _Opening:
    """A run opened on its request's task (`Queueing._open_now`), for the session's worker to go on with."""

    launched: LaunchedRun | None = None
    events: AsyncIterator[Event] | None = None
    """The run's events after `first` (None: not begun, as its lease must be waited for; or it failed)."""
    first: Event | None = None
    failure: BaseException | None = None
    claimed: bool = False
    """The run is claimed in the relay already (`Mesh.run_started`)."""


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
    pull: bool = False
    """Another process queued prompts for the session in the store (the relay said so, or a takeover):
    its worker reads the queue after the run in progress."""
    opening: asyncio.Future[_Opening] | None = None
    """The run of the first waiting prompt, opened on that prompt's task (`Queueing.start`): the worker
    waits for it, then goes on with it."""


@dataclass
class _Asked:
    """An approval request a run of this manager waits on: `root` is the session the manager runs (a
    sub-agent's request comes through its parent's run)."""

    request: ApprovalRequest
    root: str
    answer: asyncio.Future[Answer]


class _Approver:
    """The approver of one session's runs: asks through the manager, which knows the session once it exists."""

    def __init__(self, manager: ManagerBase, root: str) -> None:
        self.manager = manager
        self.root = root

    async def __call__(self, request: ApprovalRequest) -> Answer:
        return await self.manager._ask(request, self.root)


class Relaying(Protocol):
    """What the manager asks of its place among the processes sharing its store (`mesh.Mesh`), when it has one."""

    def event(self, session_id: str, event: Event) -> None: ...
    def approval(self, item: ApprovalPending | ApprovalSettled) -> None: ...
    def waits_elsewhere(self, session_id: str, call_id: str) -> bool: ...
    def requests(self, session_id: str | None) -> list[ApprovalRequest]: ...
    def waits_for_approval(self, session_id: str) -> bool: ...
    def relays(self, session_id: str) -> bool: ...
    async def claimed_elsewhere(self, session_id: str) -> bool: ...
    async def sync(self) -> None: ...
    async def answer(self, session_id: str, call_id: str, answer: Answer) -> None: ...
    async def control(self, session_id: str, what: str) -> None: ...
    async def run_started(self, session_id: str) -> None: ...
    async def run_ended(self, session_id: str, *, again: Callable[[], bool] | None = None) -> None: ...
    async def queued(self, session_id: str, prompt_id: int) -> None: ...
    def placed_with(self, session_id: str) -> str | None: ...
    def placement(self, session_id: str, load: int) -> str | None: ...
    def unplace(self, session_id: str) -> None: ...
    async def place(self, session_id: str, prompt_id: int) -> bool: ...
    def cancel_placed(self, session_id: str) -> list[int]: ...
    def ran(self, session_id: str, prompt_id: int, outcome: Done | Error) -> None: ...


class ManagerBase:
    """The state of a `SessionManager`, set by its `__init__`, and what its rooms ask of each other."""

    store: Store
    config: Config
    defaults: RunRequest
    resolve: Resolver
    subscriber_buffer: int
    activity: ActivityFeed
    mcp: ProcessServers
    pacer: Pacer | None
    _sessions: dict[str, _Session]
    _recent: OrderedDict[str, _Session]
    _closing: bool
    _asked: dict[tuple[str, str], _Asked]
    _given: dict[tuple[str, str], Answer]
    _store_watch: asyncio.Task[None] | None
    _known: OrderedDict[str, tuple[float, int]]
    _forwarded: dict[tuple[str, int], RunHandle]
    """Prompts this process queued for a run elsewhere, by (session, queued id): their result comes through
    the relay from the process that ran them."""
    _ran: OrderedDict[tuple[str, int], Done | Error]
    """The latest ends of queued prompts' runs elsewhere that no handle here waited for (yet)."""
    mesh: Relaying | None
    """The other processes over the same store (`mesh.Mesh`, set by a server): they get this manager's
    events, approvals and run claims, and it gets theirs."""

    if TYPE_CHECKING:  # each is defined in the room named

        async def start(  # queueing.py
            self,
            session_id: str | None,
            prompt: str | Message | None,
            *,
            steer: bool = False,
            queue: bool = True,
            directory: str | None = None,
            info: SessionInfo | None = None,
            **fields: object,
        ) -> RunHandle: ...

        def _entry(self, session_id: str) -> _Session: ...  # queueing.py

        def _let_go(self, entry: _Session) -> None: ...  # queueing.py

        async def _announce(self, session_id: str, info: SessionInfo | None = None) -> None: ...  # queueing.py

        def _publish(self, entry: _Session, event: Event, *, relay: bool = True) -> None: ...  # following.py

        def _runs_here(self, entry: _Session) -> bool: ...  # following.py

        async def _ask(self, request: ApprovalRequest, root: str) -> Answer: ...  # asking.py

        async def status(self, session_id: str) -> Status: ...  # watching.py

        async def _busy(self, session_id: str) -> SessionBusy | None: ...  # watching.py

        async def announce(self, activity: Activity) -> Activity: ...  # watching.py

    def _finish(self, entry: _Session, handle: RunHandle, outcome: Done | Error | None) -> None:
        if entry.waiting and entry.waiting[0] is handle:
            entry.waiting.popleft()
        elif handle in entry.waiting:
            entry.waiting.remove(handle)
        if not handle._done.done():
            handle._done.set_result(
                outcome or Error(session_id=entry.session_id, n=entry.last_n, code="internal", message="no result")
            )

    @staticmethod
    def _position(entry: _Session, info: SessionInfo) -> int:
        if not entry.last_n:  # a session this manager does not follow (or has let go of): where it stands,
            # after its last entry's durable events and before the live ones of the run to come
            entry.last_n = live_number(info.last_seq, 0) - 1
        return entry.last_n
