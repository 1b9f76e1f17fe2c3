"""The agent loop with the scripted provider: tool use, concurrency, error paths, step limit and continue,
cancel, and a real SIGKILL in the middle of a run followed by --continue."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether import Message, Session, ToolCallPart, ToolResultPart
from tether.errors import RateLimited, TransientError
from tether.events import (
    CheckpointReached,
    Done,
    Error,
    Event,
    Progress,
    RunStarted,
    TextComplete,
    TextDelta,
    ToolCallComplete,
    ToolCallStart,
    UsageReport,
)
from tether.messages import Checkpoint, Marker
from tether.providers.scripted import ScriptedProvider, ScriptedResponse
from tether.runtime.loop import ABORTED, INTERRUPTED, UNTOOLED
from tether.runtime.tool_calls import REPEAT_NOTE
from tether.store import SqliteStore, Store
from tether.tools.base import ToolRegistry, function_tool


def call(name: str, id: str, **arguments: object) -> ToolCallPart:
    return ToolCallPart(id=id, name=name, arguments=arguments)


def calls(*parts: ToolCallPart, text: str = "") -> Message:
    return Message.assistant(text, tool_calls=list(parts))


async def run(session: Session, prompt: str | None, provider: ScriptedProvider, **options: object) -> list[Event]:
    return [e async for e in session.stream(prompt, provider=provider, model="test-model", **options)]


def results(session_messages: list[Message]) -> dict[str, ToolResultPart]:
    return {r.call_id: r for m in session_messages for r in m.tool_results}


@pytest.fixture
async def session(store: Store, tmp_path: Path) -> Session:
    return await Session.create(store, directory=tmp_path)


def notes_registry(log: list[str]) -> ToolRegistry:
    @function_tool
    async def note(text: str) -> str:
        """Write a note."""
        log.append(text)
        return f"noted {text}"

    @function_tool(read_only=True)
    async def look(what: str) -> str:
        """Look at something."""
        return f"{what} looks fine"

    return ToolRegistry([note, look])


async def test_multi_step_tool_use_is_journaled_in_order(session: Session) -> None:
    log: list[str] = []
    provider = ScriptedProvider(
        [
            calls(call("look", "c1", what="the tests"), text="Checking."),
            calls(call("note", "c2", text="fix it")),
            "All done.",
        ]
    )
    events = await run(session, "fix the tests", provider, tools=notes_registry(log))

    assert isinstance(events[0], RunStarted)
    assert isinstance(events[-1], Done)
    assert events[-1].text == "All done." and events[-1].steps == 3 and events[-1].reason == "completed"
    assert log == ["fix it"]
    roles = [m.role for m in await session.messages()]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    # the model saw each result in the next request
    second = provider.requests[1].messages
    assert second[-1].tool_results[0].content == "the tests looks fine"
    assert [type(e).__name__ for e in events].count("ToolCallComplete") == 2
    usage_reports = [e for e in events if isinstance(e, UsageReport)]
    assert len(usage_reports) == 3
    assert events[-1].usage.output_tokens == sum(u.step.output_tokens for u in usage_reports)
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert deltas == "Checking.All done."
    info = await session.refresh()
    assert info.message_count == 6 and info.entry_count == 6


async def test_a_run_whose_model_is_offered_no_tools_says_so_as_it_starts(session: Session) -> None:
    """`RunOptions.untooled` (launch sets it for a model the catalog offers tools only when named): the
    event after the run's start says how to offer them, on every face; a run with tools says nothing."""
    untooled = await run(session, "hi", ScriptedProvider(["hello"]), tools=ToolRegistry(), untooled=True)
    assert isinstance(untooled[0], RunStarted) and isinstance(untooled[1], Progress)
    assert (untooled[1].what, untooled[1].detail) == ("tools", UNTOOLED) and isinstance(untooled[-1], Done)
    plain = await run(session, "again", ScriptedProvider(["hello"]))
    assert not [e for e in plain if isinstance(e, Progress)]


