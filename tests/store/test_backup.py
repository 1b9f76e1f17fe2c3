"""`SqliteStore.backup`: a copy that opens as a store with everything in it, consistent while another process
appends, with progress; it never overwrites without `force`, never writes into the live database, and
leaves nothing behind when it fails."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tether.errors import InvalidInput, StoreCorrupt, StorePermission
from tether.messages import Message
from tether.store import SqliteStore
from tether.store.sqlite import check_file

HERE = Path(__file__).parent


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"tether_store_test_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _load("faults")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "live" / "tether.db"
    faults.build_database(path)
    return path


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if "partial" in p.name)


async def test_a_backup_is_a_store_with_everything_in_it(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.store.backup.STEP_PAGES", 64)  # progress a few times on this small file
    target = tmp_path / "backup.db"
    seen: list[tuple[int, int]] = []
    async with SqliteStore(db) as store:
        sid = (await store.list_sessions()).items[0].id
        await store.append(sid, [Message.user("the newest entry, still in the WAL")])
        result = await store.backup(target, progress=lambda done, total: seen.append((done, total)))
        original = {s.id: await store.read(s.id) for s in (await store.list_sessions(limit=100)).items}
    assert result.path == str(target) and result.sessions == 12 and result.size == target.stat().st_size
    assert len(seen) >= 3 and seen[-1][0] == seen[-1][1] == result.size
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    async with SqliteStore(target) as copy:
        assert {s.id: await copy.read(s.id) for s in (await copy.list_sessions(limit=100)).items} == original
        assert (await copy.search("newest"))[0].session_id == sid
    assert not [f for f in check_file(target) if f.status != "ok"]
    assert leftovers(tmp_path) == []


async def test_an_existing_file_is_replaced_only_with_force(db: Path, tmp_path: Path) -> None:
    target = tmp_path / "backup.db"
    target.write_text("an older backup")
    async with SqliteStore(db) as store:
        with pytest.raises(InvalidInput, match="already exists: choose another name, or --force"):
            await store.backup(target)
        assert target.read_text() == "an older backup"
        await store.backup(target, force=True)
    assert sqlite3.connect(target).execute("SELECT count(*) FROM sessions").fetchone()[0] == 12


@pytest.mark.parametrize("name", ["tether.db", "tether.db-wal", "tether.db-shm"])
async def test_the_live_database_is_never_a_target(db: Path, name: str) -> None:
    before = db.read_bytes()
    async with SqliteStore(db) as store:
        with pytest.raises(InvalidInput, match="is the live database"):
            await store.backup(db.parent / name, force=True)
    assert db.read_bytes() == before


async def test_a_directory_or_a_missing_directory_is_refused(db: Path, tmp_path: Path) -> None:
    async with SqliteStore(db) as store:
        with pytest.raises(InvalidInput, match="is a directory: name the backup file"):
            await store.backup(tmp_path)
        with pytest.raises(InvalidInput, match="is not a directory"):
            await store.backup(tmp_path / "nowhere" / "backup.db")


async def test_a_read_only_target_directory_is_store_permission_and_leaves_nothing(db: Path, tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    async with SqliteStore(db) as store:
        with faults.read_only(shelf), pytest.raises(StorePermission, match=f"check the permissions of {shelf}"):
            await store.backup(shelf / "backup.db")
    assert list(shelf.iterdir()) == []


async def test_a_damaged_database_is_not_backed_up(db: Path, tmp_path: Path) -> None:
    async with SqliteStore(db) as store:
        faults.damage_pages(db)  # damaged under the open store, as a failing disk would
        with pytest.raises(StoreCorrupt) as caught:
            await store.backup(tmp_path / "backup.db")
    assert f"the database {db} is damaged" in str(caught.value) and "restore it from a backup" in str(caught.value)
    assert not (tmp_path / "backup.db").exists() and leftovers(tmp_path) == []


async def test_a_backup_is_consistent_while_another_process_appends(db: Path, tmp_path: Path) -> None:
    """A writer in another process appends all the while; each backup is one moment of the store: every
    session's counters agree with its rows, the file is sound, and a later backup holds more."""
    writer = subprocess.Popen(
        [sys.executable, str(HERE / "workers.py"), "crash", str(db), "normal", "3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        totals = []
        async with SqliteStore(db) as store:
            for i in range(3):
                for _ in range(50):  # some appends between backups
                    writer.stdout.readline()
                target = tmp_path / f"backup-{i}.db"
                await store.backup(target)
                conn = sqlite3.connect(target)
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                mismatched = conn.execute(
                    "SELECT count(*) FROM sessions s WHERE s.entry_count !="
                    " (SELECT count(*) FROM entries e WHERE e.session_id = s.id)"
                ).fetchone()[0]
                assert mismatched == 0
                totals.append(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
                conn.close()
        assert totals == sorted(totals) and totals[0] < totals[-1]
        assert writer.poll() is None  # the writer never waited on the backups long enough to fail
    finally:
        writer.kill()
        writer.wait()


async def test_an_in_memory_store_has_nothing_to_back_up(tmp_path: Path) -> None:
    async with SqliteStore(":memory:") as store:
        with pytest.raises(InvalidInput, match="in-memory"):
            await store.backup(tmp_path / "x.db")


@pytest.mark.parametrize("how", faults.INDEX_DAMAGE)
async def test_a_database_whose_search_index_is_damaged_is_not_backed_up(db: Path, tmp_path: Path, how: str) -> None:
    """The source is checked before anything is copied: a damaged search index (which the copy's own check
    passed, so the backup was made and said nothing) is refused with what to do first."""
    faults.damage_search_index(db, how)
    async with SqliteStore(db) as store:
        with pytest.raises(StoreCorrupt) as caught:
            await store.backup(tmp_path / "backup.db")
    message = str(caught.value)
    assert message.startswith(f"the database {db} is damaged") and "so no backup was made" in message
    assert "tether doctor --repair" in message and "\n" not in message
    assert message.count(f"the database {db}") == 1  # said once (it was said again inside the finding)
    assert not (tmp_path / "backup.db").exists() and leftovers(tmp_path) == []


def _nodes(tmp_path: Path) -> dict[str, Path]:
    """Names that are there but are not regular files: a FIFO, a symbolic link to a file, and (as root) a
    character device like /dev/full, made here so that a test that fails cannot harm the real one."""
    made: dict[str, Path] = {}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    made["fifo"] = fifo
    target = tmp_path / "elsewhere.db"
    target.write_text("someone else's file")
    link = tmp_path / "link.db"
    link.symlink_to(target)
    made["symlink"] = link
    if os.geteuid() == 0:
        device = tmp_path / "full"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        made["device"] = device
    return made


async def test_only_a_regular_file_or_a_new_name_is_a_destination(db: Path, tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    async with SqliteStore(db) as store:
        for kind, node in _nodes(shelf).items():
            before = os.lstat(node)
            with pytest.raises(InvalidInput, match="not a regular file") as caught:
                await store.backup(node, force=True)
            assert str(node) in str(caught.value), kind
            after = os.lstat(node)  # the node itself is as it was: not replaced, not written through
            assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
        assert (shelf / "elsewhere.db").read_text() == "someone else's file"
        result = await store.backup(shelf / "new.db")  # a new name is fine
    assert result.sessions == 12 and leftovers(shelf) == []
