"""Shared fixtures. `store` runs a test once per backend: the conformance suite is every test that uses it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.store import MemoryStore, SqliteStore, Store

BACKENDS = ["memory", "sqlite"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may touch the user's real tether data or pick up their API keys."""
    home = tmp_path_factory.mktemp("tether-home")
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.delenv("TETHER_STORE", raising=False)
    for key in list(os.environ):
        if key.endswith("_API_KEY"):
            monkeypatch.delenv(key, raising=False)


def make_store(kind: str, path: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(path / "tether.db")
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = make_store(request.param, tmp_path)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "tether.db")
    try:
        yield s
    finally:
        await s.close()
