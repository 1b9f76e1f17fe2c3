"""The SQLite search index itself: after any mix of appends, forks, reverts, deletes, imports and kill -9,
the FTS rows are exactly the indexed entries of the live sessions and hold exactly their terms (the index
is contentless: every term and position is compared with an index made afresh from the journal, plus
FTS5's own integrity check); older files migrate and backfill in bounded batches."""

from __future__ import annotations

import asyncio
import importlib.util
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

from tether.errors import StoreCorrupt
from tether.messages import Message, Revert, TextPart
from tether.store import SqliteStore, searchindex
from tether.store.searchindex import FLUSH_EVERY, SEARCH_FLUSH, rowid
from tether.store.searchtext import document, indexed_text
from tether.store.sqlite import SCHEMA_VERSION, check_file


def postings(conn: sqlite3.Connection) -> set[tuple[str, int, int]]:
    """Every (term, rowid, position) an FTS5 table's index holds, read from the index itself."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_terms USING fts5vocab(main, search_fts, instance)")
    return set(conn.execute("SELECT term, doc, offset FROM temp.search_terms"))


async def check_consistent(path: Path) -> int:
    """Open the file, let a search index what is pending, and compare the index with the journal.
    Returns how many entries are indexed."""
    store = SqliteStore(path)
    try:
        await store.search("anything")
        assert await store.search_backlog() == 0
        conn = sqlite3.connect(path)
        nums = dict(conn.execute("SELECT session_id, num FROM search_sessions"))
        expected: set[int] = set()
        reverts: set[tuple[int, int, int]] = set()
        fresh = sqlite3.connect(":memory:")  # what the index should hold, made from the journal
        fresh.execute("CREATE VIRTUAL TABLE search_fts USING fts5(body, tokenize = 'porter unicode61')")
        sessions = [sid for (sid,) in conn.execute("SELECT id FROM sessions")]
        for sid in sessions:
            for entry in await store.read(sid):
                text = indexed_text(entry.body)
                if isinstance(entry.body, Message) and text is not None:
                    expected.add(rowid(nums[sid], entry.seq, entry.body.role))
                    fresh.execute(
                        "INSERT INTO search_fts (rowid, body) VALUES (?, ?)",
                        (rowid(nums[sid], entry.seq, entry.body.role), document(text)),
                    )
                elif isinstance(entry.body, Revert):
                    reverts.add((nums[sid], entry.seq, entry.body.to_seq))
        expected_postings = postings(fresh)
        fresh.close()
        actual = {rowid for (rowid,) in conn.execute("SELECT rowid FROM search_fts")}
        assert actual == expected
        assert postings(conn) == expected_postings
        assert set(conn.execute("SELECT num, seq, to_seq FROM search_reverts")) == reverts
        assert set(nums) <= set(sessions)  # no index rows of deleted sessions
        conn.execute("INSERT INTO search_fts (search_fts) VALUES ('integrity-check')")
        assert searchindex.check(conn) == []  # the store's own check (tether doctor's) agrees
        conn.close()
        return len(expected)
    finally:
        await store.close()


async def test_index_is_consistent_after_a_random_mix_of_operations(tmp_path: Path) -> None:
    rng = random.Random(5)
    path = tmp_path / "t.db"
    store = SqliteStore(path)
    live: list[str] = []
    for step in range(600):
        op = rng.random()
        if not live or op < 0.05:
            live.append((await store.create_session(directory=f"/d{rng.randint(0, 3)}")).id)
        sid = rng.choice(live)
        info = await store.get_session(sid)
        if op < 0.75:
            await store.append(
                sid,
                [
                    Message.user(f"step {step} word{rng.randint(0, 50)} {rng.choice(('de-stress', 're-run', 'x'))}")
                    for _ in range(rng.randint(1, 3))
                ],
            )
        elif op < 0.82 and info.entry_count > 1:
            await store.append(sid, [Revert(to_seq=rng.randint(0, info.entry_count - 1))])
        elif op < 0.9:
            live.append((await store.fork(sid, rng.randint(0, info.entry_count))).id)
        elif op < 0.95 and len(live) > 2:
            for gone in await store.delete_session(sid):
                live.remove(gone)
        else:
            entries = await store.read(sid)
            await store.delete_session(sid)
            await store.import_session(info, entries)
        if step % 97 == 0:
            await store.search(f"word{rng.randint(0, 50)}")  # searches flush in the middle of it all
    await store.close()
    assert await check_consistent(path) > 300


WRITER = textwrap.dedent(
    """
    import asyncio, random, sys
    from tether.messages import Message, Revert
    from tether.store import SqliteStore

    async def main(path, seed):
        rng = random.Random(seed)
        store = SqliteStore(path)
        live = [s.id for s in (await store.list_sessions(limit=1000)).items]
        while True:
            if not live or rng.random() < 0.05:
                live.append((await store.create_session(directory="/crash")).id)
            sid = rng.choice(live)
            info = await store.get_session(sid)
            op = rng.random()
            if op < 0.8:
                await store.append(sid, [Message.user(f"crash text {rng.random()}") for _ in range(rng.randint(1, 4))])
            elif op < 0.88 and info.entry_count > 1:
                await store.append(sid, [Revert(to_seq=rng.randint(0, info.entry_count - 1))])
            elif op < 0.94:
                live.append((await store.fork(sid)).id)
            elif len(live) > 3:
                for gone in await store.delete_session(sid):
                    live.remove(gone)
            if rng.random() < 0.02:
                await store.search("crash")
            sys.stdout.write("."); sys.stdout.flush()

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


