"""The built-in tools: files (read, write, edit), shell (bash), search (glob, grep, list) and question."""

from __future__ import annotations

from ..base import Tool
from .files import EditTool, ReadTool, WriteTool
from .question import QuestionTool
from .search import GlobTool, GrepTool, ListTool
from .shell import BashTool

__all__ = [
    "BashTool",
    "EditTool",
    "GlobTool",
    "GrepTool",
    "ListTool",
    "QuestionTool",
    "ReadTool",
    "WriteTool",
    "builtin_tools",
]


def builtin_tools() -> list[Tool]:
    """A fresh instance of every built-in tool, in the order they are offered to the model."""
    from ...recall.tool import SessionRecallTool  # recall imports tools.base: import it when the list is made

    return [
        ReadTool(),
        WriteTool(),
        EditTool(),
        BashTool(),
        GlobTool(),
        GrepTool(),
        ListTool(),
        QuestionTool(),
        SessionRecallTool(),
    ]
