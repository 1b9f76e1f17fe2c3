"""What only the SQLite backend promises: WAL and the durability setting, corrupt rows that are skipped and
reported, writes that survive the cancellation of their caller, `StoreBusy` after the busy timeout, the
`open_store` URL forms, and files from a newer schema that are refused."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.errors import CorruptEntry, InvalidInput, SeqConflict, SessionBusy, StoreBusy, StoreCorrupt, StoreError
from tether.ids import new_session_id
from tether.messages import Entry, EntryBody, Marker, Message, Revert, TextPart, Usage
from tether.paths import tether_home
from tether.store import MemoryStore, SqliteStore, active_entries, active_tail, open_store
from tether.store import sqlite as sqlite_module
from tether.store.records import Durability
from tether.store.sqlite import SCHEMA_VERSION


def texts(entries: list[Entry]) -> list[str]:
    return [e.body.text if isinstance(e.body, Message) else f"<{e.kind}>" for e in entries]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tether.db"


@pytest.fixture
def raw(db: Path) -> Iterator[sqlite3.Connection]:
    """A second, plain connection to the same file: the other process, or the disk going bad."""
    SqliteStore(db)  # make the schema
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


@pytest.fixture
async def reports(db: Path) -> AsyncIterator[tuple[SqliteStore, list[CorruptEntry]]]:
    seen: list[CorruptEntry] = []
    store = SqliteStore(db, on_corrupt=seen.append)
    try:
        yield store, seen
    finally:
        await store.close()


# --- WAL and durability ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
async def test_wal_and_durability(db: Path, durability: Durability, synchronous: int) -> None:
    async with SqliteStore(db, durability=durability) as store:
        assert store.durability == durability
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        await store.create_session()
    other = sqlite3.connect(db)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # WAL is a property of the file
    finally:
        other.close()


async def test_bad_durability_is_refused(db: Path) -> None:
    with pytest.raises(InvalidInput, match="durability"):
        SqliteStore(db, durability="sometimes")  # type: ignore[arg-type]


async def test_everything_survives_a_reopen(db: Path) -> None:
    async with SqliteStore(db) as store:
        info = await store.create_session(directory="/w", metadata={"k": [1]})
        cost = Usage(input_tokens=3, output_tokens=4, cost=__import__("decimal").Decimal("0.0123"))
        await store.append(info.id, [Message.user("hello"), Message(role="assistant", parts=[], usage=cost)])
        aid = await store.put_artifact(b"blob")
        before = await store.get_session(info.id)
        entries = await store.read(info.id)
    async with SqliteStore(db, durability="full") as store:
        assert await store.get_session(info.id) == before
        assert await store.read(info.id) == entries
        assert await store.get_artifact(aid) == b"blob"
        assert [e.seq for e in await store.append(info.id, [Message.user("again")])] == [3]


async def test_two_handles_on_one_file_see_each_others_writes_and_conflict(db: Path) -> None:
    async with SqliteStore(db) as a, SqliteStore(db) as b:
        info = await a.create_session()
        await a.append(info.id, [Message.user("from a")], expect_seq=1)
        with pytest.raises(SeqConflict) as caught:
            await b.append(info.id, [Message.user("from b, stale")], expect_seq=1)
        assert (caught.value.expected, caught.value.actual) == (1, 2)
        assert texts(await b.read(info.id)) == ["from a"]
        await b.append(info.id, [Message.user("from b")], expect_seq=2)
        assert texts(await a.read(info.id)) == ["from a", "from b"]


# --- corrupt rows ---------------------------------------------------------------------------------------


async def _corrupted(store: SqliteStore, raw: sqlite3.Connection) -> str:
    info = await store.create_session(directory="/w")
    await store.append(info.id, [Message.user(f"m{i}") for i in range(1, 7)])
    bad = {
        2: '{"kind": "message", "role": "user", "parts": [{"kind": "te',  # torn write
        3: '{"kind": "message", "role": "wizard"}',  # valid JSON, not a message
        4: "not json at all",
        5: sqlite3.Binary(b'{"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "\xff\xfe"}]}'),
    }
    for seq, payload in bad.items():
        raw.execute("UPDATE entries SET payload = ? WHERE session_id = ? AND seq = ?", (payload, info.id, seq))
    return info.id


async def test_corrupt_rows_are_skipped_and_reported(
    reports: tuple[SqliteStore, list[CorruptEntry]], raw: sqlite3.Connection
) -> None:
    store, seen = reports
    sid = await _corrupted(store, raw)
    other = await store.create_session(directory="/w")

    # listing does not read entries at all, so it is untouched
    assert {s.id for s in (await store.list_sessions()).items} == {sid, other.id}
    assert (await store.get_session(sid)).entry_count == 6

    assert texts(await store.read(sid)) == ["m1", "m6"]
    assert [(r.session_id, r.seq) for r in seen] == [(sid, 2), (sid, 3), (sid, 4), (sid, 5)]
    assert all(isinstance(r, CorruptEntry) and r.reason for r in seen)

    seen.clear()
    assert texts(await store.tail(sid, 3)) == ["m6"]
    assert [r.seq for r in seen] == [4, 5]
    assert texts([e async for e in store.iter_entries(sid, batch=2)]) == ["m1", "m6"]
    assert texts(await active_tail(store, sid, 10)) == ["m1", "m6"]
    assert texts(await active_entries(store, sid)) == ["m1", "m6"]

    # the session goes on: the next append gets the next seq, the bad rows stay as evidence
    assert [e.seq for e in await store.append(sid, [Message.user("m7"), Revert(to_seq=1)])] == [7, 8]
    assert texts(await active_entries(store, sid)) == ["m1"]
    fork = await store.fork(sid, 6)
    assert fork.entry_count == 6
    seen.clear()
    assert texts(await store.read(fork.id)) == ["m1", "m6"]
    assert [r.seq for r in seen] == [2, 3, 4, 5]


async def test_corrupt_rows_are_logged_by_default(
    db: Path, raw: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    async with SqliteStore(db) as store:
        sid = await _corrupted(store, raw)
        with caplog.at_level(logging.WARNING, logger="tether.store"):
            assert texts(await store.read(sid)) == ["m1", "m6"]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 4
    assert f"session {sid}: entry 2 is corrupt" in caplog.records[0].getMessage()


async def test_corrupt_session_metadata_does_not_break_listing(
    reports: tuple[SqliteStore, list[CorruptEntry]], raw: sqlite3.Connection
) -> None:
    store, _ = reports
    info = await store.create_session(metadata={"k": "v"})
    ok = await store.create_session()
    raw.execute("UPDATE sessions SET metadata = '{broken' WHERE id = ?", (info.id,))
    listed = {s.id: s for s in (await store.list_sessions()).items}
    assert set(listed) == {info.id, ok.id}
    assert listed[info.id].metadata == {"_corrupt_metadata": "{broken"}
    await store.append(info.id, [Message.user("still usable")])
    assert (await store.get_session(info.id)).entry_count == 1


# --- the write lock: cancellation and busy timeout -----------------------------------------------------


async def _wait_for_entries(store: SqliteStore, sid: str, allowed: set[int], want: int) -> int:
    """Poll until the session has `want` entries, checking on every look that it never shows a partial
    write. A bound, not a timing assertion: the write is expected within milliseconds."""
    for _ in range(1000):
        count = (await store.get_session(sid)).entry_count
        assert count in allowed
        if count == want:
            return count
        await asyncio.sleep(0.01)
    raise AssertionError(f"the write never landed: {count} entries")


@pytest.mark.parametrize("size", [1, 3])
async def test_cancelled_append_still_lands_whole(
    reports: tuple[SqliteStore, list[CorruptEntry]], raw: sqlite3.Connection, size: int
) -> None:
    store, _ = reports
    info = await store.create_session()
    bodies = [Message.user(f"m{i}") for i in range(1, size + 1)]

    raw.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    task = asyncio.create_task(store.append(info.id, bodies))
    await asyncio.sleep(0.05)
    assert not task.done()  # waiting for the lock, without blocking the event loop
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await store.get_session(info.id)).entry_count == 0  # readers are not blocked by the writer
    raw.execute("COMMIT")

    await _wait_for_entries(store, info.id, {0, size}, size)
    assert texts(await store.read(info.id)) == [f"m{i}" for i in range(1, size + 1)]
    assert [e.seq for e in await store.append(info.id, [Message.user("next")])] == [size + 1]


async def test_append_cancelled_before_it_starts_writes_nothing(
    reports: tuple[SqliteStore, list[CorruptEntry]],
) -> None:
    store, _ = reports
    info = await store.create_session()
    task = asyncio.create_task(store.append(info.id, [Message.user("never")]))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)
    assert (await store.get_session(info.id)).entry_count == 0


async def test_write_waits_for_the_lock_and_then_succeeds(
    reports: tuple[SqliteStore, list[CorruptEntry]], raw: sqlite3.Connection
) -> None:
    store, _ = reports
    info = await store.create_session()
    raw.execute("BEGIN IMMEDIATE")
    raw.execute("UPDATE sessions SET title = 'set by the other writer' WHERE id = ?", (info.id,))
    asyncio.get_running_loop().call_later(0.2, raw.execute, "COMMIT")
    entries = await store.append(info.id, [Message.user("waited")])
    assert [e.seq for e in entries] == [1]
    got = await store.get_session(info.id)
    assert (got.title, got.entry_count) == ("set by the other writer", 1)


async def test_a_lock_let_go_at_once_is_waited_for_in_place(
    reports: tuple[SqliteStore, list[CorruptEntry]], raw: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's write holds the lock a moment: the append tries again in place (a few short sleeps,
    the loop held) and lands without the loop's waiting; a lock held for longer than `LOCK_IN_PLACE` is
    waited for with the loop's sleeps (the test above)."""
    from tether.store import sqlite as sqlite_module

    store, _ = reports
    info = await store.create_session()
    naps: list[float] = []

    def nap(seconds: float) -> None:  # the other writer commits while this one sleeps its first nap
        naps.append(seconds)
        if len(naps) == 1:
            raw.execute("COMMIT")

    async def no_loop_wait(fn: object) -> object:
        raise AssertionError("waited with the loop's sleeps")

    monkeypatch.setattr(sqlite_module.time, "sleep", nap)
    monkeypatch.setattr(store, "_write_retrying", no_loop_wait)
    raw.execute("BEGIN IMMEDIATE")
    entries = await store.append(info.id, [Message.user("in place")])
    assert [e.seq for e in entries] == [1] and naps == [sqlite_module.LOCK_STEP]


