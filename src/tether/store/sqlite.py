"""`SqliteStore`: the embedded default. One file in WAL mode, one connection that is the single writer,
`BEGIN IMMEDIATE` transactions, a busy timeout that waits without blocking the event loop, and writes that
complete even when the task awaiting them is cancelled."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ..errors import (
    CorruptEntry,
    InvalidInput,
    NotFound,
    SeqConflict,
    SessionNotFound,
    StoreBusy,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreUnavailable,
)
from ..ids import check_id, new_id, new_session_id
from ..messages import (
    Checkpoint,
    Compaction,
    Entry,
    EntryBody,
    Marker,
    Message,
    Revert,
    TitleChange,
    decode_body,
    encode_body,
    encode_json,
    kind_of,
)
from . import auditsql, feedsql, health, queuesql, searchindex
from .audit import AuditDraft, AuditRecord
from .audit import created as _created
from .audit import deleted as _deleted
from .audit import forked as _forked
from .audit import imported as _imported
from .audit import reverted as _reverted
from .audit import share_made as _share_made
from .audit import share_revoked as _share_revoked
from .backup import BackupResult, Progress, backup_file
from .bookkeeping import artifact_id, decimal_to_pico, message_counters, pico_to_decimal, title_candidate
from .faults import RESTORE, is_busy, is_corrupt, store_fault
from .health import Finding
from .records import (
    LEASE_REQUESTS,
    UNSET,
    ArtifactInfo,
    BackfillProgress,
    Change,
    ChangedSessions,
    CorruptHandler,
    Durability,
    Lease,
    LeaseRequest,
    Page,
    QueuedPrompt,
    RevertSpan,
    SearchHit,
    SessionInfo,
    SessionState,
    Share,
    StreamRecord,
    decode_cursor,
    encode_cursor,
    lease_lost,
    log_corrupt,
)
from .validate import (
    check_artifact_id,
    check_artifact_listing,
    check_audit_filters,
    check_change,
    check_changed_sessions,
    check_changes_after,
    check_created_at,
    check_lease,
    check_lease_request,
    check_limit,
    check_new_session,
    check_reservation,
    check_restored_share,
    check_search_filters,
    check_share,
    check_stream,
    check_token_hash,
    check_update,
    validate_bodies,
    validate_import,
)
from .walfile import rollback as _rollback
from .walfile import until_free

R = TypeVar("R")
SCHEMA_VERSION = 11
"""2: the search index (searchindex.py); 3: appends leave no row for it; 4: the index holds terms only
(contentless), its rowids carry the role; files of 2 and 3 are reindexed from the journal; 5: leases say
who holds them (holder, pid, host, since); the old table had never been used, so it is made anew; 6: share
links (a new table, nothing else changes); 7: streamed answers, one row per session replaced in place (a new
table); 8: the audit trail and the event sinks' positions (`auditsql`: new tables); 9: live event numbers reserved per
session and the global change feed (`feedsql`: new tables); 10: the sessions' change cursor (`session_changes`,
kept by triggers on `sessions`: `SessionChanges`); 11: the durable prompt queue (`queuesql`: a new table)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    parent_id TEXT,
    forked_from TEXT,
    forked_at INTEGER,
    title TEXT,
    directory TEXT,
    agent TEXT,
    model TEXT,
    state TEXT NOT NULL DEFAULT 'active',
    system_prompt TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    entry_count INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_pico INTEGER NOT NULL DEFAULT 0,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS sessions_recent ON sessions (updated_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS sessions_directory ON sessions (directory, updated_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions (parent_id, updated_at DESC, id DESC)
    WHERE parent_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS entries (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    created_at REAL NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS artifacts (
    id TEXT PRIMARY KEY,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    created_at REAL NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    pid INTEGER,
    host TEXT,
    since REAL NOT NULL,
    expires_at REAL NOT NULL,
    request TEXT
);
CREATE TABLE IF NOT EXISTS shares (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    token_hash BLOB NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    expires_at REAL,
    revoked_at REAL
);
CREATE INDEX IF NOT EXISTS shares_session ON shares (session_id, created_at);
CREATE TABLE IF NOT EXISTS streams (
    session_id TEXT PRIMARY KEY,
    after_seq INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    payload TEXT NOT NULL
);
"""

_CHANGES_SCHEMA = [
    # Every write to a session's row, and its deletion, stamps it with the next change number. Writers are
    # serialized (one write transaction at a time), so numbers follow commits; a deleted session keeps its
    # row here (a tombstone: its readers learn it went, and the largest number never goes back).
    "CREATE TABLE IF NOT EXISTS session_changes (session_id TEXT PRIMARY KEY, change INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS session_changes_order ON session_changes (change)",
    # A session that already holds the latest number keeps it (no write: the common case, one session
    # appended to again and again); readers ask from their last position inclusive, so they see it again.
    *(
        f"CREATE TRIGGER IF NOT EXISTS sessions_changed_{op.lower()} AFTER {op} ON sessions"
        f" WHEN NOT EXISTS (SELECT 1 FROM session_changes WHERE session_id = {row}.id"
        " AND change = (SELECT max(change) FROM session_changes)) BEGIN"
        f" INSERT OR REPLACE INTO session_changes (session_id, change) VALUES ({row}.id,"
        " (SELECT coalesce(max(change), 0) + 1 FROM session_changes)); END"
        for op, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))
    ),
    # sessions of a file older than the feed: changed once, at the migration
    "INSERT OR IGNORE INTO session_changes (session_id, change)"
    " SELECT id, row_number() OVER (ORDER BY updated_at, id) FROM sessions",
]

_SESSION_COLS = (
    "id, created_at, updated_at, title, directory, parent_id, forked_from, forked_at, agent, model, state, "
    "system_prompt, entry_count, message_count, input_tokens, output_tokens, cost_pico, metadata"
)
_metadata_decoder = msgspec.json.Decoder(dict[str, Any])
_message_decoder = msgspec.json.Decoder(Message)
_KINDS: dict[type, str] = {
    t: str(t.__struct_config__.tag) for t in (Message, Revert, TitleChange, Checkpoint, Compaction, Marker)
}
# The append transaction reads the session's position, then updates its counters. UPDATE ... RETURNING
# would be one statement less, but measured here it costs ~20 us more than a plain UPDATE and a SELECT.
_POSITION_SQL = "SELECT entry_count, updated_at, (SELECT max(updated_at) FROM sessions) FROM sessions WHERE id = ?"
_COUNTERS = (
    "UPDATE sessions SET entry_count = entry_count + ?, message_count = message_count + ?,"
    " input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, cost_pico = cost_pico + ?"
)
_APPEND_SQL = {
    # (title: None | "set" | "default", bump updated_at)
    (title, bump): _COUNTERS
    + {None: "", "set": ", title = ?", "default": ", title = coalesce(title, ?)"}[title]
    + (", updated_at = ?" if bump else "")
    + " WHERE id = ?"
    for title in (None, "set", "default")
    for bump in (False, True)
}
_APPEND_IF_AT_SQL = {key: sql + " AND entry_count = ?" for key, sql in _APPEND_SQL.items()}
# The session and its lease row (all NULL when it never had one): no row at all is a missing session.
_LEASE_SQL = (
    "SELECT l.holder, l.pid, l.host, l.since, l.expires_at, l.request"
    " FROM sessions s LEFT JOIN leases l ON l.session_id = s.id WHERE s.id = ?"
)
_LEASE_TAKE_SQL = (
    "UPDATE leases SET holder = ?, pid = ?, host = ?, since = ?, expires_at = ?, request = ? WHERE session_id = ?"
)
_LEASE_TAKE_FREE_SQL = (
    "UPDATE leases SET holder = ?, pid = ?, host = ?, since = ?, expires_at = ?, request = NULL"
    " WHERE session_id = ? AND expires_at <= ?"
)
_LEASE_TAKE_OVER_SQL = _LEASE_TAKE_FREE_SQL + " OR session_id = ? AND holder = ?"
_LEASE_INSERT_SQL = (
    "INSERT INTO leases (holder, pid, host, since, expires_at, request, session_id) VALUES (?,?,?,?,?,?,?)"
)
_LEASE_RELEASE_SQL = "UPDATE leases SET expires_at = 0 WHERE session_id = ? AND holder = ? AND expires_at > 0"
_STREAM_SQL = (
    "INSERT INTO streams (session_id, after_seq, updated_at, payload) SELECT ?, ?, ?, ? WHERE EXISTS"
    " (SELECT 1 FROM sessions WHERE id = ?) ON CONFLICT (session_id) DO UPDATE SET after_seq = excluded.after_seq,"
    " updated_at = excluded.updated_at, payload = excluded.payload"
)
_INSERT_SQL = "INSERT INTO entries (session_id, seq, kind, created_at, payload) VALUES (?,?,?,?,?)"
LOCK_IN_PLACE = 0.0005
"""Seconds a write waits in place (the event loop held) for the write lock another process holds, before it
waits with the loop's sleeps."""
LOCK_STEP = 0.00005
"""Seconds between two tries in place."""
CHECKPOINT_EVERY = 256
"""Commits of a store between its background checkpoints (see _Checkpointer)."""
CHECKPOINT_LOCKED_ROWS = 4096
"""The most rows a store may write beside a checkpoint's first pass for the second to follow, holding its lock:
what ~2,000 appends write. A fork or an import of more entries is left to the next checkpoint's first pass."""


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    """Bring a schema of `version` (0: none yet) to SCHEMA_VERSION, inside the caller's write transaction."""
    if version in (2, 3):
        searchindex.drop(conn)  # an index of another shape: made again from the journal
    if 1 <= version <= 4:
        conn.execute("DROP TABLE IF EXISTS leases")  # the unused table of before: new columns
    for statement in (
        _statements(_SCHEMA + searchindex.SCHEMA + auditsql.SCHEMA + feedsql.SCHEMA + queuesql.SCHEMA) + _CHANGES_SCHEMA
    ):
        conn.execute(statement)
    if 1 <= version <= 3:
        searchindex.mark_all_pending(conn)  # entries stored before this index: backlog
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class _Busy(Exception):
    """The write lock is held by another connection right now."""


class SqliteStore:
    """The SQLite backend of `Store`.

    `durability="normal"` survives a process crash (kill -9) with nothing acknowledged lost;
    `durability="full"` also fsyncs every commit, so it survives power loss. `busy_timeout` (seconds) is how
    long a write waits for other processes' writes before `StoreBusy`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "normal",
        busy_timeout: float = 30.0,
        on_corrupt: CorruptHandler | None = None,
    ) -> None:
        if durability not in ("normal", "full"):
            raise InvalidInput(f"durability must be 'normal' or 'full', not {durability!r}")
        self.path = str(path)
        self.durability: Durability = durability
        self.busy_timeout = busy_timeout
        self.on_corrupt: CorruptHandler = on_corrupt or log_corrupt
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, cached_statements=256)
        except (sqlite3.Error, OSError) as e:
            raise store_fault(e, self.path, "open") from e
        try:
            self._setup(conn)
        except BaseException as e:
            conn.close()  # a refused file (newer schema, not WAL, damaged) must not stay open
            if isinstance(e, (sqlite3.Error, OSError)):
                raise store_fault(e, self.path, "open") from e
            raise
        self._conn = conn
        self._unindexed = 0  # appends since this store last flushed the search index
        self._valid_ids: set[str] = set()  # ids already checked: the check is a regex, appends are hot
        # (entry_count, updated_at) of sessions this store appended to, and the latest updated_at it wrote
        self._positions: dict[str, tuple[int, float]] = {}
        self._newest = 0.0
        self._checkpointer = _Checkpointer(self.path, self._lock) if self.path != ":memory:" else None
        if self._checkpointer is not None:
            # Checkpoints copy WAL pages into the database and fsync it: done inside a commit they made every
            # few hundredth append slow. A background thread does them instead (see _Checkpointer).
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")

    # --- connection and transactions ---------------------------------------------------------------

    def _setup(self, conn: sqlite3.Connection) -> None:
        # Opening may race with other processes creating the schema; waiting here is fine (sync, once).
        conn.execute(f"PRAGMA busy_timeout = {int(max(self.busy_timeout, 1) * 1000)}")
        # The busy handler does not cover the switch to WAL of a new file another process is making (see
        # walfile). Every step below is a read, or done again whole under the write lock.
        until_free(lambda: self._prepare(conn), max(self.busy_timeout, 1), undo=lambda: _rollback(conn))
        # From here on, a locked database is waited for asynchronously (see _write), never inside SQLite.
        conn.execute("PRAGMA busy_timeout = 0")

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """The file's checks, its mode and its schema (made, or migrated): `_setup`'s one try."""
        # The version first: it reads the header and the schema, so a file that is not a database, or whose
        # schema is damaged, fails here, before anything below could write to it.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise self._newer(version)
        if version < SCHEMA_VERSION and conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None:
            # A migration rewrites tables: never of a damaged file, which it could only make worse. Checked
            # once per file (the version moves on), so its cost, a read of every page, is paid once.
            problem = " ".join(str(conn.execute("PRAGMA quick_check(1)").fetchone()[0]).split())
            if problem != "ok":
                raise StoreCorrupt(
                    f"the database {self.path} is damaged ({problem}), so it was not migrated", RESTORE, path=self.path
                )
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal" and self.path != ":memory:":
            raise StoreUnavailable(
                f"could not switch the database {self.path} to WAL mode (got {mode!r})",
                "keep it on a local disk",
                path=self.path,
            )
        conn.execute(f"PRAGMA synchronous = {'FULL' if self.durability == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA temp_store = MEMORY")
        if version < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Read again under the write lock: another process may have migrated since (a migration run
                # twice would drop the search index it had just made again).
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise self._newer(version)
                if version < SCHEMA_VERSION:
                    _migrate(conn, version)
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise

    def _newer(self, version: int) -> StoreUnavailable:
        return StoreUnavailable(
            f"the database {self.path} was written by a newer tether (schema {version}, this one knows "
            f"{SCHEMA_VERSION})",
            "upgrade tether, or open another store",
            path=self.path,
        )

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosed("the store is closed")
        return self._conn

    def _try_write(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        with self._lock:
            conn = self.conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                if is_busy(e):
                    raise _Busy from None
                raise store_fault(e, self.path, "write to") from e
            try:
                result = fn(conn)
                conn.execute("COMMIT")
                if self._checkpointer is not None:
                    self._checkpointer.committed(conn.total_changes)
                return result
            except BaseException as e:
                _rollback(conn)
                if isinstance(e, sqlite3.OperationalError) and is_busy(e):
                    raise _Busy from None
                if isinstance(e, (sqlite3.Error, OSError)):
                    raise store_fault(e, self.path, "write to") from e
                raise

    async def _write(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Run `fn` in one `BEGIN IMMEDIATE` transaction.

        The common case runs inline with no await between BEGIN and COMMIT, so cancellation cannot split it.
        When another process holds the write lock we wait with asyncio sleeps (the event loop keeps running)
        in a shielded task: a caller that is cancelled while waiting does not cancel the write itself."""
        try:
            return self._try_write_waiting(fn)
        except _Busy:
            pass
        return await asyncio.shield(asyncio.ensure_future(self._write_retrying(fn)))

    def _try_write_waiting(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """`_try_write`, tried again in place every `LOCK_STEP` for `LOCK_IN_PLACE` seconds while another
        process holds the write lock (`_Busy` after that). A writer holds it a tenth of a millisecond or so;
        the loop's sleeps below come back only once a pass of the loop is over, milliseconds on a busy one."""
        deadline = time.monotonic() + LOCK_IN_PLACE
        while True:
            try:
                return self._try_write(fn)
            except _Busy:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(LOCK_STEP)

    async def _write_retrying(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.0005
        while True:
            await asyncio.sleep(delay * (0.5 + random.random()))
            try:
                return self._try_write(fn)
            except _Busy:
                if time.monotonic() >= deadline:
                    raise StoreBusy(
                        f"the database {self.path} stayed locked by other writers for {self.busy_timeout:g}s: "
                        "another tether is writing a lot; try again when it is done"
                    ) from None
                delay = min(delay * 2, 0.05)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:  # as `_reading` does, without a generator on the path of every read
            try:
                return self.conn.execute(sql, params).fetchall()
            except (sqlite3.Error, OSError) as e:
                raise store_fault(e, self.path, "read") from e

    @contextlib.contextmanager
    def _reading(self, doing: str = "read") -> Iterator[sqlite3.Connection]:
        """The connection, under the store's lock, with any failure of SQLite or the disk raised as the
        `StoreError` that says what it is (a damaged page, a locked file...)."""
        with self._lock:
            try:
                yield self.conn
            except (sqlite3.Error, OSError) as e:
                raise store_fault(e, self.path, doing) from e

    async def __aenter__(self) -> SqliteStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute("PRAGMA optimize")
                except sqlite3.Error:
                    pass
                self._conn.close()
                self._conn = None

    # --- the file as a whole ---------------------------------------------------------------------------

    async def check(self, *, full: bool = True) -> list[Finding]:
        """What is wrong with this database, if anything (`check_file`), read beside the store on a
        connection of its own that cannot write, so that appends go on meanwhile."""
        if self.path == ":memory:":
            return [Finding("database", "ok", "an in-memory database: nothing on disk to check")]
        findings = await asyncio.to_thread(check_file, self.path, full=full)
        if self._checkpointer is not None and self._checkpointer.error is not None:
            findings.append(Finding("checkpoint", "warn", str(self._checkpointer.error), "see the error above it"))
        return findings

    async def backup(
        self,
        target: str | os.PathLike[str],
        *,
        force: bool = False,
        full: bool | None = None,
        progress: Progress | None = None,
    ) -> BackupResult:
        """A consistent copy of this database at `target`, made while it stays in use (`backup_file`: the
        snapshot checked first, `full` or not, and refused when damaged): a normal tether database, to open
        with ``sqlite:///TARGET`` or to copy back in place of this one."""
        if self.path == ":memory:":
            raise InvalidInput("an in-memory database has no file to back up")
        return await asyncio.to_thread(
            backup_file, self.path, target, known_version=SCHEMA_VERSION, force=force, full=full, progress=progress
        )

    # --- sessions ----------------------------------------------------------------------------------

    def _row_to_info(self, row: Sequence[Any]) -> SessionInfo:
        try:
            metadata = _metadata_decoder.decode(row[17])
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
            metadata = {"_corrupt_metadata": str(row[17])[:200]}
        return SessionInfo(
            id=row[0],
            created_at=row[1],
            updated_at=row[2],
            title=row[3],
            directory=row[4],
            parent_id=row[5],
            forked_from=row[6],
            forked_at=row[7],
            agent=row[8],
            model=row[9],
            state=row[10],
            system_prompt=row[11],
            entry_count=row[12],
            message_count=row[13],
            input_tokens=row[14],
            output_tokens=row[15],
            cost=pico_to_decimal(row[16]),
            metadata=metadata,
        )

    def _get_row(self, conn: sqlite3.Connection, session_id: str) -> SessionInfo:
        row = conn.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return self._row_to_info(row)

    async def create_session(
        self,
        *,
        id: str | None = None,
        directory: str | None = None,
        parent_id: str | None = None,
        title: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
        state: SessionState = "active",
        metadata: dict[str, Any] | None = None,
        created_at: float | None = None,
    ) -> SessionInfo:
        fields: dict[str, Any] = {"title": title, "directory": directory, "agent": agent, "model": model}
        fields.update(system_prompt=system_prompt, metadata=metadata)
        sid = check_new_session(id, parent_id, state, fields) or new_session_id()
        meta = encode_json(metadata or {}).decode()
        now = time.time()
        created = created_at if created_at is not None else now
        record = _created(sid, now, directory, parent_id, title, metadata)

        def tx(conn: sqlite3.Connection) -> SessionInfo:
            if (
                parent_id is not None
                and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (parent_id,)).fetchone() is None
            ):
                raise SessionNotFound(parent_id)
            try:
                conn.execute(
                    "INSERT INTO sessions (id, parent_id, title, directory, agent, model, state, system_prompt,"
                    " created_at, updated_at, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (sid, parent_id, title, directory, agent, model, state, system_prompt, created, now, meta),
                )
            except sqlite3.IntegrityError:
                raise InvalidInput(f"session {sid} already exists") from None
            auditsql.insert(conn, record)
            return self._get_row(conn, sid)

        return await self._write(tx)

    async def get_session(self, session_id: str) -> SessionInfo:
        check_id(session_id, "session id")
        with self._reading() as conn:
            return self._get_row(conn, session_id)

    async def update_session(self, session_id: str, **fields: Any) -> SessionInfo:
        changes = check_update(session_id, fields)
        if "metadata" in changes:
            changes["metadata"] = encode_json(changes["metadata"] or {}).decode()
        changes["updated_at"] = time.time()
        assignments = ", ".join(f"{k} = ?" for k in changes)

        def tx(conn: sqlite3.Connection) -> SessionInfo:
            cur = conn.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", (*changes.values(), session_id))
            if cur.rowcount == 0:
                raise SessionNotFound(session_id)
            return self._get_row(conn, session_id)

        return await self._write(tx)

    def _delete_tree(self, conn: sqlite3.Connection, session_id: str) -> list[str]:
        """Delete a session and its sub-agents' sessions (inside the caller's transaction); their ids."""
        ids = [
            r[0]
            for r in conn.execute(
                "WITH RECURSIVE tree(id) AS (SELECT id FROM sessions WHERE id = ? "
                "UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_id = t.id) SELECT id FROM tree",
                (session_id,),
            )
        ]
        if not ids:
            raise SessionNotFound(session_id)
        for sid in ids:
            self._delete_rows(conn, sid)
        return ids

    async def delete_session(self, session_id: str) -> list[str]:
        check_id(session_id, "session id")

        def tx(conn: sqlite3.Connection) -> list[str]:
            ids = self._delete_tree(conn, session_id)
            for sid in ids:
                feedsql.forget(conn, sid)  # not in _delete_tree: a replaced session keeps its numbers reserved
            auditsql.insert(conn, _deleted(session_id, ids))
            return ids

        return await self._write(tx)

    def _delete_rows(self, conn: sqlite3.Connection, session_id: str) -> None:
        searchindex.delete(conn, session_id)
        self._positions.pop(session_id, None)
        conn.execute("DELETE FROM entries WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM leases WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM shares WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM streams WHERE session_id = ?", (session_id,))
        queuesql.forget(conn, session_id)
        conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    async def list_sessions(
        self,
        *,
        directory: str | None = None,
        parent_id: str | None = UNSET,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[SessionInfo]:
        check_limit(limit)
        where: list[str] = []
        params: list[Any] = []
        if directory is not None:
            where.append("directory = ?")
            params.append(directory)
        if parent_id is None:
            where.append("parent_id IS NULL")
        elif parent_id is not UNSET:
            where.append("parent_id = ?")
            params.append(check_id(parent_id, "parent id"))
        if cursor is not None:
            at, sid = decode_cursor(cursor)
            where.append("(updated_at < ? OR (updated_at = ? AND id < ?))")
            params.extend((at, at, sid))
        sql = f"SELECT {_SESSION_COLS} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, id DESC LIMIT ?"
        rows = self._read(sql, (*params, limit + 1))
        items = [self._row_to_info(r) for r in rows[:limit]]
        nxt = encode_cursor(items[-1].updated_at, items[-1].id) if len(rows) > limit else None
        return Page(items, nxt)

    async def last_session(self, directory: str) -> SessionInfo | None:
        page = await self.list_sessions(directory=directory, parent_id=None, limit=1)
        return page.items[0] if page.items else None

    # --- entries -----------------------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        bodies: Sequence[EntryBody],
        *,
        expect_seq: int | None = None,
        created_at: Sequence[float] | None = None,
        audit: Sequence[AuditDraft] = (),
    ) -> list[Entry]:
        if session_id not in self._valid_ids:
            check_id(session_id, "session id")
            if len(self._valid_ids) > 4096:
                self._valid_ids.clear()
            self._valid_ids.add(session_id)
        n = len(bodies)
        if not n:
            raise InvalidInput("append needs at least one entry")
        times = check_created_at(created_at, n)
        # Encode before taking the write lock: bad input fails here, and the lock is held only for SQL.
        rows = [(encode_body(b).decode(), _KINDS[type(b)]) for b in bodies]
        messages, t_in, t_out, cost = message_counters(bodies)
        cost_pico = decimal_to_pico(cost) if cost else 0
        explicit_title: str | None = None
        has_revert = False
        for body in bodies:
            kind = type(body)
            if kind is TitleChange:
                explicit_title = body.title  # type: ignore[union-attr]
            elif kind is Revert:
                has_revert = True
        title = explicit_title if explicit_title is not None else title_candidate(bodies)
        title_mode = None if title is None else ("set" if explicit_title is not None else "default")
        counters: tuple[Any, ...] = (n, messages, t_in, t_out, cost_pico)
        if title_mode is not None:
            counters += (title or None,)

        def tx(conn: sqlite3.Connection) -> tuple[int, float]:
            now = time.time()
            known = self._positions.get(session_id)
            if known is not None and (expect_seq is None or expect_seq == known[0] + 1):
                # Optimistic: the UPDATE itself checks that nobody appended since we last did, which saves
                # the SELECT of the session's position on every append of a session this store is writing.
                count, updated_at = known
                bump = now - updated_at >= 1.0 or updated_at < self._newest
                args = (*counters, now, session_id, count) if bump else (*counters, session_id, count)
                if conn.execute(_APPEND_IF_AT_SQL[title_mode, bump], args).rowcount == 1:
                    first = count + 1
                    if has_revert:
                        validate_bodies(bodies, first)  # raises inside the transaction: rolled back
                    if bump:
                        return self._insert_rows(conn, session_id, first, rows, now, now, times)
                    return self._insert_rows(conn, session_id, first, rows, max(now, updated_at), updated_at, times)
            row = conn.execute(_POSITION_SQL, (session_id,)).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            first = row[0] + 1
            if expect_seq is not None and expect_seq != first:
                raise SeqConflict(session_id, expect_seq, first)
            if has_revert:
                validate_bodies(bodies, first)
            updated_at, newest = row[1], row[2]
            # Moving a session in the listing indexes costs two index writes, a good part of an append.
            # Skip it while the session is already the most recent one and was bumped less than a second ago:
            # the listing order is then unchanged, and updated_at stays within a second of the truth.
            bump = updated_at < newest or now - updated_at >= 1.0
            if bump:
                if updated_at < newest and newest - now < 1.0:
                    # another process's clock is a little ahead: stay on top of the listing anyway, but
                    # never follow a timestamp far in the future (an import from a skewed machine)
                    now = max(now, newest + 1e-6)
                conn.execute(_APPEND_SQL[title_mode, True], (*counters, now, session_id))
            else:
                now = max(now, updated_at)
                conn.execute(_APPEND_SQL[title_mode, False], (*counters, session_id))
            return self._insert_rows(conn, session_id, first, rows, now, now if bump else updated_at, times)

        if has_revert or audit:
            plain_tx = tx

            def tx(conn: sqlite3.Connection) -> tuple[int, float]:  # the audit records, in the same transaction
                first, now = plain_tx(conn)
                for record in [*audit, *(_reverted(session_id, bodies, first, now) if has_revert else ())]:
                    auditsql.insert(conn, record)
                return first, now

        # The common case commits inline; only a write lock held by another process goes through _write.
        try:
            first, now = self._try_write(tx)
        except _Busy:
            first, now = await self._write(tx)
        except BaseException:
            self._positions.pop(session_id, None)
            raise
        self._unindexed += 1
        if self._unindexed >= searchindex.FLUSH_EVERY:
            self._flush_index_now()
        return [Entry(first + i, now if times is None else times[i], body) for i, body in enumerate(bodies)]

    def _insert_rows(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        first: int,
        rows: list[tuple[str, str]],
        now: float,
        session_updated_at: float,
        times: list[float] | None = None,
    ) -> tuple[int, float]:
        if times is not None:
            conn.executemany(
                _INSERT_SQL,
                [(session_id, first + i, kind, times[i], payload) for i, (payload, kind) in enumerate(rows)],
            )
        elif len(rows) == 1:
            conn.execute(_INSERT_SQL, (session_id, first, rows[0][1], now, rows[0][0]))
        else:
            conn.executemany(
                _INSERT_SQL, [(session_id, first + i, kind, now, payload) for i, (payload, kind) in enumerate(rows)]
            )
        # Remember where the session is, for the next append's optimistic UPDATE (a stale guess only costs
        # the SELECT it would have saved). The transaction commits right after this returns.
        if len(self._positions) > 4096:
            self._positions.clear()
        self._positions[session_id] = (first + len(rows) - 1, session_updated_at)
        if session_updated_at > self._newest:
            self._newest = session_updated_at
        return first, now

    def _decode_rows(self, session_id: str, rows: list[Any]) -> list[Entry]:
        # Payloads are read as bytes (CAST AS BLOB): a row that is not even UTF-8 then fails here, alone,
        # instead of failing the fetch of every row around it.
        out: list[Entry] = []
        for seq, created_at, payload in rows:
            try:
                out.append(Entry(seq, created_at, decode_body(payload)))
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, TypeError) as e:
                self.on_corrupt(CorruptEntry(session_id, seq, str(e)))
        return out

    def _require_session(self, session_id: str) -> None:
        if not self._read("SELECT 1 FROM sessions WHERE id = ?", (session_id,)):
            raise SessionNotFound(session_id)

    async def read(self, session_id: str, start: int = 1, end: int | None = None) -> list[Entry]:
        check_id(session_id, "session id")
        rows = self._read(
            "SELECT seq, created_at, CAST(payload AS BLOB) FROM entries WHERE session_id = ? AND seq >= ? AND seq <= ? ORDER BY seq",
            (session_id, max(1, start), end if end is not None else 2**62),
        )
        if not rows:
            self._require_session(session_id)
        return self._decode_rows(session_id, rows)

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        check_id(session_id, "session id")
        if n <= 0:
            self._require_session(session_id)
            return []
        rows = self._read(
            "SELECT seq, created_at, CAST(payload AS BLOB) FROM entries WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
            (session_id, n),
        )
        if not rows:
            self._require_session(session_id)
        rows.reverse()
        return self._decode_rows(session_id, rows)

    async def iter_entries(self, session_id: str, start: int = 1, *, batch: int = 500) -> AsyncIterator[Entry]:
        check_id(session_id, "session id")
        seq = max(1, start)
        first = True
        while True:
            rows = self._read(
                "SELECT seq, created_at, CAST(payload AS BLOB) FROM entries WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT ?",
                (session_id, seq, batch),
            )
            if not rows:
                if first:
                    self._require_session(session_id)
                return
            first = False
            for entry in self._decode_rows(session_id, rows):
                yield entry
            seq = rows[-1][0] + 1
            await asyncio.sleep(0)  # let other tasks run between batches of a long history

    async def fork(
        self, session_id: str, at_seq: int | None = None, *, id: str | None = None, title: str | None = None
    ) -> SessionInfo:
        check_id(session_id, "session id")
        new_id = check_id(id, "session id") if id is not None else new_session_id()

        def tx(conn: sqlite3.Connection) -> SessionInfo:
            src = self._get_row(conn, session_id)
            at = src.entry_count if at_seq is None else at_seq
            if not 0 <= at <= src.entry_count:
                raise InvalidInput(f"cannot fork {session_id} at {at}: it has {src.entry_count} entries")
            now = time.time()
            try:
                conn.execute(
                    "INSERT INTO sessions (id, forked_from, forked_at, title, directory, agent, model, state,"
                    " system_prompt, created_at, updated_at, metadata, entry_count)"
                    " SELECT ?, id, ?, ?, directory, agent, model, 'active', system_prompt, ?, ?, metadata, ?"
                    " FROM sessions WHERE id = ?",
                    (new_id, at, title if title is not None else src.title, now, now, at, session_id),
                )
            except sqlite3.IntegrityError:
                raise InvalidInput(f"session {new_id} already exists") from None
            conn.execute(
                "INSERT INTO entries (session_id, seq, kind, created_at, payload)"
                " SELECT ?, seq, kind, created_at, payload FROM entries WHERE session_id = ? AND seq <= ?"
                " ORDER BY seq",
                (new_id, session_id, at),
            )
            # The source's counters are those of all its entries: a fork of the whole history copies them,
            # and one of a part reads the usage of whichever side of `at` is shorter (reading the usage of all
            # 10,000 entries was 20 of the 58 ms that bench/store.py's fork took). A damaged entry, which
            # reading skips, stays counted in the source's counters as it was when appended.
            total = (src.message_count, src.input_tokens, src.output_tokens, decimal_to_pico(src.cost))
            if at == src.entry_count:
                messages, t_in, t_out, cost = total
            elif at <= src.entry_count - at:
                messages, t_in, t_out, cost = _usage(conn, session_id, 1, at)
            else:
                after = _usage(conn, session_id, at + 1, src.entry_count)
                messages, t_in, t_out, cost = (whole - part for whole, part in zip(total, after, strict=True))
            conn.execute(
                "UPDATE sessions SET message_count = ?, input_tokens = ?, output_tokens = ?, cost_pico = ? WHERE id = ?",
                (messages, t_in, t_out, cost, new_id),
            )
            searchindex.mark_pending(conn, new_id, 1, at)
            auditsql.insert(conn, _forked(new_id, session_id, at, now))
            return self._get_row(conn, new_id)

        return await self._write(tx)

    async def import_session(self, info: SessionInfo, entries: Sequence[Entry]) -> SessionInfo:
        write = self._importing(info, entries)
        record = _imported(info, len(entries))

        def tx(conn: sqlite3.Connection) -> SessionInfo:
            imported = write(conn)
            auditsql.insert(conn, record)
            return imported

        return await self._write(tx)

    def _importing(self, info: SessionInfo, entries: Sequence[Entry]) -> Callable[[sqlite3.Connection], SessionInfo]:
        """The import of one session, checked and encoded now, written when the returned function runs (in
        the caller's transaction)."""
        sid = validate_import(info, entries)
        rows = [(sid, e.seq, kind_of(e.body), e.created_at, encode_body(e.body).decode()) for e in entries]
        messages, t_in, t_out, cost = message_counters([e.body for e in entries])
        meta = encode_json(info.metadata).decode()

        def tx(conn: sqlite3.Connection) -> SessionInfo:
            if (
                info.parent_id is not None
                and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (info.parent_id,)).fetchone() is None
            ):
                raise SessionNotFound(info.parent_id)
            try:
                conn.execute(
                    "INSERT INTO sessions (id, parent_id, forked_from, forked_at, title, directory, agent, model,"
                    " state, system_prompt, created_at, updated_at, entry_count, message_count, input_tokens,"
                    " output_tokens, cost_pico, metadata) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        sid, info.parent_id, info.forked_from, info.forked_at, info.title, info.directory,
                        info.agent, info.model, info.state, info.system_prompt, info.created_at, info.updated_at,
                        len(rows), messages, t_in, t_out, decimal_to_pico(cost), meta,
                    ),
                )  # fmt: skip
            except sqlite3.IntegrityError:
                raise InvalidInput(f"session {sid} already exists") from None
            # Derived indexes that `append` maintains must be fed here too, in this same transaction.
            conn.executemany(
                "INSERT INTO entries (session_id, seq, kind, created_at, payload) VALUES (?,?,?,?,?)", rows
            )
            searchindex.mark_pending(conn, sid, 1, len(rows))
            return self._get_row(conn, sid)

        return tx

    async def replace_session(
        self, session_id: str, sessions: Sequence[tuple[SessionInfo, Sequence[Entry]]], record: AuditDraft
    ) -> list[SessionInfo]:
        check_id(session_id, "session id")
        writes = [self._importing(info, entries) for info, entries in sessions]

        def tx(conn: sqlite3.Connection) -> list[SessionInfo]:
            self._delete_tree(conn, session_id)
            made = [write(conn) for write in writes]
            auditsql.insert(conn, record)
            return made

        return await self._write(tx)

    # --- search ------------------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        directory: str | None = None,
        session_id: str | None = None,
        role: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
        include_reverted: bool = False,
    ) -> list[SearchHit]:
        check_search_filters(role, limit, session_id)
        with self._reading("search") as conn:
            pending = searchindex.has_pending(conn)
        if pending:
            await self._flush_index(searchindex.SEARCH_FLUSH)
        with self._reading("search") as conn:
            return searchindex.search(
                conn, query, directory=directory, session_id=session_id, role=role, since=since,
                until=until, limit=limit, include_reverted=include_reverted,
            )  # fmt: skip

    async def reverted_spans(self, session_id: str) -> list[RevertSpan]:
        check_id(session_id, "session id")
        with self._reading() as conn:
            self._get_row(conn, session_id)
            return searchindex.reverted_spans(conn, session_id)

    async def _flush_index(self, limit: int) -> None:
        """Move up to `limit` pending entries into the FTS index, in one write transaction."""
        self._unindexed = 0
        await self._write(lambda conn: searchindex.flush(conn, limit))

    def _flush_index_now(self) -> None:
        """The flush an append does now and then, after its own commit: it must not fail the append that
        was already committed, nor wait for another process's lock. What it leaves waits for the next one."""
        self._unindexed = 0
        try:
            self._try_write(lambda conn: searchindex.flush(conn, searchindex.FLUSH_EVERY * 2))
        except (_Busy, StoreError):
            pass

    async def search_backlog(self, *, before: float | None = None) -> int:
        with self._reading() as conn:
            return searchindex.backlog(conn, before)[0]

    async def backfill_search(self, *, batch: int = 500) -> AsyncIterator[BackfillProgress]:
        check_limit(batch)
        done = indexed = 0
        while True:
            self._unindexed = 0  # a flush: the next append-time flush is FLUSH_EVERY appends from here
            count, finished = await self._write(lambda conn: searchindex.flush(conn, batch))
            if not count:
                if indexed >= searchindex.OPTIMIZE_AFTER:
                    await self._write(searchindex.optimize)
                return
            indexed += count
            done += finished
            with self._reading() as conn:
                backlog, left = searchindex.backlog(conn)
            yield BackfillProgress(sessions_done=done, sessions_left=left, entries_indexed=indexed, backlog=backlog)
            await asyncio.sleep(0)  # appends and reads go on between batches

    async def reset_search(self) -> int:
        """Make the search index again from the journal, the truth: its tables dropped and made anew, every
        stored entry waiting to be indexed (`backfill_search` does it; a search, a batch at a time). The repair
        of an index that is damaged or out of step with its journal; nothing of the journal is written.
        Returns the entries waiting.

        An index whose own pages are damaged cannot be dropped (SQLite reads a table's pages to free them):
        once the journal's tables pass their check, the index's are cut out of the file's schema and the
        file is rewritten without them (VACUUM). A journal that fails its check is `StoreCorrupt`, and
        nothing is changed: restore a backup."""
        await asyncio.to_thread(self._drop_damaged_index)

        def tx(conn: sqlite3.Connection) -> None:
            searchindex.drop(conn)
            for statement in _statements(searchindex.SCHEMA):
                conn.execute(statement)
            searchindex.mark_all_pending(conn)

        self._unindexed = 0
        await self._write(tx)
        return await self.search_backlog()

    def _drop_damaged_index(self) -> None:
        """If the file fails its `quick_check`: the index's tables cut out of the schema and the file
        rewritten, provided the journal's tables are sound (else `StoreCorrupt`); otherwise nothing."""
        with self._reading("rebuild the search index of") as conn:
            try:
                if conn.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok":
                    return
            except sqlite3.Error as e:
                if not is_corrupt(e):
                    raise
            try:
                problems = health.journal_problems(conn)
            except sqlite3.Error as e:
                if not is_corrupt(e):
                    raise
                problems = [" ".join(str(e).split())]
            if problems:
                raise StoreCorrupt(
                    f"the database {self.path} is damaged beyond its search index ({problems[0]}), so nothing was "
                    "rebuilt",
                    RESTORE,
                    path=self.path,
                )
            names = (*searchindex.TABLES, *searchindex.SHADOW_TABLES)
            marks = ", ".join("?" * len(names))
            conn.execute("PRAGMA writable_schema = ON")
            try:
                conn.execute("BEGIN IMMEDIATE")
                (version,) = conn.execute("PRAGMA schema_version").fetchone()
                conn.execute(f"DELETE FROM sqlite_master WHERE tbl_name IN ({marks})", names)
                # other connections read the schema again when its version moves
                conn.execute(f"PRAGMA schema_version = {int(version) + 1}")
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            finally:
                conn.execute("PRAGMA writable_schema = OFF")
            conn.execute("VACUUM")  # the cut-out pages are gone from the rewritten file

    # --- the change feed ---------------------------------------------------------------------------

    async def changed_sessions(self, after: int = 0, *, limit: int = 1000) -> ChangedSessions:
        check_changed_sessions(after, limit)
        sql = (
            f"SELECT c.change, c.session_id, s.{_SESSION_COLS.replace(', ', ', s.')} FROM session_changes c"
            " LEFT JOIN sessions s ON s.id = c.session_id WHERE c.change >= ? ORDER BY c.change LIMIT ?"
        )
        with self._reading() as conn:
            rows = conn.execute(sql, (after, limit + 1)).fetchall()
            if not rows and after > 0:  # nothing at or after it: is it a position this file ever gave?
                top = conn.execute("SELECT max(change) FROM session_changes").fetchone()[0] or 0
                if after > top:  # another file put in this one's place: from the start
                    after = 0
                    rows = conn.execute(sql, (after, limit + 1)).fetchall()
        sessions = [self._row_to_info(r[2:]) for r in rows if r[2] is not None]
        deleted = [r[1] for r in rows if r[2] is None]
        position = rows[-1][0] if rows else after
        more = len(rows) > limit
        return ChangedSessions(sessions=sessions, deleted=deleted, position=position, more=more)

    # --- artifacts ---------------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, media_type: str = "text/plain") -> str:
        aid = artifact_id(data)

        def tx(conn: sqlite3.Connection) -> str:
            conn.execute(
                "INSERT OR IGNORE INTO artifacts (id, media_type, size, created_at, data) VALUES (?,?,?,?,?)",
                (aid, media_type, len(data), time.time(), bytes(data)),
            )
            return aid

        return await self._write(tx)

    async def get_artifact(self, artifact_id: str) -> bytes:
        check_artifact_id(artifact_id)
        rows = self._read("SELECT data FROM artifacts WHERE id = ?", (artifact_id,))
        if not rows:
            raise NotFound(f"no artifact {artifact_id}")
        return bytes(rows[0][0])

    async def list_artifacts(self, *, after: str | None = None, limit: int = 1000) -> list[ArtifactInfo]:
        check_artifact_listing(after, limit)
        rows = self._read(
            "SELECT id, media_type, size FROM artifacts WHERE id > ? ORDER BY id LIMIT ?", (after or "", limit)
        )
        return [ArtifactInfo(id=aid, media_type=media_type, size=size) for aid, media_type, size in rows]

    # --- leases ------------------------------------------------------------------------------------------
    #
    # A session's lease row, once written, stays until the session is deleted: releasing it sets its
    # expires_at to 0 (expired: free), and taking a free one is one conditional UPDATE, with no read before
    # it. Each is then an in-place update of one row; the INSERT OR REPLACE and the DELETE of before also
    # wrote the primary key's index, and acquire read the whole session row first. bench/manager.py: a run's
    # acquire + release went from 4.7 to 2.9 times a bare write transaction (two transactions: 2 at best).

    def _lease_row(self, conn: sqlite3.Connection, session_id: str) -> Lease | None:
        """The session's lease row as it is (maybe expired, or released: expires_at 0), or None when it never
        had one; a missing session is `SessionNotFound`."""
        row = conn.execute(_LEASE_SQL, (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        if row[0] is None:
            return None
        request = row[5] if row[5] in LEASE_REQUESTS else None
        return Lease(
            session_id=session_id,
            holder=row[0],
            pid=row[1],
            host=row[2],
            since=row[3],
            expires_at=row[4],
            request=request,
        )

    async def acquire_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl: float,
        pid: int | None = None,
        host: str | None = None,
        take_from: str | None = None,
    ) -> Lease:
        check_lease(session_id, holder, ttl)
        if take_from == holder:
            take_from = None  # a live lease of its own is renewed, as without take_from (its request stays)

        def tx(conn: sqlite3.Connection) -> Lease:
            now = time.time()
            expires_at = now + ttl
            # The common case in one statement: a lease row that is free (released or expired) or whose dead
            # holder is being taken over. A row exists only for a session that exists.
            args: tuple[Any, ...] = (holder, pid, host, now, expires_at, session_id, now)
            if take_from is not None:
                args += (session_id, take_from)
            if conn.execute(_LEASE_TAKE_FREE_SQL if take_from is None else _LEASE_TAKE_OVER_SQL, args).rowcount:
                return Lease(session_id=session_id, holder=holder, pid=pid, host=host, since=now, expires_at=expires_at)
            current = self._lease_row(conn, session_id)  # no row yet, or a live one: ours (renewing) or not
            if current is not None and current.holder != holder:
                raise current.busy()
            since = current.since if current is not None else now  # renewing keeps its start and its request
            request = current.request if current is not None else None
            args = (holder, pid, host, since, expires_at, request, session_id)
            conn.execute(_LEASE_TAKE_SQL if current is not None else _LEASE_INSERT_SQL, args)
            return Lease(
                session_id=session_id,
                holder=holder,
                pid=pid,
                host=host,
                since=since,
                expires_at=expires_at,
                request=request,
            )

        try:  # inline, as an append: a coroutine less on the path of every run's start
            return self._try_write(tx)
        except _Busy:
            return await self._write(tx)

    async def renew_lease(self, session_id: str, holder: str, *, ttl: float) -> Lease:
        check_lease(session_id, holder, ttl)

        def tx(conn: sqlite3.Connection) -> Lease:
            now = time.time()
            current = self._lease_row(conn, session_id)
            if current is None or current.holder != holder or current.expires_at <= now:
                raise lease_lost(
                    session_id, holder, current if current is not None and current.expires_at > now else None
                )
            conn.execute("UPDATE leases SET expires_at = ? WHERE session_id = ?", (now + ttl, session_id))
            return msgspec.structs.replace(current, expires_at=now + ttl)

        return await self._write(tx)

    async def release_lease(self, session_id: str, holder: str) -> bool:
        check_lease(session_id, holder)

        # expired (even if nobody took it) and still the holder's: released, as it would have been at once
        def tx(conn: sqlite3.Connection) -> bool:
            return bool(conn.execute(_LEASE_RELEASE_SQL, (session_id, holder)).rowcount)

        try:
            return self._try_write(tx)
        except _Busy:
            return await self._write(tx)

    async def request_lease(self, session_id: str, request: LeaseRequest) -> Lease | None:
        check_lease_request(session_id, request)

        def tx(conn: sqlite3.Connection) -> Lease | None:
            current = self._lease_row(conn, session_id)
            if current is None or current.expires_at <= time.time():
                return None
            if current.request == "cancel":
                return current  # a cancel stands: a later pause does not soften it
            conn.execute("UPDATE leases SET request = ? WHERE session_id = ?", (request, session_id))
            return msgspec.structs.replace(current, request=request)

        return await self._write(tx)

    async def get_lease(self, session_id: str) -> Lease | None:
        check_id(session_id, "session id")
        with self._reading() as conn:
            lease = self._lease_row(conn, session_id)
        return lease if lease is not None and lease.expires_at > time.time() else None

    # --- streams -------------------------------------------------------------------------------------------
    # One row per session, replaced in place by a single UPSERT (one small write transaction per save: the
    # cost of a durable stream is bounded by how often a run saves, see `tether.runtime.streaming`).

    async def save_stream(self, session_id: str, after_seq: int, message: Message) -> None:
        payload = check_stream(session_id, after_seq, message).decode()

        def tx(conn: sqlite3.Connection) -> int:
            return conn.execute(_STREAM_SQL, (session_id, after_seq, time.time(), payload, session_id)).rowcount

        if not await self._write(tx):
            raise SessionNotFound(session_id)

    async def get_stream(self, session_id: str) -> StreamRecord | None:
        check_id(session_id, "session id")
        with self._reading() as conn:
            row = conn.execute(
                "SELECT s.id, t.after_seq, t.updated_at, CAST(t.payload AS BLOB) FROM sessions s"
                " LEFT JOIN streams t ON t.session_id = s.id WHERE s.id = ?",
                (session_id,),
            ).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        if row[1] is None:
            return None
        try:
            message = _message_decoder.decode(row[3])
        except (msgspec.DecodeError, msgspec.ValidationError):
            log_corrupt(CorruptEntry(session_id, row[1] + 1, "its streamed answer could not be read; it is left out"))
            return None
        return StreamRecord(session_id=session_id, after_seq=row[1], updated_at=row[2], message=message)

    async def drop_stream(self, session_id: str) -> bool:
        check_id(session_id, "session id")
        return bool(
            await self._write(
                lambda conn: conn.execute("DELETE FROM streams WHERE session_id = ?", (session_id,)).rowcount
            )
        )

    # --- shares --------------------------------------------------------------------------------------------

    async def create_share(
        self, session_id: str, token_hash: bytes, *, expires_at: float | None = None, id: str | None = None
    ) -> Share:
        check_share(session_id, token_hash, expires_at, id)
        share = Share(id=id or new_id("shr"), session_id=session_id, created_at=time.time(), expires_at=expires_at)

        def tx(conn: sqlite3.Connection) -> Share:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
                raise SessionNotFound(session_id)
            try:
                conn.execute(
                    "INSERT INTO shares (id, session_id, token_hash, created_at, expires_at) VALUES (?,?,?,?,?)",
                    (share.id, session_id, token_hash, share.created_at, expires_at),
                )
            except sqlite3.IntegrityError:
                raise InvalidInput("a share with this id or token already exists") from None
            auditsql.insert(conn, _share_made(share))
            return share

        return await self._write(tx)

    async def share_by_token(self, token_hash: bytes) -> Share | None:
        check_token_hash(token_hash)
        rows = self._read(f"SELECT {_SHARE_COLS} FROM shares WHERE token_hash = ?", (token_hash,))
        return _share(rows[0]) if rows else None

    async def list_shares(self, session_id: str | None = None) -> list[Share]:
        if session_id is None:
            return [_share(r) for r in self._read(f"SELECT {_SHARE_COLS} FROM shares ORDER BY created_at, id")]
        check_id(session_id, "session id")
        with self._reading() as conn:
            self._get_row(conn, session_id)
            sql = f"SELECT {_SHARE_COLS} FROM shares WHERE session_id = ? ORDER BY created_at, id"
            return [_share(r) for r in conn.execute(sql, (session_id,))]

    async def share_records(self, session_id: str) -> list[tuple[Share, bytes]]:
        check_id(session_id, "session id")
        with self._reading() as conn:
            self._get_row(conn, session_id)
            sql = f"SELECT {_SHARE_COLS}, token_hash FROM shares WHERE session_id = ? ORDER BY created_at, id"
            return [(_share(r[:5]), bytes(r[5])) for r in conn.execute(sql, (session_id,))]

    async def restore_share(self, share: Share, token_hash: bytes) -> bool:
        check_restored_share(share, token_hash)

        def tx(conn: sqlite3.Connection) -> bool:
            self._get_row(conn, share.session_id)
            if conn.execute("SELECT 1 FROM shares WHERE id = ?", (share.id,)).fetchone() is not None:
                return False
            try:
                conn.execute(
                    "INSERT INTO shares (id, session_id, token_hash, created_at, expires_at, revoked_at)"
                    " VALUES (?,?,?,?,?,?)",
                    (share.id, share.session_id, token_hash, share.created_at, share.expires_at, share.revoked_at),
                )
            except sqlite3.IntegrityError:
                raise InvalidInput("another share has this token") from None
            return True

        return await self._write(tx)

    async def revoke_share(self, share_id: str) -> Share:
        check_id(share_id, "share id")

        def tx(conn: sqlite3.Connection) -> Share:
            revoked = conn.execute(
                "UPDATE shares SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (time.time(), share_id)
            ).rowcount
            row = conn.execute(f"SELECT {_SHARE_COLS} FROM shares WHERE id = ?", (share_id,)).fetchone()
            if row is None:
                raise NotFound(f"no share {share_id}")
            if revoked:
                auditsql.insert(conn, _share_revoked(_share(row)))
            return _share(row)

        return await self._write(tx)

    # --- the audit trail --------------------------------------------------------------------------------------

    async def append_audit(self, draft: AuditDraft) -> AuditRecord:
        return await self._write(lambda conn: auditsql.insert(conn, draft))

    async def list_audit(
        self,
        *,
        after: int = 0,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        kind: str | None = None,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        check_audit_filters(after, session_id, kind, limit)
        with self._reading() as conn:
            return auditsql.select(
                conn, after=after, since=since, until=until, session_id=session_id, kind=kind, limit=limit
            )

    async def audit_head(self) -> tuple[int, str] | None:
        with self._reading() as conn:
            return auditsql.head(conn)

    async def prune_audit(self, before: float) -> int:
        now = time.time()
        return await self._write(lambda conn: auditsql.prune(conn, before, now))

    # --- event sinks' positions -----------------------------------------------------------------------------

    async def sink_positions(self, sink: str) -> dict[str, int]:
        rows = self._read("SELECT session_id, seq FROM sink_positions WHERE sink = ?", (sink,))
        return {str(r[0]): int(r[1]) for r in rows}

    async def save_sink_positions(self, sink: str, positions: dict[str, int]) -> None:
        if not positions:
            return
        rows = [(sink, sid, seq) for sid, seq in positions.items()]

        def tx(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO sink_positions (sink, session_id, seq) VALUES (?,?,?) ON CONFLICT (sink, session_id)"
                " DO UPDATE SET seq = max(seq, excluded.seq)",
                rows,
            )

        await self._write(tx)

    # --- event numbers and the change feed --------------------------------------------------------------------

    async def reserve_numbers(self, session_id: str, floor: int, count: int) -> int:
        check_reservation(session_id, floor, count)
        return await self._write(lambda conn: feedsql.reserve(conn, session_id, floor, count))

    async def append_change(
        self, kind: str, *, session_id: str | None = None, data: dict[str, Any] | None = None
    ) -> Change:
        body = check_change(kind, session_id, {} if data is None else data)
        at = time.time()
        change_id = await self._write(lambda conn: feedsql.append(conn, at, kind, session_id, body))
        return Change(id=change_id, at=at, kind=kind, session_id=session_id, data=json.loads(body))

    async def changes_after(self, after: int, limit: int = 500) -> list[Change]:
        check_changes_after(after, limit)
        with self._reading() as conn:
            return feedsql.after(conn, after, limit)

    async def last_change_id(self) -> int:
        with self._reading() as conn:
            return feedsql.last_id(conn)

    # --- the prompt queue ------------------------------------------------------------------------------

    async def enqueue_prompt(self, session_id: str, body: bytes) -> QueuedPrompt:
        check_id(session_id, "session id")
        data = bytes(body)
        return await self._write(lambda conn: queuesql.enqueue(conn, session_id, data))

    async def queued_prompts(self, session_id: str) -> list[QueuedPrompt]:
        with self._reading() as conn:
            return queuesql.of_session(conn, session_id)

    async def queued_sessions(self) -> list[str]:
        with self._reading() as conn:
            return queuesql.sessions(conn)

    async def drop_prompt(self, session_id: str, prompt_id: int) -> bool:
        return await self._write(lambda conn: queuesql.drop(conn, session_id, prompt_id))


_SHARE_COLS = "id, session_id, created_at, expires_at, revoked_at"


def _share(row: Sequence[Any]) -> Share:
    return Share(id=row[0], session_id=row[1], created_at=row[2], expires_at=row[3], revoked_at=row[4])


class _Checkpointer:
    """A daemon thread with its own connection that checkpoints the WAL after every `every` commits of the
    store, so that the WAL stays small without any append paying for a whole checkpoint.

    A checkpoint bounds the WAL only if the next write then starts it over from the beginning, and SQLite
    does that only when a write begins while every frame of the WAL is in the database. A PASSIVE
    checkpoint beside a writer that keeps appending never gets there: it copies the frames it saw while new
    ones arrive, and the WAL grew by every append (255 MiB after bench/store.py's 20,000, each append
    writing to a longer file). So the bulk is copied PASSIVE, beside the writer; then what the store wrote
    meanwhile is copied holding the store's lock, and the store's next write finds the WAL all copied and
    starts it over, writing over pages the file already has. The store's writes and reads wait for that
    second, short checkpoint only: a few hundred pages and their fsyncs, ~1.5 ms here, once per `every`
    commits (the append that meets it, and the one that starts the WAL over with an fsync of its header,
    are the slowest ~1% of a run of back-to-back appends). On a slow disk, while appends keep coming, it is
    longer: the wait then paces the writer to the disk. When more than CHECKPOINT_LOCKED_ROWS rows were
    written beside the first (a fork, an import, a delete), there is no second: the next checkpoint tries
    again. Other processes' writers never wait for either."""

    def __init__(self, path: str, lock: threading.RLock, every: int = CHECKPOINT_EVERY) -> None:
        self.path = path
        self.every = every
        self._lock = lock
        self._count = 0
        self._changes = 0  # the store connection's total_changes after its latest commit
        self._kick = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.error: StoreError | None = None
        """What the latest checkpoint failed with (None after one succeeds)."""

    def committed(self, total_changes: int) -> None:
        """After each commit of the store, under its lock, with its connection's `total_changes`."""
        self._changes = total_changes
        self._count += 1
        if self._count % self.every == 0:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tether-checkpoint", daemon=True)
                self._thread.start()
            self._kick.set()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 1000")
        except sqlite3.Error as e:
            # The store's own connection meets the same fault and reports it; a thread's traceback would not.
            self.error = store_fault(e, self.path, "checkpoint")
            return
        try:
            while True:
                self._kick.wait()
                self._kick.clear()
                if self._stopping:
                    return
                try:
                    self.checkpoint(conn)
                    self.error = None
                except sqlite3.Error as e:
                    # Busy or locked: the next kick tries again. A full disk or a damaged page: the store's
                    # next write or read meets it too, and says so; the WAL only grows meanwhile.
                    self.error = store_fault(e, self.path, "checkpoint")
        finally:
            conn.close()

    def checkpoint(self, conn: sqlite3.Connection) -> None:
        before = self._changes
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        with self._lock:
            if self._changes - before <= CHECKPOINT_LOCKED_ROWS:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def stop(self) -> None:
        self._stopping = True
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def _usage(conn: sqlite3.Connection, session_id: str, first: int, last: int) -> tuple[int, int, int, int]:
    """(messages, input tokens, output tokens, cost in picodollars) of entries first..last of a session, as
    `append` counted them (`message_counters`); an entry that is not valid JSON counts for nothing."""
    messages, t_in, t_out, cost = 0, 0, 0, 0
    for usage_in, usage_out, usage_cost in conn.execute(
        "SELECT json_extract(payload, '$.usage.input_tokens'), json_extract(payload, '$.usage.output_tokens'),"
        " json_extract(payload, '$.usage.cost') FROM entries"
        " WHERE session_id = ? AND seq BETWEEN ? AND ? AND kind = 'message' AND json_valid(payload)",
        (session_id, first, last),
    ):
        messages += 1
        t_in += usage_in or 0
        t_out += usage_out or 0
        if usage_cost is not None:
            cost += decimal_to_pico(Decimal(str(usage_cost)))
    return messages, t_in, t_out, cost


def check_file(path: str | os.PathLike[str], *, full: bool = True) -> list[Finding]:
    """Check the tether database at `path` without writing to it: it opens, its pages and indexes are sound
    (`full`: ``integrity_check``, else ``quick_check``), its schema is one this tether knows, its entries
    decode, and its search index agrees with the journal (`full`: row by row). Never creates, migrates or
    repairs anything; a missing file is reported, not made."""
    return health.check_file(os.fspath(path), full=full, known_version=SCHEMA_VERSION)


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
