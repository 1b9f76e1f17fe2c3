"""`SessionManager`: prompts to one session run in order (or are steered into the run in progress), many
sessions run at once, subscribers follow through bounded buffers and catch up from the journal, and runs
are cancelled, paused, resumed and shut down, with the lease always given back. A scripted model, a real
SQLite store."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tether import Message, ToolCallPart
from tether.config import Config, PermissionsConfig, ProviderConfig, RuntimeConfig
from tether.errors import InvalidInput, SessionBusy
from tether.events import DURABLE_TYPES, Done, Error, Event, TextComplete, TextDelta, ToolCallComplete
from tether.messages import Checkpoint
from tether.providers.base import ModelRequest
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider, ScriptedResponse
from tether.runtime.activity import SessionCreated, StatusChanged
from tether.runtime.journal import replay_events
from tether.runtime.launch import RunRequest
from tether.runtime.manager import SessionManager
from tether.runtime.permission import Answer
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry, function_tool

STEP_GATE: dict[str, asyncio.Event] = {}
ROOT = Path(__file__).resolve().parents[2]


@function_tool(read_only=True)
async def look(what: str) -> str:
    """Look at something."""
    return f"{what} looks fine"


@function_tool
async def slow(seconds: float) -> str:
    """Wait a while."""
    await asyncio.sleep(seconds)
    return "waited"


def steps(n: int, tool: str = "look", **arguments: Any) -> Callable[[ModelRequest], Message]:
    """A model that calls `tool` until it has `n` results since the last prompt, then answers."""

    def respond(request: ModelRequest) -> Message:
        since = 0
        for message in reversed(request.messages):
            if message.role == "user" and message.text:
                break
            since += message.role == "tool"
        if since >= n:
            return Message.assistant(f"done after {since}: {request.messages[-1].text[:40]}")
        # arguments that differ at every call: the same call three times in a row stops a run
        args = {k: v + since / 10_000 for k, v in arguments.items()} if arguments else {"what": f"#{since}"}
        return Message.assistant(tool_calls=[ToolCallPart(id=f"c{len(request.messages)}", name=tool, arguments=args)])

    return respond


def manager(store: SqliteStore, tmp_path: Path, provider: ScriptedProvider, **kwargs: Any) -> SessionManager:
    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider, "test", unknown_model("scripted", "test"))

    defaults = RunRequest(None, directory=tmp_path, registry=ToolRegistry([look, slow]))
    # `slow` changes nothing, but is not marked read-only: these tests allow it, as a user's config would
    config = Config(permissions=PermissionsConfig(allow=["slow"]))
    return SessionManager(store, config=config, defaults=defaults, resolve=resolve, **kwargs)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    async with SqliteStore(tmp_path / "t.db") as s:
        yield s


async def test_prompts_to_one_session_run_in_order(store: SqliteStore, tmp_path: Path) -> None:
    provider = ScriptedProvider(lambda r: f"answer to {r.messages[-1].text}")
    mgr = manager(store, tmp_path, provider)
    first = await mgr.start(None, "one")
    second = await mgr.start(first.session_id, "two")
    third = await mgr.start(first.session_id, "three")
    results = [await h.result() for h in (first, second, third)]
    assert all(isinstance(r, Done) for r in results)
    texts = [m.text for m in await (await _messages(store, first.session_id))]
    assert texts == ["one", "answer to one", "two", "answer to two", "three", "answer to three"]
    assert await mgr.status(first.session_id) == "idle" and await store.get_lease(first.session_id) is None


async def _messages(store: SqliteStore, sid: str) -> Any:
    async def read() -> list[Message]:
        return [e.body for e in await store.read(sid) if isinstance(e.body, Message)]

    return read()


async def test_many_sessions_run_at_once(store: SqliteStore, tmp_path: Path) -> None:
    provider = ScriptedProvider(steps(3))
    mgr = manager(store, tmp_path, provider)
    handles = [await mgr.start(None, f"task {i}", tools=None) for i in range(30)]
    results = await asyncio.gather(*(h.result() for h in handles))
    assert all(isinstance(r, Done) and r.steps == 4 for r in results), results[:3]
    assert len({h.session_id for h in handles}) == 30


async def test_a_steered_prompt_is_read_by_the_run_in_progress(store: SqliteStore, tmp_path: Path) -> None:
    gate = asyncio.Event()

    def respond(request: ModelRequest) -> Message | str:
        last = request.messages[-1]
        if last.role == "user" and last.text == "go":
            return Message.assistant(tool_calls=[ToolCallPart(id="c1", name="slow", arguments={"seconds": 0.3})])
        gate.set()
        return "saw: " + " | ".join(m.text for m in request.messages if m.role == "user")

    mgr = manager(store, tmp_path, ScriptedProvider(respond))
    first = await mgr.start(None, "go", tools=None)
    while await mgr.status(first.session_id) != "running":
        await asyncio.sleep(0.01)
    steered = await mgr.start(first.session_id, "and mind the tests", steer=True)
    done = await first.result()
    assert isinstance(done, Done) and done.text == "saw: go | and mind the tests"
    assert await steered.result() == done  # it rode the same run


async def test_a_subscriber_gets_live_events_and_replay_after_a_number(store: SqliteStore, tmp_path: Path) -> None:
    mgr = manager(store, tmp_path, ScriptedProvider(steps(2)))
    first = await mgr.start(None, "look", tools=None)
    await first.result()
    sid = first.session_id
    durable = [e async for e in replay_events(store, sid)]
    seen: list[Event] = []

    async def follow() -> None:
        async for event in mgr.subscribe(sid, after=0):
            seen.append(event)
            if sum(isinstance(e, Done) for e in seen) == 2:  # the first run's (caught up), the second's (live)
                return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    second = await mgr.start(sid, "again", tools=None)
    await second.result()
    await asyncio.wait_for(follower, 10)
    # the past from the journal (with the first run's start and end in their places), then the second run live
    assert [e for e in seen if isinstance(e, DURABLE_TYPES)][: len(durable)] == durable
    assert [type(e).__name__ for e in seen if not isinstance(e, DURABLE_TYPES)][:2] == ["RunStarted", "Done"]
    numbers = [e.n for e in seen]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # in order, none repeated
    assert isinstance(seen[-1], Done) and any(isinstance(e, TextDelta) for e in seen)


async def test_a_subscriber_that_reads_nothing_stays_bounded_and_catches_up(store: SqliteStore, tmp_path: Path) -> None:
    """100,000 events pass a subscriber that reads none: its buffer stays at its bound, and when it reads it
    gets every durable event it missed, from the journal, then the live ones."""
    text = "w " * 40_000  # streamed two characters a chunk: 40,000 deltas an answer

    def respond(request: ModelRequest) -> Message | ScriptedResponse:
        if request.messages[-1].text == "warm up":
            return "ready"
        tools = 0
        for message in reversed(request.messages):
            if message.role == "user" and message.text:
                break
            tools += message.role == "tool"
        if tools < 30:
            return Message.assistant(
                "w " * 500, tool_calls=[ToolCallPart(id=f"c{tools}", name="look", arguments={"what": str(tools)})]
            )
        return ScriptedResponse(text)

    provider = ScriptedProvider(respond, chunk_size=2)
    mgr = manager(store, tmp_path, provider, subscriber_buffer=256)
    # 40,000 tokens, ten times an unknown model's output limit: allowed here, the answer's length is the point
    mgr.config = msgspec.structs.replace(mgr.config, runtime=RuntimeConfig(max_answer_tokens=100_000))
    first = await mgr.start(None, "warm up", tools="none")
    await first.result()
    sid = first.session_id
    after = (mgr._sessions.get(sid) or mgr._recent[sid]).last_n  # in use, or just let go
    stream = mgr.subscribe(sid, after=after)
    follower = asyncio.create_task(stream.__anext__())  # registered, then reads nothing while the run goes
    await asyncio.sleep(0.05)
    run = await mgr.start(sid, "many events", tools=None)
    done = await run.result()
    assert isinstance(done, Done)
    (subscriber,) = mgr._sessions[sid].subscribers
    assert subscriber.queue.qsize() <= 256  # bounded, though far more passed
    got = [await follower]
    while not isinstance(got[-1], Done):
        got.append(await asyncio.wait_for(stream.__anext__(), 10))
    await stream.aclose()
    missed = [e async for e in replay_events(store, sid, after)]
    durable = [e for e in got if isinstance(e, DURABLE_TYPES)]
    assert durable == missed and len(durable) >= 30 * 3  # every durable event, in order, once
    assert sum(isinstance(e, ToolCallComplete) for e in durable) == 30


async def test_batches_give_what_piled_up_at_once_in_order(store: SqliteStore, tmp_path: Path) -> None:
    """`subscribe_batches` gives the events queued behind the first in one batch (`most` at most), the same
    events in the same order as `subscribe`; a replay comes from the journal `most` at a time."""
    mgr = manager(store, tmp_path, ScriptedProvider(steps(6)))
    first = await mgr.start(None, "warm up", tools=None)
    await first.result()
    sid = first.session_id
    plain = mgr.subscribe(sid)
    batches = mgr.subscribe_batches(sid, most=7)
    plain_first = asyncio.create_task(plain.__anext__())  # both registered, then the run goes unread
    batch_first = asyncio.create_task(batches.__anext__())
    await asyncio.sleep(0.05)
    run = await mgr.start(sid, "look around", tools=None)
    await run.result()
    events = [await plain_first]
    while not isinstance(events[-1], Done):
        events.append(await asyncio.wait_for(plain.__anext__(), 10))
    got = [await batch_first]
    while not isinstance(got[-1][-1], Done):
        got.append(await asyncio.wait_for(batches.__anext__(), 10))
    await plain.aclose()
    await batches.aclose()
    assert [e for b in got for e in b] == events
    assert all(1 <= len(b) <= 7 for b in got) and max(len(b) for b in got) == 7
    assert not mgr._sessions.get(sid) or not mgr._sessions[sid].subscribers  # closing took them off

    journal = [e async for e in replay_events(store, sid)]
    replay = mgr.subscribe_batches(sid, after=0, most=5)
    replayed: list[list[Event]] = []
    while sum(isinstance(e, DURABLE_TYPES) for b in replayed for e in b) < len(journal):
        replayed.append(await asyncio.wait_for(replay.__anext__(), 10))
    await replay.aclose()
    assert all(len(b) == 5 for b in replayed[:-1]) and 1 <= len(replayed[-1]) <= 5
    assert [e for b in replayed for e in b if isinstance(e, DURABLE_TYPES)] == journal


async def test_cancel_stops_the_run_keeps_its_work_and_frees_the_session(store: SqliteStore, tmp_path: Path) -> None:
    provider = ScriptedProvider(
        [Message.assistant(tool_calls=[ToolCallPart(id="c1", name="slow", arguments={"seconds": 60})])]
    )
    mgr = manager(store, tmp_path, provider)
    run = await mgr.start(None, "wait a minute", tools=None)
    queued = await mgr.start(run.session_id, "then this")
    while await mgr.status(run.session_id) != "running" or not (await store.read(run.session_id))[1:]:
        await asyncio.sleep(0.01)
    feed = mgr.activity.follow(mgr.activity.last_n)
    assert await mgr.cancel(run.session_id)
    told = await asyncio.wait_for(anext(feed), 10), await asyncio.wait_for(anext(feed), 10)
    assert [type(t).__name__ for t in told] == ["SessionUpdated", "StatusChanged"]  # the feed is told it stopped
    assert isinstance(told[1], StatusChanged) and told[1].status == "idle"
    outcome = await run.result()
    assert isinstance(outcome, Error) and outcome.code == "cancelled"
    assert isinstance(await queued.result(), Error)  # what waited behind it is dropped
    results = [r for m in await (await _messages(store, run.session_id)) for r in m.tool_results]
    assert len(results) == 1 and "aborted" in results[0].content
    assert await store.get_lease(run.session_id) is None and await mgr.status(run.session_id) == "idle"


async def test_pause_then_resume(store: SqliteStore, tmp_path: Path) -> None:
    mgr = manager(store, tmp_path, ScriptedProvider(steps(200, "slow", seconds=0.02)))
    run = await mgr.start(None, "a long job", tools=None)
    while len(await store.read(run.session_id)) < 6:
        await asyncio.sleep(0.01)
    assert await mgr.pause(run.session_id)
    paused = await run.result()
    assert isinstance(paused, Done) and paused.reason == "paused"
    assert await mgr.status(run.session_id) == "paused"
    last = (await store.read(run.session_id))[-1].body
    assert isinstance(last, Checkpoint) and last.reason == "paused"
    resumed = await mgr.resume(run.session_id)
    await asyncio.sleep(0.2)
    assert await mgr.status(run.session_id) == "running"
    await mgr.cancel(run.session_id)
    assert isinstance(await resumed.result(), Error)


async def test_status_of_a_session_another_process_runs(store: SqliteStore, tmp_path: Path) -> None:
    mgr = manager(store, tmp_path, ScriptedProvider(["x"]))
    info = await store.create_session(directory=str(tmp_path))
    assert await mgr.status(info.id) == "idle"
    await store.acquire_lease(info.id, "run_elsewhere", ttl=30, pid=1, host="another-machine")
    assert await mgr.status(info.id) == "busy_elsewhere"
    with pytest.raises(SessionBusy, match="run_elsewhere"):  # refused now: never taken, then dropped
        await mgr.start(info.id, "hi")
    assert info.id not in mgr._sessions or not mgr._sessions[info.id].waiting
    assert await mgr.cancel(info.id)  # asked through the store
    lease = await store.get_lease(info.id)
    assert lease is not None and lease.request == "cancel"


async def test_shutdown_cancels_what_runs_and_refuses_new_prompts(store: SqliteStore, tmp_path: Path) -> None:
    provider = ScriptedProvider(
        lambda r: Message.assistant(tool_calls=[ToolCallPart(id="c", name="slow", arguments={"seconds": 60})])
    )
    mgr = manager(store, tmp_path, provider)
    runs = [await mgr.start(None, f"job {i}", tools=None) for i in range(5)]
    while [await mgr.status(r.session_id) for r in runs].count("running") < 5:
        await asyncio.sleep(0.01)
    await mgr.shutdown(wait=0.1)
    for r in runs:
        assert isinstance(await r.result(), Error) and await store.get_lease(r.session_id) is None
    with pytest.raises(Exception, match="shutting down"):
        await mgr.start(None, "too late")


async def test_sessions_nothing_uses_are_let_go_and_followed_again_from_where_they_stand(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.runtime.queueing.RECENT_SESSIONS", 2)
    mgr = manager(store, tmp_path, ScriptedProvider(lambda r: f"answer to {r.messages[-1].text}"))
    handles = [await mgr.start(None, f"task {i}") for i in range(4)]
    assert all(isinstance(r, Done) for r in [await h.result() for h in handles])
    await asyncio.sleep(0)  # the workers' last steps
    # nothing runs, waits or follows: none is in use, and only the two latest are remembered
    assert mgr._sessions == {} and list(mgr._recent) == [h.session_id for h in handles[2:]]
    # a later prompt to a forgotten one starts after what its journal holds: the new run, whole, nothing older
    sid = handles[0].session_id
    second = await mgr.start(sid, "two")
    seen: list[Event] = []
    following = mgr.subscribe(sid, after=second.after)
    async for event in following:
        seen.append(event)
        if isinstance(event, Done | Error):
            break
    await following.aclose()  # type: ignore[attr-defined]
    assert isinstance(await second.result(), Done)
    assert [type(e).__name__ for e in seen if type(e).__name__ in ("RunStarted", "TextComplete", "Done")] == [
        "RunStarted",
        "TextComplete",
        "Done",
    ]
    assert [e.text for e in seen if isinstance(e, TextComplete)] == ["answer to two"]
    for _ in range(20):  # the worker's last steps (the session's announcement)
        await asyncio.sleep(0)
    assert mgr._sessions == {} and sid in mgr._recent and len(mgr._recent) == 2


async def test_an_answer_to_a_call_that_waits_for_nothing_is_a_clear_error(store: SqliteStore, tmp_path: Path) -> None:
    mgr = manager(store, tmp_path, ScriptedProvider(steps(1)))
    run = await mgr.start(None, "look once", tools=None)
    assert isinstance(await run.result(), Done)
    assert await mgr.approvals() == [] and await mgr.approvals(run.session_id) == []
    assert await mgr.status(run.session_id) == "idle"
    with pytest.raises(InvalidInput, match=f"no approval request for the call c9 waits in session {run.session_id}"):
        await mgr.answer(run.session_id, "c9", Answer(True))


async def test_a_prompt_that_may_not_queue_is_refused_with_the_holder(store: SqliteStore, tmp_path: Path) -> None:
    gate = asyncio.Event()

    def respond(request: ModelRequest) -> Message | str:
        if request.messages[-1].role == "user":
            return Message.assistant(tool_calls=[ToolCallPart(id="c1", name="wait_for_gate", arguments={})])
        return "ok"

    @function_tool(read_only=True)
    async def wait_for_gate() -> str:
        """Wait until the test lets the run go."""
        await gate.wait()
        return "let go"

    mgr = manager(store, tmp_path, ScriptedProvider(respond))
    first = await mgr.start(None, "one", registry=ToolRegistry([wait_for_gate]))
    while await mgr.status(first.session_id) != "running":
        await asyncio.sleep(0.01)
    with pytest.raises(SessionBusy) as busy:
        await mgr.start(first.session_id, "two", queue=False)
    assert busy.value.session_id == first.session_id and busy.value.holder
    with pytest.raises(SessionBusy):
        async with mgr.exclusive(first.session_id):
            pass
    gate.set()
    assert isinstance(await first.result(), Done)
    async with mgr.exclusive(first.session_id):  # idle now: held for the edit, then given back
        assert (await store.get_lease(first.session_id)) is not None
    assert await store.get_lease(first.session_id) is None
    assert await mgr.delete(first.session_id) == [first.session_id]


async def test_a_prompt_handle_says_where_its_events_start(store: SqliteStore, tmp_path: Path) -> None:
    mgr = manager(store, tmp_path, ScriptedProvider(lambda r: "answer"))
    info = await store.create_session(directory=str(tmp_path))
    await store.append(info.id, [Message.user("earlier"), Message.assistant("before")])
    handle = await mgr.start(info.id, "now")
    seen = [e async for e in _until_done(mgr.subscribe(info.id, after=handle.after))]
    assert type(seen[0]).__name__ == "RunStarted" and isinstance(seen[-1], Done)
    assert all(e.n > handle.after for e in seen) and not any(getattr(e, "text", "") == "before" for e in seen)


async def _until_done(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    async for event in events:
        yield event
        if isinstance(event, Done | Error):
            return


async def test_shutdown_ends_every_subscription_and_the_activity_feed(store: SqliteStore, tmp_path: Path) -> None:
    mgr = manager(store, tmp_path, ScriptedProvider(lambda r: "answer"))
    info = await store.create_session(directory=str(tmp_path))
    events = mgr.subscribe(info.id)
    feed = mgr.activity.follow()
    waiting = [asyncio.create_task(anext(events)), asyncio.create_task(anext(feed))]
    await asyncio.sleep(0)
    await mgr.shutdown()
    for task in waiting:
        with pytest.raises(StopAsyncIteration):
            await task


async def test_a_subscriber_sees_what_a_run_of_another_process_appends(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.runtime.following.WATCH_INTERVAL", 0.02)
    here = manager(store, tmp_path, ScriptedProvider(steps(0)))
    first = await here.start(None, "hello")
    assert isinstance(await first.result(), Done)
    sid = first.session_id
    position = await here.position(sid)
    followed = here.subscribe(sid, after=position)
    reader = asyncio.ensure_future(anext(followed))
    await asyncio.sleep(0.1)  # the subscriber waits; nothing of this manager runs the session
    async with SqliteStore(store.path) as other_store:  # another process's connection to the same file
        other = manager(other_store, tmp_path, ScriptedProvider(steps(2)))
        run = await other.start(sid, "look twice")
        assert isinstance(await run.result(), Done)
        await other.shutdown()
    seen = [await asyncio.wait_for(reader, 5)]
    while not (isinstance(seen[-1], TextComplete) and seen[-1].text.startswith("done after 2")):
        seen.append(await asyncio.wait_for(anext(followed), 5))
    await followed.aclose()
    assert all(isinstance(e, DURABLE_TYPES) for e in seen)  # what the journal holds: no deltas, no boundaries
    assert [e.n for e in seen] == sorted({e.n for e in seen})  # each once, in order
    assert sum(isinstance(e, ToolCallComplete) for e in seen) == 2
    journal = [e async for e in replay_events(store, sid, position)]
    assert [e.n for e in seen] == [e.n for e in journal if e.n <= seen[-1].n]  # from the first new one, no gap
    await here.shutdown()


async def test_the_activity_feed_tells_what_another_process_does_to_the_store(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.runtime.watching.STORE_WATCH_INTERVAL", 0.02)
    here = manager(store, tmp_path, ScriptedProvider(steps(0)))
    feed = here.follow_activity()
    first = asyncio.ensure_future(anext(feed))
    await asyncio.sleep(0)  # what changes from now on is news, whenever the watcher first looks
    gate = asyncio.Event()

    @function_tool(read_only=True)
    async def wait_for_gate(what: str) -> str:
        """Wait."""
        await gate.wait()
        return f"{what}: open"

    async with SqliteStore(store.path) as other_store:
        other = manager(other_store, tmp_path, ScriptedProvider(steps(1, "wait_for_gate")))
        other.defaults = RunRequest(None, directory=tmp_path, registry=ToolRegistry([wait_for_gate]))
        run = await other.start(None, "elsewhere")
        seen = [await asyncio.wait_for(first, 5)]
        while not (isinstance(seen[-1], StatusChanged) and seen[-1].status == "busy_elsewhere"):
            seen.append(await asyncio.wait_for(anext(feed), 5))
        gate.set()
        assert isinstance(await run.result(), Done)
        await other.shutdown()
    while not (isinstance(seen[-1], StatusChanged) and seen[-1].status == "idle"):
        seen.append(await asyncio.wait_for(anext(feed), 5))
    await feed.aclose()
    assert isinstance(seen[0], SessionCreated) and seen[0].session.id == run.session_id
    assert {i.session_id for i in seen if isinstance(i, StatusChanged)} == {run.session_id}
    await here.shutdown()


async def test_a_prompt_to_an_idle_session_has_its_run_started_when_start_returns(
    store: SqliteStore, tmp_path: Path
) -> None:
    """The run is opened on the prompt's own task: its lease is held and its first event is with the
    followers before `start` returns (under many runs, a pass of the loop sooner than from a new task)."""
    mgr = manager(store, tmp_path, ScriptedProvider(steps(1, "slow", seconds=0.05)))
    sid = (await store.create_session(directory=str(tmp_path))).id
    following = mgr.subscribe_batches(sid, after=0)
    reading = asyncio.ensure_future(anext(following))
    await asyncio.sleep(0)  # the follower waits on its queue
    handle = await mgr.start(sid, "go")
    lease = await store.get_lease(sid)
    assert lease is not None and lease.holder.startswith("run_")
    assert await mgr.status(sid) == "running"
    batch = await asyncio.wait_for(reading, 5)
    assert type(batch[0]).__name__ == "RunStarted" and batch[0].n > handle.after
    assert isinstance(await handle.result(), Done)
    await following.aclose()


async def _taken_after_the_look(mgr: SessionManager, store: SqliteStore, sid: str) -> None:
    """Another process takes the session's lease just after `start` looked (and found it free)."""

    async def free(session_id: str) -> None:
        await store.acquire_lease(sid, "edit_elsewhere", ttl=60.0)

    mgr._busy = free  # type: ignore[method-assign,assignment]


