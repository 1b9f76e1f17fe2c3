"""The boundary a model cannot talk its way past, tried as an attacker would: `tether run` processes with no
terminal, driven by a scripted model that emits chosen tool calls (the model has read a hostile file).

- it grants itself permissions: a `write` of ``[permissions] allow = ["bash"]`` to ``.tether/config.toml``
  under ``accept-edits``, or ``echo ... > .tether/config.toml`` under ``--allow 'bash(echo *)'``, even with
  ``--permission-mode bypass``: asked about (so, here, denied), and a file that says so anyway (written by
  hand, by a command with the sandbox off) grants nothing to the next plain run until `tether trust`;
- secrets under names tether does not know, and tether's own environment through ``/proc/$PPID/environ``:
  never reach the command, the journal or an export."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import tether
from tether.messages import Message
from tether.store import SqliteStore

DRIVER = """
import json, os, sys
from tether import Message, ToolCallPart
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
import tether.runtime.launch as launch

calls = json.loads(os.environ["TEST_CALLS"])

def respond(request):
    start = max(i for i, m in enumerate(request.messages) if m.role == "user")
    done = sum(len(m.tool_results) for m in request.messages[start:])
    if done < len(calls):
        name, arguments = calls[done]
        return Message.assistant(tool_calls=[ToolCallPart(id=f"c{done}", name=name, arguments=arguments)])
    return "finished"

provider = ScriptedProvider(respond)
launch.resolve_provider = lambda model=None, **_: ResolvedModel(provider, "test", unknown_model("scripted", "test"))
from tether.cli.main import cli
cli(sys.argv[1:], prog_name="tether")
"""

SECRETS = {
    "GITHUB_PAT": "ghp_boundary0123456789abcdefghijklmnop",
    "SENTRY_DSN": "https://0123456789abcdef0123@o42.ingest.sentry.io/4242",
    "MYAPP_KEY": "myapp-boundary-secret-0123456789",
    "OPENAI_API_KEY": "sk-boundary-provider-key-0123456789",
}


class Agent:
    """A workspace, a tether home and a store; `run` is one `tether run` whose model makes `calls`."""

    def __init__(self, tmp_path: Path) -> None:
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.db = tmp_path / "t.db"
        self.driver = tmp_path / "driver.py"
        self.driver.write_text(DRIVER)
        self.env = {
            **os.environ,
            "TETHER_HOME": str(self.home),
            "PYTHONPATH": str(Path(tether.__file__).resolve().parents[1]),
        }

    def run(self, calls: list[tuple[str, dict[str, Any]]], *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [sys.executable, str(self.driver), "--store", f"sqlite:///{self.db}", "run", *args, "go"],
            cwd=self.work,
            env={**self.env, **(env or {}), "TEST_CALLS": json.dumps(calls)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    def tether(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", "--store", f"sqlite:///{self.db}", *args],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def last_results(self) -> list[str]:
        async def read() -> list[str]:
            async with SqliteStore(self.db) as store:
                info = (await store.list_sessions(limit=1)).items[0]
                return [
                    r.content
                    for e in await store.read(info.id)
                    if isinstance(e.body, Message)
                    for r in e.body.tool_results
                ]

        return asyncio.run(read())


GRANT = '[permissions]\nallow = ["bash"]\n'


def test_a_model_cannot_grant_itself_permissions_with_the_write_tool(tmp_path: Path) -> None:
    agent = Agent(tmp_path)
    for mode in ("accept-edits", "bypass"):
        agent.run([("write", {"path": ".tether/config.toml", "content": GRANT})], "--permission-mode", mode)
        assert not (agent.work / ".tether" / "config.toml").exists()
        (result,) = agent.last_results()
        assert "asked about in every mode" in result and "nobody is here to answer" in result
    # a rule that names the file is the user's own choice
    agent.run([("write", {"path": ".tether/config.toml", "content": GRANT})], "--allow", "write(.tether/config.toml)")
    assert (agent.work / ".tether" / "config.toml").read_text() == GRANT


def test_a_model_cannot_grant_itself_permissions_through_a_redirection(tmp_path: Path) -> None:
    agent = Agent(tmp_path)
    (agent.work / ".tether").mkdir()
    command = f"echo '{GRANT}' > .tether/config.toml"
    for args in (
        ("--allow", "bash(echo *)"),
        ("--permission-mode", "bypass"),
        ("--sandbox", "off", "--allow", "bash(echo *)"),
    ):
        agent.run([("bash", {"command": command})], *args)
        assert not (agent.work / ".tether" / "config.toml").exists()
        (result,) = agent.last_results()
        assert "changes" in result and ".tether" in result


def test_a_project_config_that_grants_more_waits_for_its_user(tmp_path: Path) -> None:
    agent = Agent(tmp_path)
    (agent.work / ".tether").mkdir()
    (agent.work / ".tether" / "config.toml").write_text(GRANT)  # as a model with the sandbox off could
    touch = [("bash", {"command": "touch pwned"})]
    stderr = agent.run(touch)
    assert not (agent.work / "pwned").exists()
    assert "grants more than you last accepted here: + allow bash" in " ".join(stderr.split())
    assert "tether trust" in stderr

    shown = agent.tether("trust", "--show")
    assert shown.returncode == 0 and "+ allow bash" in shown.stdout
    accepted = agent.tether("trust")
    assert accepted.returncode == 0 and "Accepted" in accepted.stdout, accepted.stderr
    agent.run(touch)
    assert (agent.work / "pwned").exists()

    # a grant added since is not covered by the yes
    (agent.work / ".tether" / "config.toml").write_text(
        '[permissions]\nallow = ["bash", "write"]\nmode = "accept-edits"\n'
    )
    stderr = agent.run([("write", {"path": "x.txt", "content": "x"})], "--permission-mode", "default")
    assert not (agent.work / "x.txt").exists()
    assert "+ allow write" in " ".join(stderr.split())


def test_secrets_under_unknown_names_and_tethers_own_environment_stay_out(tmp_path: Path) -> None:
    agent = Agent(tmp_path)
    command = "env; cat /proc/$PPID/environ | tr '\\0' '\\n'; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | head -c 100000"
    agent.run([("bash", {"command": command})], "--allow", "bash", env=SECRETS)
    (result,) = agent.last_results()
    assert "PATH=" in result  # the command ran and printed its environment
    journal = agent.db.read_bytes()
    for wal in agent.db.parent.glob("t.db*"):
        journal += wal.read_bytes()
    for name, value in SECRETS.items():
        assert value not in result, name
        assert value.encode() not in journal, name
    session = agent.tether("sessions", "--all", "--json")
    sid = json.loads(session.stdout)[0]["id"] if session.stdout.strip().startswith("[") else None
    assert sid is not None, session.stdout
    for fmt in ("json", "html", "markdown", "claude-code", "codex"):
        exported = agent.tether("sessions", "export", sid, "-f", fmt)
        assert exported.returncode == 0, exported.stderr
        for name, value in SECRETS.items():
            assert value not in exported.stdout, (fmt, name)
