"""Keeps bench/loop.py from rotting: a --quick run finishes and its last line is the JSON with the figures the
issue names; the store-counting wrapper and the OpenAI stub it relies on do what they say. Speed is never
asserted here, only that each figure was measured."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPT = BENCH / "loop.py"


def test_quick_run_reports_the_step_store_and_sdk_figures(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--generated", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["step_ms_10"] > 0 and figures["startup_ms_10"] > 0 and figures["first_step_ms_10"] > 0
    assert figures["step_ms_1000"] > 0  # --quick measures 1,000 messages in place of 10,000
    assert figures["store_calls_per_step_10"] > 0 and figures["store_calls_per_step_1000"] > 0
    assert figures["store_calls_by_method_10"]["append"] > 0
    # 30 turns through the real openai client against the stub, about half of them with a tool call.
    assert figures["sdk_turns"] == 30 and figures["sdk_turn_ms_10"] > 0 and figures["sdk_turn_ms_30"] > 0
    assert isinstance(figures["sdk_turn_growth_ms"], float)
    assert figures["sdk_requests"] > 31 and figures["sdk_tool_calls"] > 10
    assert figures["opencode_skipped"] == "--quick"
    assert set(figures["targets"]) == {
        "step_ms_10",
        "step_ms_10000",
        "store_calls_per_step_10",
        "store_calls_per_step_10000",
        "sdk_turn_growth_ms",
        "stream_checkpoint_overhead_ratio",
    }
    # the durable stream against none, in the same run: saved by size (16,000 characters: 3 saves or more)
    assert figures["stream_turn_ms"] > 0 and figures["stream_turn_ms_undurable"] > 0
    assert figures["stream_saves_per_answer"] >= 3 and figures["stream_checkpoint_overhead_ratio"] > 0
    assert "per step, history of 10 messages" in proc.stdout
    assert "skipped (--quick)" in proc.stdout


def test_a_missing_data_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--data", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "nope.json" in proc.stderr


@pytest.fixture
def loop(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("loop")


class FakeStore:
    """Each kind of method a store has: a coroutine, an async generator, a plain one; and an attribute."""

    path = "fake.db"

    def __init__(self) -> None:
        self.rows: list[str] = []

    async def append(self, row: str) -> int:
        self.rows.append(row)
        return len(self.rows)

    async def iter_rows(self) -> Any:
        for row in self.rows:
            yield row

    def size(self) -> int:
        return len(self.rows)


async def test_the_counting_store_counts_each_call_and_changes_nothing(loop: Any) -> None:
    inner = FakeStore()
    store = loop.CountingStore(inner)
    assert await store.append("a") == 1 and await store.append("b") == 2
    assert [row async for row in store.iter_rows()] == ["a", "b"]
    assert store.size() == 2 and store.size() == 2
    assert store.calls == {"append": 2, "iter_rows": 1, "size": 2}
    assert store.path == "fake.db" and store.rows is inner.rows  # attributes are the wrapped store's own
