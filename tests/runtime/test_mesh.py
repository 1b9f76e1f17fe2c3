"""`Mesh`: two `SessionManager`s over one SQLite file, each with its own connection and its own end of the
relay, as two workers of a server would be (the processes themselves are in tests/server/test_workers.py).
A follower of B sees every event of A's run, live ones (text deltas) too, in order, as A's own follower
does; an approval A's run waits on is listed by B and answered there; B's cancel stops A's run at once; the
claim of a run whose peer is gone is taken over by the other, which resumes the session."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tether import Message, ToolCallPart
from tether.config import Config
from tether.errors import SessionBusy
from tether.events import Done, Error, Event, TextDelta
from tether.providers.base import ModelRequest
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime import mesh as mesh_module
from tether.runtime.launch import RunRequest
from tether.runtime.manager import SessionManager
from tether.runtime.mesh import PLACE_MARGIN, Mesh, same_supervisor
from tether.runtime.permission import Answer
from tether.store import SqliteStore, Store
from tether.store.relay import Peer, SqliteRelay, relay_path
from tether.tools.base import ToolRegistry, function_tool

GATE: dict[str, asyncio.Event] = {}
GATE_NAME = ["cancel"]
"""The gate the `holds` model's call waits at."""


@function_tool
async def change(what: str) -> str:
    """Change something (not read-only: a person is asked first)."""
    return f"changed {what}"


@function_tool(read_only=True)
async def hold(name: str) -> str:
    """Wait until the test lets go."""
    await GATE[name].wait()
    return "let go"


def make(store: SqliteStore, tmp_path: Path, respond: Any) -> SessionManager:
    provider = ScriptedProvider(respond, chunk_size=3)

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider, "test", unknown_model("scripted", "test"))

    defaults = RunRequest(None, directory=tmp_path, registry=ToolRegistry([change, hold]))
    return SessionManager(store, config=Config(), defaults=defaults, resolve=resolve)


class Pair:
    def __init__(self, a: SessionManager, b: SessionManager) -> None:
        self.a, self.b = a, b