async def test_a_prompt_whose_lease_must_be_waited_for_returns_and_its_run_waits(
    store: SqliteStore, tmp_path: Path
) -> None:
    """Opening on the prompt's task never waits for a lease there: the worker waits, as the terms say."""
    mgr = manager(store, tmp_path, ScriptedProvider(lambda r: "ok"))
    sid = (await store.create_session(directory=str(tmp_path))).id
    await _taken_after_the_look(mgr, store, sid)
    handle = await mgr.start(sid, "go", wait=30.0)  # returns while the lease is still held elsewhere
    assert not handle.finished
    await store.release_lease(sid, "edit_elsewhere")
    assert isinstance(await asyncio.wait_for(handle.result(), 10), Done)
    assert [m.text for m in await (await _messages(store, sid))] == ["go", "ok"]


async def test_a_run_opened_on_its_prompts_task_fails_as_any_run_does(store: SqliteStore, tmp_path: Path) -> None:
    """A lease held elsewhere with no wait: the run ends with the busy error, reported by the worker."""
    mgr = manager(store, tmp_path, ScriptedProvider(lambda r: "ok"))
    sid = (await store.create_session(directory=str(tmp_path))).id
    await _taken_after_the_look(mgr, store, sid)
    handle = await mgr.start(sid, "go")
    result = await asyncio.wait_for(handle.result(), 10)
    assert isinstance(result, Error) and result.code == SessionBusy.code
    assert await store.read(sid) == [] and await mgr.status(sid) != "running"