async def test_read_only_calls_run_concurrently(session: Session) -> None:
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    @function_tool(read_only=True)
    async def wait_for(me: str, other: str) -> str:
        """Finishes only once the other call has started too: passes only when both run at once."""
        started[me].set()
        await asyncio.wait_for(started[other].wait(), timeout=5)
        return f"{me} saw {other}"

    provider = ScriptedProvider(
        [calls(call("wait_for", "c1", me="a", other="b"), call("wait_for", "c2", me="b", other="a")), "ok"]
    )
    events = await run(session, "go", provider, tools=ToolRegistry([wait_for]))
    done = [e for e in events if isinstance(e, ToolCallComplete)]
    assert {e.call_id: e.success for e in done} == {"c1": True, "c2": True}
    assert isinstance(events[-1], Done)


async def test_mutating_calls_run_one_at_a_time_in_order(session: Session) -> None:
    order: list[str] = []
    running = 0

    @function_tool
    async def step(label: str) -> str:
        """A tool with side effects."""
        nonlocal running
        running += 1
        assert running == 1, "two mutating calls overlapped"
        await asyncio.sleep(0.01)
        order.append(label)
        running -= 1
        return label

    provider = ScriptedProvider([calls(*(call("step", f"c{i}", label=str(i)) for i in range(4))), "done"])
    events = await run(session, "go", provider, tools=ToolRegistry([step]))
    assert order == ["0", "1", "2", "3"]
    assert all(e.success for e in events if isinstance(e, ToolCallComplete))


async def test_error_paths_become_results_the_model_sees(session: Session) -> None:
    @function_tool
    async def explode() -> str:
        """Always fails."""
        raise RuntimeError("the disk is on fire")

    bad_json = ToolCallPart.from_raw("c2", "explode", '{"unterminated": ')
    assert bad_json.raw_arguments is not None
    provider = ScriptedProvider(
        [calls(call("no_such_tool", "c1"), bad_json, call("explode", "c3")), "I see the errors."]
    )
    events = await run(session, "try", provider, tools=ToolRegistry([explode]))
    assert isinstance(events[-1], Done)
    got = results(await session.messages())
    assert all(r.is_error for r in got.values())
    assert "no_such_tool" in got["c1"].content and "explode" in got["c1"].content  # lists what exists
    assert "JSON" in got["c2"].content or "json" in got["c2"].content
    assert "the disk is on fire" in got["c3"].content
    # the next model call received all three error results
    sent = results(provider.requests[1].messages)
    assert set(sent) == {"c1", "c2", "c3"} and all(r.is_error for r in sent.values())


async def test_three_identical_calls_stop_the_run(session: Session) -> None:
    log: list[str] = []
    same = lambda i: calls(call("note", f"c{i}", text="again"))  # noqa: E731
    provider = ScriptedProvider([same(1), same(2), same(3), "never reached"])
    events = await run(session, "loop", provider, tools=notes_registry(log))
    assert isinstance(events[-1], Error) and events[-1].code == "repeated_tool_call"
    assert "note" in events[-1].message and "3 times" in events[-1].message
    assert log == ["again", "again"]  # the third call was not run
    got = results(await session.messages())
    assert got["c3"].is_error and "stopped" in got["c3"].content
    # the second call's result told the model it was repeating itself, before the run had to stop
    assert REPEAT_NOTE not in got["c1"].content and REPEAT_NOTE in got["c2"].content
    assert provider.remaining == 1


async def test_step_limit_writes_a_checkpoint_and_continue_resumes(session: Session) -> None:
    log: list[str] = []
    provider = ScriptedProvider([calls(call("note", f"c{i}", text=str(i))) for i in range(3)] + ["finished"])
    events = await run(session, "write notes", provider, tools=notes_registry(log), max_steps=2)
    assert isinstance(events[-1], Done) and events[-1].reason == "step_limit"
    checkpoint = next(e for e in events if isinstance(e, CheckpointReached))
    assert checkpoint.objective == "write notes" and checkpoint.steps == 2
    stored = [e.body for e in await session.entries() if isinstance(e.body, Checkpoint)]
    assert len(stored) == 1 and "note x2" in stored[0].done

    more = await run(session, None, provider, tools=notes_registry(log), max_steps=5)
    assert isinstance(more[0], RunStarted) and more[0].resumed
    assert isinstance(more[-1], Done) and more[-1].text == "finished" and more[-1].reason == "completed"
    assert log == ["0", "1", "2"]
    # the resumed run's first request ended with the results the limit left unread
    assert provider.requests[2].messages[-1].role == "tool"


