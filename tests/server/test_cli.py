"""The CLI on a server: `tether run --server URL` runs there (a new session in the workspace, the one named,
`--continue`), shows the events as a local run's, exits 3 when the session is busy and --wait is not given;
`tether serve --help` is fast to load and says how it is guarded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner

from tether.cli.main import cli

from .cluster import free_port
from .conftest import GATES, Served, asks, gated, serve


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["run", *args])
    return result.exit_code, result.stdout, result.stderr


def test_run_on_a_server_creates_a_session_and_streams_its_events(server: Served) -> None:
    code, out, err = run("--server", server.url, "--dir", str(server.workspace), "--json", "hello there")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "done"
    assert events[-1]["text"] == "answer to hello there"
    sid = events[-1]["session_id"]
    code, out, err = run("--server", server.url, "--dir", str(server.workspace), "--continue", "and again")
    assert code == 0, err
    assert "answer to and again" in out
    page = server.call(server.state.store.list_sessions())
    assert [s.id for s in page.items] == [sid] and page.items[0].message_count == 4


def test_run_on_a_server_says_who_holds_a_busy_session(tmp_path: Path) -> None:
    GATES["cli"] = threading.Event()
    with serve(tmp_path, gated("cli")) as served:
        body = {"directory": str(served.workspace), "prompt": "first"}
        created = httpx2.post(served.url + "/sessions", json=body, timeout=30).json()
        sid = created["session"]["id"]
        while httpx2.get(f"{served.url}/sessions/{sid}", timeout=30).json()["status"] != "running":
            threading.Event().wait(0.01)
        code, _, err = run("--server", served.url, "--session", sid, "second")
        assert code == 3 and "busy" in err and sid in err
        GATES["cli"].set()
        code, out, err = run("--server", served.url, "--session", sid, "--wait", "third")
        assert code == 0 and "answered third" in out, err


def test_serve_help_loads_no_web_framework() -> None:
    script = (
        "import sys; from click.testing import CliRunner; from tether.cli.main import cli; "
        "r = CliRunner().invoke(cli, ['serve', '--help']); "
        "print(r.exit_code, 'fastapi' in sys.modules, 'uvicorn' in sys.modules); print(r.output)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    first, _, rest = done.stdout.partition("\n")
    assert first == "0 False False"
    assert "--token-required" in rest and "TETHER_SERVER_TOKEN" in rest and "127.0.0.1" in rest


def test_the_text_a_late_follower_missed_is_filled_in() -> None:
    from tether.cli.remote import _TextFill
    from tether.events import RunStarted, TextComplete, TextDelta

    def texts(events: list[object]) -> str:
        return "".join(e.text for e in events if isinstance(e, TextDelta))  # type: ignore[attr-defined]

    whole = _TextFill("ses_a")
    start = RunStarted(session_id="ses_a", n=1_500_000, run_id="r", model="m", provider="p")
    deltas = [TextDelta(session_id="ses_a", n=1_500_001 + i, text=t) for i, t in enumerate(["Hel", "lo"])]
    complete = TextComplete(session_id="ses_a", n=2_000_000, text="Hello", seq=2)
    shown = [e for event in [start, *deltas, complete] for e in whole.fill(event)]
    assert texts(shown) == "Hello" and shown[-1] == complete  # followed from the start: shown as it came
    late = _TextFill("ses_a")
    shown = [e for event in [start, deltas[1], complete] for e in late.fill(event)]
    assert texts(shown) == "Hello"  # "Hel" was missed: the completed text shows it all, once


def test_a_run_on_a_server_without_a_terminal_says_where_an_approval_is_answered(tmp_path: Path) -> None:
    with serve(tmp_path, asks("the config")) as served:
        box: list[tuple[int, str, str]] = []
        runner = threading.Thread(
            target=lambda: box.append(run("--server", served.url, "--dir", str(served.workspace), "change it"))
        )
        runner.start()
        pending: list[dict[str, object]] = []
        for _ in range(3000):  # the run waits for a yes that only HTTP can give
            pending = httpx2.get(served.url + "/approvals", timeout=30).json()["approvals"]
            if pending:
                break
            threading.Event().wait(0.01)
        assert len(pending) == 1 and runner.is_alive()
        (waiting,) = pending
        answer = {"approved": True, "scope": "once", "message": ""}
        path = f"/sessions/{waiting['session_id']}/approvals/{waiting['call_id']}"
        assert httpx2.post(served.url + path, json=answer, timeout=30).status_code == 200
        runner.join(60)
        assert not runner.is_alive()
    ((code, out, err),) = box
    assert code == 0, err
    assert "waiting for approval: change in session" in " ".join(err.split())
    assert f"POST{served.url}{path}" in "".join(err.split())  # where to answer it (rich may wrap the line)
    assert "result:" in out


def test_a_run_on_a_server_takes_the_permission_options_as_a_local_run_does(tmp_path: Path) -> None:
    with serve(tmp_path, asks("the config")) as served:
        common = ("--server", served.url, "--dir", str(served.workspace))
        code, out, err = run(*common, "--allow", "change", "change it")
        assert code == 0, err
        assert "result: changed the config" in out and "waiting for approval" not in err
        code, out, err = run(*common, "--deny", "change", "change it again")
        assert code == 0, err
        assert "result:" in out and "changed the config" not in out  # denied: the model reads why
        code, _, err = run(*common, "--allow", "bash(", "x")
        assert code == 2 and "is not a rule" in " ".join(err.split())


def test_serve_with_workers_refuses_a_memory_store(tmp_path: Path) -> None:
    """A memory:// store lives in one process: several workers could not share it."""
    result = CliRunner().invoke(cli, ["--store", "memory://", "serve", "--workers", "2"])
    assert result.exit_code == 2 and "memory:// store lives in one process" in result.output


def test_serve_help_names_workers_and_nodes() -> None:
    result = CliRunner().invoke(cli, ["serve", "--help"])
    assert result.exit_code == 0 and "--workers N" in result.output and "postgresql://" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_serve_says_it_serves_once_a_connection_is_served(tmp_path: Path, workers: int) -> None:
    """A script that waits for the line and then connects is served: before, with --workers, the line came
    before the supervisor forked, and a connection right after it was refused for a few hundred ms."""
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}, "TETHER_HOME": str(tmp_path)}
    argv = [sys.executable, "-m", "tether", "--store", f"sqlite:///{tmp_path / 't.db'}", "serve", "--port"]
    process = subprocess.Popen(
        [*argv, str(port), "--workers", str(workers)], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        said = process.stderr.readline()
        assert said.startswith("tether serving on"), said
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:  # refused: ConnectionRefusedError
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port)
            conn.settimeout(30)
            got = conn.recv(4096)
            assert got.startswith(b"HTTP/1.1 200"), (said, got)
    finally:
        process.terminate()
        process.wait(30)
