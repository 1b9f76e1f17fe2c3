"""Approvals at the terminal, tried as a new user would: `tether run` in a real terminal (tmux) with a
scripted model whose command asks; the person answers y, n, always (a), always for the project (p), or types
a message; a process killed while it asks, and `--continue` asks again. Without a terminal, the ask is denied
with a line that says how to allow it; `--allow` does; a bad `--allow` or mode is exit 2."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

import tether
from tether.cli.approval import parse_answer
from tether.messages import APPROVAL_DECISION_MARKER, Marker, Message
from tether.runtime.permission import Answer, ApprovalRequest
from tether.store import SqliteStore

DRIVER = """
import os, sys
from tether import Message, ToolCallPart
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
import tether.runtime.launch as launch

with open(os.environ["TEST_PIDFILE"], "a") as f:
    f.write(f"{os.getpid()}\\n")
command, calls = os.environ["TEST_COMMAND"], int(os.environ.get("TEST_CALLS", "1"))

def respond(request):
    start = max(i for i, m in enumerate(request.messages) if m.role == "user")
    results = [r for m in request.messages[start:] for r in m.tool_results]
    if len(results) < calls:
        call = ToolCallPart(id=f"c{len(request.messages)}", name="bash", arguments={"command": command})
        return Message.assistant(tool_calls=[call])
    return "finished: " + " | ".join(r.content.splitlines()[0] for r in results)