async def test_continue_with_nothing_to_do(session: Session) -> None:
    provider = ScriptedProvider(["hello"])
    await run(session, "hi", provider)
    events = await run(session, None, provider)
    assert isinstance(events[-1], Done) and events[-1].reason == "nothing_to_do"
    assert (await session.refresh()).entry_count == 2


async def test_cancel_during_the_answer_keeps_the_partial_text(session: Session) -> None:
    provider = ScriptedProvider([ScriptedResponse(message="one two three four five six seven", chunk_delay=0.05)])
    seen: list[str] = []

    async def consume() -> None:
        async for event in session.stream("count", provider=provider, model="m"):
            if isinstance(event, TextDelta):
                seen.append(event.text)

    task = asyncio.create_task(consume())
    while len(seen) < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    messages = await session.messages()
    assert [m.role for m in messages] == ["user", "assistant"]
    partial = messages[-1]
    assert partial.finish_reason == "cancelled" and partial.metadata.get("partial") is True
    assert partial.text == "".join(seen)[: len(partial.text)] and partial.text
    assert partial.text != "one two three four five six seven"


async def test_cancel_during_a_tool_marks_it_aborted(session: Session) -> None:
    entered = asyncio.Event()

    @function_tool
    async def hang() -> str:
        """Never finishes."""
        entered.set()
        await asyncio.sleep(3600)
        return "unreachable"

    provider = ScriptedProvider([calls(call("hang", "c1"), call("hang", "c2"))])

    async def consume() -> None:
        async for _ in session.stream("go", provider=provider, model="m", tools=ToolRegistry([hang])):
            pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    got = results(await session.messages())
    assert set(got) == {"c1", "c2"}
    assert all(r.is_error and r.content == ABORTED for r in got.values())


@pytest.mark.parametrize(
    ("error", "code", "retryable"),
    [
        (RateLimited("slow down", retry_after=3), "rate_limited", True),
        (TransientError("HTTP 500 from the provider"), "transient_error", True),  # the exception's own code
    ],
)
async def test_provider_failure_ends_in_an_error_event(
    session: Session, error: Exception, code: str, retryable: bool
) -> None:
    events = await run(session, "hi", ScriptedProvider([error]))
    assert isinstance(events[-1], Error)
    assert events[-1].code == code and events[-1].retryable is retryable
    # the user's turn is kept; a later run can continue from it
    assert [m.role for m in await session.messages()] == ["user"]
    again = await run(session, None, ScriptedProvider(["recovered"]))
    assert isinstance(again[-1], Done) and again[-1].text == "recovered"


async def test_another_writer_is_a_conflict_not_an_interleaving(session: Session) -> None:
    provider = ScriptedProvider(["a late answer in several chunks"])
    other = await Session.open(session.store, session.id)
    events: list[Event] = []
    async for event in session.stream("hi", provider=provider, model="m"):
        events.append(event)
        if isinstance(event, TextDelta) and len(events) == 3:
            # another handle appends while the run is streaming its answer
            await other.append(Message.user("from elsewhere"))
    assert isinstance(events[-1], Error) and events[-1].code == "seq_conflict"
    roles = [m.role for m in await session.messages()]
    assert roles == ["user", "user"]  # the run's answer was not interleaved after the intruder


async def test_oversized_tool_output_is_cut_and_kept_as_an_artifact(session: Session) -> None:
    @function_tool(read_only=True)
    async def dump() -> str:
        """Prints a lot."""
        return "\n".join(f"line {i}" for i in range(200_000))

    provider = ScriptedProvider([calls(call("dump", "c1")), "ok"])
    events = await run(session, "dump", provider, tools=ToolRegistry([dump]))
    complete = next(e for e in events if isinstance(e, ToolCallComplete))
    assert complete.truncated
    result = results(await session.messages())["c1"]
    assert len(result.content) < 100_000
    artifact = result.metadata["artifact"]
    full = await session.store.get_artifact(artifact)
    assert full.decode().count("\n") == 199_999
    assert artifact in result.content  # the model is told how to read the rest


