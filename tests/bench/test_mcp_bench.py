"""Keeps bench/mcp_client.py from rotting: a quick run reports every figure in its JSON line. Speed is never
asserted here; only that each figure was measured and is in range."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install 'tether[mcp]')")

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_mcp_bench_reports_every_figure() -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    proc = subprocess.run(
        [sys.executable, str(BENCH / "mcp_client.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in (
        "mcp_call_bare_us",
        "mcp_call_tether_us",
        "mcp_overhead_ratio",
        "mcp_cold_start_ms",
        "mcp_cold_start_bare_ms",
    ):
        assert isinstance(figures[key], int | float) and figures[key] > 0, key
    assert figures["tool_search_tools"] == 212
    assert (
        figures["tool_search_tokens_saved"]
        == figures["tool_search_tokens_all"] - figures["tool_search_tokens_sent"]
        > 10_000
    )
    assert set(figures["targets"]) == {"mcp_overhead_ratio"}
