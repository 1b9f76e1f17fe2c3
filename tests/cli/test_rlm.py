"""`tether rlm` end to end: the real command, a provider declared in config.toml that points at an
OpenAI-compatible server on loopback (scripted answers, real HTTP and SSE), and the real sandbox."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tether.cli.main import cli

Responder = Callable[[list[dict[str, Any]]], str]


class ChatServer:
    """Chat Completions over SSE; `respond(messages)` writes each answer. Records every request body."""

    def __init__(self, respond: Responder) -> None:
        self.bodies: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                owner.bodies.append(body)
                text = respond(body["messages"])
                chunks = [
                    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                    {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}},
                ]
                payload = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(payload.encode())))
                self.end_headers()
                self.wfile.write(payload.encode())

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def planted_file(tmp_path: Path) -> Path:
    lines = [f"{n:06d} nothing to see on this line" for n in range(40_000)]
    lines.insert(27_000, "the launch code is 7301")
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines))
    return path


def scripted(messages: list[dict[str, Any]]) -> str:
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    last = messages[-1]["content"]
    if "Python REPL" in system:
        if len(messages) <= 2:
            return (
                '```repl\ni = context.find("launch code")\nfound = llm_query("Which code? " + context[i-50:i+50])\n```'
            )
        return "FINAL_VAR(found)"
    code = re.search(r"launch code is (\d+)", last)
    return f"The launch code is {code.group(1)}." if code else "nothing here"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    s = ChatServer(scripted)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def configured(server: ChatServer) -> None:
    home = Path(os.environ["TETHER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[providers.lab]\nkind = "openai"\nbase_url = "{server.url}"\n')


@pytest.mark.usefixtures("configured")
def test_answers_with_the_repl_and_reports_progress(server: ChatServer, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["rlm", str(planted_file(tmp_path)), "What is the launch code?", "-m", "lab/m"])
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout == "The launch code is 7301.\n"
    assert "rlm: sandbox layers:" in result.stderr
    assert "rlm: step 2" in result.stderr
    assert "RLM · 2 steps · 1 sub-calls · 300 tokens in / 30 out" in result.stderr
    assert len(server.bodies) == 3
    assert all("7301" not in json.dumps(b) for b in server.bodies if "Python REPL" in json.dumps(b))


@pytest.mark.usefixtures("configured")
def test_json_output_is_the_whole_result(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["rlm", str(planted_file(tmp_path)), "What is the launch code?", "-m", "lab/m", "--json", "-q"]
    )
    assert result.exit_code == 0, result.output + result.stderr
    data = json.loads(result.stdout)
    assert data["answer"] == "The launch code is 7301."
    assert data["iterations"] == 2 and data["sub_calls"] == 1 and data["fallback"] is False
    assert data["usage"]["input_tokens"] == 300 and data["usage"]["output_tokens"] == 30  # three calls
    assert {layer["name"] for layer in data["layers"]} >= {"rlimits", "audit_hook"}
    assert result.stderr == ""


@pytest.mark.usefixtures("configured")
def test_map_reduce_mode_needs_no_code(server: ChatServer, tmp_path: Path) -> None:
    path = tmp_path / "small.txt"
    path.write_text("notes\nthe launch code is 99\nmore notes")
    result = CliRunner().invoke(cli, ["rlm", str(path), "Which code?", "-m", "lab/m", "--mode", "map-reduce"])
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout == "The launch code is 99.\n"
    assert "map-reduce (REPL not used: the model cannot write code)" in result.stderr
    assert len(server.bodies) == 1


def test_reads_stdin(configured: None) -> None:
    result = CliRunner().invoke(
        cli, ["rlm", "-", "Which code?", "-m", "lab/m", "--mode", "map-reduce", "-q"], input="the launch code is 5"
    )
    assert result.exit_code == 0, result.output + result.stderr
    assert result.stdout == "The launch code is 5.\n"


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["rlm", str(tmp_path / "nope.txt"), "q?"])
    assert result.exit_code == 2
    assert "No such file" in result.stderr


def test_bad_limits_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("x")
    result = CliRunner().invoke(cli, ["rlm", str(path), "q?", "--max-iterations", "0"])
    assert result.exit_code == 2


def test_an_unknown_model_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("x")
    result = CliRunner().invoke(cli, ["rlm", str(path), "q?", "-m", "nosuchprovider/model"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