# --- a real crash ------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tether import Message, Session, ToolCallPart
    from tether.providers.scripted import ScriptedProvider
    from tether.store import SqliteStore
    from tether.tools.base import ToolRegistry, function_tool

    db, workdir, sid = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

    @function_tool
    async def deploy(target: str) -> str:
        "A tool with a side effect."
        with open(workdir / "deploys.log", "a") as f:
            f.write(target + "\\n")
        await asyncio.sleep(3600)  # killed here
        return "deployed"

    async def main():
        store = SqliteStore(db)
        session = await Session.open(store, sid)
        provider = ScriptedProvider([
            Message.assistant("Deploying.", tool_calls=[ToolCallPart(id="c1", name="deploy", arguments={"target": "prod"})]),
        ])
        async for event in session.stream("deploy to prod", provider=provider, model="m", tools=ToolRegistry([deploy])):
            print(type(event).__name__, flush=True)

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_kill_9_mid_tool_then_continue_reports_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = SqliteStore(db)
    session = await Session.create(store, directory=tmp_path)
    await store.close()
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(db), str(tmp_path), session.id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "deploys.log"
    deadline = time.monotonic() + 30
    while not log.exists():
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert time.monotonic() < deadline, "the child never ran the tool"
        await asyncio.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)

    store = SqliteStore(db)
    try:
        session = await Session.open(store, session.id)
        before = [e.seq for e in await session.entries()]
        assert [m.role for m in await session.messages()] == ["user", "assistant"]

        deploys = 0

        @function_tool
        async def deploy(target: str) -> str:
            """Must not be re-run."""
            nonlocal deploys
            deploys += 1
            return "deployed again"

        provider = ScriptedProvider(["The deploy was interrupted; I did not repeat it."])
        events = await run(session, None, provider, tools=ToolRegistry([deploy]))
        assert isinstance(events[-1], Done)
        assert deploys == 0 and log.read_text() == "prod\n"
        messages = await session.messages()
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        interrupted = messages[2].tool_results[0]
        assert interrupted.call_id == "c1" and interrupted.is_error and interrupted.content == INTERRUPTED
        seqs = [e.seq for e in await session.entries()]
        assert seqs[: len(before)] == before and seqs == list(range(1, len(seqs) + 1))
        # the model was told, in its request, that the call was interrupted
        assert provider.requests[0].messages[-1].tool_results[0].content == INTERRUPTED
    finally:
        await store.close()


