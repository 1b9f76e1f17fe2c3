"""Opening an SQLite file in WAL mode when other processes may be opening it at the same moment.

SQLite's busy handler (`busy_timeout`, `sqlite3.connect(timeout=...)`) does not cover everything an open does:
the switch of a new file to WAL fails at once with "database is locked" while another connection holds the
write lock of the file, still in rollback mode (it is making the same file). The workers of `tether serve
--workers N` each open the store, the relay and recall's files themselves, so on a new home they meet there.
`until_free` tries such a step again, with short naps, until the caller's time has passed."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from .faults import is_busy

T = TypeVar("T")


def until_free(attempt: Callable[[], T], seconds: float, *, undo: Callable[[], None] | None = None) -> T:
    """`attempt()`, tried again while it fails with SQLite's busy (or locked) error, until `seconds` have
    passed (then the last error). `undo` runs after each failed try (a rollback). `attempt` must be safe to run
    again: reads, or writes done whole in one transaction."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as e:
            if not is_busy(e) or time.monotonic() >= deadline:
                raise
            if undo is not None:
                undo()
            time.sleep(random.uniform(0.005, 0.02))  # apart, so that two openers do not meet again


def connect_wal(
    path: str, *, timeout: float = 10.0, setup: Callable[[sqlite3.Connection], None] | None = None
) -> sqlite3.Connection:
    """A connection to `path` (autocommit, any thread) in WAL mode, with `setup(conn)` run on it (pragmas and
    a schema of ``IF NOT EXISTS`` statements: it may run more than once), each waiting up to `timeout` seconds
    for other processes opening the same file. The connection is closed when it fails."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=timeout)

    def prepare() -> None:
        conn.execute("PRAGMA journal_mode = WAL")
        if setup is not None:
            setup(conn)

    try:
        until_free(prepare, timeout, undo=lambda: rollback(conn))
    except BaseException:
        conn.close()
        raise
    return conn


def rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction. SQLite has often rolled it back itself (a full disk, an I/O error), and a
    ROLLBACK that fails too must not hide the error that caused it."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
