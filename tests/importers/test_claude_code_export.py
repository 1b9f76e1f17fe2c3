"""Sessions written as Claude Code transcripts: import(export(x)) equals x on what the format holds, for the
shared real samples (imported, exported, imported again), for sessions made by tether's own loop (tool
calls, an error, a revert, a compaction) and for odd text (hypothesis); the lines are the ones Claude Code
writes (a ``parentUuid`` chain, its tool names and arguments, a compaction as a boundary and a summary), and
what cannot be carried is said in the report."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.importers.claude_code import import_claude_code
from tether.messages import Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from tether.store import MemoryStore, Store

FMT = "claude-code"


def samples_dir() -> Path:
    """$TETHER_CLAUDE_SAMPLES, else ../shared/data/claude-code-samples next to the repository (skipped, saying
    how to get them, only when that default folder is absent)."""
    configured = os.environ.get("TETHER_CLAUDE_SAMPLES")
    path = Path(configured) if configured else Path(__file__).resolve().parents[3] / "shared/data/claude-code-samples"
    how = (
        "set TETHER_CLAUDE_SAMPLES to a folder of Claude Code .jsonl transcripts (the project uses "
        "daaain/claude-code-log's test/test_data, MIT, kept in ../shared/data/claude-code-samples next to the "
        "repository)"
    )
    if not path.is_dir():
        if configured:
            pytest.fail(f"TETHER_CLAUDE_SAMPLES={configured} is not a folder: {how}")
        pytest.skip(f"no Claude Code samples at {path}: {how}")
    return path


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


async def test_the_shared_samples_come_back_as_they_were(store: Store, folder: Path, rt: Any) -> None:
    files = sorted(samples_dir().glob("*.jsonl"))
    assert files
    checked = 0
    for path in files:
        result = await import_claude_code(store, path)
        assert result.outcome == "imported"
        for session_id in result.sessions:  # the main line and each branch
            await rt.check(store, session_id, FMT, folder)
            checked += 1
    assert checked >= len(files)


async def test_a_session_of_tethers_loop_comes_back(store: Store, tmp_path: Path, folder: Path, rt: Any) -> None:
    sid = await rt.loop_session(store, tmp_path)
    report = await rt.check(store, sid, FMT, folder)
    assert report.left_out["reverted entries"] == 2
    assert report.flattened["compactions (as a boundary and a summary message)"] == 1
    assert report.flattened["system messages (as user lines marked isMeta)"] == 1
    want = await rt.carried(store, sid, FMT)
    kinds = [item[0] for item in want.items]
    assert "compaction" in kinds and "system" in kinds
    assert any(part[0] == "thinking" for item in want.items if item[0] == "assistant" for part in item[1])
    errors = [p for item in want.items if item[0] == "tool" for p in item[1] if p[3] is True]
    assert len(errors) == 1 and "exploded: on purpose" in errors[0][2]


async def test_the_lines_are_claude_codes(store: Store, tmp_path: Path, folder: Path, rt: Any) -> None:
    sid = await rt.loop_session(store, tmp_path)
    info = await store.get_session(sid)
    path, report = await rt.export_to(store, sid, FMT, folder)
    lines = lines_of(path)
    assert report.lines == len(lines)
    convo = [ln for ln in lines if ln["type"] in ("user", "assistant", "system")]
    assert {ln["sessionId"] for ln in lines if "sessionId" in ln} == {report.target_id}
    assert {ln["cwd"] for ln in convo} == {info.directory}
    # one chain: each line's parent is the line before, except the compaction boundary, which starts anew
    uuids = [ln["uuid"] for ln in convo]
    assert len(set(uuids)) == len(uuids)
    for before, line in itertools.pairwise(convo):
        if line.get("subtype") == "compact_boundary":
            assert line["parentUuid"] is None and line["logicalParentUuid"] == before["uuid"]
        else:
            assert line["parentUuid"] == before["uuid"]
    boundary = next(i for i, ln in enumerate(convo) if ln.get("subtype") == "compact_boundary")
    summary = convo[boundary + 1]
    assert summary["isCompactSummary"] is True and isinstance(summary["message"]["content"], str)
    # the kept tail follows the summary, and the last exchange is after it
    assert convo[-1]["message"]["content"][0]["text"] == "still here"
    first = convo[0]
    assert first["parentUuid"] is None and first["message"] == {"role": "user", "content": "check the tests"}
    thinking = next(ln for ln in convo if ln["type"] == "assistant")["message"]
    assert thinking["content"][0] == {
        "type": "thinking",
        "thinking": "Let me look first.",
        "signature": "EqQBCkYIBxgCKkA=",
    }
    assert thinking["usage"] == {
        "input_tokens": 100, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000, "output_tokens": 80,
    }  # fmt: skip
    errors = [b for ln in convo if ln["type"] == "user" and isinstance(ln["message"]["content"], list)
              for b in ln["message"]["content"] if b.get("is_error")]  # fmt: skip
    assert len(errors) == 1 and errors[0]["type"] == "tool_result"
    # where it came from, at which entry, and how many lines are tether's (what follows is Claude Code's)
    assert convo[0]["tether"] == {"exported_from": sid, "entries": info.entry_count, "lines": len(lines)}
    assert not any("tether" in ln and "exported_from" in ln["tether"] for ln in lines[1:])
    system = next(ln for ln in convo if ln.get("tether", {}).get("role") == "system")
    assert system["isMeta"] is True and system["message"]["content"] == "The user switched branches."
    assert lines[-1] == {"type": "summary", "summary": "Check the tests", "leafUuid": convo[-1]["uuid"]}
    times = [ln["timestamp"] for ln in convo]
    assert times == sorted(set(times))  # Claude Code resumes from the newest line (the first of equals)
    assert "detour" not in path.read_text()  # the reverted turn is not there


async def test_tools_map_back_to_claude_codes_names_and_arguments(store: Store, tmp_path: Path, rt: Any) -> None:
    info = await store.create_session(directory=str(tmp_path))
    calls = [
        ToolCallPart(id="t1", name="read", arguments={"path": "/a.py", "offset": 3}),
        ToolCallPart(id="t2", name="bash", arguments={"command": "make", "timeout": 1.5, "description": "build"}),
        ToolCallPart(id="t3", name="grep", arguments={"pattern": "x", "case_insensitive": True}),
        ToolCallPart(id="t4", name="task", arguments={"description": "d", "prompt": "p", "agent": "plan"}),
        ToolCallPart(id="t5", name="note", arguments={"text": "mine"}),
        ToolCallPart.from_raw("t6", "look", "{not json"),
    ]
    results = [ToolResultPart(call_id=c.id, content="ok", name=c.name) for c in calls]
    await store.append(
        info.id, [Message.user("go"), Message(role="assistant", parts=list(calls)), Message.tool(*results)]
    )
    folder = tmp_path / "out"
    folder.mkdir()
    path, report = await rt.export_to(store, info.id, FMT, folder)
    uses = [b for ln in lines_of(path) if ln.get("type") == "assistant" for b in ln["message"]["content"]]
    assert [(b["name"], b["input"]) for b in uses] == [
        ("Read", {"file_path": "/a.py", "offset": 3}),
        ("Bash", {"command": "make", "timeout": 1500, "description": "build"}),
        ("Grep", {"pattern": "x", "-i": True}),
        ("Task", {"description": "d", "prompt": "p", "subagent_type": "plan"}),
        ("note", {"text": "mine"}),
        ("look", {}),
    ]
    assert report.flattened == {"tool calls with unparsed arguments (written as {})": 1}
    back, _ = await rt.round_trip(store, info.id, FMT, folder)
    got = [p for e in await store.read(back) if isinstance(e.body, Message) for p in e.body.tool_calls]
    assert [(c.name, c.arguments) for c in got[:5]] == [(c.name, c.arguments) for c in calls[:5]]


async def test_what_the_format_cannot_carry_is_said(store: Store, tmp_path: Path, rt: Any) -> None:
    from tether.messages import Checkpoint, FilePart, Marker

    info = await store.create_session(directory=str(tmp_path), system_prompt="Be brief.")
    await store.create_session(directory=str(tmp_path), parent_id=info.id)
    openai = ThinkingPart(text="hmm", redacted="gAAAA-encrypted", provider="openai")
    await store.append(info.id, [
        Message(role="user", parts=[TextPart(text="see"), FilePart(media_type="application/pdf")]),
        Message(role="assistant", parts=[openai, TextPart(text="seen")]),
        Message(role="assistant", parts=[openai]),
        Marker(name="approval_request", data={"call_id": "x"}),
        Checkpoint(objective="o"),
    ])  # fmt: skip
    folder = tmp_path / "out"
    folder.mkdir()
    _, report = await rt.export_to(store, info.id, FMT, folder)
    assert report.left_out == {
        "thinking blocks without an Anthropic signature": 2,
        "assistant messages with nothing Claude Code can carry": 1,
        "attachments without data or address": 1,
        "markers (approval_request)": 1,
        "checkpoints (tether's)": 1,
        "system prompt (Claude Code keeps none per session)": 1,
        "child sessions (export each by its id)": 1,
    }
    assert report.summary().startswith("left out: assistant messages with nothing Claude Code can carry: 1, ")


texts = st.text(max_size=60)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=texts, answer=texts, argument=texts, output=texts, error=st.booleans())
def test_odd_text_survives(user: str, answer: str, argument: str, output: str, error: bool, rt: Any) -> None:
    async def main() -> None:
        store = MemoryStore()
        info = await store.create_session(directory="/w")
        call = ToolCallPart(id="c1", name="bash", arguments={"command": argument, argument: [argument]})
        await store.append(info.id, [
            Message.user(user),
            Message(role="assistant", parts=[TextPart(text=answer), call], model="m"),
            Message.tool(ToolResultPart(call_id="c1", content=output, is_error=error, name="bash")),
        ])  # fmt: skip
        with tempfile.TemporaryDirectory() as folder:
            await rt.check(store, info.id, FMT, Path(folder))

    asyncio.run(main())


async def test_a_call_that_never_got_a_result_gets_an_error_one(store: Store, tmp_path: Path, rt: Any) -> None:
    """A run stopped between a call and its result: Claude's API refuses such a history, so the export
    answers the call with an error saying so (and says it did)."""
    from tether.importers.foreign_export import NO_RESULT

    info = await store.create_session(directory=str(tmp_path))
    calls = [
        ToolCallPart(id="c1", name="bash", arguments={"command": "ls"}),
        ToolCallPart(id="c2", name="read", arguments={"path": "a.py"}),
        ToolCallPart(id="c3", name="grep", arguments={"pattern": "x"}),
    ]
    await store.append(info.id, [
        Message.user("go"),
        Message(role="assistant", parts=list(calls)),
        Message.tool(ToolResultPart(call_id="c1", content="a.py", name="bash")),
        Message.user("what happened?"),
    ])  # fmt: skip
    folder = tmp_path / "out"
    folder.mkdir()
    path, report = await rt.export_to(store, info.id, FMT, folder)
    assert report.flattened == {"calls that never got a result (given an error result)": 2}
    lines = lines_of(path)
    assert lines[2]["message"]["content"] == [
        {"type": "tool_result", "tool_use_id": c, "content": NO_RESULT, "is_error": True} for c in ("c2", "c3")
    ]
    back, _ = await rt.round_trip(store, info.id, FMT, folder)
    results = [r for e in await store.read(back) if isinstance(e.body, Message) for r in e.body.tool_results]
    assert [(r.call_id, r.is_error) for r in results] == [("c2", True), ("c3", True), ("c1", False)]
    assert (await rt.carried(store, back, FMT)).items == (await rt.carried(store, info.id, FMT)).items


def claude_code_cli() -> tuple[str, str]:
    """(node, Claude Code's cli.js) from $TETHER_CLAUDE_CODE_CLI; skipped, saying how to get them, when unset."""
    import shutil

    cli = os.environ.get("TETHER_CLAUDE_CODE_CLI")
    node = shutil.which("node")
    how = (
        "set TETHER_CLAUDE_CODE_CLI to Claude Code's cli.js (`npm pack @anthropic-ai/claude-code@2.0.30`, untar, "
        "package/cli.js; later versions ship a native binary instead) and have node on PATH"
    )
    if not cli or node is None:
        pytest.skip(f"no Claude Code to resume with: {how}")
    if not Path(cli).is_file():
        pytest.fail(f"TETHER_CLAUDE_CODE_CLI={cli} is not a file: {how}")
    return node, cli


@pytest.mark.slow
@pytest.mark.parametrize("compact", [False, True], ids=["whole", "compacted"])
async def test_real_claude_code_resumes_the_export(
    tmp_path: Path, rt: Any, compact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`claude --resume UUID -p ...` on the installed export, against a recording Anthropic API on loopback:
    Claude Code finds the session and sends the model what tether's context has (the compaction's summary
    and kept tail when compacted; thinking with its signature, the tool calls, the error, otherwise)."""
    import http.server
    import subprocess
    import threading

    from tether.importers.foreign_export import install_path, session_uuid

    node, cli = claude_code_cli()
    seen: list[dict[str, Any]] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            seen.append(json.loads(body))
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type":"error","error":{"type":"invalid_request_error","message":"recorded"}}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_port}",
        "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }  # fmt: skip
    try:
        store = MemoryStore()
        sid = await rt.loop_session(store, work, compact=compact)
        info = await store.get_session(sid)
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", env["CLAUDE_CONFIG_DIR"])
        target = install_path("claude-code", info, session_uuid(sid))
        target.parent.mkdir(parents=True)
        path, _ = await rt.export_to(store, sid, FMT, target.parent)
        assert path == target
        done = await asyncio.to_thread(
            subprocess.run, [node, cli, "--resume", session_uuid(sid), "-p", "go on"],
            cwd=work, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert "No conversation found" not in done.stdout + done.stderr
    asked = [r for r in seen if r.get("messages") and r["messages"][-1]["content"] != "Warmup"]
    assert asked, done.stdout + done.stderr
    messages = asked[-1]["messages"]

    def texts(kind: str) -> list[Any]:
        return [b for m in messages if isinstance(m["content"], list) for b in m["content"] if b["type"] == kind]

    said = [b["text"] for b in texts("text")] + [m["content"] for m in messages if isinstance(m["content"], str)]
    assert said[-1] == "go on" or "go on" in said
    assert "still here" in said and "and after the compaction?" in said
    if compact:
        assert said[0].startswith("[Summary of this session's earlier part")
        assert "check the tests" not in said  # before the cut: not sent
        assert "answer 29" in said and "answer 27" not in said  # the kept tail only
    else:
        assert "check the tests" in said and "The user switched branches." in str(messages)
        assert texts("thinking")[0]["signature"] == "EqQBCkYIBxgCKkA="
        assert [b["name"] for b in texts("tool_use")] == ["look", "boom"]
        assert [b.get("is_error", False) for b in texts("tool_result")] == [False, True]
        assert "detour" not in str(messages)


@pytest.mark.slow
@pytest.mark.parametrize("compact", [False, True], ids=["whole", "compacted"])
async def test_real_claude_code_continues_the_export_and_the_turn_comes_back(
    tmp_path: Path, rt: Any, compact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round trip through the real tool: `claude --resume UUID -p ...` on the installed export, against
    an Anthropic API on loopback that answers; Claude Code appends the turn to the file (first writing again,
    under new ids, every message after one of several blocks), and importing the file brings that turn
    back to the original session (no copy, nothing written twice), once."""
    import http.server
    import subprocess
    import threading

    from tether.importers.foreign_export import install_path, session_uuid

    node, cli = claude_code_cli()
    answer = "Carried on in Claude Code."

    class Model(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            message = {"id": "msg_cc_1", "type": "message", "role": "assistant", "model": request.get("model", "m"),
                       "content": [], "stop_reason": None, "stop_sequence": None,
                       "usage": {"input_tokens": 12, "output_tokens": 1}}  # fmt: skip
            self.send_response(200)
            if not request.get("stream"):
                self.send_header("content-type", "application/json")
                self.end_headers()
                done = {**message, "content": [{"type": "text", "text": answer}], "stop_reason": "end_turn"}
                self.wfile.write(json.dumps(done).encode())
                return
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for event in (
                {"type": "message_start", "message": message},
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": answer}},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                 "usage": {"output_tokens": 6}},
                {"type": "message_stop"},
            ):  # fmt: skip
                self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "ANTHROPIC_API_KEY": "sk-ant-test", "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_port}",
        "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }  # fmt: skip
    store = MemoryStore()
    try:
        sid = await rt.loop_session(store, work, compact=compact)
        info = await store.get_session(sid)
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", env["CLAUDE_CONFIG_DIR"])
        target = install_path("claude-code", info, session_uuid(sid))
        target.parent.mkdir(parents=True)
        path, _ = await rt.export_to(store, sid, FMT, target.parent)
        exported = path.read_bytes()
        assert (await import_claude_code(store, path)).outcome == "unchanged"
        done = await asyncio.to_thread(
            subprocess.run, [node, cli, "--resume", session_uuid(sid), "-p", "go on"],
            cwd=work, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0 and answer in done.stdout, done.stdout + done.stderr
    grown = path.read_bytes()
    assert grown.startswith(exported) and len(grown) > len(exported), "Claude Code wrote its turn elsewhere"
    result = await import_claude_code(store, path)
    assert result.outcome == "grown" and result.session_id == sid and not result.problems, result
    assert len((await store.list_sessions()).items) == 1  # no copy
    entries = await store.read(sid, info.entry_count + 1)
    said = [(e.body.role, e.body.text) for e in entries if isinstance(e.body, Message)]
    assert said == [("user", "go on"), ("assistant", answer)]  # the messages written again are not imported
    assert len(entries) == result.entries  # the rest: markers of Claude Code's own lines (its queue)
    assert all(isinstance(e.body, Message) or e.body.name.startswith("claude-code.") for e in entries)
    assert (await import_claude_code(store, path)).outcome == "unchanged"