THINKER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from tether import Session
    from tether.providers.scripted import ScriptedProvider
    from tether.store import SqliteStore
    from tether.tools.base import ToolRegistry

    db, flag, sid = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

    def think(request):
        flag.write_text("thinking")
        time.sleep(3600)  # killed here, before any answer
        return "never"

    async def main():
        store = SqliteStore(db)
        session = await Session.open(store, sid)
        provider = ScriptedProvider(think)
        async for _ in session.stream("summarize the logs", provider=provider, model="m", tools=ToolRegistry()):
            pass

    asyncio.run(main())
    """
)


@pytest.mark.slow
async def test_kill_9_before_the_answer_marks_the_turn_interrupted(tmp_path: Path) -> None:
    """A run killed between its prompt and the first answer left two user messages in a row, and nothing said
    a turn was cut off. The next run journals an `interrupted` marker, and the model sees a note in its place."""
    db = tmp_path / "t.db"
    store = SqliteStore(db)
    session = await Session.create(store, directory=tmp_path)
    await store.close()
    script, flag = tmp_path / "thinker.py", tmp_path / "thinking"
    script.write_text(THINKER)
    child = subprocess.Popen([sys.executable, str(script), str(db), str(flag), session.id], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not flag.exists():
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert time.monotonic() < deadline, "the child never asked the model"
        await asyncio.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)

    store = SqliteStore(db)
    try:
        session = await Session.open(store, session.id)
        assert [m.role for m in await session.messages()] == ["user"]  # the prompt, and no answer
        provider = ScriptedProvider(["Here is the summary of the errors."])
        events = await run(session, "only the errors, please", provider, tools=ToolRegistry())
        assert isinstance(events[-1], Done)
        entries = await session.entries()
        markers = [e.body for e in entries if isinstance(e.body, Marker)]
        assert [(m.name, m.data) for m in markers] == [("interrupted", {"seq": 1})]
        sent = provider.requests[0].messages
        assert [m.role for m in sent] == ["user", "assistant", "user"]  # alternating, as every provider takes
        assert "No answer was given" in sent[1].text and sent[2].text == "only the errors, please"
        # a second prompt after an answered turn adds no marker
        await run(session, "thanks", ScriptedProvider(["You're welcome."]), tools=ToolRegistry())
        assert sum(isinstance(e.body, Marker) for e in await session.entries()) == 1
    finally:
        await store.close()


async def test_text_complete_points_at_the_journaled_message(session: Session) -> None:
    events = await run(session, "hi", ScriptedProvider(["hello there"]))
    complete = next(e for e in events if isinstance(e, TextComplete))
    (entry,) = await session.read(complete.seq, complete.seq)
    assert entry.message is not None and entry.message.text == "hello there"
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert starts == []


# --- the context engine in the loop ------------------------------------------------------------------

from tether.errors import ContextOverflow  # noqa: E402
from tether.events import CompactionCompleted, CompactionStarted  # noqa: E402
from tether.messages import Compaction  # noqa: E402
from tether.providers.catalog import ModelInfo  # noqa: E402

SMALL = ModelInfo(provider="scripted", model="small", context_window=6_000, max_output_tokens=1_000)


async def long_history(session: Session, turns: int = 30) -> None:
    for i in range(turns):
        await session.append(
            Message.user(f"step {i}: please look at src/module_{i}.py and fix the failing check {i}. " * 6),
            Message.assistant(f"Looked at src/module_{i}.py; the check {i} now passes. " * 6),
        )


def summary_or_answer(answer: str) -> object:
    """Summarize when asked to (the compaction request has no tools), else answer."""

    def respond(request: object) -> str:
        tools = getattr(request, "tools", [])
        return "Goal: fix the checks. Done: modules 0-29 fixed. Next: report." if not tools else answer

    return respond


async def test_overflow_compacts_once_and_retries_the_step(session: Session) -> None:
    await long_history(session)
    answers = iter([ContextOverflow("maximum context length exceeded")])

    def respond(request: object) -> object:
        if getattr(request, "tools", []):
            return next(answers, "All checks pass.")
        return "Goal: fix the checks. Done: modules 0-29 fixed. Next: report."

    provider = ScriptedProvider(respond)
    events = await run(session, "report", provider, tools=notes_registry([]))
    assert isinstance(events[-1], Done) and events[-1].text == "All checks pass."
    started = next(e for e in events if isinstance(e, CompactionStarted))
    assert started.reason == "overflow"
    completed = next(e for e in events if isinstance(e, CompactionCompleted))
    assert completed.tokens_after < completed.tokens_before
    compactions = [e for e in await session.entries() if isinstance(e.body, Compaction)]
    assert len(compactions) == 1 and compactions[0].seq == completed.seq
    # the retried request was smaller than the one that overflowed
    with_tools = [r for r in provider.requests if r.tools]
    assert len(with_tools) == 2 and len(with_tools[1].messages) < len(with_tools[0].messages)
    # the history is whole: every turn is still in the journal
    assert (await session.refresh()).message_count == 60 + 2


async def test_overflow_with_auto_compaction_off_is_an_error_not_a_compaction(session: Session) -> None:
    await long_history(session)
    await session.update(metadata={"auto_compact": False})
    provider = ScriptedProvider([ContextOverflow("prompt is too long"), "never"])
    events = await run(session, "report", provider, tools=notes_registry([]))
    assert isinstance(events[-1], Error) and events[-1].code == "context_overflow"
    assert not any(isinstance(e, CompactionStarted) for e in events)
    assert not [e for e in await session.entries() if isinstance(e.body, Compaction)]
    assert len(provider.requests) == 1  # no summarizer call, no retry


async def test_auto_compaction_before_a_step_over_the_threshold(session: Session) -> None:
    await long_history(session)
    provider = ScriptedProvider(summary_or_answer("Reported."))
    events = await run(session, "report", provider, tools=notes_registry([]), model_info=SMALL)
    assert isinstance(events[-1], Done) and events[-1].text == "Reported."
    started = next(e for e in events if isinstance(e, CompactionStarted))
    assert started.reason == "auto"
    answer_request = [r for r in provider.requests if r.tools][-1]
    assert len(answer_request.messages) < 61  # the model saw the compacted context, not all 61 messages


async def test_a_failing_summarizer_does_not_loop(session: Session) -> None:
    await long_history(session)
    calls = {"summaries": 0}

    def respond(request: object) -> object:
        if not getattr(request, "tools", []):
            calls["summaries"] += 1
            raise TransientError("the summarizer is down")
        return "Reported anyway."

    provider = ScriptedProvider(respond)
    events = await run(session, "report", provider, tools=notes_registry([]), model_info=SMALL)
    assert isinstance(events[-1], Done) and events[-1].text == "Reported anyway."
    assert calls["summaries"] <= 1  # tried once, then the mechanical fallback: never a loop
    assert sum(isinstance(e, CompactionStarted) for e in events) == 1


# --- oversized inputs go through RLM ------------------------------------------------------------------

from tether.context.derive import CONDENSED_MARKER  # noqa: E402
from tether.events import RlmFinished, RlmProgress  # noqa: E402


def rlm_or_answer(answer: str) -> object:
    """Requests without tools come from RLM (the root model and its sub-calls): they finish at once."""

    def respond(request: object) -> str:
        if not getattr(request, "tools", []):
            return "FINAL(The document says the deploy password is swordfish.)"
        return answer

    return respond


async def test_an_oversized_user_message_is_condensed_and_kept_whole(session: Session) -> None:
    document = "Some filler about the weather and the sea. " * 800 + "The deploy password is swordfish. "
    prompt = "Read this and tell me the password.\n\n" + document
    provider = ScriptedProvider(rlm_or_answer("It is swordfish."))
    events = await run(session, prompt, provider, tools=notes_registry([]), model_info=SMALL)
    assert isinstance(events[-1], Done) and events[-1].text == "It is swordfish."
    assert any(isinstance(e, RlmProgress) and e.stage == "input" for e in events)
    assert sum(isinstance(e, RlmFinished) for e in events) == 1
    entries = await session.entries()
    assert entries[0].message is not None and entries[0].message.text == prompt  # the history keeps it whole
    markers = [e.body for e in entries if isinstance(e.body, Marker) and e.body.name == CONDENSED_MARKER]
    assert len(markers) == 1 and markers[0].data["seq"] == entries[0].seq
    sent = next(r for r in provider.requests if r.tools).messages[0].text
    assert "swordfish" in sent and len(sent) < len(prompt) // 4
    assert sent.startswith("[This message is")  # the model is told it sees a stand-in


async def test_a_small_message_is_not_condensed(session: Session) -> None:
    provider = ScriptedProvider(rlm_or_answer("hi"))
    events = await run(session, "hello", provider, tools=notes_registry([]), model_info=SMALL)
    assert not any(isinstance(e, Progress | RlmProgress) for e in events)
    assert len(provider.requests) == 1


async def test_an_oversized_bulk_tool_output_is_condensed(session: Session) -> None:
    @function_tool(read_only=True, bulk=True)
    async def fetch(url: str) -> str:
        """Fetch a web page."""
        return "<p>navigation</p>\n" * 3000 + "<p>The release is on 12 March.</p>\n"

    provider = ScriptedProvider(
        lambda request: (
            "FINAL(The page says the release is on 12 March.)"
            if not request.tools
            else (
                calls(call("fetch", "c1", url="https://example.org"))
                if len(request.messages) == 1
                else "The release is on 12 March."
            )
        )
    )
    events = await run(session, "when is the release?", provider, tools=ToolRegistry([fetch]), model_info=SMALL)
    assert isinstance(events[-1], Done) and events[-1].text == "The release is on 12 March."
    markers = [e.body for e in await session.entries() if isinstance(e.body, Marker)]
    assert len(markers) == 1 and markers[0].data["call_id"] == "c1"
    last = [r for r in provider.requests if r.tools][-1]
    result = last.messages[-1].tool_results[0]
    assert "12 March" in result.content and result.content.startswith("[This tool output is")
    stored = results(await session.messages())["c1"]
    assert stored.content != result.content  # the journal keeps the tool's own (cut) output


async def test_read_is_never_condensed_even_when_huge(session: Session, tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("line of text\n" * 20000)
    provider = ScriptedProvider(
        lambda request: calls(call("read", "c1", path="big.txt")) if len(request.messages) == 1 else "read it"
    )
    from tether.runtime.toolset import default_registry

    events = await run(session, "read big.txt", provider, tools=default_registry(), model_info=SMALL)
    assert isinstance(events[-1], Done)
    assert not any(isinstance(e, Progress | RlmProgress) for e in events)
    assert not [e for e in await session.entries() if isinstance(e.body, Marker)]


async def test_config_context_section_switches_auto_compaction_off(session: Session, tmp_path: Path) -> None:
    import os

    config = Path(os.environ["TETHER_HOME"]) / "config.toml"
    config.write_text("[context]\nauto_compact = false\n")
    await long_history(session)
    provider = ScriptedProvider([ContextOverflow("prompt is too long"), "never"])
    events = await run(session, "report", provider, tools=notes_registry([]))
    assert isinstance(events[-1], Error) and events[-1].code == "context_overflow"
    assert not any(isinstance(e, CompactionStarted) for e in events)


async def test_a_bad_context_setting_is_a_clear_config_error(session: Session) -> None:
    import os

    from tether.errors import ConfigError

    (Path(os.environ["TETHER_HOME"]) / "config.toml").write_text("[context]\ncompact_threshold = 7\n")
    with pytest.raises(ConfigError, match=r"\[context\]"):
        await run(session, "hi", ScriptedProvider(["hi"]))


# --- compaction_model: a model of its own writes the automatic summaries ----------------------------------

from tether.context.budget import compute_budget  # noqa: E402
from tether.context.compaction import SUMMARIZER_SYSTEM  # noqa: E402
from tether.context.tokens import get_counter  # noqa: E402
from tether.errors import ConfigError  # noqa: E402
from tether.providers.registry import ResolvedModel  # noqa: E402

SUMMARIZER = ModelInfo(provider="cheap", model="summarizer", context_window=3_000, max_output_tokens=1_000)


def write_config(text: str) -> None:
    (Path(os.environ["TETHER_HOME"]) / "config.toml").write_text(text)


def only_answers(answer: object) -> object:
    """The run's own model: it must never be asked for a summary (a request without tools)."""

    def respond(request: object) -> object:
        assert getattr(request, "tools", []), "the run's model was asked to summarize"
        return answer() if callable(answer) else answer

    return respond


