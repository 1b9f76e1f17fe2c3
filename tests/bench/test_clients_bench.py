"""Keeps bench/clients.py from rotting: a short run over TLS through its latency relay ends with the JSON line
of every figure, and the connections it counts are what sharing means (one per prompt without; fewer with).
Times are never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_clients_bench_reports_every_figure() -> None:
    pytest.importorskip("openai", reason="needs the `openai` extra")
    proc = subprocess.run(
        [sys.executable, str(BENCH / "clients.py"), "--prompts", "3", "--rounds", "1", "--rtt-ms", "0,4"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for rtt in ("rtt0", "rtt4"):
        for mode in ("shared", "own"):
            assert figures[f"prompt_ms_p50_{mode}_{rtt}"] > 0
        assert figures[f"connections_per_prompt_own_{rtt}"] == 1.0
        assert 0 < figures[f"connections_per_prompt_shared_{rtt}"] <= 1 / 3 + 1e-3
        assert figures[f"prompt_own_over_shared_{rtt}"] > 0
