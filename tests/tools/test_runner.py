from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from tether.errors import ToolError
from tether.messages import ToolCallPart
from tether.store import MemoryStore, SqliteStore
from tether.tools import ToolContext, ToolOutput, ToolRegistry, function_tool, read_artifact_bytes, run_tool_call


@function_tool
async def echo(text: str) -> str:
    """Say it back."""
    return text


@function_tool
async def explode(text: str) -> str:
    """Always fails, unexpectedly."""
    raise KeyError(text)


@function_tool
async def refuse(text: str) -> str:
    """Always fails, on purpose."""
    raise ToolError(f"cannot do {text!r}")


@function_tool
async def hang(ctx: ToolContext) -> str:
    """Waits forever."""
    await asyncio.Event().wait()
    return ""


@function_tool
async def bad_return() -> str:
    """Returns the wrong thing."""
    return 42  # type: ignore[return-value]


@function_tool
async def metadata_soup() -> ToolOutput:
    """Puts things JSON cannot hold into its metadata."""
    return ToolOutput("ok", metadata={"path": Path("/x"), "pair": (1, 2), 3: {"set": {1}}})


@function_tool(parameters={"type": "object", "properties": ["not", "a", "dict"]})
async def broken_schema() -> str:
    """Declares a schema the validator cannot read."""
    return "never"


@function_tool
async def bytes_content() -> ToolOutput:
    """Returns bytes where text belongs."""
    return ToolOutput(b"raw")  # type: ignore[arg-type]


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry([echo, explode, refuse, hang, bad_return, metadata_soup, broken_schema, bytes_content])


@pytest.fixture
def ctx(tmp_path: Path, sqlite_store: SqliteStore) -> ToolContext:
    return ToolContext(workspace=tmp_path, session_id="s", store=sqlite_store)


def call(name: str, arguments: Any = None, raw: str | None = None) -> ToolCallPart:
    if raw is not None:
        return ToolCallPart.from_raw("c1", name, raw)
    return ToolCallPart(id="c1", name=name, arguments=arguments)


async def test_a_good_call(reg: ToolRegistry, ctx: ToolContext) -> None:
    result = await run_tool_call(reg, call("echo", {"text": "hi"}), ctx)
    assert result.call_id == "c1" and result.name == "echo"
    assert result.content == "hi" and not result.is_error
    assert set(result.metadata) == {"duration"} and result.metadata["duration"] >= 0


async def test_unknown_tool_lists_the_available_ones(reg: ToolRegistry, ctx: ToolContext) -> None:
    result = await run_tool_call(reg, call("ech0", {"text": "hi"}), ctx)
    assert result.is_error
    assert result.content == (
        "unknown tool 'ech0'; the available tools are: "
        "echo, explode, refuse, hang, bad_return, metadata_soup, broken_schema, bytes_content"
    )
    assert result.metadata["error"] == "unknown_tool"


async def test_malformed_json_quotes_the_parse_problem(reg: ToolRegistry, ctx: ToolContext) -> None:
    result = await run_tool_call(reg, call("echo", raw='{"text": "hi",'), ctx)
    assert result.is_error and result.metadata["error"] == "malformed_arguments"
    assert result.content.startswith("echo: the arguments are not valid JSON (Expecting property name")
    assert '\'{"text": "hi",\'' in result.content
    nan = await run_tool_call(reg, ToolCallPart(id="c1", name="echo", raw_arguments='{"text": NaN}'), ctx)
    assert "(NaN is not valid JSON)" in nan.content
    lone = ToolCallPart(id="c1", name="echo", raw_arguments='{"text": "\\ud83d"}')
    assert "lone surrogate" in (await run_tool_call(reg, lone, ctx)).content
    long_raw = '{"text": "' + "x" * 5_000
    result = await run_tool_call(reg, call("echo", raw=long_raw), ctx)
    assert "(5,010 characters)" in result.content and len(result.content) < 600


async def test_validation_failure(reg: ToolRegistry, ctx: ToolContext) -> None:
    result = await run_tool_call(reg, call("echo", {}), ctx)
    assert result.is_error and result.metadata["error"] == "invalid_arguments"
    assert result.content == "echo: missing required argument 'text' (expected: text)"
    result = await run_tool_call(reg, call("echo", {"text": 5}), ctx)
    assert result.content == "echo: argument 'text' must be a string, not integer 5"


