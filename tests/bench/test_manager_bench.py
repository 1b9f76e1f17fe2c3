"""Keeps bench/manager.py from rotting: a --quick run finishes and its last line is the JSON with every figure
issue 13 names (and those printed beside them). Speed is never asserted here, only that each figure was
measured and is in range."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPT = BENCH / "manager.py"

FIGURES = (
    "step_cpu_us_single",
    "step_cpu_us_concurrent",
    "manager_step_overhead_ratio",
    "concurrent_wall_s",
    "concurrent_steps_per_s",
    "fanout_p50_ms",
    "fanout_p99_ms",
    "fanout_max_ms",
    "lease_us",
    "lease_store_us",
    "lease_floor_us",
    "lease_vs_floor",
    "idle_runs_cpu_pct",
    "rss_kb_per_idle_session",
    "rss_kb_per_running_session",
)


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in FIGURES:
        value = figures.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool) and value >= 0, (key, value)
    assert figures["step_cpu_us_single"] > 0 and figures["lease_floor_us"] > 0
    assert figures["lease_us"] > figures["lease_floor_us"]  # two transactions against one
    # the busy fan-out is measured when the followed session ran beside the others, else null
    for key in ("fanout_p99_ms_busy", "loop_lag_p99_ms_busy"):
        assert figures[key] is None or figures[key] >= 0
    assert set(figures["targets"]) == {
        "manager_step_overhead_ratio",
        "fanout_p99_ms",
        "lease_vs_floor",
        "rss_kb_per_idle_session",
    }
    assert figures["quick"] is True and figures["sizes"]["sessions"] == 100
    assert "per-step cost" in proc.stdout and "fan-out" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # the scratch files are gone


def test_a_bad_option_is_refused() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--steps", "1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--steps" in proc.stderr


def test_one_section_alone(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--only", "lease", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["sections"] == ["lease"]
    assert figures["lease_vs_floor"] > 0
    # the sections left out report null figures, and their targets are not judged
    assert figures["manager_step_overhead_ratio"] is None and figures["rss_kb_per_idle_session"] is None
    assert figures["targets"]["fanout_p99_ms"]["pass"] is None
    assert "per-step cost" not in proc.stdout


def test_an_unknown_section_is_refused() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "lease,bogus"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--only" in proc.stderr and "bogus" in proc.stderr
