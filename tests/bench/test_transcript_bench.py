"""Keeps bench/transcript.py from rotting: a quick run ends with the JSON line that carries every figure.
Speed is never asserted here; only that each figure was measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_transcript_bench_reports_every_figure() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "transcript.py"), "--quick", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for label in ("small", "large"):
        for key in ("html_ms", "markdown_ms", "html_vs_markdown", "html_mb", "html_peak_mb"):
            value = figures[f"{key}_{label}"]
            assert isinstance(value, int | float) and value > 0, (key, label, value)
    assert figures["large_messages"] == 10 * figures["small_messages"]
    assert figures["peak_growth_large_over_small"] > 0
