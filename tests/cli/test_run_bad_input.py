"""`tether run` on what a model or a person can send that a run must survive: a NUL byte in a tool call's
path or command, a prompt that is not UTF-8, an answer that never ends. Each runs the real CLI in a process
of its own, on a scripted model (`SCRIPT_DRIVER`) or a loopback OpenAI-compatible server."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# --- what a model can send that no path or command can hold -------------------------------------------------

SCRIPT_DRIVER = """
import json, os, sys
from tether import Message, ToolCallPart
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
import tether.runtime.launch as launch

script = []
for n, item in enumerate(json.loads(os.environ["TETHER_TEST_SCRIPT"])):
    if isinstance(item, str):
        script.append(item)
    else:
        calls = [ToolCallPart(id=f"c{n}_{k}", name=name, arguments=args) for k, (name, args) in enumerate(item)]
        script.append(Message.assistant(tool_calls=calls))
provider = ScriptedProvider(script)
launch.resolve_provider = lambda model=None, **_: ResolvedModel(provider, "test", unknown_model("scripted", "test"))
from tether.cli.main import cli
cli(sys.argv[1:], prog_name="tether")
"""
"""`tether` in a process of its own, on a scripted model that emits the tool calls of `TETHER_TEST_SCRIPT`
(JSON: a text answer, or a list of [tool, arguments] calls)."""


def scripted_process(tmp_path: Path, script: list[object], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_TEST_SCRIPT": json.dumps(script)}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT_DRIVER, "--store", f"sqlite:///{tmp_path / 'cli.db'}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize("mode", ["default", "bypass"])
def test_a_nul_byte_in_a_path_or_a_command_is_a_tool_error_the_model_reads(tmp_path: Path, mode: str) -> None:
    """A NUL byte cannot be in a path or a command: each such call is a tool error for the model, decided on
    (`default`: the rules look at the path) and run (`bypass`: the tools get it), never a crash or a traceback."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("alpha\n")
    calls = [
        ["read", {"path": "notes.txt\x00.png"}],
        ["write", {"path": "out\x00.txt", "content": "x"}],
        ["edit", {"path": "notes.txt\x00", "old_string": "alpha", "new_string": "beta"}],
        ["grep", {"pattern": "alpha", "path": "no\x00where"}],
        ["bash", {"command": "echo a\x00b > made.txt"}],
        ["bash", {"command": "cat <notes.txt\x00 >made.txt"}],
    ]
    script: list[object] = [[call] for call in calls] + ["Nothing could be done."]
    proc = scripted_process(tmp_path, script, "run", "--json", "--permission-mode", mode, "--dir", str(work), "go")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "null" not in proc.stderr.lower(), proc.stderr
    events = json_lines(proc.stdout)
    assert events[-1]["type"] == "done" and events[-1]["text"] == "Nothing could be done.", events[-1]
    results = [e for e in events if e["type"] == "tool_call_complete"]
    assert [e["name"] for e in results] == [name for name, _ in calls]
    assert all(e["success"] is False for e in results), results
    ran = [e for e in results if not e.get("denied")]
    if mode == "bypass":
        assert len(ran) == len(calls)
        for e in ran:  # what the model reads says what was wrong with its call
            assert "NUL byte" in e["preview"], e
    assert (work / "notes.txt").read_text() == "alpha\n"
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize(("ref", "code"), [("nope12", "session_not_found"), ("../x", "invalid_id")])
def test_an_unknown_session_is_an_error_event_for_programs(tmp_path: Path, ref: str, code: str) -> None:
    """`run --json --session` with a session that is not there: the error event on stdout, as for a bad
    option (before, stdout was empty and only stderr said it)."""
    env = {**os.environ, "TETHER_TEST_SCRIPT": json.dumps(["never asked"])}
    base = [sys.executable, "-c", SCRIPT_DRIVER, "--store", f"sqlite:///{tmp_path / 'cli.db'}", "run", "--json"]
    proc = subprocess.run([*base, "--session", ref, "x"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (event,) = json_lines(proc.stdout)
    assert event["type"] == "error" and event["code"] == code and ref in event["message"]


def test_a_busy_session_is_an_error_event_for_programs(tmp_path: Path) -> None:
    """`run --json` on a session another run (or an edit) holds: exit 3 and the error event on stdout."""
    import asyncio
    import socket

    from tether.store import SqliteStore

    db = tmp_path / "cli.db"

    async def held() -> str:
        async with SqliteStore(db) as store:
            info = await store.create_session(directory=str(tmp_path))
            await store.acquire_lease(info.id, "run_there", ttl=600, pid=os.getpid(), host=socket.gethostname())
            return info.id

    sid = asyncio.run(held())
    env = {**os.environ, "TETHER_TEST_SCRIPT": json.dumps(["never asked"])}
    argv = [sys.executable, "-c", SCRIPT_DRIVER, "--store", f"sqlite:///{db}", "run", "--json", "--session", sid, "x"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3, proc.stderr
    (event,) = json_lines(proc.stdout)
    assert event["type"] == "error" and event["code"] == "session_busy" and "run_there" in event["message"]


def test_a_prompt_that_is_not_utf8_is_refused_before_a_session_exists(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 (a Latin-1 file piped in, a name from an old archive) are refused before the
    store is opened: one line and exit 2 for people, an error event for programs; no session, at any try."""
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "TETHER_TEST_SCRIPT": json.dumps(["never asked"])}
    base = [sys.executable, "-c", SCRIPT_DRIVER, "--store", f"sqlite:///{tmp_path / 'cli.db'}", "run"]
    stdin = "fix the café menu\n".encode("latin-1")
    for _ in range(2):
        proc = subprocess.run([*base, "--dir", str(work), "-"], input=stdin, capture_output=True, env=env, timeout=120)
        err = proc.stderr.decode()
        assert proc.returncode == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "not valid UTF-8" in lines[0], err
        assert "byte 0xe9" in lines[0] and proc.stdout == b""
    proc = subprocess.run(
        [*base, "--json", "--dir", str(work), "-"], input=stdin, capture_output=True, env=env, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    (event,) = json_lines(proc.stdout.decode())
    assert event["type"] == "error" and event["code"] == "invalid_input" and "not valid UTF-8" in event["message"]
    # the same bytes as an argument (the shell passes them through; Python keeps them as lone surrogates)
    proc = subprocess.run([*base, "--dir", str(work), b"caf\xe9 menu"], capture_output=True, env=env, timeout=120)
    assert proc.returncode == 2 and b"not valid UTF-8" in proc.stderr and b"Traceback" not in proc.stderr
    assert not (tmp_path / "cli.db").exists()  # not even a database, let alone an empty session
    # valid UTF-8 still runs, from stdin as from the command line
    proc = subprocess.run(
        [*base, "--dir", str(work), "-"],
        input="fix the café menu\n".encode(),
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0 and b"never asked" in proc.stdout, proc.stderr


# --- an answer that never ends --------------------------------------------------------------------------------


class EndlessServer:
    """An OpenAI-compatible chat server on loopback whose answers never end (a word a chunk until the client
    goes away), or, with `quiet_after`, go silent after that many words. Counts the chunks it wrote."""

    def __init__(self, quiet_after: int | None = None) -> None:
        self.quiet_after = quiet_after
        self.written = 0
        self.gone = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                try:
                    for n in itertools.count():
                        if owner.quiet_after is not None and n >= owner.quiet_after:
                            owner.gone.wait(60)  # silent, the connection open, until the test ends
                            return
                        chunk = {
                            "id": "c1",
                            "object": "chat.completion.chunk",
                            "created": 0,
                            "model": "m",
                            "choices": [{"index": 0, "delta": {"content": f"word{n} "}, "finish_reason": None}],
                        }
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        owner.written += 1
                        time.sleep(0.001)
                except OSError:  # the client hung up: what a cut answer does
                    owner.gone.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> EndlessServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.gone.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def tether_process(tmp_path: Path, config: str, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(config)
    env = {**os.environ, "TETHER_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "tether", "--store", f"sqlite:///{tmp_path / 'cli.db'}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def lab_config(url: str, runtime: str = "") -> str:
    return (
        f'[providers.lab]\nkind = "openai"\nbase_url = "{url}"\napi_key = "not-needed"\n\n'
        '[models."lab/m"]\ncontext_window = 16000\nmax_output_tokens = 300\n\n' + runtime
    )


@pytest.mark.parametrize("max_steps", ["1", "5"])
def test_an_answer_that_streams_forever_ends_its_step_and_is_kept(tmp_path: Path, max_steps: str) -> None:
    """`--max-steps 1` once ran 60 s and 10,000 deltas until Ctrl-C: now the step ends past the model's
    output limit (300 tokens here, and a quarter more), the run says so, and the answer is in the session,
    marked as cut."""
    work = tmp_path / "work"
    work.mkdir()
    with EndlessServer() as server:
        started = time.monotonic()
        proc = tether_process(
            tmp_path, lab_config(server.url), "run", "--json", "-m", "lab/m", "--max-steps", max_steps,
            "--dir", str(work), "tell me everything",
        )  # fmt: skip
        took = time.monotonic() - started
        assert server.gone.wait(10)  # tether hung up on the stream
    assert proc.returncode == 1, proc.stderr
    events = json_lines(proc.stdout)
    deltas = [e for e in events if e["type"] == "text_delta"]
    assert events[-1]["type"] == "error" and events[-1]["code"] == "answer_cut", events[-1]
    assert "past the 375 a step allows" in str(events[-1]["message"])
    assert 50 < len(deltas) < 500 and server.written < 1000 and took < 60
    shown = tether_process(tmp_path, lab_config(server.url), "sessions", "show", "--json", str(events[0]["session_id"]))
    entries = json.loads(shown.stdout)["entries"]
    answer = next(e["body"] for e in entries if e["body"].get("role") == "assistant")
    text = "".join(p["text"] for p in answer["parts"] if p["kind"] == "text")
    assert text == "".join(str(e["text"]) for e in deltas)  # every word shown is kept
    assert answer["finish_reason"] == "length" and answer["metadata"]["cut"]["reason"] == "length"
    assert entries[-1]["body"]["kind"] == "checkpoint"


def test_a_server_that_goes_quiet_is_cut_after_the_stall_timeout(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with EndlessServer(quiet_after=5) as server:
        started = time.monotonic()
        proc = tether_process(
            tmp_path, lab_config(server.url, "[runtime]\nstall_timeout = 5\n"), "run", "-m", "lab/m",
            "--dir", str(work), "hello",
        )  # fmt: skip
        took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert "word0 word1 word2 word3 word4" in proc.stdout
    assert "the model sent nothing for 5 s" in proc.stderr and "--continue" in proc.stderr, proc.stderr
    assert "The answer was cut short" in proc.stderr and "step limit" not in proc.stderr
    assert "Traceback" not in proc.stderr and took < 50
