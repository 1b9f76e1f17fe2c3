"""bench/recall.py still runs and reports every figure: on a small LoCoMo-format file written here (the real
one lives outside the repository) and at a small --scale. Figures are not judged here: speed is the bench's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "recall.py"


def run(*args: str, cwd: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=300, check=False, cwd=cwd
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def locomo_file(path: Path) -> Path:
    turns = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy called Rex last week!"},
        {"speaker": "Bo", "dia_id": "D1:2", "text": "Congrats! What breed is he?"},
        {
            "speaker": "Ann",
            "dia_id": "D1:3",
            "text": "A beagle, and he loves the beach.",
            "blip_caption": "a dog on sand",
        },
    ]
    later = [
        {"speaker": "Bo", "dia_id": "D2:1", "text": "I started violin lessons on Monday."},
        {"speaker": "Ann", "dia_id": "D2:2", "text": "That is brave. How is it going?"},
    ]
    data = [
        {
            "sample_id": "conv-test",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bo",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": turns,
                "session_2_date_time": "10:00 am on 13 October, 2023",
                "session_2": later,
            },
            "qa": [
                {"question": "What is the name of Ann's puppy?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
                {"question": "What breed is Ann's dog?", "answer": "beagle", "evidence": ["D1:3; D1:1"], "category": 1},
                {
                    "question": "When did Bo start violin?",
                    "answer": "October 2023",
                    "evidence": ["D2:1"],
                    "category": 2,
                },
                {"question": "Unanswerable?", "answer": "n/a", "evidence": [], "category": 5},
            ],
        }
    ]
    other = {
        "sample_id": "conv-other",
        "conversation": {
            "speaker_a": "Cy",
            "speaker_b": "Di",
            "session_1_date_time": "9:00 am on 2 March, 2023",
            "session_1": [
                {"speaker": "Cy", "dia_id": "D1:1", "text": "The build fails with ImportError in src/app.py"},
                {"speaker": "Di", "dia_id": "D1:2", "text": "Pin numpy below 2, then rerun the tests."},
            ],
        },
        "qa": [{"question": "What did Di say about numpy?", "answer": "pin it", "evidence": ["D1:2"], "category": 4}],
    }
    path.write_text(json.dumps([*data, other]))
    return path


def test_locomo_run_reports_every_figure(tmp_path: Path) -> None:
    result = run(str(locomo_file(tmp_path / "mini.json")), "--no-semantic", "--dir", str(tmp_path), cwd=tmp_path)
    for key in ("recall_at_5", "recall_at_10", "recall_at_25", "p50_ms", "p95_ms", "config", "configs"):
        assert key in result
    assert result["config"] == "lexical" and result["questions"] == 4  # the one without evidence is left out
    lexical = result["configs"]["lexical"]
    assert set(lexical) >= {"recall_at_5", "index_build_s", "p50_ms", "categories", "conversations", "loo"}
    assert set(lexical["conversations"]) == {"conv-test", "conv-other"}
    assert set(lexical["loo"]["chosen"]) == {"conv-test", "conv-other"}  # constants chosen without each one
    # every question has its evidence among the few turns of its conversation, tuned or not
    assert result["recall_at_5"] == 1.0 and result["loo_recall_at_5"] == 1.0


def test_scale_run_reports_every_figure(tmp_path: Path) -> None:
    result = run(
        "--scale", "2000", "--queries", "10", "--append-sample", "200", "--append-rounds", "1",
        "--dir", str(tmp_path), cwd=tmp_path,
    )  # fmt: skip
    for key in ("scale_p50_ms", "scale_p95_ms", "scale_p50_ms_all", "index_append_ratio", "index_append_ratio_median",
                "scale_found_at_10", "scale_index_s"):  # fmt: skip
        assert isinstance(result[key], float)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), str(tmp_path / "nope.json")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and "locomo" in proc.stderr.lower() and "Traceback" not in proc.stderr