provider = ScriptedProvider(respond)
launch.resolve_provider = lambda model=None, **_: ResolvedModel(provider, "test", unknown_model("scripted", "test"))
from tether.cli.main import cli
cli(sys.argv[1:], prog_name="tether")
"""


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"


class Workspace:
    """A workspace, a tether home and a store for `tether` processes driven by the scripted model."""

    def __init__(self, tmp_path: Path, calls: int = 1) -> None:
        self.root = tmp_path
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.db = tmp_path / "t.db"
        self.log = self.work / "deploys.log"
        self.driver = tmp_path / "driver.py"
        self.driver.write_text(DRIVER)
        self.pidfile = tmp_path / "pids"
        self.env = {
            "TETHER_HOME": str(self.home),
            "TEST_COMMAND": "echo deployed >> deploys.log",
            "TEST_CALLS": str(calls),
            "TEST_PIDFILE": str(self.pidfile),
            "PYTHONPATH": str(Path(tether.__file__).resolve().parents[1]),
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, str(self.driver), "--store", f"sqlite:///{self.db}", *args]

    def shell(self, *args: str) -> str:
        env = " ".join(f"{k}={_quote(v)}" for k, v in self.env.items())
        return f"cd {_quote(str(self.work))} && env {env} " + " ".join(_quote(a) for a in self.argv(*args))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """A run with no terminal: standard input is not one."""
        return subprocess.run(
            self.argv(*args),
            cwd=self.work,
            env={**os.environ, **self.env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def entries(self) -> list[object]:
        async def read() -> list[object]:
            async with SqliteStore(self.db) as store:
                (info,) = (await store.list_sessions(limit=10)).items
                return [e.body for e in await store.read(info.id)]

        return asyncio.run(read())

    def results(self) -> list[str]:
        return [r.content for b in self.entries() if isinstance(b, Message) for r in b.tool_results]


class Terminal:
    """A tmux server of its own, one window running a script; its screen read with `capture-pane`."""

    def __init__(self, where: Path) -> None:
        self.socket = str(where / "tmux.sock")
        self.where = where
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "100", "-s", "t", "sh")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def start(self, *lines: str) -> None:
        script = self.where / "go.sh"
        script.write_text("unset COLUMNS LINES\n" + "\n".join(lines) + "\necho __DONE__\nexec sleep 600\n")
        self.tmux("new-window", "-d", "-t", "t:1", f"sh {script}")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "t:1")

    def wait_for(self, text: str, count: int = 1) -> str:
        deadline = time.monotonic() + 120
        while (screen := self.screen()).count(text) < count:
            assert time.monotonic() < deadline, f"{text!r} never showed:\n{screen}"
            time.sleep(0.1)
        return screen

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "t:1", "-l", line)
        self.tmux("send-keys", "-t", "t:1", "Enter")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for the real-terminal tests: install it (apt-get install -y tmux)")
    term = Terminal(tmp_path)
    try:
        yield term
    finally:
        term.close()


def decisions(ws: Workspace) -> list[dict[str, object]]:
    return [b.data for b in ws.entries() if isinstance(b, Marker) and b.name == APPROVAL_DECISION_MARKER]


@pytest.mark.slow
def test_yes_runs_the_command_once(tmp_path: Path, terminal: Terminal) -> None:
    ws = Workspace(tmp_path)
    terminal.start(ws.shell("run", "deploy it"))
    screen = terminal.wait_for("approve›")
    assert "? approve bash: echo deployed >> deploys.log" in screen
    assert "asks by default" in screen
    assert (
        "[y] yes  [a] always (bash(echo deployed)) in this session  [p] always, saved to the project  [n] no" in screen
    )
    assert not ws.log.exists()  # nothing ran before the answer
    terminal.type("y")
    screen = terminal.wait_for("__DONE__")
    assert "✓ allowed once" in screen and "finished: " in screen
    assert ws.log.read_text() == "deployed\n"
    assert decisions(ws) == [{"call_id": decisions(ws)[0]["call_id"], "approved": True, "by": "user", "scope": "once"}]


@pytest.mark.slow
def test_no_leaves_the_command_unrun_and_says_so(tmp_path: Path, terminal: Terminal) -> None:
    ws = Workspace(tmp_path)
    terminal.start(ws.shell("run", "deploy it"))
    terminal.wait_for("approve›")
    terminal.type("n")
    screen = terminal.wait_for("__DONE__")
    assert "✗ not allowed" in screen
    assert "not run: the user did not allow it" in screen  # the call's line, and what the model read
    assert not ws.log.exists()


@pytest.mark.slow
def test_a_message_is_a_no_that_the_model_reads(tmp_path: Path, terminal: Terminal) -> None:
    ws = Workspace(tmp_path)
    terminal.start(ws.shell("run", "deploy it"))
    terminal.wait_for("approve›")
    terminal.type("deploy to staging first")
    screen = terminal.wait_for("__DONE__")
    assert "✗ not allowed (the agent reads your message)" in screen
    assert "finished: bash: not run: the user did not allow it, and said: deploy to staging first" in screen
    assert not ws.log.exists()


@pytest.mark.slow
def test_always_asks_once_for_the_session(tmp_path: Path, terminal: Terminal) -> None:
    ws = Workspace(tmp_path, calls=2)
    terminal.start(ws.shell("run", "deploy twice"))
    terminal.wait_for("approve›")
    terminal.type("")  # an empty line asks again
    terminal.wait_for("approve›", count=2)
    terminal.type("always")
    screen = terminal.wait_for("__DONE__")
    assert screen.count("approve›") == 2 and "✓ allowed for this session" in screen
    assert ws.log.read_text() == "deployed\ndeployed\n"  # the second call was not asked
    (decision,) = decisions(ws)
    assert decision["scope"] == "session" and decision["rules"] == ["bash(echo deployed)"]


@pytest.mark.slow
def test_always_for_the_project_saves_the_rule_and_the_next_run_does_not_ask(
    tmp_path: Path, terminal: Terminal
) -> None:
    ws = Workspace(tmp_path)
    terminal.start(ws.shell("run", "deploy it"), ws.shell("run", "deploy again in a new session"))
    terminal.wait_for("approve›")
    terminal.type("p")
    screen = terminal.wait_for("__DONE__")
    assert screen.count("approve›") == 1 and "✓ allowed saved to the project" in screen
    assert (ws.work / ".tether" / "config.toml").read_text() == '\n[permissions]\nallow = ["bash(echo deployed)"]\n'
    assert ws.log.read_text() == "deployed\ndeployed\n"


@pytest.mark.slow
def test_a_process_killed_while_it_asks_is_asked_again_by_continue(tmp_path: Path, terminal: Terminal) -> None:
    ws = Workspace(tmp_path)
    terminal.start(ws.shell("run", "deploy it"), ws.shell("run", "--continue"))
    terminal.wait_for("approve›")
    first_pid = int(ws.pidfile.read_text().split()[0])
    os.kill(first_pid, 9)  # gone while it waits for the person
    screen = terminal.wait_for("approve›", count=2)
    assert screen.count("? approve bash: echo deployed >> deploys.log") == 2
    assert not ws.log.exists()
    terminal.type("y")
    terminal.wait_for("__DONE__")
    assert ws.log.read_text() == "deployed\n"  # once, after the yes
    assert len(ws.pidfile.read_text().split()) == 2


def test_without_a_terminal_an_ask_is_denied_with_how_to_allow_it(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    done = ws.run("run", "deploy it")
    assert done.returncode == 0, done.stderr
    assert not ws.log.exists()
    (result,) = ws.results()
    assert "nobody is here to answer (no terminal); to allow it: --allow 'bash(echo deployed)'" in result
    assert "--allow 'bash(echo deployed)'" in done.stderr  # shown on the call's line
    again = ws.run("run", "--allow", "bash(echo deployed)", "deploy it now")
    assert again.returncode == 0, again.stderr
    assert ws.log.read_text() == "deployed\n"


def test_never_ask_denies_and_bypass_runs(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    denied = ws.run("run", "--permission-mode", "never-ask", "deploy it")
    assert denied.returncode == 0 and not ws.log.exists()
    assert "never-ask denies what would ask" in ws.results()[0]
    ran = ws.run("run", "--permission-mode", "bypass", "deploy it")
    assert ran.returncode == 0 and ws.log.read_text() == "deployed\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--allow", "bash(rm"], "--allow: 'bash(rm' is not a rule: write TOOL or TOOL(PATTERN)"),
        (["--deny", "()"], "--deny: '()' is not a rule"),
        (["--permission-mode", "yolo"], "Invalid value for '--permission-mode': 'yolo' is not one of"),
    ],
)
def test_a_bad_flag_is_a_clear_error_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    ws = Workspace(tmp_path)
    done = ws.run("run", *args, "deploy it")
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not ws.db.exists()  # nothing was created


def test_a_malformed_rule_in_the_config_names_the_file(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    (ws.home / "config.toml").write_text('[permissions]\nallow = ["bash(git status"]\n')
    done = ws.run("run", "deploy it")
    assert done.returncode == 2
    assert f"[permissions] in {ws.home / 'config.toml'}: 'bash(git status' is not a rule" in done.stderr


@pytest.mark.parametrize(
    ("line", "answer"),
    [
        ("y", Answer(True)),
        ("YES", Answer(True)),
        (" n ", Answer(False)),
        ("no", Answer(False)),
        ("a", Answer(True, scope="session")),
        ("always", Answer(True, scope="session")),
        ("p", Answer(True, scope="project")),
        ("no, use staging", Answer(False, message="no, use staging")),
        ("", None),
    ],
)
def test_what_a_typed_line_means(line: str, answer: Answer | None) -> None:
    request = ApprovalRequest("s", "c", "bash", {"command": "make"}, "asks", suggestion=("bash(make)",))
    assert parse_answer(line, request) == answer


def test_always_without_a_rule_to_keep_is_a_yes_once() -> None:
    request = ApprovalRequest("s", "c", "bash", {"command": "$CMD"}, "asks")
    assert parse_answer("always", request) == Answer(True)


def test_a_write_or_edit_shows_the_change_it_would_make(tmp_path: Path) -> None:
    from tether.cli.approval import DIFF_LINES, proposed_diff, show_diff

    (tmp_path / "parser.py").write_text("def parse(text):\n    return text.splitlines()[:-1]\n")

    def ask(tool: str, **arguments: object) -> ApprovalRequest:
        return ApprovalRequest("ses_x", "c1", tool, arguments, "asks by default", workspace=str(tmp_path))

    edit = proposed_diff(ask("edit", path="parser.py", old_string="splitlines()[:-1]", new_string="splitlines()"))
    assert "-    return text.splitlines()[:-1]" in edit and "+    return text.splitlines()" in edit
    assert " def parse(text):" in edit  # the file's own lines around it
    rewrite = proposed_diff(ask("write", path="parser.py", content="def parse(text):\n    return text.split()\n"))
    assert "+    return text.split()" in rewrite and "-    return text.splitlines()[:-1]" in rewrite
    new = proposed_diff(ask("write", path="new.txt", content="one\ntwo\n"))
    assert [line for line in new if line.startswith("+")] == ["+one", "+two"]
    assert proposed_diff(ask("bash", command="ls")) == [] and proposed_diff(ask("write", path="x")) == []
    # shown escaped and cut
    out = io.StringIO()
    big = proposed_diff(ask("write", path="big.txt", content="".join(f"line {i} \x1b[2J\n" for i in range(100))))
    show_diff(Console(file=out, width=80), big)
    assert "\x1b" not in out.getvalue() and "\\x1b[2J" in out.getvalue()
    assert f"{len(big) - DIFF_LINES} more lines of the change" in out.getvalue()
