"""Sub-agents (the `task` tool): a child session's answer and id come back to the parent; the calls of one step
run in parallel up to the cap; depth is limited; cancelling the parent cancels the children and keeps their
work; a child's events (an approval request among them) reach the parent's subscribers; a child never has
more tools or permission than its parent. A scripted model, a real SQLite store, the real loop."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether import Message, Session, ToolCallPart
from tether.config import AgentConfig, Config, PermissionsConfig, RuntimeConfig
from tether.events import (
    DURABLE_TYPES,
    ApprovalRequested,
    Done,
    Error,
    Event,
    Progress,
    RunStarted,
    ToolCallComplete,
    ToolCallStart,
)
from tether.messages import ToolResultPart
from tether.providers.base import ModelRequest
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime.children import TASK_KEY
from tether.runtime.journal import replay_events
from tether.runtime.launch import RunRequest
from tether.runtime.loop import ABORTED
from tether.runtime.manager import SessionManager
from tether.runtime.permission import ALLOWED, Answer, Permission
from tether.runtime.tasks import TaskTool
from tether.store import SqliteStore
from tether.store.records import SessionInfo
from tether.tools.base import ToolContext, ToolRegistry, function_tool
from tether.tools.builtin import builtin_tools


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    async with SqliteStore(tmp_path / "t.db") as s:
        yield s


def prompt_of(request: ModelRequest) -> str:
    """The prompt a run was given: who is asking (the parent, or which child)."""
    return next(m.text for m in request.messages if m.role == "user")


def results_of(request: ModelRequest) -> list[ToolResultPart]:
    return [r for m in request.messages for r in m.tool_results]


def offered(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


def task(call_id: str, prompt: str, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(id=call_id, name="task", arguments={"description": prompt, "prompt": prompt, **arguments})


def delegating(calls: Callable[[], list[ToolCallPart]], child: Callable[[ModelRequest], Message | str]) -> Any:
    """A model: the parent (prompt "go") makes `calls` once, then reports its results; children answer with
    `child`."""

    def respond(request: ModelRequest) -> Message | str:
        if prompt_of(request) != "go":
            return child(request)
        results = results_of(request)
        if not results:
            return Message.assistant(tool_calls=calls())
        return "parent read: " + " | ".join(r.content for r in results)

    return respond


def tools(*extra: Any) -> ToolRegistry:
    return ToolRegistry([*builtin_tools(), TaskTool(), *extra])


async def children_of(store: SqliteStore, parent: str) -> list[SessionInfo]:
    return (await store.list_sessions(parent_id=parent, limit=100)).items


def manager(
    store: SqliteStore,
    tmp_path: Path,
    provider: ScriptedProvider,
    registry: ToolRegistry,
    allow: tuple[str, ...] = ("block",),
    **config: Any,
) -> SessionManager:
    """A manager whose runs use `provider`; `allow`: the rules of the user's config (the tests' own tools
    are not read-only, so they would ask)."""

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider, "test", unknown_model("scripted", "test"))

    defaults = RunRequest(None, directory=tmp_path, registry=registry)
    permissions = PermissionsConfig(allow=list(allow))
    return SessionManager(store, config=Config(permissions=permissions, **config), defaults=defaults, resolve=resolve)


async def test_a_task_runs_a_child_session_and_returns_its_answer_and_id(store: SqliteStore, tmp_path: Path) -> None:
    provider = ScriptedProvider(
        delegating(lambda: [task("t1", "count the tests")], lambda r: f"child answer to {prompt_of(r)}")
    )
    session = await Session.create(store, directory=tmp_path)
    events = [e async for e in session.stream("go", provider=provider, model="test", tools=tools(), config=Config())]

    (child,) = await children_of(store, session.id)
    assert child.directory == session.info.directory and child.agent == "build" and child.model == "scripted/test"
    assert child.metadata[TASK_KEY] == {"depth": 1, "call_id": "t1", "description": "count the tests"}
    result = next(r for m in await session.messages() for r in m.tool_results)
    assert result.content.startswith("child answer to count the tests")
    assert child.id in result.content and not result.is_error
    assert result.metadata["child_id"] == child.id and result.metadata["outcome"] == "completed"
    assert isinstance(events[-1], Done) and events[-1].session_id == session.id
    assert events[-1].text.startswith("parent read: child answer to count the tests")

    # the child's events came through the parent's run, after the note that ties the child to its call,
    # with the child's id and the numbers of the child's own session: its journal replays them the same
    (start,) = [e for e in events if isinstance(e, Progress) and e.what == "task"]
    assert start.session_id == session.id and start.data == {"call_id": "t1", "child_id": child.id, "agent": "build"}
    from_child = [e for e in events if e.session_id == child.id]
    assert events.index(start) < events.index(from_child[0])
    assert isinstance(from_child[0], RunStarted) and isinstance(from_child[-1], Done)
    assert [e for e in from_child if isinstance(e, DURABLE_TYPES)] == [e async for e in replay_events(store, child.id)]
    own = [e.n for e in events if e.session_id == session.id]
    assert own == sorted(own) and len(set(own)) == len(own)


async def test_task_calls_of_one_step_run_in_parallel_up_to_the_cap(store: SqliteStore, tmp_path: Path) -> None:
    """Three task calls, a cap of two: two children work at once, the third waits for a place (its session is
    not even made), then runs when one is free."""
    holding: list[str] = []
    peak = 0
    gates = {n: asyncio.Event() for n in "123"}

    @function_tool
    async def hold(what: str) -> str:
        """Hold until released."""
        nonlocal peak
        holding.append(what)
        peak = max(peak, len(holding))
        try:
            await gates[what].wait()
        finally:
            holding.remove(what)
        return f"held {what}"

    def child(request: ModelRequest) -> Message | str:
        job = prompt_of(request)[-1]
        if not results_of(request):
            return Message.assistant(tool_calls=[ToolCallPart(id=f"h{job}", name="hold", arguments={"what": job})])
        return f"finished {job}"

    provider = ScriptedProvider(delegating(lambda: [task(f"t{n}", f"job {n}") for n in "123"], child))
    session = await Session.create(store, directory=tmp_path)
    config = Config(runtime=RuntimeConfig(max_parallel_tasks=2))
    run = asyncio.create_task(
        Session.prompt(session, "go", provider=provider, model="test", tools=tools(hold), config=config)
    )
    for _ in range(1000):
        if len(holding) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(holding) == 2
    await asyncio.sleep(0.2)  # room for a third to start, were the cap not kept
    assert len(holding) == 2 and len(await children_of(store, session.id)) == 2
    first = holding[0]
    gates[first].set()  # one place frees: the third child starts
    for _ in range(1000):
        if len(holding) == 2 and first not in holding:
            break
        await asyncio.sleep(0.01)
    assert sorted(holding) == sorted({"1", "2", "3"} - {first})
    for gate in gates.values():
        gate.set()
    result = await asyncio.wait_for(run, 30)
    assert peak == 2
    assert all(f"finished {n}" in result.text for n in "123")
    assert len(await children_of(store, session.id)) == 3


@pytest.mark.parametrize("limit", [None, 1])
async def test_depth_is_limited_and_a_child_at_the_limit_has_no_task_tool(
    store: SqliteStore, tmp_path: Path, limit: int | None
) -> None:
    """Every level hands its work down while it can: the chain stops where the depth limit (default 3)
    takes the `task` tool away."""

    def respond(request: ModelRequest) -> Message | str:
        level = int(prompt_of(request).split()[-1])
        if "task" not in offered(request):
            return f"leaf at level {level}"
        results = results_of(request)
        if not results:
            return Message.assistant(tool_calls=[task(f"t{level}", f"level {level + 1}")])
        return results[0].content.splitlines()[0]

    provider = ScriptedProvider(respond)
    session = await Session.create(store, directory=tmp_path)
    config = Config(runtime=RuntimeConfig(max_task_depth=limit))
    result = await session.prompt("level 0", provider=provider, model="test", tools=tools(), config=config)
    expected = 3 if limit is None else limit
    assert result.text == f"leaf at level {expected}"
    chain, parent = [], session.id
    while kids := await children_of(store, parent):
        (kid,) = kids
        chain.append(kid)
        parent = kid.id
    assert [c.metadata[TASK_KEY]["depth"] for c in chain] == list(range(1, expected + 1))
    by_level = {int(prompt_of(r).split()[-1]): "task" in offered(r) for r in provider.requests}
    assert by_level == {level: level < expected for level in range(expected + 1)}


@function_tool
async def block(what: str) -> str:
    """Wait for something that does not come."""
    await asyncio.Event().wait()
    return "never"


def blocking_child(request: ModelRequest) -> Message | str:
    if not results_of(request):
        return Message.assistant("Waiting.", tool_calls=[ToolCallPart(id="b1", name="block", arguments={"what": "x"})])
    return "the child gave up"


async def running_child(store: SqliteStore, parent: str, children: int = 1) -> SessionInfo:
    """A child of `parent` once `children` of them are inside their blocking calls (their answer with the
    call journaled). Waits up to a minute: a loaded machine is slow, never wrong."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kids = await children_of(store, parent)
        if len(kids) >= children and all([len(await store.read(k.id)) >= 2 for k in kids]):
            return kids[0]
        await asyncio.sleep(0.01)
    raise AssertionError("the children never started their calls")


