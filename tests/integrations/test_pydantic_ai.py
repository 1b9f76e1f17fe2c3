"""pydantic-ai histories in tether sessions: agents with tools run on pydantic-ai's `TestModel` and
`FunctionModel`, their new messages are saved, loaded back exactly and fed to the next run as
`message_history`; each part kind round trips and has its tether meaning; sessions tether wrote are
translated; reverts, compactions and bad input."""

from __future__ import annotations

import subprocess
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import tether
from tether import messages as tm
from tether.errors import InvalidInput
from tether.integrations.openai_agents import TetherSession
from tether.integrations.pydantic_ai import (
    MESSAGE_MARKER,
    META_KEY,
    load_messages,
    save_messages,
    session_id_for,
    to_entries,
    to_model_messages,
)
from tether.session import Session
from tether.store import MemoryStore, SqliteStore, active_entries

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def own_round_trip(messages: list[ModelMessage]) -> list[ModelMessage]:
    """What pydantic-ai's own serialization gives back: the most a store can be asked for."""
    return ModelMessagesTypeAdapter.validate_json(dump(messages))


def dice_agent(model: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, system_prompt="Roll dice when asked.")

    @agent.tool_plain
    def roll(sides: int) -> str:
        """Roll a die with `sides` sides."""
        return f"rolled a {sides % 6 + 1}"

    return agent


