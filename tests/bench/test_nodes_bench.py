"""Keeps bench/nodes.py and `bench/server.py --workers` from rotting: quick runs (real server processes on
loopback, over one SQLite store) finish and their last lines are the JSON with the figures issue 27 names.
Speed is never asserted here, only that each figure was measured and that node B's clients got as many
frames as node A's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SRC = Path(__file__).resolve().parents[2] / "src"


def run(tmp_path: Path, *args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, *args, "--dir", str(tmp_path)], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def test_nodes_quick_run_reports_the_cross_node_figures(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'nodes.db'}"
    figures = run(tmp_path, str(BENCH / "nodes.py"), "--quick", "--store", store)
    for key in ("cross_node_p50_ms", "cross_node_p99_ms", "same_node_p99_ms"):
        assert isinstance(figures[key], float) and figures[key] > 0, key
    assert figures["cross_node_frames_equal"] is True


def test_server_workers_quick_run_reports_the_ratio(tmp_path: Path) -> None:
    figures = run(tmp_path, str(BENCH / "server.py"), "--quick", "--workers", "2")
    assert isinstance(figures["workers_throughput_ratio"], float) and figures["workers_throughput_ratio"] > 0
    for key in ("workers1_runs_s", "workers2_runs_s", "workers2_prompt_first_event_p50_ms", "workers2_sse_p99_ms"):
        assert isinstance(figures[key], float) and figures[key] > 0, key
