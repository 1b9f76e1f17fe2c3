"""The durable prompt queue in SQLite (schema 11): `prompt_queue`, one row per queued prompt, numbered by an
AUTOINCREMENT key (never reused, so that a prompt's id names it alone even after it was taken), indexed by
session. Every function here runs inside the caller's transaction or under its lock; `SqliteStore` calls
them (`PromptQueue`)."""

from __future__ import annotations

import sqlite3
import time

from ..errors import SessionNotFound
from .records import QueuedPrompt

SCHEMA = """
CREATE TABLE IF NOT EXISTS prompt_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    after_seq INTEGER NOT NULL,
    queued_at REAL NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS prompt_queue_session ON prompt_queue(session_id, id);
"""

_COLS = "id, session_id, after_seq, body, queued_at"


def _item(row: tuple[object, ...]) -> QueuedPrompt:
    i, s, a, b, q = row
    return QueuedPrompt(id=int(i), session_id=str(s), after_seq=int(a), body=bytes(b), queued_at=float(q))  # type: ignore[call-overload, arg-type]


def enqueue(conn: sqlite3.Connection, session_id: str, body: bytes) -> QueuedPrompt:
    row = conn.execute("SELECT entry_count FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    now = time.time()
    cur = conn.execute(
        "INSERT INTO prompt_queue (session_id, after_seq, queued_at, body) VALUES (?, ?, ?, ?)",
        (session_id, int(row[0]), now, body),
    )
    return QueuedPrompt(
        id=int(cur.lastrowid or 0), session_id=session_id, after_seq=int(row[0]), body=body, queued_at=now
    )


def of_session(conn: sqlite3.Connection, session_id: str) -> list[QueuedPrompt]:
    rows = conn.execute(f"SELECT {_COLS} FROM prompt_queue WHERE session_id = ? ORDER BY id", (session_id,))
    return [_item(r) for r in rows.fetchall()]


def sessions(conn: sqlite3.Connection) -> list[str]:
    """The sessions with a queued prompt, through the index (one step per session, not per prompt)."""
    return [str(r[0]) for r in conn.execute("SELECT DISTINCT session_id FROM prompt_queue ORDER BY session_id")]


def drop(conn: sqlite3.Connection, session_id: str, prompt_id: int) -> bool:
    cur = conn.execute("DELETE FROM prompt_queue WHERE session_id = ? AND id = ?", (session_id, prompt_id))
    return cur.rowcount > 0


def forget(conn: sqlite3.Connection, session_id: str) -> None:
    conn.execute("DELETE FROM prompt_queue WHERE session_id = ?", (session_id,))
