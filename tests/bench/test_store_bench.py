"""Keeps bench/store.py from rotting: a --quick run must finish and end with the JSON line that carries every
figure the issue asks for. Speed is never asserted here; only that each figure was measured."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPT = BENCH / "store.py"

REQUIRED = (
    "append_us_normal",
    "append_us_full",
    "sqlitesession_append_us",
    "append_ratio_vs_sqlitesession",
    "raw_sqlite_us",
    "append_vs_raw",
    "fsync_us",
    "append_full_vs_fsync",
    "resume_ms_1k",
    "resume_ms_100k",
    "resume_ratio_100k_vs_1k",
    "resume_rss_mb_100k",
    "list_ms_100k",
    "list_dir_ms_100k",
    "fork_ms_10k",
    "json_rewrite_us",
    "json_rewrite_us_first_tenth",
    "json_rewrite_us_last_tenth",
)
TARGETED = (
    "append_ratio_vs_sqlitesession",
    "append_vs_raw",
    "append_full_vs_fsync",
    "resume_ms_100k",
    "resume_ratio_100k_vs_1k",
    "resume_rss_mb_100k",
    "list_ms_100k",
    "list_dir_ms_100k",
    "fork_ms_10k",
)


def run_bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    figures = last_json(run_bench("--quick", "--dir", str(tmp_path)))
    missing = [k for k in REQUIRED if not is_number(figures.get(k))]
    assert not missing, f"not measured: {missing}"
    assert figures["data_source"] in ("tau-airline-trajectories", "generated")
    assert len(figures["append_us_by_tenth_normal"]) == 10
    assert len(figures["json_rewrite_us_by_tenth"]) == 10
    assert figures["quick"] is True
    assert set(figures["targets"]) == set(TARGETED)
    assert all(isinstance(t["pass"], bool) for t in figures["targets"].values())
    assert set(figures["failed_targets"]) == {k for k, t in figures["targets"].items() if not t["pass"]}
    assert list(tmp_path.iterdir()) == [], "the run's scratch files were left behind"


def test_generated_messages_and_a_partial_run(tmp_path: Path) -> None:
    proc = run_bench("--quick", "--generated", "--only", "append", "--dir", str(tmp_path))
    figures = last_json(proc)
    assert figures["data_source"] == "generated"
    assert "generated" in proc.stdout.splitlines()[1]
    assert figures["sections"] == ["append"]
    assert is_number(figures["append_us_normal"]) and is_number(figures["append_us_full"])
    # Sections that did not run leave their figures null rather than absent or invented.
    assert figures["resume_ms_100k"] is None
    assert figures["append_vs_raw"] is None
    assert figures["append_ratio_vs_sqlitesession"] is None
    assert figures["targets"]["fork_ms_10k"]["pass"] is None


def test_a_named_data_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    proc = run_bench("--quick", "--data", str(missing), "--dir", str(tmp_path))
    assert proc.returncode == 2
    assert str(missing) in proc.stderr and "tau-bench" in proc.stderr
    assert proc.stdout == ""


def test_the_env_data_path_is_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_BENCH_DATA", str(tmp_path / "absent.json"))
    proc = run_bench("--quick", "--dir", str(tmp_path))
    assert proc.returncode == 2
    assert "TETHER_BENCH_DATA" in proc.stderr


def test_a_file_that_is_not_tau_bench_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"traj": []}))
    proc = run_bench("--quick", "--data", str(bad), "--dir", str(tmp_path))
    assert proc.returncode == 2
    assert "not a tau-bench trajectory file" in proc.stderr


def test_unknown_sections_are_refused(tmp_path: Path) -> None:
    proc = run_bench("--quick", "--only", "append,bogus", "--dir", str(tmp_path))
    assert proc.returncode == 2
    assert "--only" in proc.stderr


@pytest.fixture
def bench_import(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import a module of bench/ the way its scripts see each other (bench/ is not a package)."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module


def test_chat_messages_convert_to_tether_and_sdk_items(bench_import: Any) -> None:
    common = bench_import("_common")
    store_bench = bench_import("store")
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{not json"}}
    assistant = {"role": "assistant", "content": "Checking.", "tool_calls": [call]}
    tool = {"role": "tool", "tool_call_id": "call_1", "name": "lookup", "content": "found"}

    message = common.to_message(assistant)
    assert message.text == "Checking."
    (part,) = message.tool_calls
    assert (part.id, part.name, part.arguments, part.raw_arguments) == ("call_1", "lookup", None, "{not json")
    (result,) = common.to_message(tool).tool_results
    assert (result.call_id, result.content, result.name) == ("call_1", "found", "lookup")

    items = store_bench.to_sdk_items(assistant)
    assert [i["type"] for i in items] == ["message", "function_call"]
    assert items[1]["arguments"] == "{not json" and items[1]["call_id"] == "call_1"
    assert store_bench.to_sdk_items(tool) == [{"type": "function_call_output", "call_id": "call_1", "output": "found"}]

    with pytest.raises(common.BenchError):
        common.to_message({"role": "narrator", "content": "x"})


def test_a_long_conversation_keeps_one_system_prompt_and_cycles_the_rest(bench_import: Any) -> None:
    common = bench_import("_common")
    trajectories = common.generate_trajectories(count=3)
    conversation = common.long_conversation(trajectories, 500)
    assert len(conversation) == 500
    assert conversation[0]["role"] == "system"
    assert all(m["role"] != "system" for m in conversation[1:])
    body = [m for t in trajectories for m in t if m["role"] != "system"]
    assert conversation[1 : 1 + len(body)] == body  # whole trajectories, in order, so calls meet their results
