"""Keeps bench/postgres.py from rotting: a --quick run on the PostgreSQL cluster it starts itself must finish
and end with the JSON line that carries each figure the issue asks for (the sizes are smaller: the keys name
them). Speed is never asserted here; only that each figure was measured, and that bad options are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPT = BENCH / "postgres.py"


def run_bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_quick_run_measures_every_figure_and_ends_with_json() -> None:
    proc = run_bench("--quick", "--only", "append,writers,resume,list")
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in (
        "pg_append_us",
        "sqlalchemysession_append_us",
        "raw_psycopg_insert_us",
        "raw_asyncpg_insert_us",
        "pg_append_ratio_vs_sqlalchemysession",
        "pg_append_vs_raw",
        "raw_asyncpg_vs_psycopg",
        "pg_writers_1_msgs_per_s",
        "pg_writers_16_msgs_per_s",
        "pg_writers_scaling",
        "pg_resume_ms_1k",
        "pg_resume_ms_10k",
        "pg_list_ms_50k",
        "pg_list_dir_ms_50k",
    ):
        assert isinstance(figures.get(key), float) and figures[key] > 0, key
    assert figures["server"]["fsync"] == "on" and figures["server"]["synchronous_commit"] == "on"
    assert "load_before" in figures and "== append" in proc.stdout


def test_bad_options_are_refused_with_a_reason(tmp_path: Path) -> None:
    proc = run_bench("--only", "nothing", timeout=60)
    assert proc.returncode == 2 and "unknown section" in proc.stderr
    missing = run_bench("--quick", "--only", "recall", "--locomo", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "is not a file" in missing.stderr and "Traceback" not in missing.stderr