@pytest.fixture
async def pair(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    respond = request.param if hasattr(request, "param") else (lambda r: "a fairly long answer, streamed in deltas")
    stores = [SqliteStore(tmp_path / "t.db"), SqliteStore(tmp_path / "t.db")]
    managers = [make(s, tmp_path, respond) for s in stores]
    meshes = [Mesh(m, SqliteRelay(relay_path(tmp_path / "t.db"))) for m in managers]
    for manager, mesh in zip(managers, meshes, strict=True):
        manager.mesh = mesh
        await mesh.start()
    for mesh in meshes:  # each knows the other is there (as its first heartbeat would tell it)
        mesh.others = {p.peer for p in await mesh.relay.heartbeat()}
    try:
        yield Pair(*managers)
    finally:
        for manager, mesh in zip(managers, meshes, strict=True):
            await manager.shutdown()
            await mesh.stop()
        for store in stores:
            await store.close()


async def reader_stopped(manager: SessionManager) -> Mesh:
    """The manager's mesh, its task that reads the relay stopped (a worker that lags)."""
    mesh = manager.mesh
    assert isinstance(mesh, Mesh)
    reader = mesh._tasks[0]
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    return mesh


async def until_end(events: AsyncIterator[Event], session_id: str, into: list[Event]) -> None:
    async for event in events:
        into.append(event)
        if isinstance(event, Done | Error) and event.session_id == session_id:
            return


async def followed_run(pair: Pair) -> tuple[list[Event], list[Event]]:
    """A run of A's from its start to its end, as a follower at A and one at B saw it."""
    session = await pair.a.store.create_session(directory=str(Path.cwd()))
    here: list[Event] = []
    there: list[Event] = []
    after = await pair.a.position(session.id)
    followers = [
        asyncio.create_task(until_end(pair.a.subscribe(session.id, after=after), session.id, here)),
        asyncio.create_task(until_end(pair.b.subscribe(session.id, after=after), session.id, there)),
    ]
    await asyncio.sleep(0.05)  # both subscribed
    run = await pair.a.start(session.id, "tell me")
    assert isinstance(await run.result(), Done)
    await asyncio.wait_for(asyncio.gather(*followers), 10)
    return here, there


async def test_a_follower_of_another_manager_sees_every_event_of_the_run_live_ones_too(pair: Pair) -> None:
    here, there = await followed_run(pair)
    assert [e.n for e in there] == [e.n for e in here] and there == here
    assert sum(isinstance(e, TextDelta) for e in there) > 5  # the deltas, which no journal holds
    assert type(there[0]).__name__ == "RunStarted"


async def test_a_new_follower_gets_no_event_of_a_run_that_ended_before_it_came(pair: Pair) -> None:
    # B's relay reader lags (a worker that just started, a busy one): the rows of A's first run are
    # still unread when a client subscribes at B "from now"; they must not reach it as if they were live
    mesh = await reader_stopped(pair.b)
    mesh.relay.on_rows(None)  # nor are the rows handed on as the wake-ups bring them
    session = await pair.a.store.create_session(directory=str(Path.cwd()))
    first = await (await pair.a.start(session.id, "one")).result()
    assert isinstance(first, Done)
    await asyncio.sleep(0.05)  # its rows posted
    there: list[Event] = []
    follower = asyncio.create_task(until_end(pair.b.subscribe(session.id), session.id, there))
    await asyncio.sleep(0.05)  # subscribed
    second = await pair.a.start(session.id, "two")
    outcome = await second.result()
    assert isinstance(outcome, Done)
    await asyncio.sleep(0.05)
    await mesh.sync()  # B reads the relay again (its reader is stopped)
    await asyncio.wait_for(follower, 10)
    assert type(there[0]).__name__ == "RunStarted" and there[-1] == outcome
    assert all(e.n > first.n for e in there)


async def test_rows_a_wake_up_brings_are_handed_on_from_its_callback(pair: Pair) -> None:
    """The SQLite relay's wake-ups carry the rows: B's followers get A's run from the datagram's callback,
    in order, with B's reading task stopped and B never reading the relay itself."""
    mesh = await reader_stopped(pair.b)

    async def no_read() -> None:
        pass

    mesh.sync = no_read  # type: ignore[method-assign]
    here, there = await followed_run(pair)
    assert there == here and sum(isinstance(e, TextDelta) for e in there) > 5


def asks(request: ModelRequest) -> Message | str:
    if request.messages[-1].role == "user":
        return Message.assistant(tool_calls=[ToolCallPart(id="c1", name="change", arguments={"what": "the config"})])
    return f"after the call: {request.messages[-1].tool_results[0].content}"


@pytest.mark.parametrize("pair", [asks], indirect=True)
async def test_an_approval_a_run_waits_on_is_listed_and_answered_in_the_other_manager(pair: Pair) -> None:
    run = await pair.a.start(None, "change it")
    for _ in range(500):
        if await pair.b.approvals():
            break
        await asyncio.sleep(0.01)
    (request,) = await pair.b.approvals()
    assert request.call_id == "c1" and request.session_id == run.session_id
    assert await pair.b.approvals(run.session_id) == [request]
    assert await pair.b.status(run.session_id) == "waiting_for_approval"
    assert await pair.b.answer(run.session_id, "c1", Answer(True, by="bob")) is None  # reaches A's run
    done = await asyncio.wait_for(run.result(), 10)
    assert isinstance(done, Done) and done.text == "after the call: changed the config"
    for _ in range(200):  # the settling reached B
        if not await pair.b.approvals():
            break
        await asyncio.sleep(0.01)
    assert await pair.b.approvals() == []


def holds(request: ModelRequest) -> Message | str:
    if request.messages[-1].role == "user":
        return Message.assistant(tool_calls=[ToolCallPart(id="c1", name="hold", arguments={"name": GATE_NAME[0]})])
    return "held"


@pytest.mark.parametrize("pair", [holds], indirect=True)
async def test_a_cancel_in_the_other_manager_stops_the_run_at_once(pair: Pair) -> None:
    GATE["cancel"] = asyncio.Event()
    GATE_NAME[0] = "cancel"
    run = await pair.a.start(None, "hold on")
    while await pair.b.status(run.session_id) not in ("busy_elsewhere", "running"):
        await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await pair.b.cancel(run.session_id) is True
    outcome = await asyncio.wait_for(run.result(), 10)
    assert isinstance(outcome, Error) and outcome.code == "cancelled"
    assert loop.time() - started < 0.45  # the relay, not the lease's half-second look
    assert await pair.a.store.get_lease(run.session_id) is None


@pytest.mark.parametrize("pair", [holds], indirect=True)
async def test_a_sibling_s_run_is_running_to_the_other_peer(pair: Pair) -> None:
    """A worker asked about a session another worker runs says `running`, as that worker does (before:
    `busy_elsewhere`, which is for a process outside the service, so the answer depended on the worker)."""
    GATE["sibling"] = asyncio.Event()
    GATE_NAME[0] = "sibling"
    run = await pair.a.start(None, "hold on")
    try:
        for _ in range(500):
            if await pair.b.status(run.session_id) == "running":
                break
            await asyncio.sleep(0.01)
        assert await pair.b.status(run.session_id) == "running" == await pair.a.status(run.session_id)
        # a peer that joined after the run began never heard it start: the run's claim in the relay says it
        assert pair.b.mesh is not None
        pair.b.mesh.remote_runs.clear()
        assert await pair.b.status(run.session_id) == "running"
    finally:
        GATE["sibling"].set()
    assert isinstance(await asyncio.wait_for(run.result(), 10), Done)
    for _ in range(500):
        if await pair.b.status(run.session_id) == "idle":
            break
        await asyncio.sleep(0.01)
    assert await pair.b.status(run.session_id) == "idle"


@pytest.mark.parametrize("pair", [holds], indirect=True)
async def test_the_run_claim_of_a_gone_peer_is_taken_over_and_the_session_resumed(pair: Pair, tmp_path: Path) -> None:
    """A peer gone without ending its run (its relay row removed, as for a dead process, and its lease
    released, as at expiry): the other peer resumes the session; the call that was cut off is not run
    again."""
    GATE["takeover"] = asyncio.Event()
    session = await pair.a.store.create_session(directory=str(tmp_path))
    await pair.a.store.append(
        session.id,
        [
            Message.user("hold on"),
            Message.assistant(tool_calls=[ToolCallPart(id="c9", name="hold", arguments={"name": "takeover"})]),
        ],
    )
    ghost = SqliteRelay(relay_path(tmp_path / "t.db"))
    await ghost.join()
    await ghost.claim_run(session.id)
    await ghost.close()  # leaves its claim behind
    assert pair.b.mesh is not None
    await pair.b.mesh._take_over()  # type: ignore[attr-defined]
    messages: list[Message] = []
    for _ in range(1000):
        messages = [e.body for e in await pair.b.store.read(session.id) if isinstance(e.body, Message)]
        if len(messages) == 4:
            break
        await asyncio.sleep(0.01)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].tool_results[0].is_error  # interrupted, never run again
    assert messages[3].text == "held"
    assert await pair.a.mesh._take_over() is None and pair.a.running() == []  # type: ignore[union-attr]


