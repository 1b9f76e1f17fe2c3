"""The audit trail in SQLite (schema 8): the `audit` table of records, and `audit_head`, one row with the last
seq and hash, written in the same transaction as each record (so a removed last record is seen). Every
function here runs inside the caller's transaction; `SqliteStore` calls them, and its session writes add
their own records in their own transactions."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from .audit import GENESIS, AuditDraft, AuditRecord, audit_where, canonical_json, pruned_draft, seal

SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    session_id TEXT,
    actor TEXT,
    outcome TEXT,
    detail TEXT NOT NULL,
    prev TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_session ON audit (session_id, seq) WHERE session_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sink_positions (
    sink TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (sink, session_id)
) WITHOUT ROWID;
"""
_COLS = "seq, at, kind, session_id, actor, outcome, detail, prev, hash"


def head(conn: sqlite3.Connection) -> tuple[int, str] | None:
    row = conn.execute("SELECT seq, hash FROM audit_head WHERE id = 1").fetchone()
    return (int(row[0]), str(row[1])) if row is not None else None


def insert(conn: sqlite3.Connection, draft: AuditDraft) -> AuditRecord:
    """Append `draft` after the head, in the caller's (write) transaction."""
    last = head(conn)
    seq, prev = (last[0] + 1, last[1]) if last is not None else (1, GENESIS)
    record = seal(seq, prev, draft)
    conn.execute(
        f"INSERT INTO audit ({_COLS}) VALUES (?,?,?,?,?,?,?,?,?)",
        (
            seq,
            record.at,
            record.kind,
            record.session_id,
            record.actor,
            record.outcome,
            canonical_json(record.detail).decode(),
            prev,
            record.hash,
        ),
    )
    conn.execute(
        "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
        (seq, record.hash),
    )
    return record


def select(
    conn: sqlite3.Connection,
    *,
    after: int,
    since: float | None,
    until: float | None,
    session_id: str | None,
    kind: str | None,
    limit: int,
) -> list[AuditRecord]:
    where, params = audit_where(after, since, until, session_id, kind, mark="?")
    sql = f"SELECT {_COLS} FROM audit WHERE {where} ORDER BY seq LIMIT ?"
    return [_record(row) for row in conn.execute(sql, (*params, limit))]


def prune(conn: sqlite3.Connection, before: float, now: float) -> int:
    """Remove the records older than `before` (a prefix: the trail is in time order) and append the prune
    record that names where the rest continues from. Returns how many were removed."""
    row = conn.execute("SELECT max(seq) FROM audit WHERE at < ?", (before,)).fetchone()
    through = row[0] if row is not None else None
    if through is None:
        return 0
    last = conn.execute("SELECT hash FROM audit WHERE seq = ?", (through,)).fetchone()
    count = conn.execute("DELETE FROM audit WHERE seq <= ?", (through,)).rowcount
    insert(conn, pruned_draft(through, str(last[0]), count, before, now))
    return int(count)


def _record(row: Any) -> AuditRecord:
    try:
        detail = json.loads(row[6])
    except ValueError:
        detail = {"unreadable": str(row[6])[:200]}
    return AuditRecord(
        seq=row[0],
        at=row[1],
        kind=row[2],
        session_id=row[3],
        actor=row[4],
        outcome=row[5],
        detail=detail if isinstance(detail, dict) else {"value": detail},
        prev=row[7],
        hash=row[8],
    )
