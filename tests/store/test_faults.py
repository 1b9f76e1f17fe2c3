"""Store faults (`tether.store.faults`) on real files: each ends in the `StoreError` subtype that says what it
is, in one line that names the path and what to do, never a raw `sqlite3` error; and a damaged file is never
written to. Last, `store_fault` on errors that real files do not give on demand."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tether.errors import StoreBusy, StoreCorrupt, StoreError, StoreFull, StorePermission, StoreUnavailable
from tether.messages import Message
from tether.store import SqliteStore
from tether.store import faults as store_faults
from tether.store.sqlite import SCHEMA_VERSION


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"tether_store_test_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _load("faults")


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    return text


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "home" / "tether.db"
    faults.build_database(path)
    return path


def test_a_truncated_database_is_refused_as_damaged_and_left_as_it_was(db: Path) -> None:
    faults.truncate(db)
    before = faults.fingerprint(db)
    with pytest.raises(StoreCorrupt) as caught:
        SqliteStore(db)
    message = one_line(caught.value)
    assert str(db) in message and "is damaged" in message and "tether backup" in message
    assert caught.value.path == str(db)
    assert faults.fingerprint(db) == before


def test_garbage_bytes_are_refused_as_not_a_database(db: Path) -> None:
    faults.garbage(db)
    before = faults.fingerprint(db)
    with pytest.raises(StoreCorrupt, match="is not a database") as caught:
        SqliteStore(db)
    assert str(db) in one_line(caught.value) and "`tether doctor`" in str(caught.value)
    assert faults.fingerprint(db) == before


async def test_damaged_pages_fail_the_reads_that_touch_them_as_store_corrupt(db: Path) -> None:
    faults.damage_pages(db)
    async with SqliteStore(db) as store:  # the header and the schema are sound: it opens
        page = await store.list_sessions(limit=100)
        assert len(page.items) == 12
        failures = 0
        for info in page.items:
            try:
                await store.read(info.id)
            except StoreCorrupt as e:
                failures += 1
                assert str(db) in one_line(e) and "restore it from a backup" in str(e)
        assert failures  # the damaged pages hold some session's entries
        with pytest.raises(StoreCorrupt):
            for info in page.items:
                async for _ in store.iter_entries(info.id):
                    pass


async def test_a_damaged_file_of_an_older_schema_is_not_migrated(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 4")  # the leases table of schema 4 is made anew by the migration
    conn.close()
    faults.damage_pages(db)
    before = faults.fingerprint(db)
    with pytest.raises(StoreCorrupt, match="so it was not migrated") as caught:
        SqliteStore(db)
    assert str(db) in one_line(caught.value)
    assert faults.fingerprint(db) == before
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
    conn.close()


async def test_a_sound_file_of_an_older_schema_is_still_migrated(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    async with SqliteStore(db) as store:
        assert len((await store.list_sessions()).items) == 12
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_a_home_that_is_a_file_is_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a directory")
    with pytest.raises(StoreUnavailable) as caught:
        SqliteStore(home / "tether.db")
    message = one_line(caught.value)
    assert f"{home} is a file, not a directory" in message and "TETHER_HOME" in message
    assert home.read_text() == "not a directory"


def test_a_file_higher_up_the_path_is_named(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    with pytest.raises(StoreUnavailable, match=f"{tmp_path / 'a'} is a file, not a directory"):
        SqliteStore(tmp_path / "a" / "b" / "tether.db")


def test_a_database_path_that_is_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "tether.db").mkdir()
    with pytest.raises(StoreUnavailable, match="it is a directory, not a database file"):
        SqliteStore(tmp_path / "tether.db")


def test_a_read_only_home_without_a_database(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with faults.read_only(home), pytest.raises(StorePermission) as caught:
        SqliteStore(home / "tether.db")
    message = one_line(caught.value)
    assert f"{home} cannot be written" in message and f"check the permissions of {home}" in message
    assert not (home / "tether.db").exists()


def test_a_read_only_home_with_a_database(db: Path) -> None:
    before = faults.fingerprint(db)
    with faults.read_only(db.parent), pytest.raises(StorePermission, match=f"check the permissions of {db.parent}"):
        SqliteStore(db)
    assert faults.fingerprint(db) == before


async def test_a_read_only_database_file_fails_the_write_and_keeps_the_reads(db: Path) -> None:
    with faults.read_only(db):  # the file itself; its directory stays writable
        async with SqliteStore(db) as store:
            sessions = (await store.list_sessions()).items
            assert len(await store.read(sessions[0].id)) > 0
            with pytest.raises(StorePermission) as caught:
                await store.append(sessions[0].id, [Message.user("one more")])
            assert str(db) in one_line(caught.value) and "permissions" in str(caught.value)
            assert (await store.get_session(sessions[0].id)).entry_count == sessions[0].entry_count


async def test_a_full_database_fails_the_write_and_loses_nothing(tmp_path: Path) -> None:
    """SQLITE_FULL simulated with `PRAGMA max_page_count` (the real full disk is the next test's)."""
    async with SqliteStore(tmp_path / "tether.db") as store:
        info = await store.create_session(directory=str(tmp_path))
        await store.append(info.id, [Message.user("kept")])
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        with pytest.raises(StoreFull) as caught:
            await store.append(info.id, [Message.user("x" * 100_000)])
        message = one_line(caught.value)
        assert str(tmp_path / "tether.db") in message and "free disk space" in message
        assert [e.body for e in await store.read(info.id)] == [Message.user("kept")]
        assert (await store.get_session(info.id)).entry_count == 1
        await store.append(info.id, [Message.user("small again")])  # the store goes on


FILL_UNTIL_FULL = """
import asyncio, sys
from tether.store import SqliteStore
from tether.messages import Message
from tether.errors import StoreError

async def main():
    store = SqliteStore(sys.argv[1])
    info = await store.create_session(directory="/full")
    appended = 0
    try:
        while True:
            await store.append(info.id, [Message.user("y" * 20_000)])
            appended += 1
    except StoreError as e:
        print(type(e).__name__, appended, e, sep="\\t")
    print("count", len(await store.read(info.id)), (await store.get_session(info.id)).entry_count, sep="\\t")
    await store.close()

asyncio.run(main())
"""


def test_a_really_full_disk_fails_the_write_and_loses_nothing(tmp_path: Path) -> None:
    faults.needs_small_disk()
    disk = tmp_path / "disk"
    disk.mkdir()
    argv = faults.small_disk(disk, 400, [sys.executable, "-c", FILL_UNTIL_FULL, str(disk / "tether.db")])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (error, appended, message), (_, read, counted) = (line.split("\t") for line in proc.stdout.splitlines())
    assert error == "StoreFull" and int(appended) > 0
    assert str(disk / "tether.db") in message and "free disk space" in message
    assert int(read) == int(counted) == int(appended)  # every acknowledged append is there, the failed one not


def test_a_full_disk_at_open_is_store_full(tmp_path: Path) -> None:
    """Opening needs room for the WAL index (-shm): with none left, SQLite reports an I/O error of the
    shared memory, not SQLITE_FULL; the free space tells them apart."""
    faults.needs_small_disk()
    disk = tmp_path / "disk"
    disk.mkdir()
    db = tmp_path / "tether.db"
    faults.build_database(db, sessions=2, messages=10)
    probe = "import sys\nfrom tether.store import SqliteStore\nfrom tether.errors import StoreError\ntry:\n"
    probe += "    SqliteStore(sys.argv[1])\nexcept StoreError as e:\n    print(type(e).__name__, e, sep='\\t')\n"
    setup = f'cp "{db}" . && (cat /dev/zero > filler 2>/dev/null; true)'
    argv = faults.small_disk(disk, 400, [sys.executable, "-c", probe, str(disk / "tether.db")], setup=setup)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    name, message = proc.stdout.strip().split("\t")
    assert name == "StoreFull" and str(disk / "tether.db") in message


def test_locked_past_the_timeout_at_open_is_store_busy(db: Path) -> None:
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreBusy) as caught:
            SqliteStore(db, busy_timeout=0.2)
        assert str(db) in one_line(caught.value) and "try again" in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_locked_past_the_timeout_on_write_is_store_busy(db: Path) -> None:
    async with SqliteStore(db, busy_timeout=0.2) as store:
        sid = (await store.list_sessions()).items[0].id
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreBusy) as caught:
                await store.append(sid, [Message.user("waits")])
            assert str(db) in one_line(caught.value) and "try again" in str(caught.value)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await store.append(sid, [Message.user("goes through now")])