async def test_store_busy_after_the_busy_timeout(db: Path, raw: sqlite3.Connection) -> None:
    async with SqliteStore(db, busy_timeout=0.2) as store:
        info = await store.create_session()
        raw.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreBusy, match="locked"):
            await store.append(info.id, [Message.user("blocked")])
        with pytest.raises(StoreBusy):
            await store.create_session()
        with pytest.raises(StoreBusy):
            await store.update_session(info.id, title="blocked")
        # reads still work while another process writes
        assert (await store.get_session(info.id)).entry_count == 0
        assert len((await store.list_sessions()).items) == 1
        raw.execute("ROLLBACK")
        assert (await store.get_session(info.id)).entry_count == 0  # nothing of the refused writes
        assert [e.seq for e in await store.append(info.id, [Message.user("free")])] == [1]
        assert len((await store.list_sessions()).items) == 1


# --- opening --------------------------------------------------------------------------------------------


def _hold_the_write_lock_of_a_new_file(db: Path) -> sqlite3.Connection:
    """A connection that made `db` (not in WAL yet) and holds its write lock: as another process that opens
    the same new file a moment earlier does, while it makes the schema."""
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("CREATE TABLE theirs (x)")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO theirs VALUES (1)")
    return conn


async def test_an_open_waits_for_another_process_making_the_file(db: Path) -> None:
    """SQLite fails the switch to WAL at once, without its busy handler, while another connection writes a
    new file: the first `tether serve --workers 2` on a new store lost a worker to it."""
    other = _hold_the_write_lock_of_a_new_file(db)
    let_go = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    let_go.start()
    try:
        async with SqliteStore(db, busy_timeout=10) as store:
            assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert store.conn.execute("SELECT x FROM theirs").fetchall() == [(1,)]  # theirs, committed
            assert (await store.create_session()).entry_count == 0
    finally:
        let_go.join()
        other.close()


