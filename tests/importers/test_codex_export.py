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

import pytest
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
    assert len(files) == 3  # with the counts after tool outputs and an image output
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
    # where it came from, at which entry, and how many lines are tether's (what follows is Codex's)
    assert meta["payload"]["tether"] == {"exported_from": sid, "entries": info.entry_count, "lines": len(lines)}
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


def codex_binary() -> str:
    """Codex's binary from $TETHER_CODEX_BIN; skipped, saying how to get it, when unset."""
    import os

    binary = os.environ.get("TETHER_CODEX_BIN")
    how = (
        "set TETHER_CODEX_BIN to a Codex binary (`npm pack @openai/codex@0.169.0-linux-x64`, untar, "
        "package/vendor/x86_64-unknown-linux-musl/bin/codex)"
    )
    if not binary:
        pytest.skip(f"no Codex to resume with: {how}")
    if not Path(binary).is_file():
        pytest.fail(f"TETHER_CODEX_BIN={binary} is not a file: {how}")
    return binary


@pytest.mark.slow
@pytest.mark.parametrize("compact", [False, True], ids=["whole", "compacted"])
async def test_real_codex_resumes_the_export(
    tmp_path: Path, rt: Any, compact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`codex exec resume UUID ...` on the installed export, against a recording Responses API on loopback:
    Codex finds the rollout and sends the model the history (the compaction's summary and kept tail when
    compacted; the calls, their outputs and the failed one's text otherwise)."""
    import http.server
    import os
    import subprocess
    import threading

    from tether.importers.foreign_export import install_path, session_uuid

    binary = codex_binary()
    seen: list[dict[str, Any]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))))
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error":{"type":"invalid_request_error","message":"recorded"}}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home, work = tmp_path / "codex", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(
        'model = "gpt-5"\nmodel_provider = "rec"\n\n[model_providers.rec]\nname = "rec"\n'
        f'base_url = "http://127.0.0.1:{server.server_port}/v1"\nenv_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "CODEX_HOME": str(home),
        "OPENAI_API_KEY": "sk-test",
    }
    try:
        store = MemoryStore()
        sid = await rt.loop_session(store, work, compact=compact)
        bash = ToolCallPart(id="b1", name="bash", arguments={"command": "pytest -q", "timeout": 30})
        thinking = ThinkingPart(text="Run them.", redacted="gAAAA-enc", provider="openai")
        await store.append(sid, [
            Message.user("run the tests"),
            Message(role="assistant", parts=[thinking, bash], model="gpt-5", usage=Usage(input_tokens=9)),
            Message.tool(ToolResultPart(call_id="b1", content="3 passed", name="bash")),
            Message.assistant("All pass."),
        ])  # fmt: skip
        info = await store.get_session(sid)
        monkeypatch.setenv("CODEX_HOME", str(home))
        target = install_path("codex", info, session_uuid(sid))
        target.parent.mkdir(parents=True)
        path, _ = await rt.export_to(store, sid, FMT, target.parent)
        path.rename(target)
        done = await asyncio.to_thread(
            subprocess.run, [binary, "exec", "--skip-git-repo-check", "resume", session_uuid(sid), "go on"],
            cwd=work, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert seen, done.stdout + done.stderr
    items = seen[0]["input"]
    said = [c.get("text", "") for i in items if i.get("type") == "message" for c in i["content"]]
    assert "go on" in said and "All pass." in said and "still here" in said
    calls = [i for i in items if i.get("type") == "function_call"]
    outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
    assert calls[-1]["name"] == "shell_command" and json.loads(calls[-1]["arguments"])["command"] == "pytest -q"
    assert outputs["b1"] == "3 passed"
    reasoning = [i for i in items if i.get("type") == "reasoning"]
    assert reasoning and reasoning[-1]["encrypted_content"] == "gAAAA-enc"
    if compact:
        assert any(t.startswith("Summary of the conversation so far") for t in said)
        assert "check the tests" not in said and "answer 27" not in said and "answer 29" in said
    else:
        assert "check the tests" in said and "The user switched branches." in said
        assert [c["name"] for c in calls[:2]] == ["look", "boom"]
        assert "exploded: on purpose" in outputs["c2"]
        assert "detour" not in json.dumps(items)


@pytest.mark.slow
async def test_real_codex_continues_the_export_and_the_turn_comes_back(
    tmp_path: Path, rt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round trip through the real tool: `codex exec resume UUID ...` on the installed export, against a
    Responses API on loopback that answers; Codex appends the turn to the rollout, and importing it brings
    that turn back to the original session (no copy, nothing written twice), once."""
    import http.server
    import os
    import subprocess
    import threading

    from tether.importers.foreign_export import install_path, session_uuid

    binary = codex_binary()
    answer = "Carried on in Codex."

    class Model(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            item = {"type": "message", "role": "assistant", "id": "msg_1",
                    "content": [{"type": "output_text", "text": answer, "annotations": []}]}  # fmt: skip
            usage = {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 6,
                     "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 26}  # fmt: skip
            for event in (
                {"type": "response.created", "response": {"id": "resp_1"}},
                {"type": "response.output_item.done", "item": item},
                {"type": "response.completed", "response": {"id": "resp_1", "usage": usage}},
            ):
                self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home, work = tmp_path / "codex", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(
        'model = "gpt-5"\nmodel_provider = "rec"\n\n[model_providers.rec]\nname = "rec"\n'
        f'base_url = "http://127.0.0.1:{server.server_port}/v1"\nenv_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
    )
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "CODEX_HOME": str(home),
           "OPENAI_API_KEY": "sk-test"}  # fmt: skip
    store = MemoryStore()
    try:
        sid = await rt.loop_session(store, work, compact=False)
        info = await store.get_session(sid)
        monkeypatch.setenv("CODEX_HOME", str(home))
        target = install_path("codex", info, session_uuid(sid))
        target.parent.mkdir(parents=True)
        path, _ = await rt.export_to(store, sid, FMT, target.parent)
        path = path.rename(target)
        exported = path.read_bytes()
        assert (await import_codex(store, path)).outcome == "unchanged"
        done = await asyncio.to_thread(
            subprocess.run, [binary, "exec", "--skip-git-repo-check", "resume", session_uuid(sid), "go on"],
            cwd=work, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0 and answer in done.stdout + done.stderr, done.stdout + done.stderr
    grown = path.read_bytes()
    assert grown.startswith(exported) and len(grown) > len(exported), "Codex wrote its turn elsewhere"
    result = await import_codex(store, path)
    assert result.outcome == "grown" and result.session_id == sid and not result.problems, result
    assert len((await store.list_sessions()).items) == 1  # no copy
    entries = await store.read(sid, info.entry_count + 1)
    said = [(e.body.role, e.body.text) for e in entries if isinstance(e.body, Message) and e.body.text]
    assert said[-1] == ("assistant", answer) and ("user", "go on") in said
    assert not [text for role, text in said if "check the tests" in text]  # the history is not written twice
    assert len(entries) == result.entries
    assert (await import_codex(store, path)).outcome == "unchanged"
