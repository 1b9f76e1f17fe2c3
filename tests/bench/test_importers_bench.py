"""Keeps bench/importers.py from rotting: a --quick run must finish and end with the JSON line that carries
every figure the issue asks for. Speed is never asserted here; only that each figure was measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "importers.py"
REQUIRED = (
    "import_mb_per_s_claude_code",
    "import_mb_per_s_codex",
    "import_mb_per_s_opencode_db",
    "import_mb_per_s_opencode_json",
    "reimport_ratio_opencode_db",
    "reimport_ratio_opencode_json",
    "import_rss_mb",
    "reimport_s",
    "reimport_ratio",
)


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in REQUIRED:
        assert isinstance(figures[key], float) and figures[key] > 0, key
    assert set(figures["targets"]) == {"import_rss_mb", "reimport_ratio"}
    assert "import speed" in proc.stdout
