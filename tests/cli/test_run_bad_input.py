"""`tether run` on what a model or a person can send that a run must survive: a NUL byte in a tool call's
path or command, a prompt that is not UTF-8, an answer that never ends. Each runs the real CLI in a process
of its own, on a scripted model (`SCRIPT_DRIVER`) or a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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