async def test_an_open_gives_up_after_the_busy_timeout(db: Path) -> None:
    other = _hold_the_write_lock_of_a_new_file(db)
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusy, match="locked"):
            SqliteStore(db, busy_timeout=1)
        assert time.monotonic() - started >= 1
    finally:
        other.close()


def _open_in_rounds(paths: list[str], barrier: Any, failures: Any) -> None:
    for path in paths:
        barrier.wait()
        try:
            SqliteStore(path).conn.execute("SELECT count(*) FROM sessions").fetchone()
        except Exception as e:  # every failure is counted, not only the busy one
            failures.put(f"{type(e).__name__}: {e}")


@pytest.mark.slow
def test_processes_opening_a_new_file_at_once_all_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Six processes open each of ten new files at the same moment (a barrier before each)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # the children import this module
    context = multiprocessing.get_context("spawn")
    paths = [str(tmp_path / f"new{i}.db") for i in range(10)]
    barrier, failures = context.Barrier(6, timeout=60), context.Queue()
    processes = [
        context.Process(target=_open_in_rounds, args=(paths, barrier, failures), daemon=True) for _ in range(6)
    ]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join(120)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
    assert [process.exitcode for process in processes] == [0] * 6
    said = []
    while not failures.empty():
        said.append(failures.get())
    assert said == []
    for path in paths:
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        finally:
            conn.close()


