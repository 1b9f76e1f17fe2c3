"""Tools: what the model can do in a workspace. `base` holds the protocol, context, registry and argument
validation; `builtin` the built-in tools; `output` the cutting and saving of oversized results; `runner`
the one function the loop calls per tool call."""

from __future__ import annotations

from .base import (
    FunctionTool,
    Tool,
    ToolContext,
    ToolLimits,
    ToolOutput,
    ToolRegistry,
    function_tool,
    validate_arguments,
)
from .output import FittedOutput, OutputSpool, fit_output, open_artifact, read_artifact_bytes
from .runner import run_tool_call

__all__ = [
    "FittedOutput",
    "FunctionTool",
    "OutputSpool",
    "Tool",
    "ToolContext",
    "ToolLimits",
    "ToolOutput",
    "ToolRegistry",
    "fit_output",
    "function_tool",
    "open_artifact",
    "read_artifact_bytes",
    "run_tool_call",
    "validate_arguments",
]
