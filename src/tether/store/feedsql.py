"""Event numbers and the change feed in SQLite (schema 9): `event_numbers`, one row per session with the
highest live event number reserved for it, and `changes`, the global change feed, numbered by an
AUTOINCREMENT key (never reused, even after the last row is deleted). Every function here runs inside the
caller's transaction; `SqliteStore` calls them."""

from __future__ import annotations

import json
import sqlite3

from .records import Change

SCHEMA = """
CREATE TABLE IF NOT EXISTS event_numbers (
    session_id TEXT PRIMARY KEY,
    hi INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    session_id TEXT,
    data TEXT NOT NULL
);
"""


def reserve(conn: sqlite3.Connection, session_id: str, floor: int, count: int) -> int:
    """Reserve `count` numbers above `floor` and above the session's last reservation; the first."""
    row = conn.execute("SELECT hi FROM event_numbers WHERE session_id = ?", (session_id,)).fetchone()
    first = max(floor, int(row[0]) if row is not None else 0) + 1
    conn.execute(
        "INSERT INTO event_numbers (session_id, hi) VALUES (?, ?) ON CONFLICT (session_id) DO UPDATE SET hi = excluded.hi",
        (session_id, first + count - 1),
    )
    return first


def forget(conn: sqlite3.Connection, session_id: str) -> None:
    conn.execute("DELETE FROM event_numbers WHERE session_id = ?", (session_id,))


def append(conn: sqlite3.Connection, at: float, kind: str, session_id: str | None, data: bytes) -> int:
    cur = conn.execute(
        "INSERT INTO changes (at, kind, session_id, data) VALUES (?, ?, ?, ?)", (at, kind, session_id, data.decode())
    )
    return int(cur.lastrowid or 0)


def after(conn: sqlite3.Connection, after: int, limit: int) -> list[Change]:
    rows = conn.execute(
        "SELECT id, at, kind, session_id, data FROM changes WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
    ).fetchall()
    return [Change(id=int(r[0]), at=float(r[1]), kind=str(r[2]), session_id=r[3], data=json.loads(r[4])) for r in rows]


def last_id(conn: sqlite3.Connection) -> int:
    """The last id given (from AUTOINCREMENT's own record, so a deleted last row still counts)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    return int(row[0]) if row is not None else 0
