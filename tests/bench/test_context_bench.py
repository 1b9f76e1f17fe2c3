"""Keeps bench/context.py and bench/compaction.py from rotting: quick runs finish and end with the JSON line
that carries every figure the issue asks for. Speed and recall are never asserted here; only that each
figure was measured and is in range."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def test_context_bench_reports_every_figure(tmp_path: Path) -> None:
    figures = last_json(run("context.py", "--quick", "--generated", "--runs", "3", "--dir", str(tmp_path)))
    for key in (
        "derive_ms_1k",
        "derive_ms_100k",
        "tokens_mb_per_s",
        "derive_cpu_ms_100k",
        "derive_ms_100k_cold",
        "load_derive_ms_100k",
        "step_derive_ms_100k",
        "heuristic_mb_per_s",
    ):
        assert is_number(figures.get(key)), key
    assert figures["data_source"] == "generated"
    assert figures["compactions_100k"] > 0  # the large session has compactions in it
    assert set(figures["targets"]) == {"derive_ms_100k", "tokens_mb_per_s"}
    assert list(tmp_path.iterdir()) == []


def test_context_bench_refuses_a_missing_data_file(tmp_path: Path) -> None:
    proc = run("context.py", "--quick", "--data", str(tmp_path / "nope.json"))
    assert proc.returncode == 2 and "nope.json" in proc.stderr


def test_compaction_bench_deterministic_baseline() -> None:
    figures = last_json(run("compaction.py"))
    assert figures["facts"] == 12
    assert 0 <= figures["kept_deterministic"] <= 1
    assert figures["tokens_after_deterministic"] > 0
    assert isinstance(figures["missing_deterministic"], list)


def test_compaction_bench_refuses_model_strategies_without_a_model() -> None:
    proc = run("compaction.py", "--strategies", "model")
    assert proc.returncode == 2 and "need --model" in proc.stderr
