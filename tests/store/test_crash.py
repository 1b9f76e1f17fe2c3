"""The crash test: a child process appends in a loop and reports every acknowledged seq through a pipe; it is
killed with SIGKILL at random moments, again and again on the same file. After each kill the store must
open, list every session, hold every acknowledged entry byte for byte, and hold no half-written session."""

from __future__ import annotations

import importlib.util
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest

from tether.errors import CorruptEntry
from tether.messages import Message
from tether.store import Store, open_store
from tether.store.bookkeeping import title_candidate
from tether.store.records import SessionInfo

WORKERS = Path(__file__).with_name("workers.py")
KILLS = 24


def _load_workers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tether_store_test_workers", WORKERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


workers = _load_workers()


@dataclass
class Acks:
    """What the killed writers acknowledged, read from their pipes."""

    sessions: set[str] = field(default_factory=set)
    last_seq: dict[str, int] = field(default_factory=dict)
    appends: int = 0

    def take(self, line: str) -> None:
        kind, *rest = line.split()
        if kind == "S":
            self.sessions.add(rest[0])
        elif kind == "A":
            sid, first, last = rest[0], int(rest[1]), int(rest[2])
            # > rather than ==: a commit that was killed before its ack line is there, just unacknowledged
            assert first > self.last_seq.get(sid, 0), f"a seq was handed out twice: {line}"
            self.last_seq[sid] = last
            self.appends += 1


class Writer:
    """One crash writer and a thread that reads its pipe until the pipe closes."""

    def __init__(self, db: Path | str, durability: str, seed: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKERS), "crash", str(db), durability, str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[str] = []
        self.appended = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill was never acknowledged
                line = raw.decode().strip()
                self.lines.append(line)
                if line.startswith("A "):
                    self.appended.set()

    def kill(self) -> list[str]:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._thread.join()
        assert self.proc.stderr is not None
        stderr = self.proc.stderr.read().decode()
        self.proc.stderr.close()
        self.proc.stdout.close()  # type: ignore[union-attr]
        assert self.proc.returncode == -signal.SIGKILL, f"the writer died on its own:\n{stderr}"
        return self.lines


async def verify(db: Path | str, acks: Acks) -> int:
    """Open the store as a fresh process would after the crash and check everything in it."""
    corrupt: list[CorruptEntry] = []
    store: Store
    async with open_store(str(db), on_corrupt=corrupt.append) as store:
        listed: list[SessionInfo] = []
        cursor = None
        while True:
            page = await store.list_sessions(limit=100, cursor=cursor)
            listed.extend(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        ids = [s.id for s in listed]
        assert len(ids) == len(set(ids))
        assert acks.sessions <= set(ids), "an acknowledged session is missing"
        total = 0
        for info in listed:
            entries = [e async for e in store.iter_entries(info.id, batch=200)]
            seqs = [e.seq for e in entries]
            assert seqs == list(range(1, info.entry_count + 1)), f"{info.id}: seqs not dense"
            assert info.entry_count >= acks.last_seq.get(info.id, 0), f"{info.id}: acknowledged entries lost"
            for entry in entries:
                tag = entry.body.parts[0].text if isinstance(entry.body, Message) else entry.body.data["tag"]  # type: ignore[union-attr]
                sid, seq, batch = tag.split()[0].split(":")
                first, last = (int(x) for x in batch.split("-"))
                assert (sid, int(seq)) == (info.id, entry.seq)
                assert last <= info.entry_count, f"{info.id}: batch {batch} was half written"
                assert entry.body == workers.crash_body(info.id, entry.seq, first, last)
            # the counters were updated in the same transactions as the entries
            messages = [e.body for e in entries if isinstance(e.body, Message)]
            assert info.message_count == len(messages)
            assert info.input_tokens == sum(m.usage.input_tokens for m in messages if m.usage)
            assert info.output_tokens == sum(m.usage.output_tokens for m in messages if m.usage)
            assert info.cost == sum((m.usage.cost for m in messages if m.usage and m.usage.cost), Decimal(0))
            assert info.title == title_candidate([e.body for e in entries])
            total += len(entries)
        assert corrupt == []
    if not isinstance(db, Path):
        return total  # PostgreSQL checks its own pages; nothing of the killed client can damage them
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    return total


@pytest.fixture(params=["sqlite", "postgres"])
def crash_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where the writers write: a SQLite file, or an empty PostgreSQL database (its schema not made yet)."""
    return tmp_path / "crash.db" if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))


@pytest.mark.slow
async def test_sigkill_at_random_moments_loses_nothing_acknowledged(crash_db: Path | str) -> None:
    db = crash_db
    rng = random.Random(20240607)
    acks = Acks()
    mid_write_kills = 0
    for i in range(KILLS):
        writer = Writer(db, "full" if i % 2 else "normal", seed=i)
        if i % 6 == 5:
            time.sleep(rng.uniform(0, 0.4))  # any moment at all: while importing, opening, creating the schema
        else:
            assert writer.appended.wait(30), "the writer never acknowledged an append"
            time.sleep(rng.uniform(0, 0.12))
        lines = writer.kill()
        mid_write_kills += any(line.startswith("A ") for line in lines)
        for line in lines:
            if line != "ready":
                acks.take(line)
        await verify(db, acks)
    assert mid_write_kills >= 20
    assert acks.appends > KILLS  # it wrote in earnest between kills
    print(
        f"{KILLS} kills ({mid_write_kills} mid-write), {acks.appends} acknowledged appends, "
        f"{len(acks.sessions)} sessions"
    )
