"""A pytest plugin (not a test module) that runs the OpenAI Agents SDK's own session tests against
`TetherSession`: loaded with ``-p agents_sdk_sessions`` into a pytest run of the SDK's
``tests/memory/test_session.py`` and ``test_session_limit.py`` (from its sdist), by
`test_openai_agents_sdk.py`.

Those tests construct the SDK's `SQLiteSession(session_id, db_path=":memory:", ..., session_settings=...)`
by name, imported from `agents`. The plugin puts `SQLiteSession` below in its place before they are
imported: a `TetherSession` on a tether store in that file (tether's own SQLite store; ``:memory:`` an
in-memory tether store), which the session owns and closes, as the SDK's session owns its connection.

The tests that examine `SQLiteSession`'s own implementation rather than the `Session` protocol (its private
attributes, ``session._connections`` or ``SQLiteSession._file_locks``; rows and tables of its schema,
``agent_sessions`` / ``agent_messages``, written or dropped through `sqlite3`) have nothing to examine in
another implementation: they are deselected, by that rule read from their source, and listed in the file
``$TETHER_SDK_DESELECTED`` names. Every other test runs, unchanged."""

from __future__ import annotations

import ast
import inspect
import os
import re
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest

from tether.integrations.openai_agents import TetherSession
from tether.store import open_store
from tether.store.memory import MemoryStore

_IMPLEMENTATION = re.compile(r"\b(?:session(?:_\d)?|SQLiteSession)\._[a-z]|\bagent_sessions\b|\bagent_messages\b")
"""What a test of SQLiteSession's own implementation touches: a private attribute, a table of its schema."""


class SQLiteSession(TetherSession):
    """`TetherSession` under the SDK's `SQLiteSession` constructor."""

    def __init__(
        self,
        session_id: str,
        db_path: str | os.PathLike[str] = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        path = os.fspath(db_path)
        store = MemoryStore() if path == ":memory:" else open_store(f"sqlite:///{Path(path).resolve()}")
        super().__init__(session_id, store=store, session_settings=session_settings)
        self._owns_store = True  # closed with the session, as SQLiteSession closes its connection


def pytest_configure(config: pytest.Config) -> None:
    agents.SQLiteSession = SQLiteSession  # type: ignore[misc,assignment]
    agents.memory.SQLiteSession = SQLiteSession  # type: ignore[misc,assignment]


def _examines_the_implementation(function: Any) -> bool:
    """Whether a test (or a module-level helper it calls, at any depth) touches SQLiteSession's privates or
    its tables."""
    module = inspect.getmodule(function)
    source = inspect.getsource(module) if module is not None else ""
    tree = ast.parse(source)
    helpers = {
        node.name: ast.get_source_segment(source, node) or ""
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("test")
    }

    def touches(code: str, seen: frozenset[str]) -> bool:
        if _IMPLEMENTATION.search(code):
            return True
        return any(
            name not in seen and re.search(rf"\b{name}\(", code) and touches(body, seen | {name})
            for name, body in helpers.items()
        )

    return touches(inspect.getsource(function), frozenset())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        function = getattr(item, "function", None)
        (dropped if function is not None and _examines_the_implementation(function) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    listing = os.environ.get("TETHER_SDK_DESELECTED")
    if listing:
        Path(listing).write_text("".join(f"{item.nodeid}\n" for item in dropped))