async def test_a_prompt_that_comes_as_a_run_gives_its_claim_back_still_runs(pair: Pair) -> None:
    """The worker gives the run's claim back (a store write) after its last prompt: a prompt queued meanwhile
    is run by it, not left waiting behind a worker that is ending."""
    first = await pair.a.start(None, "one")
    assert isinstance(await first.result(), Done)
    for i in range(5):  # each prompt as the one before ends, when its worker gives its claim back
        handle = await pair.a.start(first.session_id, f"again {i}")
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)


@pytest.mark.parametrize("pair", [holds], indirect=True)
async def test_a_prompt_to_a_session_another_manager_runs_waits_for_its_run(pair: Pair) -> None:
    """Not refused (as a session held by a process outside the service is), nor dropped: it waits for the
    lease of the run in the other manager, then runs."""
    GATE["queued"] = asyncio.Event()
    GATE_NAME[0] = "queued"
    first = await pair.a.start(None, "hold on")
    sid = first.session_id
    while await pair.b.status(sid) not in ("busy_elsewhere", "running"):
        await asyncio.sleep(0.01)
    assert pair.b.mesh is not None and await pair.b.mesh.claimed_elsewhere(sid)
    second = await pair.b.start(sid, "and then this")
    assert second.queued
    await asyncio.sleep(0.3)
    assert not second.finished  # waits while A's run holds the session
    GATE["queued"].set()
    assert isinstance(await asyncio.wait_for(first.result(), 10), Done)
    assert isinstance(await asyncio.wait_for(second.result(), 20), Done)
    texts = [e.body.text for e in await pair.b.store.read(sid) if isinstance(e.body, Message) and e.body.role == "user"]
    assert texts == ["hold on", "and then this"]