@pytest.mark.parametrize("how", ["here", "from another process"])
async def test_cancelling_the_parent_cancels_its_children_and_keeps_their_work(
    store: SqliteStore, tmp_path: Path, how: str
) -> None:
    await cancel_the_parent_of_two_children(store, tmp_path, how)


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[None]:
    """`n` processes that keep a core busy each, for as long as the block lasts."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(10)


@pytest.mark.slow
async def test_cancel_is_whole_under_load(tmp_path: Path) -> None:
    """The test above, 20 times (both ways of cancelling, in turn) beside 4 busy processes: on a loaded
    machine a cancel used to land after a child's answer was journaled and before its calls counted as
    pending, which left the child's `block` call with no result."""
    with busy_processes(4):
        for i in range(20):
            workdir = tmp_path / f"try{i}"
            workdir.mkdir()
            async with SqliteStore(workdir / "t.db") as store:
                await cancel_the_parent_of_two_children(store, workdir, ["here", "from another process"][i % 2])


async def cancel_the_parent_of_two_children(store: SqliteStore, tmp_path: Path, how: str) -> None:
    provider = ScriptedProvider(delegating(lambda: [task("t1", "wait"), task("t2", "wait too")], blocking_child))
    mgr = manager(store, tmp_path, provider, tools(block))
    try:
        await _cancel_and_check(mgr, store, how)
    finally:
        await mgr.shutdown()


