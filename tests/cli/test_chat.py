"""`tether chat` in a real terminal, 80 columns: its slash commands are read by the chat, never sent to the
model (a `/help` once went to the model as a prompt), and what they print fits the width."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.cli.chat import COMMANDS, command_help


def test_every_command_is_listed_and_the_list_fits_80_columns() -> None:
    text = command_help()
    assert all(len(line) <= 80 for line in text.splitlines())
    for name in ("/help", "/model", "/compact", "/session", "/new", "/exit"):
        assert any(entry.startswith(name) for entry, _ in COMMANDS) and name in text


@pytest.mark.slow
def test_slash_commands_at_80_columns_never_reach_the_model(terminal80: Any, cut_model: Any) -> None:
    cut_model.configure(terminal80.home)
    typed = "/help\n/nope\n/model\n/session\n/exit\n"
    screen = terminal80.script(f"printf '{typed}' | {sys.executable} -m tether chat")
    lines = screen.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "/compact" in screen and "/model [PROVIDER/MODEL]" in screen and "//TEXT" in screen
    assert "unknown command /nope: /help lists them" in screen
    assert "(no session yet)" in screen  # /session: nothing was sent, so no session was made
    assert "The parser drops" not in screen  # the model never answered anything


@pytest.mark.parametrize("ref", ["ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "nope12", "../x"])
def test_an_unknown_session_is_refused_before_the_first_message(tmp_path: Path, ref: str) -> None:
    """Before, `chat --session` took any id and said so only after the first message, which was lost."""
    db = tmp_path / "t.db"
    env = {**os.environ, "TETHER_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "tether", "--store", str(db), "chat", "--session", ref],
        input="my long first message\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "no session" in done.stderr or "invalid session id" in done.stderr
    assert "resume with" not in done.stderr and "Traceback" not in done.stderr
