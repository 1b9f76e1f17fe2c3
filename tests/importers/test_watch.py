"""The watcher behind `tether import --watch`: a round imports only what changed since the round before
(a file by its size and time, an opencode store every round), reports a problem once, and a file whose
import failed is tried again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tether.importers.watch import Watcher
from tether.store import Store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROLLOUT = "rollout-2025-09-20T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl"


def line(text: str) -> str:
    payload = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return json.dumps({"timestamp": "2025-09-20T11:00:00.000Z", "type": "response_item", "payload": payload}) + "\n"


async def test_a_round_imports_only_what_changed(store: Store, tmp_path: Path) -> None:
    rollout = tmp_path / ROLLOUT
    shutil.copy(FIXTURES / "codex" / ROLLOUT, rollout)
    db = tmp_path / "opencode.db"
    shutil.copy(FIXTURES / "opencode" / "opencode-1.18.33.db", db)
    watcher = Watcher(lambda: [(rollout, None), (db, "opencode")])
    first = await watcher.round(store)
    assert [r.outcome for r in first] == ["imported"] * 8 and watcher.listed == 2
    second = await watcher.round(store)
    assert [r.outcome for r in second] == ["unchanged"] * 7  # the store is asked; the rollout is not read
    with rollout.open("a") as f:
        f.write(line("one more"))
    third = await watcher.round(store)
    grown = [r for r in third if r.format == "codex"]
    assert [(r.outcome, r.entries) for r in grown] == [("grown", 1)]


async def test_a_problem_is_reported_once_and_a_failed_file_tried_again(store: Store, tmp_path: Path) -> None:
    rollout = tmp_path / ROLLOUT
    shutil.copy(FIXTURES / "codex" / ROLLOUT, rollout)
    with rollout.open("a") as f:
        f.write("{not json}\n")
    watcher = Watcher(lambda: [(rollout, None)])
    (first,) = await watcher.round(store)
    assert len(first.problems) == 1 and first.problems[0].line is not None
    with rollout.open("a") as f:
        f.write(line("after the bad line"))
    (second,) = await watcher.round(store)
    assert second.outcome == "grown" and second.entries == 1 and second.problems == []
    gone = tmp_path / "gone.jsonl"
    watcher = Watcher(lambda: [(gone, "codex")])
    (failed,) = await watcher.round(store)
    assert failed.outcome == "failed"
    shutil.copy(FIXTURES / "codex" / ROLLOUT, gone)
    (imported,) = await watcher.round(store)
    assert imported.outcome == "imported"


async def test_stop_ends_a_round_between_two_files(store: Store, tmp_path: Path) -> None:
    paths = []
    for name in ("a", "b"):
        path = tmp_path / name / ROLLOUT
        path.parent.mkdir()
        shutil.copy(FIXTURES / "codex" / ROLLOUT, path)
        paths.append((path, "codex"))
    watcher = Watcher(lambda: paths)
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 1

    results = await watcher.round(store, stop)
    assert len(results) == 1