async def test_a_raising_tool_becomes_a_one_line_error(
    reg: ToolRegistry, ctx: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tether.tools"):
        result = await run_tool_call(reg, call("explode", {"text": "boom"}), ctx)
    assert result.is_error and result.metadata["error"] == "exception"
    assert result.content == "explode failed: KeyError: 'boom'"
    assert "Traceback" not in result.content
    assert any(r.exc_info for r in caplog.records)  # the trace goes to the log, not to the model


async def test_tool_errors_and_wrong_returns(reg: ToolRegistry, ctx: ToolContext) -> None:
    result = await run_tool_call(reg, call("refuse", {"text": "that"}), ctx)
    assert result.is_error and result.content == "refuse: cannot do 'that'"
    assert result.metadata["error"] == "tool_error"
    result = await run_tool_call(reg, call("bad_return", {}), ctx)
    assert result.is_error and "returned int, expected str or ToolOutput" in result.content
    result = await run_tool_call(reg, call("bytes_content", {}), ctx)
    assert result.is_error and result.content == (
        "bytes_content: the tool returned bytes, not a ToolOutput with text content"
    )
    result = await run_tool_call(reg, call("broken_schema", {}), ctx)
    assert result.is_error and result.content.startswith("broken_schema: its parameter schema is broken (")


async def test_metadata_is_made_json_ready(reg: ToolRegistry, ctx: ToolContext) -> None:
    result = await run_tool_call(reg, call("metadata_soup", {}), ctx)
    assert result.metadata["path"] == "/x"
    assert result.metadata["pair"] == [1, 2]
    assert result.metadata["3"] == {"set": "{1}"}


async def test_cancellation_propagates(reg: ToolRegistry, ctx: ToolContext) -> None:
    task = asyncio.create_task(run_tool_call(reg, call("hang", {}), ctx))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_aborted_run_starts_no_tool(reg: ToolRegistry, ctx: ToolContext) -> None:
    ctx.abort.set()
    result = await run_tool_call(reg, call("hang", {}), ctx)
    assert result.is_error and result.metadata["error"] == "aborted"


async def test_oversized_results_are_cut_with_the_whole_in_the_store(reg: ToolRegistry, ctx: ToolContext) -> None:
    text = "".join(f"row {i}\n" for i in range(50_000))
    result = await run_tool_call(reg, call("echo", {"text": text}), ctx)
    assert not result.is_error
    assert len(result.content) <= ctx.limits.output_chars
    assert result.metadata["truncated"] is True and result.metadata["original_lines"] == 50_000
    assert await read_artifact_bytes(ctx.store, result.metadata["artifact"]) == text.encode()


async def test_a_failing_store_still_gives_a_cut_result(reg: ToolRegistry, tmp_path: Path) -> None:
    store = MemoryStore()
    await store.close()
    ctx = ToolContext(workspace=tmp_path, session_id="s", store=store)
    result = await run_tool_call(reg, call("echo", {"text": "y\n" * 40_000}), ctx)
    assert not result.is_error
    assert result.metadata["truncated"] is True and "artifact" not in result.metadata
    assert "the full output could not be saved (StoreClosed" in result.content


@function_tool
async def open_path(path: str) -> str:
    """Opens a path as the built-in tools do."""
    with open(path, "rb"):
        return "opened"


@function_tool
async def bad_value(text: str) -> str:
    """Fails with a ValueError of its own."""
    raise ValueError(f"cannot parse {text!r}")


async def test_a_nul_byte_the_os_refuses_is_the_calls_fault_and_logs_nothing(
    ctx: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    nul = ToolRegistry([open_path, bad_value])
    with caplog.at_level(logging.WARNING, logger="tether.tools"):
        result = await run_tool_call(nul, call("open_path", {"path": "a\x00b"}), ctx)
    assert result.is_error and result.metadata["error"] == "invalid_arguments"
    assert result.content.startswith("open_path: an argument holds a NUL byte (\\0)")
    assert not caplog.records  # no traceback: nothing went wrong in the tool
    # any other ValueError is still the tool's failure, with its trace in the log
    with caplog.at_level(logging.WARNING, logger="tether.tools"):
        other = await run_tool_call(nul, call("bad_value", {"text": "x"}), ctx)
    assert other.metadata["error"] == "exception" and "cannot parse 'x'" in other.content
    assert caplog.records and caplog.records[0].exc_info is not None
