"""End to end, as a new user would: `tether run` in a real process, with a model on a loopback
OpenAI-compatible server (a script of what a model would do, over HTTP and SSE as OpenAI's API), an MCP
server added with `tether mcp add`, a project with an AGENTS.md and a skill. The model calls the MCP tool,
loads the skill and keeps a memory note; the next `tether run --continue` shows the note to the model;
`tether context` and `tether memory list` show what was added."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install 'tether[mcp]')")

SRC = Path(__file__).resolve().parents[2] / "src"
SERVER = Path(__file__).resolve().parents[1] / "mcp" / "sdk_server.py"

STEPS: list[tuple[str, dict[str, Any]]] = [
    ("mcp__calc__add", {"a": 20, "b": 22}),
    ("skill", {"name": "deploy"}),
    ("memory", {"action": "remember", "text": "deploys need the release tag first"}),
]


class Model:
    """What the loopback model answers: the next call of `STEPS` (counting the tool results since the last
    user message), then a text that quotes every result."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def answer(self, body: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None, str]:
        self.requests.append(body)
        messages = body["messages"]
        start = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[start:] if m["role"] == "tool"]
        last_user = messages[start]["content"]
        if "continue" in str(last_user) or len(results) >= len(STEPS):
            return "done: " + " | ".join(str(r)[:400] for r in results), None, ""
        name, args = STEPS[len(results)]
        return None, {"name": name, "arguments": json.dumps(args)}, f"call_{len(results)}"


def sse(text: str | None, call: dict[str, Any] | None, call_id: str) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip

    chunks = [chunk({"role": "assistant", "content": ""})]
    if call is not None:
        chunks.append(chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": call}]}))
        chunks.append(chunk({}, "tool_calls"))
    else:
        chunks.append(chunk({"content": text}))
        chunks.append(chunk({}, "stop"))
    usage = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1", "choices": [],
             "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}  # fmt: skip
    chunks.append(usage)
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.fixture
def model() -> Iterator[tuple[str, Model]]:
    script = Model()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            payload = sse(*script.answer(body))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        server.shutdown()
        server.server_close()


def test_a_run_uses_an_mcp_tool_a_skill_and_a_memory_note(tmp_path: Path, model: tuple[str, Model]) -> None:
    url, script = model
    home = tmp_path / "home"
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "AGENTS.md").write_text("Answer in one line.\n")
    skill = project / ".agents" / "skills" / "deploy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: deploy\ndescription: How to ship\n---\nTag, then run ./ship.sh.\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")},
        "TETHER_HOME": str(home),
        "PYTHONPATH": str(SRC),
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "sk-loopback-dummy-key",
    }

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    added = tether("mcp", "add", "calc", "--", sys.executable, str(SERVER), "stdio")
    assert added.returncode == 0, added.stderr
    run = tether(
        "run", "--json", "--model", "openai/gpt-4.1", "--allow", "mcp__calc__*", "--allow", "memory", "ship it"
    )
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    done = events[-1]
    assert done["type"] == "done", events[-3:]
    assert "42" in done["text"] and "Tag, then run ./ship.sh." in done["text"] and "remembered mem_" in done["text"]
    first = script.requests[0]
    system = first["messages"][0]["content"]
    assert "Answer in one line." in system and "- deploy: How to ship" in system
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"mcp__calc__add", "skill", "memory", "bash"} <= offered

    again = tether("run", "--json", "--model", "openai/gpt-4.1", "--continue", "please continue")
    assert again.returncode == 0, again.stderr
    assert "deploys need the release tag first" in script.requests[-1]["messages"][0]["content"]

    notes = tether("memory", "list", "--json")
    [note] = json.loads(notes.stdout)
    assert note["text"] == "deploys need the release tag first" and note["by"] == "model"
    sid = events[0]["session_id"]
    context = tether("context", sid)
    assert context.returncode == 0, context.stderr
    assert "AGENTS.md" in context.stdout and "skills: deploy" in context.stdout
    assert "MCP server calc:" in context.stdout and "memory notes: 1 of 1 shown" in context.stdout