def _at_its_lock(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """The next store opened runs `meanwhile` (another process's work) as its open asks for the write lock:
    after it read the schema version, before it holds the lock."""
    real = sqlite3.connect
    traced: list[sqlite3.Connection] = []
    ran: list[bool] = []

    def trace(sql: str) -> None:
        if sql.startswith("BEGIN IMMEDIATE") and not ran:
            ran.append(True)
            meanwhile()

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, **kwargs)
        if not traced:  # the store's, not the connections `meanwhile` makes
            traced.append(conn)
            conn.set_trace_callback(trace)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)


async def test_a_schema_migrated_meanwhile_is_not_migrated_again(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read again under the lock: a second migration of a schema-4 file would drop the leases table the
    first had just made, and the leases in it."""
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE leases (session_id TEXT PRIMARY KEY)")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    migrations: list[int] = []
    real_migrate = sqlite_module._migrate
    monkeypatch.setattr(sqlite_module, "_migrate", lambda c, v: (migrations.append(v), real_migrate(c, v))[1])

    def another_process() -> None:
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        real_migrate(other, 4)
        other.execute("INSERT INTO sessions (id, created_at, updated_at) VALUES ('ses_theirs', 1, 1)")
        other.execute("COMMIT")
        other.close()

    _at_its_lock(monkeypatch, another_process)
    async with SqliteStore(db) as store:
        assert migrations == []  # it found the schema current under the lock
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.conn.execute("SELECT id FROM sessions").fetchall() == [("ses_theirs",)]


async def test_a_newer_schema_written_meanwhile_is_refused(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE leases (session_id TEXT PRIMARY KEY)")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()

    def a_newer_tether() -> None:
        other = sqlite3.connect(db, isolation_level=None)
        other.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        other.close()

    _at_its_lock(monkeypatch, a_newer_tether)
    with pytest.raises(StoreError, match=rf"newer tether \(schema {SCHEMA_VERSION + 1}"):
        SqliteStore(db)
    conn = sqlite3.connect(db)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"leases"}  # nothing of ours was made over it
    finally:
        conn.close()


# --- schema versions ------------------------------------------------------------------------------------


async def test_a_newer_schema_is_refused(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE future (x)")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match=r"newer tether \(schema 99"):
        SqliteStore(db)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 99
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"future"}  # untouched: no tables of ours were added
    finally:
        conn.close()


async def test_reopening_keeps_the_schema_version(db: Path) -> None:
    async with SqliteStore(db):
        pass
    version = sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0]
    async with SqliteStore(db):
        pass
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == version >= 1


async def test_a_file_that_is_not_a_database_is_refused(db: Path) -> None:
    text = b"this is not an SQLite file, it is a text file " * 100
    db.write_bytes(text)
    with pytest.raises(StoreCorrupt, match="is not a database"):
        SqliteStore(db)
    assert db.read_bytes() == text  # refused, not overwritten


# --- open_store -----------------------------------------------------------------------------------------


async def test_open_store_sqlite_url(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "t.db"
    async with open_store(f"sqlite:///{path}") as store:
        assert isinstance(store, SqliteStore)
        assert store.path == str(path)  # not "//tmp/...": one leading slash
        await store.create_session()
    assert path.exists()
    async with open_store(f"sqlite://{path}") as store:  # sqlite:///tmp/x.db
        assert isinstance(store, SqliteStore) and store.path == str(path)
        assert len((await store.list_sessions()).items) == 1


async def test_open_store_plain_path_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_store(str(tmp_path / "plain.db")) as store:
        assert isinstance(store, SqliteStore) and Path(store.path) == tmp_path / "plain.db"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    async with open_store("~/t.db") as store:
        assert isinstance(store, SqliteStore) and Path(store.path) == tmp_path / "home" / "t.db"


async def test_open_store_memory() -> None:
    async with open_store("memory://") as store:
        assert isinstance(store, MemoryStore)
        await store.create_session()


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("mysql://host/db", "unknown store URL scheme"),
        ("sqlite://host/path.db", "sqlite:///path"),
        ("sqlite:///", "no file path"),
        ("sqlite:", "no file path"),
    ],
)
async def test_open_store_bad_urls(url: str, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        open_store(url)


async def test_open_store_defaults_to_tether_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "th"
    monkeypatch.setenv("TETHER_HOME", str(home))
    assert tether_home() == home
    async with open_store() as store:
        assert isinstance(store, SqliteStore) and Path(store.path) == home / "tether.db"
        await store.create_session()
    assert (home / "tether.db").exists()


async def test_without_tether_home_the_user_data_directory_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert tether_home() == tmp_path / "xdg" / "tether"


async def test_tether_store_overrides_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STORE", f"sqlite:///{tmp_path / 'chosen.db'}")
    async with open_store() as store:
        assert isinstance(store, SqliteStore) and Path(store.path) == tmp_path / "chosen.db"
    monkeypatch.setenv("TETHER_STORE", "memory://")
    async with open_store() as store:
        assert isinstance(store, MemoryStore)
    async with open_store(f"sqlite:///{tmp_path / 'explicit.db'}") as store:  # a given URL wins
        assert isinstance(store, SqliteStore) and Path(store.path) == tmp_path / "explicit.db"


async def test_durability_from_argument_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_store(str(tmp_path / "a.db"), durability="full") as store:
        assert isinstance(store, SqliteStore) and store.durability == "full"
        assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    monkeypatch.setenv("TETHER_DURABILITY", "full")
    async with open_store(str(tmp_path / "b.db")) as store:
        assert isinstance(store, SqliteStore) and store.durability == "full"
    monkeypatch.setenv("TETHER_DURABILITY", "eventually")
    with pytest.raises(InvalidInput, match="durability"):
        open_store(str(tmp_path / "c.db"))


async def test_open_store_passes_options(tmp_path: Path) -> None:
    async with open_store(str(tmp_path / "a.db"), busy_timeout=0.5) as store:
        assert isinstance(store, SqliteStore) and store.busy_timeout == 0.5


# --- sizes ----------------------------------------------------------------------------------------------


async def test_many_parts_and_a_long_history_in_one_append(
    reports: tuple[SqliteStore, list[CorruptEntry]],
) -> None:
    store, _ = reports
    info = await store.create_session(id=new_session_id())
    wide = Message(role="assistant", parts=[TextPart(text=str(i)) for i in range(20_000)])
    bodies: list[EntryBody] = [wide, *[Marker(name="m", data={"i": i}) for i in range(5_000)]]
    entries = await store.append(info.id, bodies)
    assert entries[-1].seq == 5_001
    assert (await store.read(info.id, 1, 1))[0].body == wide
    assert [e.seq async for e in store.iter_entries(info.id)] == list(range(1, 5_002))


# --- leases across connections and schema 5 ----------------------------------------------------------------


async def test_a_lease_holds_across_stores_on_one_file(tmp_path: Path) -> None:
    path = tmp_path / "leases.db"
    first, second = SqliteStore(path), SqliteStore(path)
    try:
        sid = (await first.create_session()).id
        await first.acquire_lease(sid, "run_a", ttl=30, pid=4242, host="node-1")
        with pytest.raises(SessionBusy) as busy:
            await second.acquire_lease(sid, "run_b", ttl=30)
        assert (busy.value.holder, busy.value.pid, busy.value.host) == ("run_a", 4242, "node-1")
        seen = await second.get_lease(sid)
        assert seen is not None and seen.holder == "run_a"
        assert await first.release_lease(sid, "run_a")
        assert (await second.acquire_lease(sid, "run_b", ttl=30)).holder == "run_b"
    finally:
        await first.close()
        await second.close()


async def test_a_lease_row_is_written_once_and_then_updated(tmp_path: Path) -> None:
    """Release marks the row free (expires_at 0) and acquire takes it again: one row per session, each an
    update of one page (an insert and a delete also wrote the key's index), and a file whose lease rows
    were deleted on release (tether before this) works the same."""
    path = tmp_path / "leases.db"
    async with SqliteStore(path) as store, SqliteStore(path) as other:
        sid = (await store.create_session()).id
        for i in range(3):
            await store.acquire_lease(sid, f"run_{i}", ttl=30, pid=1, host="h")
            assert (await other.get_lease(sid)).holder == f"run_{i}"  # type: ignore[union-attr]
            assert await store.release_lease(sid, f"run_{i}")
            assert await other.get_lease(sid) is None
        rows = store.conn.execute("SELECT holder, expires_at FROM leases WHERE session_id = ?", (sid,)).fetchall()
        assert rows == [("run_2", 0)]
        store.conn.execute("DELETE FROM leases")  # as an older tether leaves it
        assert (await other.acquire_lease(sid, "run_x", ttl=30)).holder == "run_x"
        with pytest.raises(SessionBusy):
            await store.acquire_lease(sid, "run_y", ttl=30)
        await store.delete_session(sid)
        assert store.conn.execute("SELECT count(*) FROM leases").fetchone() == (0,)


async def test_a_schema_4_file_gets_the_new_leases_table(tmp_path: Path) -> None:
    """Schema 4's leases table (session_id, owner, expires_at) was never used: 5 makes it anew."""
    path = tmp_path / "v4.db"
    store = SqliteStore(path)
    sid = (await store.create_session()).id
    await store.append(sid, [Message.user("kept")])
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE leases")
    conn.execute("CREATE TABLE leases (session_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL)")
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    store = SqliteStore(path)
    try:
        assert [e.seq for e in await store.read(sid)] == [1]
        assert (await store.acquire_lease(sid, "run_a", ttl=30, pid=1, host="h")).holder == "run_a"
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(leases)")]
    assert columns == ["session_id", "holder", "pid", "host", "since", "expires_at", "request"]
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