async def _cancel_and_check(mgr: SessionManager, store: SqliteStore, how: str) -> None:
    run = await mgr.start(None, "go")
    child = await running_child(store, run.session_id, children=2)
    if how == "here":
        assert await mgr.cancel(run.session_id)
    else:  # `tether sessions cancel` in another process asks through the store
        assert await store.request_lease(run.session_id, "cancel") is not None
    outcome = await asyncio.wait_for(run.result(), 30)
    assert isinstance(outcome, Error) and outcome.code == "cancelled" and outcome.session_id == run.session_id
    for kid in await children_of(store, run.session_id):
        entries = await store.read(kid.id)
        bodies = [e.body for e in entries]
        assert isinstance(bodies[1], Message) and bodies[1].text == "Waiting."  # its partial work is kept
        assert [r.content for b in bodies if isinstance(b, Message) for r in b.tool_results] == [ABORTED]
        assert await store.get_lease(kid.id) is None
    assert child.parent_id == run.session_id
    parent_results = [
        r for e in await store.read(run.session_id) if isinstance(e.body, Message) for r in e.body.tool_results
    ]
    assert [r.content for r in parent_results] == [ABORTED, ABORTED]
    assert await store.get_lease(run.session_id) is None


async def test_a_child_cancelled_alone_is_an_error_result_and_its_parent_goes_on(
    store: SqliteStore, tmp_path: Path
) -> None:
    provider = ScriptedProvider(delegating(lambda: [task("t1", "wait")], blocking_child))
    mgr = manager(store, tmp_path, provider, tools(block))
    run = await mgr.start(None, "go")
    child = await running_child(store, run.session_id)
    assert await mgr.cancel(child.id)  # not run by this manager: asked through the store, as any process would
    outcome = await asyncio.wait_for(run.result(), 30)
    assert isinstance(outcome, Done) and outcome.reason == "completed"
    assert "the sub-agent failed (cancelled)" in outcome.text and child.id in outcome.text
    results = [r for e in await store.read(child.id) if isinstance(e.body, Message) for r in e.body.tool_results]
    assert [r.content for r in results] == [ABORTED]