async def test_index_is_consistent_after_kill_9_at_random_moments(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    rng = random.Random(11)
    for kill in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(kill)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None
        # wait for a number of operations (not a time: the machine may be slow), then kill mid-flight
        proc.stdout.read(rng.randint(150, 400))
        await asyncio.sleep(rng.random() / 50)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
        await check_consistent(path)
    assert await check_consistent(path) > 100


def write_v1_file(path: Path, sessions: int, entries: int) -> None:
    """A store as tether wrote it before the search index (schema 1), made with plain SQL."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, parent_id TEXT, forked_from TEXT, forked_at INTEGER,
            title TEXT, directory TEXT, agent TEXT, model TEXT, state TEXT NOT NULL DEFAULT 'active',
            system_prompt TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL,
            entry_count INTEGER NOT NULL DEFAULT 0, message_count INTEGER NOT NULL DEFAULT 0,
            input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
            cost_pico INTEGER NOT NULL DEFAULT 0, metadata TEXT NOT NULL DEFAULT '{}');
        CREATE TABLE entries (session_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
            created_at REAL NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
        CREATE TABLE artifacts (id TEXT PRIMARY KEY, media_type TEXT NOT NULL, size INTEGER NOT NULL,
            created_at REAL NOT NULL, data BLOB NOT NULL);
        CREATE TABLE leases (session_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL);
        PRAGMA journal_mode = WAL;
        PRAGMA user_version = 1;
        """
    )
    from tether.ids import new_session_id
    from tether.messages import encode_body

    now = time.time()
    for s in range(sessions):
        sid = new_session_id()
        conn.execute(
            "INSERT INTO sessions (id, directory, created_at, updated_at, entry_count, message_count)"
            " VALUES (?, '/old', ?, ?, ?, ?)",
            (sid, now, now, entries, entries),
        )
        conn.executemany(
            "INSERT INTO entries VALUES (?, ?, 'message', ?, ?)",
            [
                (sid, i, now, encode_body(Message(role="user", parts=[TextPart(text=f"old s{s} e{i} heron")])).decode())
                for i in range(1, entries + 1)
            ],
        )
    conn.commit()
    conn.close()