def answering_as(name: str) -> Any:
    """A model that says which manager's run asked it (`name`), and holds at the gate on ``hold ...``."""

    def respond(request: ModelRequest) -> Message | str:
        last = request.messages[-1]
        if last.role == "user" and last.text.startswith("hold"):
            return Message.assistant(tool_calls=[ToolCallPart(id="c1", name="hold", arguments={"name": "fwd"})])
        if last.role == "tool":
            return "held"
        return f"{name} ran: {last.text}"

    return respond


@contextlib.asynccontextmanager
async def named_pair(tmp_path: Path, sibling: Callable[[Peer], bool] | None = None) -> AsyncIterator[Pair]:
    """Managers A and B whose models say which ran them (`answering_as`); `sibling` as their meshes'."""
    stores = [SqliteStore(tmp_path / "t.db"), SqliteStore(tmp_path / "t.db")]
    managers = [make(s, tmp_path, answering_as(n)) for s, n in zip(stores, "AB", strict=True)]
    meshes = [Mesh(m, SqliteRelay(relay_path(tmp_path / "t.db")), sibling=sibling) for m in managers]
    for manager, mesh in zip(managers, meshes, strict=True):
        manager.mesh = mesh
        await mesh.start()
    for mesh in meshes:
        mesh._met(await mesh.relay.heartbeat())
    try:
        yield Pair(*managers)
    finally:
        for manager, mesh in zip(managers, meshes, strict=True):
            await manager.shutdown()
            await mesh.stop()
        for store in stores:
            await store.close()


@pytest.fixture
async def named(tmp_path: Path) -> AsyncIterator[Pair]:
    async with named_pair(tmp_path) as pair:
        yield pair


@pytest.fixture
async def siblings(tmp_path: Path) -> AsyncIterator[Pair]:
    """A and B as two workers of one server: each places runs with the other."""
    async with named_pair(tmp_path, sibling=lambda peer: True) as pair:
        yield pair


async def user_and_answers(store: Store, sid: str) -> list[str]:
    return [e.body.text for e in await store.read(sid) if isinstance(e.body, Message) and e.body.role != "tool"]


async def test_a_prompt_to_the_other_manager_is_queued_durably_and_run_by_the_runner(named: Pair) -> None:
    """B queues the prompt in the store before `start` returns and wakes A through the relay; A runs it after
    its run in progress (its model answers: "A ran"), in order, and B's handle gets the run's end."""
    GATE["fwd"] = asyncio.Event()
    first = await named.a.start(None, "hold on")
    sid = first.session_id
    while await named.b.status(sid) not in ("busy_elsewhere", "running"):
        await asyncio.sleep(0.01)
    second = await named.b.start(sid, "two")
    third = await named.b.start(sid, "three")
    assert second.queued and third.queued and second.queued_id is not None and third.queued_id is not None
    queued_now = await named.b.store.queued_prompts(sid)  # durable before the answer, while A's run holds
    assert [q.id for q in queued_now] == [second.queued_id, third.queued_id]
    assert named.b.running() == []
    GATE["fwd"].set()
    assert isinstance(await asyncio.wait_for(first.result(), 10), Done)
    for handle in (second, third):
        outcome = await asyncio.wait_for(handle.result(), 20)
        assert isinstance(outcome, Done), outcome
    texts = await user_and_answers(named.a.store, sid)
    assert texts == ["hold on", "", "held", "two", "A ran: two", "three", "A ran: three"]
    assert await named.a.store.queued_prompts(sid) == []


