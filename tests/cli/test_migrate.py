"""`tether migrate` as a user runs it, in real processes: killed with SIGKILL mid-copy and run again until it
finishes, the copy then equal to the source entry for entry; its progress on stderr, its summary, and its
refusals of bad input."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether.ids import new_id
from tether.messages import Entry, Message, TextPart
from tether.store import SqliteStore, Store, open_store
from tether.store.records import SessionInfo


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env or os.environ.copy(),
    )


_SLOW_MIGRATE = """
import asyncio, sys
from tether.store import transfer
copy = transfer._copy_session
async def paced(*args, **kwargs):
    await asyncio.sleep(0.004)
    return await copy(*args, **kwargs)
transfer._copy_session = paced
from tether.cli import main
sys.argv[0] = "tether"
main()
"""
"""`tether migrate` in a process of its own, each session's copy 4 ms slower: on a fast disk (or a tmpfs) the
whole copy can take less than one progress line's interval, and the kill must land midway on any machine.
The stores, the copy and the SIGKILL are real."""


async def _fill(path: Path, sessions: int) -> None:
    store = SqliteStore(path)
    base = 1_650_000_000.0
    try:
        for k in range(sessions):
            info = SessionInfo(
                id=new_id("ses"), created_at=base + k, updated_at=base + k + 1, title=f"t{k}", directory=f"/d/{k % 5}"
            )
            bodies = [
                Message(role="user" if i % 2 == 0 else "assistant", parts=[TextPart(text=f"turn {i} of {k} walrus")])
                for i in range(8)
            ]
            await store.import_session(info, [Entry(i + 1, base + k + i / 1000, b) for i, b in enumerate(bodies)])
        await store.put_artifact(b"a large tool output", "text/plain")
    finally:
        await store.close()


async def _dump(where: Path | str) -> dict[str, tuple[SessionInfo, list[Entry]]]:
    store: Store = open_store(str(where))
    out: dict[str, tuple[SessionInfo, list[Entry]]] = {}
    try:
        cursor = None
        while True:
            page = await store.list_sessions(limit=500, cursor=cursor)
            for info in page.items:
                out[info.id] = (info, [e async for e in store.iter_entries(info.id)])
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor
    finally:
        await store.close()


async def _append(path: Path, sid: str, text: str) -> None:
    store = SqliteStore(path)
    try:
        await store.append(sid, [Message(role="user", parts=[TextPart(text=text)])])
    finally:
        await store.close()


def _count(where: Path | str) -> int:
    return len(asyncio.run(_dump(where))) if not isinstance(where, Path) or where.exists() else 0


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_migration_killed_midway_twice_is_finished_by_a_rerun_and_equal(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """SQLite -> SQLite or PostgreSQL, SIGKILLed twice, finished by a third run; PostgreSQL's copy then goes
    back to a new SQLite file, which equals the source entry for entry."""
    source = tmp_path / "source.db"
    target: Path | str = tmp_path / "target.db" if kind == "sqlite" else request.getfixturevalue("postgres_url")
    target_url = f"sqlite:///{target}" if kind == "sqlite" else str(target)
    total = 900
    asyncio.run(_fill(source, total))
    env = {**os.environ, "TETHER_DURABILITY": "full"}  # an fsync per session, as a careful copy would
    counts = []
    for kill_after in (60, 300):
        proc = subprocess.Popen(
            [sys.executable, "-c", _SLOW_MIGRATE, "migrate", "--from", str(source), "--to", target_url],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            m = re.search(r"sessions: ([\d,]+)/", line)
            if m and int(m.group(1).replace(",", "")) >= kill_after:
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL, "".join(lines)  # it was still copying when killed
        counts.append(_count(target))
    assert 0 < counts[0] <= counts[1] < total, counts  # a partial copy, never a lost one
    done = tether("migrate", "--from", str(source), "--to", target_url, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sessions"] == total and report["verified"] == total
    assert report["skipped"] == counts[1] and report["copied"] == total - counts[1]
    assert report["artifacts"] == 0  # the killed runs had copied it first
    assert "verifying" in done.stderr and "done" in done.stderr
    assert asyncio.run(_dump(target)) == asyncio.run(_dump(source))
    again = tether("migrate", "--from", str(source), "--to", target_url)
    assert again.returncode == 0 and f"0 copied (0 entries), {total:,} already there" in again.stdout, again.stdout
    if kind == "postgres":
        back = tmp_path / "back.db"
        home = tether("migrate", "--from", target_url, "--to", f"sqlite:///{back}", "--json")
        assert home.returncode == 0 and json.loads(home.stdout)["verified"] == total, home.stderr
        assert asyncio.run(_dump(back)) == asyncio.run(_dump(source))


def test_progress_goes_to_stderr_and_the_summary_to_stdout(tmp_path: Path) -> None:
    source = tmp_path / "s.db"
    asyncio.run(_fill(source, 3))
    started = time.monotonic()
    out = tether("--store", f"sqlite:///{source}", "migrate", "--to", f"sqlite:///{tmp_path / 't.db'}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("migrated 3 session(s)") and "3 verified equal" in out.stdout
    assert "sessions: " in out.stderr and "migrate" in out.stderr and "migrated" not in out.stderr
    # each phase says where it ended, not only where it began ("0/3", then nothing until "done")
    assert "sessions: 3/3 (3 copied" in out.stderr and "verifying: 3/3 sessions" in out.stderr, out.stderr
    quiet = tether("migrate", "-q", "--from", str(source), "--to", f"sqlite:///{tmp_path / 'u.db'}")
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert time.monotonic() - started < 300


def test_bad_input_is_one_clear_line(tmp_path: Path) -> None:
    source = tmp_path / "s.db"
    asyncio.run(_fill(source, 1))
    same = tether("migrate", "--from", str(source), "--to", str(source))
    assert same.returncode != 0 and "same" in same.stderr and "Traceback" not in same.stderr
    same_file = tether("migrate", "--from", str(source), "--to", f"sqlite:///{source}")
    assert same_file.returncode != 0 and "same database file" in same_file.stderr
    scheme = tether("migrate", "--from", str(source), "--to", "mysql://x/y")
    assert scheme.returncode != 0 and "unknown store URL scheme" in scheme.stderr and "Traceback" not in scheme.stderr
    target = tmp_path / "t.db"
    assert tether("migrate", "--from", str(source), "--to", str(target)).returncode == 0
    sid = next(iter(asyncio.run(_dump(target))))
    asyncio.run(_append(target, sid, "written in the target after the copy"))
    conflict = tether("migrate", "--from", str(source), "--to", str(target))
    assert conflict.returncode == 1 and sid in conflict.stderr and "--overwrite" in conflict.stderr
    errors = [line for line in conflict.stderr.splitlines() if not line.startswith("migrate ")]
    assert len(errors) == 1 and errors[0].startswith("error:"), conflict.stderr
    down = tether("migrate", "--from", str(source), "--to", "postgresql://nobody:hunter2@127.0.0.1:1/x")
    assert down.returncode == 1 and "PostgreSQL" in down.stderr and "hunter2" not in down.stderr
    assert "Traceback" not in down.stderr
    missing = tether("migrate", "--from", str(source))
    assert missing.returncode == 2 and "--to" in missing.stderr
    helped = tether("migrate", "--help")
    assert "Safe to stop and run again" in helped.stdout and "--overwrite" in helped.stdout