async def test_an_older_file_migrates_and_backfills_in_bounded_batches(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    per_session = SEARCH_FLUSH // 5  # more than one search indexes at once
    total = 7 * per_session
    write_v1_file(path, sessions=7, entries=per_session)
    store = SqliteStore(path)
    try:
        assert await store.search_backlog() == total
        # a search indexes a bounded amount first and says how much is left
        assert await store.search("heron", limit=5)
        assert 0 < await store.search_backlog() < total
        # appends go on meanwhile, and are indexed like any other
        sid = (await store.list_sessions(limit=1)).items[0].id
        await store.append(sid, [Message.user("new egret")])
        steps = [p async for p in store.backfill_search(batch=1000)]
        assert steps and all(p.entries_indexed <= 1000 * (i + 1) for i, p in enumerate(steps))
        assert steps[-1].backlog == 0 and steps[-1].sessions_left == 0
        assert await store.search_backlog() == 0
        assert [h.seq for h in await store.search("egret")] == [per_session + 1]
        assert len(await store.search("heron", limit=10_000)) == min(total, 10_000)
    finally:
        await store.close()
    assert await check_consistent(path) == total + 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


async def test_a_schema_2_file_migrates_without_losing_or_repeating_index_entries(tmp_path: Path) -> None:
    """Schema 2 listed every append in search_pending; 3 finds appends from the sessions' rows."""
    path = tmp_path / "v2.db"
    store = SqliteStore(path)
    a = await store.create_session(directory="/w")
    b = await store.create_session(directory="/w")
    await store.append(a.id, [Message.user("the heron flew"), Message.assistant("a grey heron")])
    await store.append(b.id, [Message.user("an egret waded")])
    assert len(await store.search("heron")) == 2  # indexed now
    await store.append(b.id, [Message.user("a second egret"), Message.user("and a bittern")])  # unindexed
    await store.close()
    # what a schema-2 file looks like: no `indexed`, no search_state, the unindexed append in search_pending
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("ALTER TABLE search_sessions DROP COLUMN indexed")
    conn.execute("DROP TABLE search_state")
    conn.execute("INSERT INTO search_pending (session_id, first_seq, last_seq) VALUES (?, 2, 3)", (b.id,))
    conn.execute("PRAGMA user_version = 2")
    conn.close()

    assert await check_consistent(path) == 5
    store = SqliteStore(path)
    try:
        assert sorted(h.seq for h in await store.search("egret")) == [1, 2]
        assert [h.session_id for h in await store.search("bittern")] == [b.id]
        await store.append(a.id, [Message.user("heron again")])
        assert len(await store.search("heron")) == 3
    finally:
        await store.close()
    assert await check_consistent(path) == 6


async def test_appends_are_indexed_in_batches_not_one_by_one(tmp_path: Path) -> None:
    # the append transaction records what to index; FTS5 receives it in batches (see searchindex.py)
    path = tmp_path / "b.db"
    store = SqliteStore(path)
    sid = (await store.create_session()).id
    for i in range(10):
        await store.append(sid, [Message.user(f"m{i}")])
    assert await store.search_backlog() == 10
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT count(*) FROM search_fts").fetchone()[0] == 0
    assert [h.seq for h in await store.search("m3")] == [4]  # the search indexed them first
    assert conn.execute("SELECT count(*) FROM search_fts").fetchone()[0] == 10
    for i in range(FLUSH_EVERY + 10):
        await store.append(sid, [Message.user(f"n{i}")])
    assert await store.search_backlog() < FLUSH_EVERY  # the appends flushed along the way
    conn.close()
    await store.close()


SCHEMA_3_INDEX = """
CREATE TABLE search_sessions (num INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL UNIQUE,
    indexed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE search_state (key TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE VIRTUAL TABLE search_fts USING fts5(body, role UNINDEXED, tokenize = 'porter unicode61', detail = full);
CREATE TABLE search_reverts (num INTEGER NOT NULL, seq INTEGER NOT NULL, to_seq INTEGER NOT NULL,
    PRIMARY KEY (num, seq)) WITHOUT ROWID;
CREATE TABLE search_pending (session_id TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
    PRIMARY KEY (session_id, first_seq)) WITHOUT ROWID;
"""


async def test_a_schema_3_file_is_reindexed_into_a_contentless_index(tmp_path: Path) -> None:
    """Schema 3's FTS table held each message's text again; 4 holds terms only and is made from the journal."""
    path = tmp_path / "v3.db"
    store = SqliteStore(path)
    a = await store.create_session(directory="/w")
    b = await store.create_session(directory="/w")
    await store.append(a.id, [Message.user("the heron flew"), Message.assistant("a grey heron")])
    await store.append(b.id, [Message.user("an egret waded"), Revert(to_seq=0), Message.user("a bittern")])
    await store.close()
    # what schema 3 left: its own index tables, filled as it filled them (rowid num << 32 | seq, the text)
    conn = sqlite3.connect(path, isolation_level=None)
    for table in ("search_fts", "search_sessions", "search_state", "search_reverts", "search_pending"):
        conn.execute(f"DROP TABLE {table}")
    conn.executescript(SCHEMA_3_INDEX)
    conn.execute("INSERT INTO search_sessions (num, session_id, indexed) VALUES (1, ?, 2), (2, ?, 3)", (a.id, b.id))
    conn.execute("INSERT INTO search_fts (rowid, body, role) VALUES (4294967297, 'the heron flew', 'user')")
    conn.execute("INSERT INTO search_fts (rowid, body, role) VALUES (4294967298, 'a grey heron', 'assistant')")
    conn.execute("INSERT INTO search_fts (rowid, body, role) VALUES (8589934593, 'an egret waded', 'user')")
    conn.execute("INSERT INTO search_reverts VALUES (2, 2, 0)")
    conn.execute("PRAGMA user_version = 3")
    conn.close()

    assert await check_consistent(path) == 4
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'search_fts_content'").fetchone() == (0,)
    conn.close()
    store = SqliteStore(path)
    try:
        hits = await store.search("heron")
        assert {(h.session_id, h.seq, h.role, h.excerpt) for h in hits} == {
            (a.id, 1, "user", "the heron flew"),
            (a.id, 2, "assistant", "a grey heron"),
        }
        assert [h.seq for h in await store.search("heron", role="assistant")] == [2]
        assert [h.seq for h in await store.search("bittern")] == [3]
        assert await store.search("egret") == []  # the revert at 2 hides it
        await store.delete_session(a.id)
    finally:
        await store.close()
    assert await check_consistent(path) == 2


async def test_a_session_remade_under_its_id_by_another_connection_is_indexed_as_it_is_now(tmp_path: Path) -> None:
    # another process may delete a session between this store's appends and its flush and make another under
    # the same id: the flush indexes what the journal holds then
    path = tmp_path / "two.db"
    mine = SqliteStore(path)
    other = SqliteStore(path)
    try:
        info = await mine.create_session(directory="/w")
        await mine.append(info.id, [Message.user("ocelot one"), Message.user("ocelot two")])
        await other.delete_session(info.id)
        await other.create_session(id=info.id, directory="/w")
        await other.append(info.id, [Message.user("margay one"), Message.user("margay two")])
        await mine.append(info.id, [Message.user("ocelot three")])  # seq 3 of the new session
        assert sorted(h.seq for h in await mine.search("margay")) == [1, 2]
        assert [h.seq for h in await mine.search("ocelot")] == [3]
    finally:
        await mine.close()
        await other.close()
    assert await check_consistent(path) == 3


async def test_a_flush_over_many_sessions_writes_one_segment(tmp_path: Path) -> None:
    # FTS5 starts a new segment whenever a rowid is not above the last: sessions are flushed in rowid order
    path = tmp_path / "seg.db"
    store = SqliteStore(path)
    try:
        sessions = [(await store.create_session(directory="/w")).id for _ in range(6)]
        for sid in reversed(sessions):  # numbered in this order, the reverse of their ids
            await store.append(sid, [Message.user("first")])
        await store.search("first")
        conn = sqlite3.connect(path)
        segments = conn.execute("SELECT count(DISTINCT segid) FROM search_fts_idx").fetchone()[0]
        for round_ in range(3):
            for sid in sessions:
                await store.append(sid, [Message.user(f"round {round_} of {sid}")])
        await store.search("round")
        assert conn.execute("SELECT count(DISTINCT segid) FROM search_fts_idx").fetchone()[0] == segments + 1
        conn.close()
    finally:
        await store.close()
    assert await check_consistent(path) == 24


async def test_a_large_backfill_ends_with_the_index_merged_into_one_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v1.db"
    write_v1_file(path, sessions=6, entries=200)
    monkeypatch.setattr(searchindex, "OPTIMIZE_AFTER", 1000)
    store = SqliteStore(path)
    conn = sqlite3.connect(path)
    try:
        during = [
            conn.execute("SELECT count(DISTINCT segid) FROM search_fts_idx").fetchone()[0]
            async for _ in store.backfill_search(batch=100)  # a segment a batch
        ]
        assert max(during) > 1
        assert conn.execute("SELECT count(DISTINCT segid) FROM search_fts_idx").fetchone()[0] == 1
        # a small backfill (fewer entries than OPTIMIZE_AFTER) leaves its segment as it is
        sid = (await store.list_sessions(limit=1)).items[0].id
        await store.append(sid, [Message.user("new egret")])
        async for _ in store.backfill_search(batch=100):
            pass
        assert conn.execute("SELECT count(DISTINCT segid) FROM search_fts_idx").fetchone()[0] == 2
        assert [h.seq for h in await store.search("egret")] == [201]
    finally:
        conn.close()
        await store.close()
    assert await check_consistent(path) == 1201


# --- a damaged index, rebuilt from the journal -----------------------------------------------------------------


def _faults() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tether_store_test_faults", Path(__file__).with_name("faults.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _faults()


@pytest.mark.parametrize("how", faults.INDEX_DAMAGE)
async def test_a_damaged_index_is_rebuilt_from_the_journal_which_is_left_as_it_was(tmp_path: Path, how: str) -> None:
    db = tmp_path / "tether.db"
    faults.build_database(db)
    async with SqliteStore(db) as store:
        expected = sorted((h.session_id, h.seq) for h in await store.search("lighthouses", limit=500))
    assert len(expected) == 12 * 37  # every question but the reverted ones
    journal = faults.journal_rows(db)
    faults.damage_search_index(db, how)
    damaged = {f.check: f for f in check_file(db) if f.status != "ok"}
    assert damaged, f"{how}: the check found nothing"
    for finding in damaged.values():  # the journal is intact: the fix is the rebuild, not a backup
        assert finding.fix is not None and "tether doctor --repair" in finding.fix, finding
        assert "restore" not in finding.fix, finding
    async with SqliteStore(db) as store:
        waiting = await store.reset_search()
        assert waiting >= 12 * 40
        async for _ in store.backfill_search(batch=100):
            pass
        assert sorted((h.session_id, h.seq) for h in await store.search("lighthouses", limit=500)) == expected
    assert [f for f in check_file(db) if f.status != "ok"] == []
    assert faults.journal_rows(db) == journal  # the truth was read, never written
    async with SqliteStore(db) as store:  # and the index goes on as before
        sid = expected[0][0]
        await store.append(sid, [Message.user("a lighthouse keeper's log, after the repair")])
        assert (await store.search("keeper's log"))[0].session_id == sid


async def test_a_damaged_journal_is_never_rebuilt_over(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    faults.build_database(db)
    faults.damage_pages(db, table="entries", count=2)
    faults.damage_search_index(db, "pages")
    before = faults.fingerprint(db)
    async with SqliteStore(db) as store:
        with pytest.raises(StoreCorrupt, match="damaged beyond its search index") as caught:
            await store.reset_search()
    assert "restore it from a backup" in str(caught.value)
    assert faults.fingerprint(db)[0] == before[0]  # not a byte changed