async def test_prompts_to_either_manager_as_runs_end_each_run_exactly_once(named: Pair) -> None:
    """The races both ways: B queues while A gives its claim back (A reads the relay after releasing, B looks
    at the claim after posting); whoever runs a prompt, it runs once, and every handle gets its end."""
    first = await named.a.start(None, "start")
    assert isinstance(await asyncio.wait_for(first.result(), 10), Done)
    sid = first.session_id
    handles = []
    for i in range(8):
        to_a = await named.a.start(sid, f"a{i}")
        while await named.b.status(sid) not in (
            "busy_elsewhere",
            "running",
        ):  # (B would race A for a lease no one holds yet)
            await asyncio.sleep(0)
        to_b = await named.b.start(sid, f"b{i}")  # lands as A's run goes on or ends
        handles += [to_a, to_b]
        await asyncio.wait_for(to_a.result(), 20)
        await asyncio.wait_for(to_b.result(), 20)  # (A's next prompt must not race B's for an idle session)
    for _ in range(2000):
        if all(h.finished for h in handles):
            break
        await asyncio.sleep(0.01)
    unfinished = [(h.prompt, h.queued, h.queued_id) for h in handles if not h.finished]
    journal = await user_and_answers(named.a.store, sid)
    assert not unfinished, (unfinished, journal, named.a._forwarded, named.b._forwarded)
    for handle in handles:
        assert isinstance(await handle.result(), Done)
    prompts = [t for t in await user_and_answers(named.a.store, sid) if " ran: " not in t]
    assert sorted(prompts) == sorted(["start"] + [f"a{i}" for i in range(8)] + [f"b{i}" for i in range(8)])
    assert await named.a.store.queued_prompts(sid) == []


def mesh_of(manager: SessionManager) -> Mesh:
    assert isinstance(manager.mesh, Mesh)
    return manager.mesh


async def held_runs(manager: SessionManager, count: int) -> list[Any]:
    """`count` runs of new sessions in `manager` that hold at the gate "fwd" (its load goes up by `count`)."""
    handles = [await manager.start(None, "hold on") for _ in range(count)]
    while not all(h.session_id in manager.running() for h in handles):
        await asyncio.sleep(0.01)
    return handles


async def test_a_prompt_for_an_idle_session_goes_to_the_sibling_with_fewer_runs(siblings: Pair) -> None:
    """A runs PLACE_MARGIN - 1 sessions: a prompt it gets for an idle one still runs there; with one more,
    the next goes to B, which has none (its model answers "B ran"). A's handle gets the run's end, A's
    follower its every event, and the queue keeps nothing."""
    GATE["fwd"] = asyncio.Event()
    a = siblings.a
    held = await held_runs(a, PLACE_MARGIN - 1)
    session = await a.store.create_session(directory=str(Path.cwd()))
    here = await a.start(session.id, "one")
    assert isinstance(await asyncio.wait_for(here.result(), 10), Done)
    held += await held_runs(a, 1)
    seen: list[Event] = []
    follower = asyncio.create_task(
        until_end(a.subscribe(session.id, after=await a.position(session.id)), session.id, seen)
    )
    await asyncio.sleep(0.05)
    placed = await a.start(session.id, "two")
    assert not placed.queued  # nothing runs before it: it is not "queued" to whoever asked
    outcome = await asyncio.wait_for(placed.result(), 10)
    assert isinstance(outcome, Done)
    await asyncio.wait_for(follower, 10)
    assert type(seen[0]).__name__ == "RunStarted" and seen[-1] == outcome
    assert await user_and_answers(a.store, session.id) == ["one", "A ran: one", "two", "B ran: two"]
    assert await a.store.queued_prompts(session.id) == []
    assert session.id not in a.running() and not mesh_of(a)._placing
    GATE["fwd"].set()
    for handle in held:
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)


