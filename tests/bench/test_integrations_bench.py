"""Keeps bench/integrations.py from rotting: a --quick run finishes, all three sessions end with the same
history, and its last line is the JSON with every figure (speed is never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "integrations.py"
CONTENDERS = ("tether", "tether_full", "sqlitesession")


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--generated", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("sdk_turn_ratio", "sdk_turn_ratio_full", "sdk_turn_ratio_last"):
        assert isinstance(figures[key], float) and figures[key] > 0, key
    for c in CONTENDERS:
        for suffix in ("total_s", "turn_ms", "turn_ms_first", "turn_ms_last"):
            value = figures[f"{c}_{suffix}"]
            assert isinstance(value, int | float) and value > 0, (c, suffix, value)
        assert len(figures[f"{c}_turn_ms_by_tenth"]) == 10
    sizes = figures["sizes"]
    assert sizes["turns"] == 100 and sizes["items"] > sizes["add_items_calls"] > 100  # a call per step
    assert figures["quick"] is True and figures["data_source"] == "generated"
    assert set(figures["targets"]) == {"sdk_turn_ratio"}
    assert figures["cpus"] >= 1 and len(figures["loadavg_start"]) == 3
    assert "every session holds the same" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # the scratch files are gone


def test_a_bad_option_is_refused() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--turns", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--turns" in proc.stderr


def test_a_missing_data_file_is_an_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--data", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "nope.json" in proc.stderr