def summarizer_resolver(asked: list[str]) -> tuple[ScriptedProvider, object]:
    summarizer = ScriptedProvider(["Goal: fix the checks. Done: modules 0-29 fixed. Next: report."] * 20, name="cheap")

    def resolve(spec: str) -> ResolvedModel:
        asked.append(spec)
        return ResolvedModel(provider=summarizer, model="summarizer", info=SUMMARIZER)

    return summarizer, resolve


async def test_compaction_model_writes_the_automatic_summaries(session: Session) -> None:
    write_config('[context]\ncompaction_model = "cheap/summarizer"\n')
    await long_history(session)
    asked: list[str] = []
    summarizer, resolve = summarizer_resolver(asked)
    provider = ScriptedProvider(only_answers("Reported."))
    events = await run(session, "report", provider, tools=notes_registry([]), model_info=SMALL, resolve_model=resolve)
    assert isinstance(events[-1], Done) and events[-1].text == "Reported."
    assert asked == ["cheap/summarizer"]  # resolved once, at the start
    started = next(e for e in events if isinstance(e, CompactionStarted))
    assert started.reason == "auto" and started.summarizer == "cheap/summarizer"
    (compaction,) = [e for e in await session.entries() if isinstance(e.body, Compaction)]
    assert compaction.body.metadata.get("summarizer") == "cheap/summarizer"
    assert summarizer.requests and all(r.model == "summarizer" and not r.tools for r in summarizer.requests)
    # each summarizer call fits the summarizer's own window, not the (larger) budget of the run's model
    limit = compute_budget(SUMMARIZER.context_window, SUMMARIZER.max_output_tokens).usable
    assert limit < compute_budget(SMALL.context_window, SMALL.max_output_tokens).usable
    counter = get_counter(model="summarizer")
    for request in summarizer.requests:
        assert counter.count(SUMMARIZER_SYSTEM) + counter.count(request.messages[0].text) <= limit
    assert len(summarizer.requests) > 1  # so the transcript was cut into chunks that fit


