"""Keeps bench/audit.py from rotting: a quick run against the tests' S3 service ends with the JSON line that
carries every figure the issue asks for (their values are never asserted here, only that they were measured)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench" / "audit.py"


def test_audit_bench_reports_every_figure(tmp_path: Path, s3: Any) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--dir", str(tmp_path), "--endpoint", str(s3.config.endpoint_url)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("audit_overhead_ratio", "archive_mb_per_s", "restore_mb_per_s", "sink_lag_p99_ms", "sink_lag_p50_ms"):
        assert isinstance(figures[key], int | float) and figures[key] > 0, key
