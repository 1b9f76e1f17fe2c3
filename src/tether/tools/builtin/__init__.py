"""The built-in tools: files (read, write, edit), shell (bash), search (glob, grep, list) and question."""

from __future__ import annotations

from ..base import Tool


def builtin_tools() -> list[Tool]:
    """A fresh instance of every built-in tool, in the order they are offered to the model."""
    return []
