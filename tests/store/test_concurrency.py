"""Many processes, one SQLite file or one PostgreSQL database: four writers append to sessions of their own while two race each other
on one shared session, stating the seq they expect. Nothing may be lost or duplicated, no "database is
locked" may escape, and the races must surface as `SeqConflict`, never as interleaved or missing entries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.ids import new_session_id
from tether.messages import Entry, Message
from tether.store import Store, open_store

WORKERS = Path(__file__).with_name("workers.py")
OWN_WRITERS = 4
OWN_BATCHES = 250
SHARED_BATCHES = 200


def start(db: Path | str, sid: str, tag: str, count: int, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKERS), "concurrent", str(db), sid, tag, str(count), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def texts_of(entries: list[Entry]) -> list[str]:
    return [e.body.text if isinstance(e.body, Message) else f"<{e.kind}>" for e in entries]


@pytest.fixture(params=["sqlite", "postgres"])
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Not made yet (a SQLite file) or empty (a PostgreSQL database): the six processes also race to make the
    schema."""
    return tmp_path / "shared.db" if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))


@pytest.mark.slow
async def test_six_processes_on_one_store(shared_db: Path | str) -> None:
    db = shared_db
    own = {f"own{i}": new_session_id() for i in range(OWN_WRITERS)}
    shared_sid = new_session_id()
    procs = {tag: start(db, sid, tag, OWN_BATCHES, "own") for tag, sid in own.items()}
    procs |= {tag: start(db, shared_sid, tag, SHARED_BATCHES, "shared") for tag in ("shared0", "shared1")}

    for proc in procs.values():  # every store is open before anyone writes
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports: dict[str, dict[str, object]] = {}
    for tag, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert "locked" not in err and "busy" not in err.lower(), err
        assert proc.returncode == 0, err
        reports[tag] = json.loads(out.strip().splitlines()[-1])

    store: Store
    async with open_store(str(db)) as store:
        listed = (await store.list_sessions(limit=100)).items
        assert {s.id for s in listed} == {*own.values(), shared_sid}

        # the private sessions hold exactly what their writer acknowledged, in its order
        for tag, sid in own.items():
            entries = await store.read(sid)
            info = await store.get_session(sid)
            acked = reports[tag]["acked"]
            assert isinstance(acked, list) and len(acked) == OWN_BATCHES
            assert [e.seq for e in entries] == list(range(1, info.entry_count + 1))
            assert acked[-1][1] == info.entry_count == info.message_count
            assert [a[0] for a in acked] == [1] + [a[1] + 1 for a in acked[:-1]]
            assert reports[tag]["conflicts"] == 0
            for i, (first, last) in enumerate(acked):
                assert texts_of(entries[first - 1 : last]) == [f"{tag}:{i}:{j}" for j in range(last - first + 1)]

        # the shared session: every batch of both writers exactly once, whole, where its writer was told
        entries = await store.read(shared_sid)
        info = await store.get_session(shared_sid)
        assert [e.seq for e in entries] == list(range(1, info.entry_count + 1))
        assert info.message_count == info.entry_count
        texts = texts_of(entries)
        assert len(texts) == len(set(texts)), "an entry was written twice"
        claimed: set[int] = set()
        for tag in ("shared0", "shared1"):
            acked = reports[tag]["acked"]
            assert isinstance(acked, list) and len(acked) == SHARED_BATCHES
            for i, (first, last) in enumerate(acked):
                assert texts[first - 1 : last] == [f"{tag}:{i}:{j}" for j in range(last - first + 1)]
                span = set(range(first, last + 1))
                assert not span & claimed
                claimed |= span
        assert claimed == set(range(1, info.entry_count + 1)), "entries that no writer acknowledged"

    conflicts = {tag: reports[tag]["conflicts"] for tag in ("shared0", "shared1")}
    print(f"SeqConflict seen by the shared writers: {conflicts}")
