"""Sessions written as Codex rollouts: import(export(x)) equals x on what the format holds, for the Codex
fixtures (imported, exported, imported again), for sessions made by tether's own loop (tool calls, an
error, a revert, a compaction) and for odd text (hypothesis); the lines are ``RolloutLine``s as Codex writes
them (session meta first, response items with their UI event copies, usage after its response), and what
cannot be carried is said in the report."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.importers.codex import import_codex
from tether.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart, Usage
from tether.store import MemoryStore, Store

FMT = "codex"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


async def test_the_codex_fixtures_come_back_as_they_were(store: Store, folder: Path, rt: Any) -> None:
    files = sorted(FIXTURES.glob("*.jsonl"))
    assert len(files) == 2
    for path in files:
        result = await import_codex(store, path)
        assert result.outcome == "imported" and result.session_id
        report = await rt.check(store, result.session_id, FMT, folder)
        info, back = await store.get_session(result.session_id), None
        for candidate in (await store.list_sessions(limit=100)).items:
            if candidate.metadata.get("imported", {}).get("source_id") == report.target_id:
                back = candidate
        assert back is not None
        assert (back.system_prompt, back.created_at) == (info.system_prompt, info.created_at)


async def test_a_session_of_tethers_loop_comes_back(store: Store, tmp_path: Path, folder: Path, rt: Any) -> None:
    sid = await rt.loop_session(store, tmp_path)
    report = await rt.check(store, sid, FMT, folder)
    assert report.left_out["reverted entries"] == 2
    assert report.left_out["thinking blocks of another provider than OpenAI"] == 1  # Anthropic's, signed
    assert report.left_out["cache-write token counts"] >= 1
    assert report.flattened["failed calls' outputs (Codex keeps no error flag)"] == 1
    want = await rt.carried(store, sid, FMT)
    errors = [p for item in want.items if item[0] == "tool" for p in item[1] if p[3] is True]
    assert len(errors) == 1 and "exploded: on purpose" in errors[0][2]
    assert [item[0] for item in want.items].count("compaction") == 1


async def test_the_lines_are_codexs(store: Store, tmp_path: Path, folder: Path, rt: Any) -> None:
    sid = await rt.loop_session(store, tmp_path)
    info = await store.get_session(sid)
    path, report = await rt.export_to(store, sid, FMT, folder)
    lines = lines_of(path)
    assert all(set(ln) == {"timestamp", "type", "payload"} for ln in lines)
    meta = lines[0]
    assert meta["type"] == "session_meta"
    assert meta["payload"]["id"] == report.target_id and meta["payload"]["cwd"] == info.directory
    assert {"originator", "cli_version", "timestamp"} <= set(meta["payload"])
    # the resume picker lists a rollout only with a user message event among its first ten lines
    assert any(ln["payload"].get("type") == "user_message" for ln in lines[:10])
    kinds = [(ln["type"], ln["payload"].get("type")) for ln in lines]
    assert ("turn_context", None) in kinds and ("compacted", None) in kinds
    # usage closes each response: a token count right after the assistant's items
    first_call = kinds.index(("response_item", "function_call"))
    assert kinds[first_call + 2] == ("event_msg", "token_count")
    assert meta["payload"]["tether"] == {"exported_from": sid}  # where it came from; Codex ignores it
    failed = [ln["payload"] for ln in lines[1:] if ln["payload"].get("tether")]
    assert len(failed) == 1 and isinstance(failed[0]["output"], str)  # Codex's own shape, the flag beside it
    compacted = next(ln["payload"] for ln in lines if ln["type"] == "compacted")
    assert compacted["replacement_history"][0]["role"] == "user"
    assert compacted["message"] in compacted["replacement_history"][0]["content"][0]["text"]
    assert lines[-1]["payload"] == {"type": "thread_name_updated", "thread_id": report.target_id,
                                    "thread_name": "Check the tests"}  # fmt: skip
    assert "detour" not in path.read_text()


async def test_bash_is_codexs_shell_command_and_comes_back(store: Store, tmp_path: Path, folder: Path, rt: Any) -> None:
    info = await store.create_session(directory=str(tmp_path))
    bash = ToolCallPart(id="b1", name="bash", arguments={"command": "pytest -q", "timeout": 30, "description": "tests"})
    usage = Usage(input_tokens=900, output_tokens=40, reasoning_tokens=16, cache_read_tokens=512)
    thinking = ThinkingPart(text="Run them.", redacted="gAAAA-enc", provider="openai")
    await store.append(info.id, [
        Message(role="user", parts=[TextPart(text="run the tests"), ImagePart(media_type="image/png", data=b"\x89PNG")]),
        Message(role="assistant", parts=[thinking, bash], model="gpt-5", usage=usage),
        Message.tool(ToolResultPart(call_id="b1", content="3 passed", name="bash")),
        Message(role="assistant", parts=[TextPart(text="All pass.")], model="gpt-5", usage=usage),
    ])  # fmt: skip
    path, report = await rt.export_to(store, info.id, FMT, folder)
    items = [ln["payload"] for ln in lines_of(path) if ln["type"] == "response_item"]
    call = next(i for i in items if i["type"] == "function_call")
    assert call["name"] == "shell_command"
    assert json.loads(call["arguments"]) == {"command": "pytest -q", "timeout_ms": 30000, "description": "tests"}
    reasoning = next(i for i in items if i["type"] == "reasoning")
    assert reasoning["encrypted_content"] == "gAAAA-enc" and reasoning["summary"][0]["text"] == "Run them."
    assert items[0]["content"][1] == {"type": "input_image", "image_url": "data:image/png;base64,iVBORw=="}
    assert report.summary() == "nothing left out"
    await rt.check(store, info.id, FMT, folder)


async def test_what_the_format_cannot_carry_is_said(store: Store, tmp_path: Path, folder: Path, rt: Any) -> None:
    from tether.messages import FilePart, Marker

    info = await store.create_session(directory=str(tmp_path), system_prompt="Be brief.")
    await store.append(info.id, [
        Message(role="user", parts=[TextPart(text="read this"), FilePart(media_type="application/pdf", data=b"%PDF")]),
        Message(role="assistant", parts=[ThinkingPart(text="signed", signature="sig", provider="anthropic")]),
        Message(role="assistant", parts=[TextPart(text="one")]),
        Message(role="assistant", parts=[TextPart(text="two")]),
        Message.tool(ToolResultPart(call_id="a", content="1"), ToolResultPart(call_id="b", content="2")),
        Marker(name="interrupted", data={"seq": 1}),
    ])  # fmt: skip
    _, report = await rt.export_to(store, info.id, FMT, folder)
    assert report.left_out == {
        "file attachments (Codex messages hold text and images)": 1,
        "system prompt (Codex would put it in place of its own instructions)": 1,
        "markers (interrupted)": 1,
        "assistant messages with nothing Codex can carry": 1,
    }
    assert report.flattened == {
        "assistant messages without usage merged with the next (one Codex response)": 1,
        "tool messages with several results (one output item each)": 1,
    }


texts = st.text(max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=texts, answer=texts, argument=texts, output=texts, error=st.booleans())
def test_odd_text_survives(user: str, answer: str, argument: str, output: str, error: bool, rt: Any) -> None:
    async def main() -> None:
        store = MemoryStore()
        info = await store.create_session(directory="/w")
        call = ToolCallPart(id="c1", name="edit", arguments={"path": argument, argument: [argument]})
        await store.append(info.id, [
            Message.user(user),
            Message(role="assistant", parts=[TextPart(text=answer), call], model="m", usage=Usage(output_tokens=3)),
            Message.tool(ToolResultPart(call_id="c1", content=output, is_error=error, name="edit")),
        ])  # fmt: skip
        with tempfile.TemporaryDirectory() as folder:
            await rt.check(store, info.id, FMT, Path(folder))

    asyncio.run(main())


async def test_a_call_that_never_got_a_result_gets_an_error_one(store: Store, tmp_path: Path, rt: Any) -> None:
    from tether.importers.foreign_export import NO_RESULT

    info = await store.create_session(directory=str(tmp_path))
    await store.append(info.id, [
        Message.user("go"),
        Message(role="assistant", parts=[ToolCallPart(id="c1", name="bash", arguments={"command": "sleep 99"})]),
        Message.user("stopped it"),
    ])  # fmt: skip
    folder = tmp_path / "out"
    folder.mkdir()
    path, report = await rt.export_to(store, info.id, FMT, folder)
    assert report.flattened["calls that never got a result (given an error result)"] == 1
    outputs = [ln["payload"] for ln in lines_of(path) if ln["payload"].get("type") == "function_call_output"]
    assert outputs == [
        {"type": "function_call_output", "call_id": "c1", "output": NO_RESULT, "tether": {"is_error": True}}
    ]