# --- the runs' SDK clients ---------------------------------------------------------------------------------


@pytest.fixture
def stub_server() -> Iterator[tuple[str, list[int]]]:
    """bench/_openai_stub.py (a real OpenAI-compatible server on loopback, keep-alive as hosted APIs are):
    its base URL, and a list that grows by one at each connection it accepts."""
    spec = importlib.util.spec_from_file_location("_openai_stub", ROOT / "bench" / "_openai_stub.py")
    assert spec is not None and spec.loader is not None
    stub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stub)
    server = stub.make_server(stub.Answers())
    accepted: list[int] = []
    process = server.process_request

    def counting(request: Any, address: Any) -> None:
        accepted.append(1)
        process(request, address)

    server.process_request = counting
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", accepted
    finally:
        server.shutdown()
        server.server_close()


async def test_the_runs_of_a_manager_share_their_connections(
    store: SqliteStore, tmp_path: Path, stub_server: tuple[str, list[int]]
) -> None:
    """Each prompt resolves its model anew (a provider per run); the SDK client, and so the connection, is
    the manager's: before, every prompt to `tether serve` made a client and a connection (a TLS handshake to
    a hosted API) of its own."""
    pytest.importorskip("openai", reason="needs the `openai` extra")
    url, accepted = stub_server
    config = Config(providers={"team": ProviderConfig(kind="openai", base_url=url, api_key="k")})
    mgr = SessionManager(store, config=config, defaults=RunRequest(None, directory=tmp_path, tools="none"))
    try:
        handles = []
        for n in range(4):  # one after the other, two sessions
            handles.append(await mgr.start(handles[0].session_id if n % 2 else None, f"prompt {n}", model="team/m"))
            assert isinstance(await handles[-1].result(), Done)
        assert mgr.clients.made == 1 and len(accepted) == 1
    finally:
        await mgr.shutdown()
    assert len(mgr.clients) == 0