async def test_compaction_model_writes_the_summary_after_an_overflow(session: Session) -> None:
    await long_history(session)
    await session.update(metadata={"context": {"compaction_model": "cheap/summarizer"}})
    asked: list[str] = []
    summarizer, resolve = summarizer_resolver(asked)
    answers = iter([ContextOverflow("maximum context length exceeded")])
    provider = ScriptedProvider(only_answers(lambda: next(answers, "All checks pass.")))
    events = await run(session, "report", provider, tools=notes_registry([]), resolve_model=resolve)
    assert isinstance(events[-1], Done) and events[-1].text == "All checks pass."
    started = next(e for e in events if isinstance(e, CompactionStarted))
    assert started.reason == "overflow" and started.summarizer == "cheap/summarizer"
    assert asked == ["cheap/summarizer"] and summarizer.requests


async def test_without_compaction_model_the_run_s_model_summarizes(session: Session) -> None:
    await long_history(session)
    asked: list[str] = []
    _, resolve = summarizer_resolver(asked)
    provider = ScriptedProvider(summary_or_answer("Reported."))
    events = await run(session, "report", provider, tools=notes_registry([]), model_info=SMALL, resolve_model=resolve)
    assert isinstance(events[-1], Done)
    started = next(e for e in events if isinstance(e, CompactionStarted))
    assert started.summarizer == "scripted/test-model" and asked == []