async def test_child_events_and_approval_requests_reach_the_parents_subscribers(
    store: SqliteStore, tmp_path: Path
) -> None:
    """The child's `write` asks (the parent's rules are the child's): its request reaches whoever follows
    the parent, tagged with the child's session, and is listed by the manager; the answer given there, by
    `SessionManager.answer`, lets the child go on. Nothing is written before the yes."""
    answered: list[str] = []
    mgr: SessionManager

    def child(request: ModelRequest) -> Message | str:
        if not results_of(request):
            args = {"path": "out.txt", "content": "written by the child\n"}
            return Message.assistant(tool_calls=[ToolCallPart(id="w1", name="write", arguments=args)])
        return "wrote it"

    provider = ScriptedProvider(delegating(lambda: [task("t1", "write a file")], child))
    mgr = manager(store, tmp_path, provider, tools(), allow=())
    session = await Session.create(store, directory=tmp_path)
    seen: list[Event] = []

    async def follow() -> None:
        async for event in mgr.subscribe(session.id):
            seen.append(event)
            if isinstance(event, ApprovalRequested):
                assert not (tmp_path / "out.txt").exists()
                (listed,) = await mgr.approvals()
                assert (listed.session_id, listed.call_id) == (event.session_id, event.call_id)
                assert [r.call_id for r in await mgr.approvals(session.id)] == ["w1"]  # the parent's own list
                assert await mgr.status(session.id) == "waiting_for_approval"
                answered.append(event.session_id)
                # a person approves, from the parent's stream
                assert await mgr.answer(event.session_id, event.call_id, Answer(True)) is None
            if isinstance(event, Done) and event.session_id == session.id:
                return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0)
    run = await mgr.start(session.id, "go")
    assert isinstance(await asyncio.wait_for(run.result(), 30), Done)
    await asyncio.wait_for(follower, 10)

    (kid,) = await children_of(store, session.id)
    assert answered == [kid.id]
    (asked,) = [e for e in seen if isinstance(e, ApprovalRequested)]
    # numbered in the child's session: the durable event of its entry 3 (the request, after the call)
    assert asked.session_id == kid.id and asked.name == "write" and asked.n // 1_000_000 == 3
    from_child = [type(e).__name__ for e in seen if e.session_id == kid.id]
    assert from_child[0] == "RunStarted" and from_child[-1] == "Done"
    assert from_child.index("ApprovalRequested") < from_child.index("ApprovalResolved")
    assert from_child.index("ApprovalResolved") < from_child.index("ToolCallComplete")
    assert (tmp_path / "out.txt").read_text() == "written by the child\n"
    assert await mgr.approvals() == [] and await mgr.status(session.id) == "idle"


async def test_a_program_permission_check_is_the_childs_too(store: SqliteStore, tmp_path: Path) -> None:
    checked: list[tuple[str, str]] = []

    async def check(call: ToolCallPart, ctx: ToolContext) -> Permission:
        checked.append((ctx.session_id, call.name))
        return ALLOWED

    def child(request: ModelRequest) -> Message | str:
        if not results_of(request):
            return Message.assistant(tool_calls=[ToolCallPart(id="l1", name="list", arguments={})])
        return "listed"

    provider = ScriptedProvider(delegating(lambda: [task("t1", "list")], child))
    mgr = manager(store, tmp_path, provider, tools())
    session = await Session.create(store, directory=tmp_path)
    run = await mgr.start(session.id, "go", permission=check)
    assert isinstance(await asyncio.wait_for(run.result(), 30), Done)
    (kid,) = await children_of(store, session.id)
    assert checked == [(session.id, "task"), (kid.id, "list")]


async def test_a_child_never_has_more_tools_than_its_parent(store: SqliteStore, tmp_path: Path) -> None:
    def calls() -> list[ToolCallPart]:
        return [
            task("t1", "own", tools=["bash"]),  # the parent has no bash to give
            task("t2", "plan", agent="plan"),  # plan: only tools that change nothing
            task("t3", "only read", tools=["read"]),
            task("t4", "same as parent"),
            task("t5", "plan writes", agent="plan", tools=["write"]),
            task("t6", "nobody", agent="nobody"),
        ]

    provider = ScriptedProvider(delegating(calls, lambda r: "ok"))
    session = await Session.create(store, directory=tmp_path)
    registry = tools().subset(["read", "write", "grep", "question", "task"])
    await session.prompt("go", provider=provider, model="test", tools=registry, config=Config())
    results = {r.call_id: r for m in await session.messages() for r in m.tool_results}
    assert results["t1"].is_error and "you have no tool bash to give" in results["t1"].content
    assert results["t5"].is_error and "the agent 'plan' may not use write" in results["t5"].content
    assert results["t6"].is_error and "unknown agent 'nobody'" in results["t6"].content
    tools_by_prompt = {prompt_of(r): offered(r) for r in provider.requests if prompt_of(r) != "go"}
    assert tools_by_prompt == {
        "plan": ["read", "grep", "question", "task"],
        "only read": ["read"],
        "same as parent": ["read", "write", "grep", "question", "task"],
    }
    agents = {k.title: k.agent for k in await children_of(store, session.id)}
    assert agents == {"plan": "plan", "only read": "build", "same as parent": "build"}