async def test_a_deleted_session_s_followers_see_their_stream_end(store: SqliteStore, tmp_path: Path) -> None:
    """Deleted here (the server's DELETE) or by another process (`tether sessions rm`): a follower's stream
    ends, where before it stayed open with nothing more to come."""
    mgr = manager(store, tmp_path, ScriptedProvider(lambda r: "ok"))
    try:
        here = await mgr.start(None, "one")
        elsewhere = await mgr.start(None, "two")
        await here.result()
        await elsewhere.result()

        async def follow(sid: str) -> list[Event]:
            return [event async for event in mgr.subscribe(sid)]

        followers = [asyncio.ensure_future(follow(h.session_id)) for h in (here, elsewhere)]
        await asyncio.sleep(0.3)  # both following
        assert not any(f.done() for f in followers)
        assert await mgr.delete(here.session_id) == [here.session_id]
        await store.delete_session(elsewhere.session_id)  # as another process does it
        done, _ = await asyncio.wait(followers, timeout=10)
        assert len(done) == 2 and [f.result() for f in followers] == [[], []]
    finally:
        await mgr.shutdown()


async def test_what_another_member_told_the_feed_is_not_told_again(store: SqliteStore, tmp_path: Path) -> None:
    """Two managers over one store (two workers): a session one makes and announces is in the shared feed
    once. The other's store watcher, which tells what processes outside the service do, told it again as a
    new session (a newcomer saw `session_created` twice with `--workers 2`)."""
    from tether.runtime import watching
    from tether.runtime.activity import SessionCreated

    here, there = (manager(store, tmp_path, ScriptedProvider(["x"])) for _ in range(2))
    feed = there.follow_activity()  # starts its store watcher, which looks while someone follows
    following = asyncio.ensure_future(anext(feed))
    try:
        await asyncio.sleep(0.1)
        made = await here.announce(SessionCreated(session=await store.create_session(directory=str(tmp_path))))
        assert isinstance(made, SessionCreated)
        await asyncio.sleep(watching.STORE_WATCH_INTERVAL * 2.5)
        told = [c for c in await store.changes_after(0) if c.kind == "session_created"]
        assert [c.session_id for c in told] == [made.session.id]
    finally:
        following.cancel()
        await here.shutdown()
        await there.shutdown()
