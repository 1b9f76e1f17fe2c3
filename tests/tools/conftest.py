"""Fixtures for the tool tests: a real temporary workspace, a context on a real SQLite store, and `call`,
which runs one tool call through `run_tool_call` the way the agent loop does."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tether.messages import ToolCallPart, ToolResultPart
from tether.store import SqliteStore
from tether.tools import ToolContext, ToolRegistry, run_tool_call
from tether.tools.builtin import builtin_registry

Call = Callable[..., Awaitable[ToolResultPart]]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def ctx(workspace: Path, sqlite_store: SqliteStore) -> ToolContext:
    return ToolContext(workspace=workspace, session_id="ses_test", store=sqlite_store)


@pytest.fixture
def registry() -> ToolRegistry:
    return builtin_registry()


@pytest.fixture
def call(registry: ToolRegistry, ctx: ToolContext) -> Call:
    counter = 0

    async def run(name: str, **args: Any) -> ToolResultPart:
        nonlocal counter
        counter += 1
        return await run_tool_call(registry, ToolCallPart(id=f"call_{counter}", name=name, arguments=args), ctx)

    return run