async def test_placed_prompts_a_sibling_does_not_take_up_run_where_they_came_in_order(siblings: Pair) -> None:
    """A places two prompts for a session with a sibling that is gone by the time it would run them (a peer
    that will never read them): they run in A after it sees that, in the order they came, once each."""
    GATE["fwd"] = asyncio.Event()
    a = siblings.a
    mesh = mesh_of(a)
    held = await held_runs(a, PLACE_MARGIN)
    mesh.others.add("ghost")
    mesh.siblings = {"ghost"}  # the only sibling A sees, as if it had died after its last heartbeat
    session = await a.store.create_session(directory=str(Path.cwd()))
    first = await a.start(session.id, "one")
    second = await a.start(session.id, "two")  # follows the first to where it went, behind it
    placed = mesh._placing[session.id]
    assert placed.peer == "ghost" and placed.prompts == [first.queued_id, second.queued_id]
    assert not first.queued and second.queued  # (the second waits behind the first)
    for handle in (first, second):
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)  # (the next heartbeat: it is gone)
    assert await user_and_answers(a.store, session.id) == ["one", "A ran: one", "two", "A ran: two"]
    assert await a.store.queued_prompts(session.id) == []
    GATE["fwd"].set()
    for handle in held:
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)


async def test_a_placement_not_taken_up_in_time_runs_here(siblings: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sibling that lives but does not start the placed run within PLACE_WAIT (its reader stopped: a
    worker that lags): A runs it."""
    monkeypatch.setattr(mesh_module, "PLACE_WAIT", 0.2)
    GATE["fwd"] = asyncio.Event()
    a = siblings.a
    lagging = await reader_stopped(siblings.b)
    lagging.relay.on_rows(None)
    held = await held_runs(a, PLACE_MARGIN)
    session = await a.store.create_session(directory=str(Path.cwd()))
    placed = await a.start(session.id, "one")
    assert mesh_of(a)._placing
    assert isinstance(await asyncio.wait_for(placed.result(), 10), Done)
    assert await user_and_answers(a.store, session.id) == ["one", "A ran: one"]
    GATE["fwd"].set()
    for handle in held:
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)


def test_siblings_are_the_other_children_of_the_supervisor_on_this_host() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = same_supervisor("here", supervisor=os.getpid())
        assert mine(Peer(peer="w", host="here", pid=child.pid, wake="", seen=0.0))
        assert not mine(Peer(peer="w", host="elsewhere", pid=child.pid, wake="", seen=0.0))  # another node
        assert not mine(Peer(peer="w", host="here", pid=os.getppid(), wake="", seen=0.0))  # not its child
        assert not mine(Peer(peer="w", host="here", pid=os.getpid(), wake="", seen=0.0))  # itself
    finally:
        child.kill()
        child.wait()
    assert not same_supervisor("here", supervisor=os.getpid())(
        Peer(peer="w", host="here", pid=2**22 + 7, wake="", seen=0)
    )


def test_a_process_that_is_no_worker_has_no_siblings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_WORKER", raising=False)
    assert not same_supervisor("here")(Peer(peer="w", host="here", pid=os.getpid() + 1, wake="", seen=0.0))


async def pending_placement(pair: Pair, prompt: str = "one") -> tuple[list[Any], str, Any, Mesh]:
    """A holds PLACE_MARGIN runs; B's reader lags: `prompt`, which A gets for a new idle session, stays placed
    with B, not started. Returns (A's held runs, the session, the placed prompt's handle, B's lagging mesh)."""
    GATE["fwd"] = asyncio.Event()
    lagging = await reader_stopped(pair.b)
    lagging.relay.on_rows(None)
    held = await held_runs(pair.a, PLACE_MARGIN)
    session = await pair.a.store.create_session(directory=str(Path.cwd()))
    placed = await pair.a.start(session.id, prompt)
    assert mesh_of(pair.a).placed_with(session.id) == lagging.relay.peer
    return held, session.id, placed, lagging


async def test_a_prompt_that_comes_to_another_worker_lines_up_behind_a_placed_one(siblings: Pair) -> None:
    """A places a prompt with B, whose reader lags (it has not read the "place" row); the client's next prompt
    comes to B directly: it finds the first in the store's queue and goes behind it, so B runs both, in the
    order they were sent, and A's handle gets the first one's end."""
    a, b = siblings.a, siblings.b
    held, sid, first, _ = await pending_placement(siblings)
    second = await b.start(sid, "two")
    assert second.queued
    for handle in (first, second):
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)
    assert await user_and_answers(a.store, sid) == ["one", "B ran: one", "two", "B ran: two"]
    assert await a.store.queued_prompts(sid) == []
    GATE["fwd"].set()
    for handle in held:
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)


