"""`store/walfile.py`: a WAL file opened while another process makes it. SQLite's busy handler does not cover
the switch of a new file to WAL (it fails at once); the store, the relay and recall's files all open through
`connect_wal`, so each of them waits, and gives up with SQLite's own error after its time."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.recall.keys import KeyIndex
from tether.store.relay import SqliteRelay
from tether.store.walfile import connect_wal, until_free


@pytest.fixture
def made_by_another(tmp_path: Path) -> Iterator[Callable[[float | None], Path]]:
    """`made(after)`: a new file whose write lock another connection holds (still in rollback mode, as a
    process that opens it a moment earlier while it makes its tables), let go after `after` seconds (None:
    held to the end of the test)."""
    held: list[sqlite3.Connection] = []
    timers: list[threading.Timer] = []

    def made(after: float | None) -> Path:
        path = tmp_path / f"made{len(held)}.db"
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("CREATE TABLE theirs (x)")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO theirs VALUES (1)")
        held.append(conn)
        if after is not None:
            timer = threading.Timer(after, lambda: conn.execute("COMMIT"))
            timer.start()
            timers.append(timer)
        return path

    yield made
    for timer in timers:
        timer.join()
    for conn in held:
        conn.close()


def test_sqlite_alone_fails_at_once(made_by_another: Callable[[float | None], Path]) -> None:
    """Why this module is there: the busy handler (here 10 s) is not called for the switch to WAL."""
    conn = sqlite3.connect(made_by_another(None), isolation_level=None, timeout=10)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        conn.execute("PRAGMA journal_mode = WAL")
    assert time.monotonic() - started < 1
    conn.close()


def test_connect_wal_waits_and_runs_its_setup(made_by_another: Callable[[float | None], Path]) -> None:
    path = made_by_another(0.3)
    conn = connect_wal(str(path), setup=lambda c: c.execute("CREATE TABLE IF NOT EXISTS ours (y)"))
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT x FROM theirs").fetchall() == [(1,)]
        assert conn.execute("SELECT count(*) FROM ours").fetchone()[0] == 0
    finally:
        conn.close()


def test_connect_wal_gives_up_after_its_timeout(made_by_another: Callable[[float | None], Path]) -> None:
    path = made_by_another(None)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        connect_wal(str(path), timeout=0.5)
    assert time.monotonic() - started >= 0.5


def test_other_errors_are_not_tried_again(tmp_path: Path) -> None:
    path = tmp_path / "text.db"
    path.write_bytes(b"not a database at all " * 200)
    started = time.monotonic()
    with pytest.raises(sqlite3.DatabaseError, match="not a database"):
        connect_wal(str(path), timeout=10)
    assert time.monotonic() - started < 1
    tries: list[int] = []

    def attempt() -> None:
        tries.append(1)
        raise sqlite3.OperationalError("no such table: x")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        until_free(attempt, 10)
    assert tries == [1]


def test_until_free_undoes_each_failed_try() -> None:
    tries: list[str] = []

    def attempt() -> str:
        tries.append("try")
        if tries.count("try") < 5:
            raise sqlite3.OperationalError("database is locked")
        return "done"

    assert until_free(attempt, 10, undo=lambda: tries.append("undo")) == "done"
    assert tries == ["try", "undo"] * 4 + ["try"]


def test_the_relay_and_recall_keys_wait_too(made_by_another: Callable[[float | None], Path]) -> None:
    relay = SqliteRelay(made_by_another(0.3))
    try:
        assert relay.conn.execute("SELECT count(*) FROM relay").fetchone()[0] == 0
    finally:
        relay.conn.close()
    keys = KeyIndex(made_by_another(0.3))
    try:
        assert keys.count() == 0
    finally:
        keys.close()
