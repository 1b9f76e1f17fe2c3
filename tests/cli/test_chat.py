"""`tether chat` in a real terminal, 80 columns: its slash commands are read by the chat, never sent to the
model (a `/help` once went to the model as a prompt), and what they print fits the width."""

from __future__ import annotations

import sys
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