@pytest.mark.parametrize(
    ("spec", "why"),
    [("no-such-model-anywhere", "unknown model"), ("anthropic/claude-sonnet-5-5", "ANTHROPIC_API_KEY")],
)
async def test_a_compaction_model_that_cannot_be_resolved_fails_the_run_at_its_start(
    session: Session, spec: str, why: str
) -> None:
    write_config(f'[context]\ncompaction_model = "{spec}"\n')
    provider = ScriptedProvider(["never"])
    with pytest.raises(ConfigError, match="compaction_model") as raised:
        await run(session, "hi", provider)  # the registry's own resolution, as for --model
    assert why in str(raised.value)
    assert provider.requests == []
    assert await session.entries() == []  # nothing journaled: not even the prompt


async def test_an_unused_compaction_model_is_not_resolved(session: Session) -> None:
    write_config('[context]\ncompaction_model = "no-such-model-anywhere"\nauto_compact = false\n')
    events = await run(session, "hi", ScriptedProvider(["hello"]))
    assert isinstance(events[-1], Done) and events[-1].text == "hello"


async def test_session_recall_answers_with_the_run_s_model(store: Store, tmp_path: Path) -> None:
    earlier = await Session.create(store, directory=tmp_path)
    await earlier.append(Message.user("Remember: the staging database is on port 6543."), Message.assistant("Noted."))
    session = await Session.create(store, directory=tmp_path)

    def respond(request: object) -> object:
        if not getattr(request, "tools", []):
            return "FINAL(The staging database is on port 6543.)"  # RLM over the recalled evidence
        if len(request.messages) == 1:  # type: ignore[attr-defined]
            return calls(call("session_recall", "r1", query="staging database port", mode="answer"))
        return "Port 6543."

    from tether.runtime.toolset import default_registry

    provider = ScriptedProvider(respond)
    events = await run(session, "which port is staging on?", provider, tools=default_registry())
    assert isinstance(events[-1], Done) and events[-1].text == "Port 6543."
    result = results(await session.messages())["r1"]
    assert not result.is_error, result.content
    assert "The staging database is on port 6543." in result.content
    # answer mode ran: the run's model was asked, through RLM (no tools), the recall question; the evidence
    # itself stays in the REPL's `context` variable, never in the root model's prompt
    rlm_requests = [r for r in provider.requests if not r.tools]
    assert rlm_requests and "staging database port" in rlm_requests[0].messages[0].text


async def test_a_cancel_that_comes_while_no_task_drives_the_run_ends_it_when_one_does(
    session: Session, store: Store
) -> None:
    """A run's first event may be asked for on one task (the request that opened it) and the rest on
    another (its session's worker): a cancel another process asks for in between stops it on the second."""
    provider = ScriptedProvider(["never said"])
    events = session.stream("go", provider=provider, model="m")
    first = await asyncio.create_task(anext(events))  # driven by a task that then ends
    assert type(first).__name__ == "RunStarted"
    assert await store.request_lease(session.id, "cancel") is not None
    await asyncio.sleep(0.8)  # the lease's watcher looks every half second: it sees the cancel, no task drives
    rest = await asyncio.create_task(_all(events))
    assert isinstance(rest[-1], Error) and rest[-1].code == "cancelled", rest
    assert "never said" not in [m.text for m in await session.messages()]
    assert await store.get_lease(session.id) is None


async def _all(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]
