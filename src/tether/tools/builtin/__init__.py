"""The built-in tools: files (read, write, edit), shell (bash), search (glob, grep, list) and question. The
runtime adds the tools of other engines (`session_recall`) to make the default set."""

from __future__ import annotations

from ..base import Tool, ToolRegistry
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
    "builtin_registry",
    "builtin_tools",
]


def builtin_tools() -> list[Tool]:
    """A fresh instance of every built-in tool, in the order they are offered to the model."""
    return [
        ReadTool(),
        WriteTool(),
        EditTool(),
        BashTool(),
        GlobTool(),
        GrepTool(),
        ListTool(),
        QuestionTool(),
    ]


def builtin_registry() -> ToolRegistry:
    """A fresh registry holding the built-in tools: read, write, edit, bash, glob, grep, list, question."""
    return ToolRegistry(builtin_tools())
