"""`run_tool_call`: one model tool call in, one `ToolResultPart` out. Every way a call can go wrong (an
unknown tool, arguments that are not JSON or do not fit the schema, a tool that raises) becomes an error
result the model can read and act on; oversized output is cut and saved. Only cancellation propagates."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from ..errors import OutsideWorkspace, ToolError
from ..messages import ToolCallPart, ToolResultPart
from .base import ToolContext, ToolOutput, ToolRegistry, validate_arguments
from .output import fit_output

log = logging.getLogger("tether.tools")

_RAW_PREVIEW = 200


async def run_tool_call(registry: ToolRegistry, call: ToolCallPart, ctx: ToolContext) -> ToolResultPart:
    """Run `call` with the tool `registry` names and return its result, never raising except
    `asyncio.CancelledError`. The result's metadata holds what the tool put there, plus `duration` (seconds);
    a cut result also holds `truncated`, `artifact`, `original_chars`, `original_lines` (see `fit_output`);
    a failed call holds `error`: unknown_tool, malformed_arguments, invalid_arguments, aborted, tool_error,
    outside_workspace or exception."""
    started = time.monotonic()
    output = await _run(registry, call, ctx)
    content = output.content
    metadata = dict(output.metadata)
    fitted = await fit_output(
        content,
        store=ctx.store,
        session_id=ctx.session_id,
        limit=ctx.limits.output_chars,
        max_lines=ctx.limits.output_lines,
        redactor=ctx.redactor,
    )
    metadata.update(fitted.metadata)
    metadata["duration"] = round(time.monotonic() - started, 6)
    return ToolResultPart(
        call_id=call.id,
        name=call.name,
        content=fitted.content,
        is_error=output.is_error,
        metadata=_json_ready(metadata),
    )


async def _run(registry: ToolRegistry, call: ToolCallPart, ctx: ToolContext) -> ToolOutput:
    tool = registry.get(call.name)
    if tool is None:
        available = ", ".join(registry.names()) or "(none)"
        return _error(f"unknown tool {call.name!r}; the available tools are: {available}", "unknown_tool")
    if call.raw_arguments is not None:
        return _error(f"{call.name}: {_json_problem(call.raw_arguments)}", "malformed_arguments")
    try:
        args = validate_arguments(tool.parameters, call.arguments)
    except ToolError as e:
        return _error(f"{call.name}: {e}", "invalid_arguments")
    except Exception as e:  # a schema the validator cannot read: the tool's fault, not the model's
        log.warning("tool %s: cannot validate against its schema", call.name, exc_info=True)
        return _error(f"{call.name}: its parameter schema is broken ({type(e).__name__}: {e})", "exception")
    if ctx.abort.is_set():
        return _error(f"{call.name}: not run, the run was aborted", "aborted")
    try:
        output = await tool.run(args, ctx)
    except asyncio.CancelledError:
        raise
    except OutsideWorkspace as e:
        return _error(f"{call.name}: {e}", "outside_workspace")
    except ToolError as e:
        return _error(f"{call.name}: {e}", "tool_error")
    except Exception as e:
        if isinstance(e, ValueError) and _nul_refused(e):  # the model's call, not the tool, is at fault
            return _error(f"{call.name}: {NUL_REFUSED}", "invalid_arguments")
        # a bug or an unexpected failure inside the tool: the model gets a one-line account, the log the trace
        log.warning("tool %s raised", call.name, exc_info=True)
        return _error(f"{call.name} failed: {type(e).__name__}: {e}", "exception")
    if not isinstance(output, ToolOutput) or not isinstance(output.content, str):
        got = type(output.content if isinstance(output, ToolOutput) else output).__name__
        return _error(f"{call.name}: the tool returned {got}, not a ToolOutput with text content", "exception")
    return output


NUL_REFUSED = "an argument holds a NUL byte (\\0), which no path or command can hold. Call the tool again without it."


def _nul_refused(error: ValueError) -> bool:
    """Whether the OS layer refused a string because it holds a NUL byte (Python's words for it: paths,
    command lines, environment values)."""
    text = str(error)
    return "null byte" in text or "null character" in text


def _error(message: str, kind: str) -> ToolOutput:
    return ToolOutput(message, is_error=True, metadata={"error": kind})


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _json_problem(raw: str) -> str:
    """What is wrong with arguments that did not parse, in the parser's words where it has them."""
    preview = raw if len(raw) <= _RAW_PREVIEW else raw[:_RAW_PREVIEW] + f"... ({len(raw):,} characters)"
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except ValueError as e:
        problem = str(e)
    else:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            problem = "it holds a lone surrogate escape such as \\ud83d, which is not valid text"
        else:
            problem = "the provider reported it as malformed"
    return (
        f"the arguments are not valid JSON ({problem}): {preview!r}. "
        "Call the tool again with a JSON object that matches its parameters."
    )


def _json_ready(value: Any) -> Any:
    """Metadata goes into the journal as JSON: anything a tool put there that JSON cannot hold becomes a string."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return str(value)