async def test_a_cancel_of_a_placed_run_ends_the_handle_of_the_worker_that_placed_it(siblings: Pair) -> None:
    GATE["fwd"] = asyncio.Event()
    a, b = siblings.a, siblings.b
    held = await held_runs(a, PLACE_MARGIN)
    session = await a.store.create_session(directory=str(Path.cwd()))
    placed = await a.start(session.id, "hold on")  # runs at B, held at the gate
    while session.id not in b.running():
        await asyncio.sleep(0.01)
    assert await a.cancel(session.id)
    outcome = await asyncio.wait_for(placed.result(), 10)
    assert isinstance(outcome, Error) and outcome.code == "cancelled"
    assert not a._forwarded
    GATE["fwd"].set()
    for handle in held:
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)


async def let_go(held: list[Any]) -> None:
    GATE["fwd"].set()
    for handle in held:
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)


async def test_a_cancel_before_a_placed_run_began_drops_it(siblings: Pair) -> None:
    """The client cancels right after the 202: no process holds the session yet, but its prompt is gone from
    the queue, its handle ends cancelled, and it never runs (not here after PLACE_WAIT, nor there)."""
    held, sid, placed, _ = await pending_placement(siblings)
    assert await siblings.a.cancel(sid)
    outcome = await asyncio.wait_for(placed.result(), 5)
    assert isinstance(outcome, Error) and outcome.code == "cancelled"
    assert await siblings.a.store.queued_prompts(sid) == []
    await asyncio.sleep(mesh_module.PLACE_WAIT + 1.2)  # past the take-back's heartbeat
    assert await user_and_answers(siblings.a.store, sid) == []
    await let_go(held)


async def test_what_follows_a_placement_not_begun_goes_behind_it(siblings: Pair) -> None:
    """While a placed prompt waits for its sibling: a steer (there is no run to steer yet) is queued behind
    it, and a prompt that must not wait (`queue=False`) is refused as busy."""
    held, sid, placed, _ = await pending_placement(siblings)
    with pytest.raises(SessionBusy):
        await siblings.a.start(sid, "now or never", queue=False)
    steered = await siblings.a.start(sid, "two", steer=True)
    assert steered.queued and not steered.steered
    for handle in (placed, steered):  # (B lags: taken back after PLACE_WAIT, in order)
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)
    assert await user_and_answers(siblings.a.store, sid) == ["one", "A ran: one", "two", "A ran: two"]
    await let_go(held)


async def test_a_prompt_that_follows_a_placement_whose_run_began_is_queued_for_that_run(siblings: Pair) -> None:
    """The sibling's RunStarted comes while the next prompt's queue write is under way: that prompt is no
    longer placed but queued for the run there (as a forwarded one), and runs after it, once."""
    a, b = siblings.a, siblings.b
    held, sid, first, lagging = await pending_placement(siblings, "hold on")  # B has not read it yet
    enqueue = a.store.enqueue_prompt

    async def slow_enqueue(*args: Any, **kwargs: Any) -> Any:
        await lagging.sync()  # B reads the "place" row now: it runs the prompt, holding at the gate
        while sid not in b.running() or mesh_of(a).placed_with(sid) is not None:
            await asyncio.sleep(0.01)  # B began the run, and A heard of it
        return await enqueue(*args, **kwargs)

    a.store.enqueue_prompt = slow_enqueue  # type: ignore[method-assign]
    assert mesh_of(a).placed_with(sid) is not None
    second = await a.start(sid, "two")
    a.store.enqueue_prompt = enqueue  # type: ignore[method-assign]
    assert second.queued
    GATE["fwd"].set()
    for handle in (first, second, *held):
        assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)
    assert await user_and_answers(a.store, sid) == ["hold on", "", "held", "two", "B ran: two"]
