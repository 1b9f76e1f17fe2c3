"""Keeps bench/tools.py from rotting: a small flood runs to its end and the JSON line carries every figure.
Memory and speed are never asserted here; only that each figure was measured and is in range."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_tools_bench_reports_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "tools.py"), "--bytes", "5000000", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["flood_bytes"] == 5_000_000 and figures["exit_code"] == 0
    for key in ("rss_baseline_mb", "rss_peak_mb", "rss_growth_mb", "flood_s", "flood_mb_per_s", "store_mb"):
        assert isinstance(figures[key], int | float) and figures[key] >= 0, key
    assert 0 < figures["result_chars"] <= 30_000
    assert figures["artifact_bytes"] == 5_000_000
    assert set(figures["targets"]) == {"rss_growth_mb"}
    assert list(tmp_path.iterdir()) == []