async def test_the_parents_permission_check_decides_the_childs_calls(store: SqliteStore, tmp_path: Path) -> None:
    async def no_writes(call: ToolCallPart, ctx: ToolContext) -> Permission:
        return Permission(False, "no writes here") if call.name == "write" else ALLOWED

    def child(request: ModelRequest) -> Message | str:
        results = results_of(request)
        if not results:
            args = {"path": "x.txt", "content": "x"}
            return Message.assistant(tool_calls=[ToolCallPart(id="w1", name="write", arguments=args)])
        return f"the write said: {results[0].content}"

    provider = ScriptedProvider(delegating(lambda: [task("t1", "write")], child))
    session = await Session.create(store, directory=tmp_path)
    result = await session.prompt(
        "go", provider=provider, model="test", tools=tools(), config=Config(), permission=no_writes
    )
    assert "write: not run: no writes here" in result.text
    assert not (tmp_path / "x.txt").exists()


async def test_an_agent_with_its_own_model_and_prompt_runs_the_child_on_them(
    store: SqliteStore, tmp_path: Path
) -> None:
    reviewer = ScriptedProvider(lambda r: "looks good", name="other")
    provider = ScriptedProvider(delegating(lambda: [task("t1", "review", agent="review")], lambda r: "wrong model"))
    config = Config(agents={"review": AgentConfig(model="other/big", system_prompt="You review.", tools=["read"])})

    def resolve(spec: str) -> ResolvedModel:
        assert spec == "other/big"
        return ResolvedModel(reviewer, "big", unknown_model("other", "big"))

    session = await Session.create(store, directory=tmp_path)
    result = await session.prompt(
        "go", provider=provider, model="test", tools=tools(), config=config, resolve_model=resolve
    )
    assert result.text.startswith("parent read: looks good")
    (kid,) = await children_of(store, session.id)
    assert kid.model == "other/big" and kid.agent == "review"
    (request,) = reviewer.requests
    assert request.system == "You review." and offered(request) == ["read"] and request.model == "big"


async def test_a_task_outside_a_run_says_sub_agents_are_unavailable(store: SqliteStore, tmp_path: Path) -> None:
    from tether.tools.runner import run_tool_call

    ctx = ToolContext(workspace=tmp_path, session_id="ses_x", store=store)
    result = await run_tool_call(ToolRegistry([TaskTool()]), task("t1", "anything"), ctx)
    assert result.is_error and "sub-agents are not available here" in result.content


async def test_a_childs_events_come_while_it_works_not_when_the_task_ends(store: SqliteStore, tmp_path: Path) -> None:
    """The child's call is in the parent's stream while that call still waits, and the parent's task call
    has no result yet."""
    gate = asyncio.Event()

    @function_tool
    async def hold(what: str) -> str:
        """Hold until released."""
        await gate.wait()
        return f"{what} held"

    def child(request: ModelRequest) -> Message | str:
        if not results_of(request):
            return Message.assistant(tool_calls=[ToolCallPart(id="h1", name="hold", arguments={"what": "it"})])
        return "held"

    provider = ScriptedProvider(delegating(lambda: [task("t1", "hold")], child))
    session = await Session.create(store, directory=tmp_path)
    events: list[Event] = []

    async def consume() -> None:
        async for event in session.stream("go", provider=provider, model="test", tools=tools(hold), config=Config()):
            events.append(event)

    run = asyncio.create_task(consume())
    for _ in range(1000):
        if any(isinstance(e, ToolCallStart) and e.name == "hold" for e in events):
            break
        await asyncio.sleep(0.01)
    assert [(e.session_id == session.id, e.name) for e in events if isinstance(e, ToolCallStart)] == [
        (True, "task"),
        (False, "hold"),
    ]
    assert not any(isinstance(e, ToolCallComplete) for e in events)
    gate.set()
    await asyncio.wait_for(run, 30)
    completes = [(e.session_id == session.id, e.name) for e in events if isinstance(e, ToolCallComplete)]
    assert completes == [(False, "hold"), (True, "task")]