async def test_an_agent_with_a_tool_saves_reloads_and_goes_on(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "tether.db"
    agent = dice_agent(TestModel())
    async with SqliteStore(path) as store:
        first = await agent.run("roll a die")
        written = await save_messages(store, "dice-chat", first.new_messages(), directory=str(tmp_path))
        assert len(written) == 5  # system + user, the call, its return, the answer
        history = await load_messages(store, "dice-chat")
        assert dump(history) == dump(first.new_messages())  # exactly what was saved

        second = await agent.run("roll again", message_history=history)
        await save_messages(store, "dice-chat", second.new_messages())
        everything = await load_messages(store, "dice-chat")
        assert dump(everything) == dump(second.all_messages())

        sid = session_id_for("dice-chat")
        info = await store.get_session(sid)
        assert info.agent == "pydantic-ai" and info.directory == str(tmp_path.resolve())
        assert info.entry_count == 7 and info.input_tokens > 0 and info.title == "roll a die"
        entries = await active_entries(store, sid)
        roles = [e.body.role for e in entries if isinstance(e.body, tm.Message)]
        # (TestModel calls the tools only while no tool has returned: the second run answers at once)
        assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
        call = entries[2].body
        assert isinstance(call, tm.Message) and call.tool_calls[0].name == "roll" and call.model == "test"
        result = entries[3].body
        assert isinstance(result, tm.Message) and result.tool_results[0].content.startswith("rolled a ")
        assert entries[0].created_at == pytest.approx(first.new_messages()[0].timestamp.timestamp())  # type: ignore[union-attr]

    shown = cli("sessions", "show", sid, store=path)
    assert shown.returncode == 0, shown.stderr
    assert "roll a die" in shown.stdout and "roll(" in shown.stdout and "rolled a" in shown.stdout


async def test_a_function_model_sees_the_history_it_is_given() -> None:
    """FunctionModel answers with thinking (signed), text and a call; a retried call is an error in tether;
    the second run's model gets the first run's messages back from the store."""
    seen: list[list[ModelMessage]] = []
    attempts = {"n": 0}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        last = messages[-1]
        asked = isinstance(last, ModelRequest) and isinstance(last.parts[-1], UserPromptPart)
        retried = isinstance(last, ModelRequest) and getattr(last.parts[-1], "outcome", None) == "retried"
        if asked or retried:
            return ModelResponse(
                parts=[
                    ThinkingPart(content="a die, then", signature="sig-1", provider_name="anthropic"),
                    TextPart(content="Rolling."),
                    ToolCallPart(tool_name="flaky", args='{"x": 1}', tool_call_id=f"call-{len(messages)}"),
                ],
                model_name="fn",
            )
        return ModelResponse(parts=[TextPart(content="done")], model_name="fn")

    agent: Agent[None, str] = Agent(FunctionModel(model))

    @agent.tool_plain
    def flaky(x: int) -> str:
        """Fails once."""
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise ModelRetry("try once more")
        return f"ok {x}"

    store = MemoryStore()
    first = await agent.run("go")
    await save_messages(store, "fn", first.new_messages())
    loaded = await load_messages(store, "fn")
    assert dump(loaded) == dump(first.new_messages())
    entries = await active_entries(store, session_id_for("fn"))
    results = [p for e in entries if isinstance(e.body, tm.Message) for p in e.body.tool_results]
    assert [r.is_error for r in results] == [True, False]  # the retried call, then its success
    thinking = next(
        p for e in entries if isinstance(e.body, tm.Message) for p in e.body.parts if isinstance(p, tm.ThinkingPart)
    )
    assert thinking.signature == "sig-1" and thinking.provider == "anthropic" and thinking.text == "a die, then"

    await agent.run("again", message_history=loaded)
    assert dump(seen[-1][: len(loaded)]) == dump(loaded)  # the model got the stored history back
    await store.close()


def _messages_of_every_kind() -> list[tuple[str, ModelMessage]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecated part is built on purpose: callers still may
        retry_tool = RetryPromptPart(content="bad x", tool_name="f", tool_call_id="c3", timestamp=T0)
        retry_plain = RetryPromptPart(content="answer in JSON", timestamp=T0)
    return [
        ("system", ModelRequest(parts=[SystemPromptPart(content="sys", timestamp=T0)], timestamp=T0)),
        ("user-text", ModelRequest(parts=[UserPromptPart(content="hi é ✓", timestamp=T0)], timestamp=T0)),
        (
            "user-media",
            ModelRequest(
                parts=[
                    UserPromptPart(
                        content=[
                            "look:",
                            ImageUrl(url="https://example.com/a.png"),
                            BinaryContent(data=b"\x89PNG\r\n\x1a\n", media_type="image/png"),
                            BinaryContent(data=b"%PDF-1.4", media_type="application/pdf"),
                            DocumentUrl(url="https://example.com/a.pdf"),
                        ],
                        timestamp=T0,
                    )
                ],
                timestamp=T0,
            ),
        ),
        ("text", ModelResponse(parts=[TextPart(content="answer")], model_name="m", timestamp=T0)),
        (
            "thinking",
            ModelResponse(parts=[ThinkingPart(content="hm", signature="s", provider_name="anthropic")], timestamp=T0),
        ),
        (
            "tool-calls",
            ModelResponse(
                parts=[
                    ToolCallPart(tool_name="f", args={"a": [1, 2]}, tool_call_id="c1"),
                    ToolCallPart(tool_name="g", args="{not json", tool_call_id="c2"),
                ],
                timestamp=T0,
            ),
        ),
        (
            "tool-returns",
            ModelRequest(
                parts=[
                    ToolReturnPart(tool_name="f", content={"rows": 3}, tool_call_id="c1", timestamp=T0),
                    ToolReturnPart(tool_name="g", content="boom", tool_call_id="c2", outcome="failed", timestamp=T0),
                ],
                timestamp=T0,
            ),
        ),
        ("retry-tool", ModelRequest(parts=[retry_tool], timestamp=T0)),
        ("retry-plain", ModelRequest(parts=[retry_plain], timestamp=T0)),
        ("empty-response", ModelResponse(parts=[], timestamp=T0)),
    ]


KINDS = _messages_of_every_kind()


@pytest.mark.parametrize(("kind", "message"), KINDS, ids=[k for k, _ in KINDS])
async def test_each_part_kind_round_trips(kind: str, message: ModelMessage) -> None:
    store = MemoryStore()
    await save_messages(store, f"kind-{kind}", [message])
    loaded = await load_messages(store, f"kind-{kind}")
    assert dump(loaded) == dump(own_round_trip([message]))
    await store.close()


def test_each_part_kind_has_its_tether_meaning() -> None:
    bodies = {kind: [b for b, _ in to_entries([m])] for kind, m in KINDS}

    def only(kind: str) -> tm.Message:
        (body,) = bodies[kind]
        assert isinstance(body, tm.Message)
        return body

    assert only("system").role == "system" and only("system").text == "sys"
    assert only("user-text").role == "user" and only("user-text").text == "hi é ✓"
    media = only("user-media").parts
    assert [type(p).__name__ for p in media] == ["TextPart", "ImagePart", "ImagePart", "FilePart", "FilePart"]
    assert isinstance(media[2], tm.ImagePart) and media[2].data == b"\x89PNG\r\n\x1a\n"
    assert only("text").role == "assistant" and only("text").text == "answer" and only("text").model == "m"
    calls = only("tool-calls").tool_calls
    assert calls[0].arguments == {"a": [1, 2]} and calls[1].raw_arguments == "{not json"
    returns = only("tool-returns").tool_results
    assert [(r.name, r.content, r.is_error) for r in returns] == [("f", '{"rows":3}', False), ("g", "boom", True)]
    retry = only("retry-tool").tool_results[0]
    assert retry.is_error and retry.call_id == "c3" and "bad x" in retry.content
    assert only("retry-plain").role == "user" and "answer in JSON" in only("retry-plain").text
    (marker,) = bodies["empty-response"]
    assert isinstance(marker, tm.Marker) and marker.name == MESSAGE_MARKER
    first = only("system").metadata[META_KEY]
    assert first["entries"] == 1 and first["message"]["kind"] == "request"


async def test_a_request_of_two_roles_is_two_entries_and_a_revert_between_them_is_honoured() -> None:
    store = MemoryStore()
    request = ModelRequest(parts=[SystemPromptPart(content="sys"), UserPromptPart(content="question")])
    written = await save_messages(store, "two", [request])
    assert [e.body.role for e in written if isinstance(e.body, tm.Message)] == ["system", "user"]
    assert written[1].body.metadata[META_KEY] == {"continues": True}  # type: ignore[union-attr]
    sid = session_id_for("two")
    await store.append(sid, [tm.Revert(to_seq=1)])  # hide the user prompt
    (loaded,) = await load_messages(store, "two")
    assert isinstance(loaded, ModelRequest) and [type(p) for p in loaded.parts] == [SystemPromptPart]


async def test_a_session_tether_wrote_is_history_for_an_agent(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "tether.db") as store:
        native = await Session.create(store, directory=str(tmp_path))
        await native.append(
            tm.Message.system("You are terse."),
            tm.Message.user("read a.py"),
            tm.Message(
                role="assistant",
                parts=[
                    tm.ThinkingPart(text="plan", signature="sig"),
                    tm.TextPart(text="Reading."),
                    tm.ToolCallPart(id="c1", name="read", arguments={"path": "a.py"}),
                ],
                usage=tm.Usage(input_tokens=10, output_tokens=5),
                model="claude",
            ),
            tm.Message.tool(tm.ToolResultPart(call_id="c1", content="print(1)")),  # named by its call
            tm.Message.user("and now?"),
        )
        history = await load_messages(store, native.id)
        assert [m.kind for m in history] == ["request", "response", "request"]
        first, response, last = history
        assert (
            isinstance(first, ModelRequest) and isinstance(response, ModelResponse) and isinstance(last, ModelRequest)
        )
        assert [type(p) for p in first.parts] == [SystemPromptPart, UserPromptPart]
        assert [type(p) for p in response.parts] == [ThinkingPart, TextPart, ToolCallPart]
        assert response.usage.input_tokens == 10 and response.model_name == "claude"
        assert [type(p) for p in last.parts] == [ToolReturnPart, UserPromptPart]  # tool result and prompt merged
        assert isinstance(last.parts[0], ToolReturnPart) and last.parts[0].tool_name == "read"

        got: list[list[ModelMessage]] = []

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            got.append(messages)
            return ModelResponse(parts=[TextPart(content="fine")])

        result = await Agent(FunctionModel(model)).run("thanks", message_history=history)
        assert result.output == "fine" and len(got[0]) == 3
        await save_messages(store, native.id, result.new_messages())
        assert len(await load_messages(store, native.id)) == 5


async def test_a_compaction_stands_as_its_summary() -> None:
    store = MemoryStore()
    agent = dice_agent(TestModel())
    run = await agent.run("roll")
    written = await save_messages(store, "compacted", run.new_messages())
    sid = session_id_for("compacted")
    keep_from = written[3].seq  # the tool's return and the answer stay
    await store.append(sid, [tm.Compaction(summary="The user rolled a die.", first_kept_seq=keep_from)])
    history = await load_messages(store, "compacted")
    summary = history[0]
    assert isinstance(summary, ModelRequest) and summary.parts[0].content == "The user rolled a die."  # type: ignore[union-attr]
    assert dump(history[1:]) == dump(run.new_messages()[2:])
    await store.close()


async def test_bad_input() -> None:
    store = MemoryStore()
    with pytest.raises(InvalidInput):
        await save_messages(store, "", [ModelRequest(parts=[UserPromptPart(content="x")])])
    with pytest.raises(InvalidInput, match="not a pydantic-ai message"):
        await save_messages(store, "k", ["not a message"])  # type: ignore[list-item]
    assert await load_messages(store, "never-written") == []
    assert await save_messages(store, "k", []) == []
    assert (await store.list_sessions()).items == []  # nothing was created by any of it
    assert to_model_messages([]) == []
    await store.close()


def test_without_pydantic_ai_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "try:\n import tether.integrations.pydantic_ai\n"
        "except ImportError as e:\n print(type(e).__name__, e)\n"
    )
    env_path = str(Path(tether.__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PYTHONPATH": env_path}
    )
    assert proc.returncode == 0, proc.stderr
    assert "MissingExtra" in proc.stdout and "tether[pydantic-ai]" in proc.stdout


async def test_a_pydantic_ai_session_reads_in_the_agents_sdk() -> None:
    """One journal, two frameworks: what pydantic-ai saved is history to the Agents SDK's session too, through
    the tether messages its parts became."""
    store = MemoryStore()
    run = await dice_agent(TestModel()).run("roll a die")
    await save_messages(store, "both", run.new_messages())
    items = await TetherSession(session_id_for("both"), store=store).get_items()
    assert [i.get("type") or i.get("role") for i in items] == [
        "system",
        "user",
        "function_call",
        "function_call_output",
        "assistant",
    ]
    assert items[2]["name"] == "roll" and items[2]["call_id"] == items[3]["call_id"]  # type: ignore[typeddict-item]
    await store.close()