async def test_every_public_read_of_a_damaged_store_raises_a_store_error(db: Path) -> None:
    """No `sqlite3` error escapes any read of the store, whichever pages it meets."""
    faults.damage_pages(db)
    async with SqliteStore(db) as store:
        ids = [s.id for s in (await store.list_sessions(limit=100)).items]
        calls = [lambda sid=sid: store.read(sid) for sid in ids]
        calls += [lambda sid=sid: store.tail(sid, 1000) for sid in ids]
        calls += [lambda sid=sid: store.reverted_spans(sid) for sid in ids]
        calls += [lambda sid=sid: store.fork(sid) for sid in ids]
        calls += [lambda sid=sid: store.delete_session(sid) for sid in ids]
        outcomes = []
        for call in calls:
            try:
                await call()
                outcomes.append("ok")
            except StoreError as e:
                one_line(e)
                outcomes.append(type(e).__name__)
        assert "StoreCorrupt" in outcomes
        assert set(outcomes) <= {"ok", "StoreCorrupt"}


# --- what real files are hard to make give on demand ---------------------------------------------------


def sqlite_error(code: int, message: str) -> sqlite3.Error:
    """An error as sqlite3 raises it, with the result code SQLite gave."""
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    error.sqlite_errorname = "SQLITE_IOERR_WRITE"  # type: ignore[attr-defined]
    return error


def test_an_io_error_is_a_full_disk_only_when_the_disk_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "tether.db")
    io_error = sqlite_error(sqlite3.SQLITE_IOERR | (3 << 8), "disk I/O error")
    plain = store_faults.store_fault(io_error, path, "write to")
    assert type(plain) is StoreUnavailable and "I/O error" in str(plain) and "check the disk" in str(plain)
    monkeypatch.setattr(store_faults, "free_bytes", lambda _: 0)
    assert isinstance(store_faults.store_fault(io_error, path, "write to"), StoreFull)
    monkeypatch.setattr(store_faults, "free_bytes", lambda _: -1)  # unknown: not taken for full
    assert type(store_faults.store_fault(io_error, path, "write to")) is StoreUnavailable


def test_codes_and_errnos_map_to_their_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "tether.db")
    assert isinstance(
        store_faults.store_fault(sqlite_error(sqlite3.SQLITE_BUSY, "database is locked"), path, "read"), StoreBusy
    )
    assert isinstance(
        store_faults.store_fault(sqlite_error(sqlite3.SQLITE_CORRUPT, "malformed"), path, "read"), StoreCorrupt
    )
    full = store_faults.store_fault(OSError(28, "No space left on device"), path, "open")
    assert isinstance(full, StoreFull) and full.advice == "free disk space there and try again"
    assert store_faults.human_bytes(999) == "999 bytes" and store_faults.human_bytes(1_234_567) == "1.2 MB"
    assert store_faults.human_bytes(-1) == "unknown"
