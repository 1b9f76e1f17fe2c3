"""Keeps bench/loop.py from rotting: a --quick run finishes and its last line is the JSON with the figures the
issue names. Speed is never asserted here, only that each figure was measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "loop.py"


def test_quick_run_reports_the_step_figures(tmp_path: Path) -> None:
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
    assert set(figures["targets"]) == {"step_ms_10", "step_ms_10000"}
    assert "per step, history of 10 messages" in proc.stdout


def test_a_missing_data_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--data", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "nope.json" in proc.stderr
