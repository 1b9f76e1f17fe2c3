"""`PostgresStore`: sessions in a PostgreSQL database that many processes and machines share (the
`postgres` extra: psycopg 3 and its pool, imported only when a ``postgresql://`` URL is opened).

Opening migrates the schema (`pgschema.migrate`, under an advisory lock: two nodes may start at once) on a
connection of its own; the work then goes through an `AsyncConnectionPool` of autocommit connections, one per
event loop, the connection of its last operation kept aside for the next (`_Loop`). An append is one
statement, so one round trip and one transaction: the session row's UPDATE checks the expected seq and bumps
the counters, and the entries are inserted from its RETURNING (their search terms are made by a flush after
it, which every search makes first: `_index_pending`); `synchronous_commit`
is left as the server has it (on: a commit is acknowledged after its WAL is flushed). A write runs to its end
even when the task awaiting it is cancelled. A connection lost mid-operation is `StoreConnectionLost` (the
write was committed whole or not at all); the pool drops a connection the server closed before it hands it out
again, so the next operation works.

PostgreSQL text cannot hold NUL: text columns (title, directory...) are stored with NUL and SOH escaped
(`_esc`), which keeps equality (a directory filter) exact; JSON columns are text too (msgspec escapes NUL
there, and jsonb would refuse ``\\u0000``)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import select
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgspec

from ..errors import (
    CorruptEntry,
    InvalidInput,
    MissingExtra,
    NotFound,
    SeqConflict,
    SessionNotFound,
    StoreBusy,
    StoreClosed,
    StoreConnectionLost,
    StoreError,
    StoreFull,
    StorePermission,
    StoreUnavailable,
)
from ..ids import check_id, new_id, new_session_id
from ..messages import Entry, EntryBody, Message, Revert, TitleChange, decode_body, encode_body, encode_json, kind_of
from . import pgschema
from .audit import GENESIS, AuditDraft, AuditRecord, audit_where, canonical_json, pruned_draft, seal
from .audit import created as _created
from .audit import deleted as _deleted
from .audit import forked as _forked
from .audit import imported as _imported
from .audit import reverted as _reverted
from .audit import share_made as _share_made
from .audit import share_revoked as _share_revoked
from .bookkeeping import artifact_id, decimal_to_pico, message_counters, pico_to_decimal, title_candidate
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
from .reverts import hidden_spans, is_hidden
from .searchtext import document, excerpt_of, indexed_text, query_terms, tokens
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

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ModuleNotFoundError as _missing:  # pragma: no cover - the extra is installed wherever tests run
    raise MissingExtra("postgres", _missing.name or "psycopg") from _missing

R = TypeVar("R")
SCHEMA_VERSION = pgschema.SCHEMA_VERSION
ROLES = {"user": 1, "assistant": 2, "tool": 3}
ROLE_NAMES = {v: k for k, v in ROLES.items()}

# --- NUL in text -------------------------------------------------------------------------------------------

_ESC = re.compile("[\x00\x01]")
_UNESC = re.compile("\x01[\x01\x02]")


def _esc(value: str | None) -> str | None:
    """`value` without NUL, reversibly: NUL is SOH SOH and SOH is SOH STX (equal texts stay equal)."""
    if value is None or ("\x00" not in value and "\x01" not in value):
        return value
    return _ESC.sub(lambda m: "\x01\x01" if m.group() == "\x00" else "\x01\x02", value)


def _unesc(value: str | None) -> str | None:
    if value is None or "\x01" not in value:
        return value
    return _UNESC.sub(lambda m: "\x00" if m.group() == "\x01\x01" else "\x01", value)


# --- SQL -----------------------------------------------------------------------------------------------------

log = logging.getLogger("tether.store")

_SESSION_COLS = (
    "id, created_at, updated_at, title, directory, parent_id, forked_from, forked_at, agent, model, state, "
    "system_prompt, entry_count, message_count, input_tokens, output_tokens, cost_pico, metadata"
)
_APPEND_HEAD = """
WITH newest AS (SELECT max(updated_at) AS at FROM sessions),
s AS (
    UPDATE sessions SET
        entry_count = entry_count + %(n)s, message_count = message_count + %(messages)s,
        input_tokens = input_tokens + %(t_in)s, output_tokens = output_tokens + %(t_out)s,
        cost_pico = cost_pico + %(cost)s,
        title = CASE %(title_mode)s::text WHEN 'set' THEN %(title)s::text
            WHEN 'default' THEN coalesce(title, %(title)s::text) ELSE title END,
        updated_at = CASE
            WHEN updated_at < newest.at AND newest.at - %(now)s < 1.0 THEN greatest(%(now)s, newest.at + 1e-6)
            WHEN updated_at < newest.at OR %(now)s - updated_at >= 1.0 THEN %(now)s
            ELSE updated_at END
    FROM newest
    WHERE id = %(sid)s AND (%(expect)s::bigint IS NULL OR entry_count = %(expect)s::bigint - 1)
    RETURNING entry_count - %(n)s AS base, greatest(%(now)s, updated_at) AS at
),
ins AS (
    INSERT INTO entries (session_id, seq, kind, created_at, payload, role)
    SELECT %(sid)s, s.base + t.ord, t.kind, coalesce(t.at, s.at), t.payload, t.role
"""
_APPEND_MARK = """    RETURNING seq
),
queued AS (INSERT INTO search_queue (session_id, seq) SELECT %(sid)s, seq FROM ins)
SELECT base, at FROM s
"""
"""Every appended entry queued: a message for its search terms, and each row, stamped with the transaction's id
(`pgschema._V9`), the append's mark in the sessions' change cursor until the flush carries it into
`session_changes`."""
_APPEND_SQL = (
    _APPEND_HEAD
    + """    FROM s, unnest(%(kinds)b::text[], %(payloads)b::text[], %(times)b::float8[], %(roles)b::int2[])
        WITH ORDINALITY AS t(kind, payload, at, role, ord)
"""
    + _APPEND_MARK
)
_APPEND_ONE_SQL = (
    _APPEND_HEAD
    + """    FROM s, (VALUES (%(kind)s::text, %(payload)s::text, %(time)s::float8, %(role)s::int2, 1))
        AS t(kind, payload, at, role, ord)
"""
    + _APPEND_MARK
)
"""The append, one statement, its session marked in the change cursor by its queue rows. The session's `updated_at` moves only
when that changes the listing's order or a second passed (an index write less on most appends: the row's update
stays HOT); when another session is newer by a clock a little ahead, it goes just above it (as in
`SqliteStore.append`). A message's search terms are not made here: it waits in `search_queue` for the next
flush (`_INDEX_SQL`), which every search makes first."""
_POSITION_SQL = "SELECT entry_count FROM sessions WHERE id = %s"
_TERMS_CONFLICT = (
    " ON CONFLICT (session_id, seq) DO UPDATE SET role = excluded.role, created_at = excluded.created_at,"
    " terms = excluded.terms"
)
"""How terms are written over a row already there for the same key (left by an older tether's delete): by an
import, a fork and a flush alike."""
_INSERT_ENTRIES_SQL = (
    """
WITH t AS (
    SELECT * FROM unnest(%(seqs)b::int8[], %(kinds)b::text[], %(payloads)b::text[], %(times)b::float8[],
        %(roles)b::int2[], %(docs)b::text[]) AS t(seq, kind, payload, at, role, doc)
),
ins AS (
    INSERT INTO entries (session_id, seq, kind, created_at, payload, role)
    SELECT %(sid)s, seq, kind, at, payload, role FROM t
)
INSERT INTO entry_terms (session_id, seq, role, created_at, terms)
SELECT %(sid)s, seq, role, at, to_tsvector('tether_search', doc) FROM t WHERE doc IS NOT NULL
"""
    + _TERMS_CONFLICT
)
"""An import's entries, and their search terms made at once (a bulk write: no queue)."""
_QUEUED_SQL = (
    "SELECT q.session_id, q.seq, e.role, e.created_at, CASE WHEN e.role IS NOT NULL THEN e.payload END"
    " FROM search_queue q LEFT JOIN entries e USING (session_id, seq) ORDER BY q.session_id, q.seq LIMIT %s"
)
"""The head of the queue, read without locks: the words of a batch are made on the client with no transaction
open (no row of the queue is held across a round trip or while this process works). An entry with no role
has no words (a tool's output, a title: a change mark only, `pgschema._V9`): its payload is not sent."""
_INDEX_SQL = (
    """
WITH k AS MATERIALIZED (
    SELECT q.session_id, q.seq FROM search_queue q
    JOIN unnest(%(ksids)s::text[], %(kseqs)s::int8[]) AS k(sid, seq) ON q.session_id = k.sid AND q.seq = k.seq
    ORDER BY q.session_id, q.seq FOR UPDATE OF q
),
d AS (
    DELETE FROM search_queue q USING k WHERE q.session_id = k.session_id AND q.seq = k.seq
    RETURNING q.session_id, q.seq, q.xid
),
marks AS (
    INSERT INTO session_changes (session_id, xid)
    SELECT DISTINCT ON (session_id) session_id, xid FROM d ORDER BY session_id, xid DESC
    ON CONFLICT (session_id) DO UPDATE SET xid = EXCLUDED.xid WHERE session_changes.xid < EXCLUDED.xid
)
INSERT INTO entry_terms (session_id, seq, role, created_at, terms)
SELECT t.sid, t.seq, t.role, t.at, to_tsvector('tether_search', t.doc) FROM d
JOIN unnest(%(sids)s::text[], %(seqs)s::int8[], %(roles)s::int2[], %(times)s::float8[], %(docs)s::text[])
    AS t(sid, seq, role, at, doc) ON d.session_id = t.sid AND d.seq = t.seq
"""
    + _TERMS_CONFLICT
)
"""A batch taken off the queue and its terms written, one statement (its own transaction): the rows are locked
in key order (as `_delete_tree` locks a session's: neither waits for the other in a circle), and those that
another flush took meanwhile are waited for and then left out (`d`), so a search that flushed sees the terms of
every append committed before it began, made by it or by that other flush. A key without words (no entry
any more, a payload that does not decode) leaves the queue with no terms. A row with terms already (left by
an older tether's delete) takes the new ones."""
INDEX_EVERY = 256
"""Indexed entries a store appends before it flushes them in the background (a search flushes the rest)."""
CLOSE_FLUSH_S = 2.0
"""Seconds a store's close gives the flush of what it queued (the rest waits for another store's flush)."""
INDEX_BATCH = 64
"""Entries a flush indexes per transaction: the client makes their words (`_doc`, 40-60 µs a message here)
between two round trips, holding the event loop for that long: a few milliseconds, not the tens a batch of
hundreds would take from the runs and streams beside it."""
SEARCH_INDEX = 8_000
"""The most entries a search indexes before it runs (as SqliteStore's `SEARCH_FLUSH`): more than that waits in
the backlog for `backfill_search` (after a bulk load), while every later search indexes a share."""
_LEASE_COLS = "l.holder, l.pid, l.host, l.since, l.expires_at, l.request"
_LEASE_SQL = f"SELECT {_LEASE_COLS} FROM sessions s LEFT JOIN leases l ON l.session_id = s.id WHERE s.id = %s"
_LEASE_TAKE_FREE_SQL = (
    "UPDATE leases SET holder = %s, pid = %s, host = %s, since = %s, expires_at = %s, request = NULL"
    " WHERE session_id = %s AND (expires_at <= %s OR holder = %s)"
)
_STREAM_SQL = (
    "INSERT INTO streams (session_id, after_seq, updated_at, payload) SELECT %s, %s, %s, %s WHERE EXISTS"
    " (SELECT 1 FROM sessions WHERE id = %s) ON CONFLICT (session_id) DO UPDATE SET after_seq = excluded.after_seq,"
    " updated_at = excluded.updated_at, payload = excluded.payload"
)
_SHARE_COLS = "id, session_id, created_at, expires_at, revoked_at"
_AUDIT_SEAL_SQL = (
    "SELECT sealed_seq, sealed_prev, sealed_hash FROM tether_audit_seal(%(a_at)s::float8[], %(a_kind)s::text[],"
    " %(a_sid)s::text[], %(a_actor)s::text[], %(a_outcome)s::text[], %(a_detail)s::text[], %(a_middle)s::bytea[],"
    " %(genesis)s)"
)
"""Audit records appended after the head, in the caller's transaction (`pgschema._V5`)."""
_APPEND_SEALED_TAIL = """
SELECT base, at, (SELECT count(*) FROM tether_audit_seal(%(a_at)s::float8[], %(a_kind)s::text[], %(a_sid)s::text[],
    %(a_actor)s::text[], %(a_outcome)s::text[], %(a_detail)s::text[], %(a_middle)s::bytea[], %(genesis)s)
    WHERE s.base >= 0) FROM s
"""
"""The end of an append whose audit records go with it: sealed in the same statement (one round trip; the
trail's lock held only for the rest of it and the commit), and only when the append wrote (`s` has its row)."""
_AUDIT_COLS = "seq, at, kind, session_id, actor, outcome, detail, prev, hash"

_metadata_decoder = msgspec.json.Decoder(dict[str, Any])
_message_decoder = msgspec.json.Decoder(Message)


def _doc(body: EntryBody) -> tuple[int | None, str | None]:
    """(role number, the words the search index holds) of a body: None, None for what is not indexed. The
    words are `searchtext.tokens`, the split FTS5 makes, so that PostgreSQL only stems them."""
    text = indexed_text(body)
    if text is None:
        return None, None
    return ROLES[body.role], " ".join(tokens(document(text)))  # type: ignore[union-attr]


def _appended(bodies: Sequence[EntryBody]) -> tuple[list[str], list[str], list[int | None]]:
    """(kinds, payloads, role numbers) of an append's bodies: the role marks what the search index will hold
    (queued in `search_queue`), whose words are made by the next flush (`_index_batch`), not here."""
    kinds, payloads, roles = [], [], []
    for body in bodies:
        kinds.append(kind_of(body))
        payloads.append(encode_body(body).decode())
        roles.append(None if indexed_text(body) is None else ROLES[body.role])  # type: ignore[union-attr]
    return kinds, payloads, roles


def _encoded(bodies: Sequence[EntryBody]) -> tuple[list[str], list[str], list[int | None], list[str | None]]:
    """`_appended`, and the words of each body the search index holds: an import writes its terms at once."""
    return (*_appended(bodies), [_doc(body)[1] for body in bodies])


def _index_params(rows: Sequence[Any]) -> dict[str, Any]:
    """The parameters of `_INDEX_SQL` for queued rows (session id, seq, role, created_at, payload): every key,
    and the words of those with any (none for an entry gone, or a payload that does not decode: reading it
    reports the damage, `on_corrupt`)."""
    params: dict[str, list[Any]] = {k: [] for k in ("ksids", "kseqs", "sids", "seqs", "roles", "times", "docs")}
    for sid, seq, role, at, payload in rows:
        params["ksids"].append(sid)
        params["kseqs"].append(seq)
        if payload is None:
            continue
        try:
            doc = _doc(decode_body(payload))[1]
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
            continue
        if doc is not None:
            for key, value in (("sids", sid), ("seqs", seq), ("roles", role), ("times", at), ("docs", doc)):
                params[key].append(value)
    return params


def _audit_params(drafts: Sequence[AuditDraft]) -> dict[str, Any]:
    """The arrays `tether_audit_seal` takes: each draft's fields as stored, and the middle of the bytes its
    hash covers (`audit.record_bytes` without the seq and the prev that the server puts around it)."""
    return {
        "a_at": [d.at for d in drafts],
        "a_kind": [d.kind for d in drafts],
        "a_sid": [d.session_id for d in drafts],
        "a_actor": [_esc(d.actor) for d in drafts],
        "a_outcome": [_esc(d.outcome) for d in drafts],
        "a_detail": [canonical_json(d.detail).decode() for d in drafts],
        "a_middle": [canonical_json([d.at, d.kind, d.session_id, d.actor, d.outcome, d.detail])[1:-1] for d in drafts],
        "genesis": GENESIS,
    }


def _where(url: str) -> str:
    """The server and database a URL names, without its password, for messages."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        return f"{host}{port}{parts.path or '/'}"
    except ValueError:
        return "the PostgreSQL server"


def _ensure_idle(conn: Any) -> None:
    """Raise unless `conn` is an idle connection still open, without a round trip: an idle connection has
    nothing to read, unless the server closed it (a restart, `pg_terminate_backend`)."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    pgconn = conn.pgconn
    for _ in range(3):
        try:
            readable, _, _ = select.select([pgconn.socket], [], [], 0)
        except (OSError, ValueError) as e:
            raise psycopg.OperationalError(f"the connection's socket failed: {e}") from e
        if not readable:
            return
        # The server's goodbye, then the end of the stream (which stays readable), or a notification:
        # read what came; a connection that is still readable after that is at its end.
        pgconn.consume_input()
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            raise psycopg.OperationalError("the server closed the connection")
        while pgconn.notifies() is not None:
            pass
    raise psycopg.OperationalError("the server closed the connection")


async def _check_idle(conn: Any) -> None:
    """The pool's check of a connection it hands out (`_ensure_idle`): a closed one is dropped."""
    _ensure_idle(conn)


def _cursor(conn: Any) -> Any:
    """The cursor kept on `conn` for the append's statement: a connection is one operation's at a time, and a
    cursor that lives on keeps the dumpers it looked up for its parameters' types (`conn.execute` makes a new
    cursor, and looks them up again, each time). Only there: a cursor holds its last result until its next
    statement, and an append's is one row, where a read's may be a long session."""
    cur = getattr(conn, "_tether_cursor", None)
    if cur is None or cur.closed:
        cur = conn._tether_cursor = conn.cursor()
    return cur


_SPARE_FOR = 60.0
"""How long (seconds) a connection may go from one operation to the next without going back to the pool
(`_Loop`): then the pool's own upkeep (its checks, the connections' lifetime) reaches it again."""


class _Loop:
    """An event loop's pool, and the connection its last operation used, kept aside for the next one: the
    common case of one operation at a time takes no trip through the pool (a lock, its bookkeeping, and a
    round robin over its idle connections: each operation on another backend) and runs on a warm
    connection. `waiting` counts the operations waiting for the pool: a connection is never kept aside while
    one waits (with `max_size` 1 that one would wait for the connection kept aside)."""

    __slots__ = ("indexing", "pool", "since", "spare", "waiting")

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        self.pool = pool
        self.spare: Any = None
        self.since = 0.0
        self.waiting = 0
        self.indexing: asyncio.Task[None] | None = None  # the background flush of the search terms, while it runs


class PostgresStore:
    """The PostgreSQL backend of `Store`, opened from a ``postgresql://`` URL (libpq's form: user, password,
    host, port, database, and options such as ``?sslmode=require``).

    `durability` is accepted for every backend's sake: PostgreSQL's own `synchronous_commit` decides, and tether
    never turns it off (a commit is acknowledged once it is durable on the server). `min_size`/`max_size`
    bound the pool of each event loop; `timeout` is how long an operation waits for a connection (then
    `StoreBusy`), and `connect_timeout` how long opening waits for the server."""

    def __init__(
        self,
        url: str,
        *,
        durability: Durability = "normal",
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        on_corrupt: CorruptHandler | None = None,
    ) -> None:
        if durability not in ("normal", "full"):
            raise InvalidInput(f"durability must be 'normal' or 'full', not {durability!r}")
        if not 1 <= min_size <= max_size:
            raise InvalidInput(f"the pool needs 1 <= min_size <= max_size, not {min_size} and {max_size}")
        self.url = url
        self.where = _where(url)
        self.durability: Durability = durability
        self.on_corrupt: CorruptHandler = on_corrupt or log_corrupt
        self._sizes = (min_size, max_size)
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop] = weakref.WeakKeyDictionary()
        self._closed = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unindexed = 0  # entries this store queued (for the search index, and as marks) since it last flushed them
        self._migrate()

    # --- opening, the pool, errors ---------------------------------------------------------------------

    def _migrate(self) -> None:
        """Connect once, now, so that a wrong URL or a server that is down fails `open_store` itself, and
        bring the schema to this version (a blocking call, once per store, as SqliteStore's open)."""
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))) as conn:
                pgschema.migrate(conn)
        except pgschema.NewerSchema as e:
            raise StoreUnavailable(
                f"the database {self.where} was written by a newer tether ({e})",
                "upgrade tether, or open another store",
            ) from None
        except psycopg.Error as e:
            raise self._fault(e, "open") from e

    def _fault(self, e: BaseException, doing: str) -> StoreUnavailable | StoreBusy:
        """A psycopg or pool error as the store error that says what it is."""
        text = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, PoolTimeout):
            return StoreBusy(
                f"no connection to {self.where} came free within {self._timeout:g}s to {doing} it: every "
                "connection of the pool is busy, or the server does not answer"
            )
        if isinstance(e, pg_errors.QueryCanceled | pg_errors.LockNotAvailable | pg_errors.DeadlockDetected):
            return StoreBusy(f"PostgreSQL at {self.where} gave up waiting to {doing} it: {text}")
        if isinstance(e, pg_errors.DiskFull | pg_errors.OutOfMemory | pg_errors.ProgramLimitExceeded):
            return StoreFull(f"PostgreSQL at {self.where} could not {doing} it: {text}", "free space on the server")
        if isinstance(e, pg_errors.InsufficientPrivilege):
            return StorePermission(
                f"PostgreSQL at {self.where} refused to let tether {doing} it: {text}",
                "grant the role tether connects as what it needs on that database",
            )
        if isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
            if doing == "open":
                advice = "check the URL, and that the server is up and reachable from here"
            else:
                advice = (
                    "check that the server is up and reachable; a write that was under way was kept whole or not "
                    "at all, so read it back before trying it again"
                )
            return StoreConnectionLost(
                f"the connection to PostgreSQL at {self.where} failed while tether tried to {doing} it ({text})",
                advice,
            )
        return StoreUnavailable(f"PostgreSQL at {self.where} failed to {doing} it: {text}")

    async def _loop(self) -> _Loop:
        if self._closed:
            raise StoreClosed("the store is closed")
        loop = asyncio.get_running_loop()
        here = self._loops.get(loop)
        if here is None:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.url,
                min_size=self._sizes[0],
                max_size=self._sizes[1],
                timeout=self._timeout,
                kwargs={"autocommit": True, "connect_timeout": max(1, int(self._connect_timeout))},
                check=_check_idle,
                open=False,
                name=f"tether {self.where}",
            )
            here = self._loops[loop] = _Loop(pool)
            await pool.open(wait=False)
        return here

    async def _connection(self, here: _Loop) -> tuple[Any, float]:
        """A connection for one operation, and when it left the pool: the one kept aside when it is still
        open and idle, or the pool's (which checks it the same way)."""
        conn, since = here.spare, here.since
        if conn is not None:
            here.spare = None
            try:
                _ensure_idle(conn)
                return conn, since
            except psycopg.OperationalError:
                await conn.close()
                await here.pool.putconn(conn)  # closed: the pool opens another in its place
        here.waiting += 1
        # The pool is waited for in a task of its own: psycopg_pool waits with `asyncio.wait_for`, which on
        # Python 3.11 loses a cancel that comes as it hands a connection over, and the caller would go on as if
        # it had never been cancelled (a third of the cancels of waiting readers, with a pool of one). A cancel
        # of the caller ends its wait here for sure; a connection that comes after goes back to the pool.
        getting = asyncio.ensure_future(here.pool.getconn())
        try:
            conn = await asyncio.shield(getting)
        except asyncio.CancelledError:
            getting.add_done_callback(functools.partial(self._unwanted, here))
            raise
        finally:
            here.waiting -= 1
        return conn, time.monotonic()

    def _unwanted(self, here: _Loop, getting: asyncio.Future[Any]) -> None:
        """A connection the pool gave after its caller stopped waiting: back to the pool."""
        if getting.cancelled() or getting.exception() is not None:
            return
        task = getting.get_loop().create_task(here.pool.putconn(getting.result()))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _give_back(self, here: _Loop, conn: Any, since: float) -> None:
        """Keep `conn` aside for the next operation when it is idle and nothing waits for the pool; else
        back to the pool (which brings it back to idle, or replaces it)."""
        if (
            here.spare is None
            and not here.waiting
            and not self._closed
            and not conn.closed
            and conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
            and time.monotonic() - since < _SPARE_FOR
        ):
            here.spare, here.since = conn, since
        else:
            await here.pool.putconn(conn)

    async def _run(self, fn: Callable[[Any], Awaitable[R]], doing: str) -> R:
        """`fn(connection)` on a connection of this loop (`_Loop`); a failure of the server or of the
        connection as a `StoreError`. Reads only: see `_write`."""
        here = await self._loop()
        try:
            conn, since = await self._connection(here)
            try:
                return await fn(conn)
            finally:
                await self._give_back(here, conn, since)
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as e:
            if self._closed:
                raise StoreClosed("the store is closed") from None
            raise self._fault(e, doing) from e
        except psycopg.Error as e:
            if isinstance(e, pg_errors.UntranslatableCharacter | pg_errors.CharacterNotInRepertoire):
                raise InvalidInput(f"text that PostgreSQL cannot store ({' '.join(str(e).split())})") from None
            raise self._fault(e, doing) from e

    async def _read(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        async def go(conn: Any) -> list[Any]:
            cur = await conn.execute(sql, params)
            return list(await cur.fetchall())

        try:
            return await self._run(go, "read")
        except StoreConnectionLost:
            # a read changes nothing: once more, on a connection the pool has checked since
            return await self._run(go, "read")

    async def _write(self, fn: Callable[[Any], Awaitable[R]], doing: str = "write to") -> R:
        """Run a write to its end even when the awaiting task is cancelled (the caller stops waiting; the
        write commits or fails on its own), as SqliteStore's writes do: in a task of its own, which hands
        its outcome to the future the caller awaits (`asyncio.shield` without its relay through the task's
        done callback: one turn of the event loop less per write)."""
        outcome: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(self._settle(outcome, fn, doing))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await outcome

    async def _settle(self, outcome: asyncio.Future[R], fn: Callable[[Any], Awaitable[R]], doing: str) -> None:
        """`_run(fn)`, its result or its error set on `outcome`, unless the caller stopped waiting (then
        there is no one to give it to)."""
        try:
            result = await self._run(fn, doing)
        except asyncio.CancelledError:  # the loop is shutting down
            outcome.cancel()
            raise
        except BaseException as e:
            if not outcome.done():
                outcome.set_exception(e)
                outcome.exception()  # retrieved: a caller cancelled just after it was set never raises it
            if not isinstance(e, Exception):
                raise
        else:
            if not outcome.done():
                outcome.set_result(result)

    async def _tx(self, fn: Callable[[Any], Awaitable[R]], doing: str = "write to") -> R:
        """`fn(connection)` in one transaction (committed when it returns, rolled back when it raises)."""

        async def go(conn: Any) -> R:
            async with conn.transaction():
                return await fn(conn)

        return await self._write(go, doing)

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        running = asyncio.get_running_loop()
        under_way = [t for t in self._tasks if t.get_loop() is running]
        if under_way:  # writes still under way finish first
            await asyncio.gather(*under_way, return_exceptions=True)
        if self._unindexed and running in self._loops:
            # A writer that stops (`tether run`, a script) flushes what it queued since its last flush: short-lived
            # writers that never search would otherwise leave the queue growing (`changed_sessions` reads it whole).
            # Bounded: a server that is gone must not hold the close up for the pool's timeout.
            try:
                await asyncio.wait_for(self._index_pending(min(self._unindexed, INDEX_EVERY * 2)), CLOSE_FLUSH_S)
            except Exception:  # the rows wait, durably, for the next flush
                log.warning("the flush of %s's search terms on close failed", self.where, exc_info=True)
            self._unindexed = 0
        self._closed = True
        for loop, here in list(self._loops.items()):
            if loop is running:
                await self._close_loop(here)
            elif not loop.is_closed() and loop.is_running():
                asyncio.run_coroutine_threadsafe(self._close_loop(here), loop)
        self._loops.clear()

    @staticmethod
    async def _close_loop(here: _Loop) -> None:
        spare, here.spare = here.spare, None
        if spare is not None:
            await here.pool.putconn(spare)
        await here.pool.close()

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
            title=_unesc(row[3]),
            directory=_unesc(row[4]),
            parent_id=row[5],
            forked_from=row[6],
            forked_at=row[7],
            agent=_unesc(row[8]),
            model=_unesc(row[9]),
            state=row[10],
            system_prompt=_unesc(row[11]),
            entry_count=row[12],
            message_count=row[13],
            input_tokens=row[14],
            output_tokens=row[15],
            cost=pico_to_decimal(row[16]),
            metadata=metadata,
        )

    async def _get_row(self, conn: Any, session_id: str, *, lock: bool = False) -> SessionInfo:
        sql = f"SELECT {_SESSION_COLS} FROM sessions WHERE id = %s" + (" FOR UPDATE" if lock else "")
        row = await (await conn.execute(sql, (session_id,))).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return self._row_to_info(row)

    async def _exists(self, conn: Any, session_id: str) -> bool:
        cur = await conn.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,))
        return await cur.fetchone() is not None

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
        row = (sid, parent_id, _esc(title), _esc(directory), _esc(agent), _esc(model), state, _esc(system_prompt))

        async def tx(conn: Any) -> SessionInfo:
            if parent_id is not None and not await self._exists(conn, parent_id):
                raise SessionNotFound(parent_id)
            cur = await conn.execute(
                "INSERT INTO sessions (id, parent_id, title, directory, agent, model, state, system_prompt,"
                f" created_at, updated_at, metadata) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
                f" ON CONFLICT (id) DO NOTHING RETURNING {_SESSION_COLS}",
                (*row, created, now, meta),
            )
            made = await cur.fetchone()
            if made is None:
                raise InvalidInput(f"session {sid} already exists")
            await self._audit(conn, record)
            return self._row_to_info(made)

        return await self._tx(tx)

    async def get_session(self, session_id: str) -> SessionInfo:
        check_id(session_id, "session id")
        rows = await self._read(f"SELECT {_SESSION_COLS} FROM sessions WHERE id = %s", (session_id,))
        if not rows:
            raise SessionNotFound(session_id)
        return self._row_to_info(rows[0])

    async def update_session(self, session_id: str, **fields: Any) -> SessionInfo:
        changes = check_update(session_id, fields)
        if "metadata" in changes:
            changes["metadata"] = encode_json(changes["metadata"] or {}).decode()
        for name in ("title", "directory", "agent", "model", "system_prompt"):
            if name in changes:
                changes[name] = _esc(changes[name])
        changes["updated_at"] = time.time()
        assignments = ", ".join(f"{k} = %s" for k in changes)

        async def go(conn: Any) -> SessionInfo:
            cur = await conn.execute(
                f"UPDATE sessions SET {assignments} WHERE id = %s RETURNING {_SESSION_COLS}",
                (*changes.values(), session_id),
            )
            row = await cur.fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            return self._row_to_info(row)

        return await self._write(go)

    async def _delete_tree(self, conn: Any, session_id: str) -> list[str]:
        """Delete a session and its sub-agents' sessions (inside the caller's transaction); their ids."""
        cur = await conn.execute(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM sessions WHERE id = %s"
            " UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_id = t.id) SELECT id FROM tree",
            (session_id,),
        )
        ids = [r[0] for r in await cur.fetchall()]
        if not ids:
            raise SessionNotFound(session_id)
        await conn.execute("DELETE FROM entries WHERE session_id = ANY(%s)", (ids,))
        # The queue before the terms, its rows locked in key order as a flush locks them (no deadlock): a flush
        # under way on them is waited for, and the next statement (a newer snapshot) sees the terms it wrote.
        await conn.execute(
            "DELETE FROM search_queue WHERE (session_id, seq) IN (SELECT session_id, seq FROM search_queue"
            " WHERE session_id = ANY(%s) ORDER BY session_id, seq FOR UPDATE)",
            (ids,),
        )
        for table in ("entry_terms", "leases", "shares", "streams"):
            await conn.execute(f"DELETE FROM {table} WHERE session_id = ANY(%s)", (ids,))
        await conn.execute("DELETE FROM sessions WHERE id = ANY(%s)", (ids,))
        return ids

    async def delete_session(self, session_id: str) -> list[str]:
        check_id(session_id, "session id")

        async def tx(conn: Any) -> list[str]:
            ids = await self._delete_tree(conn, session_id)
            # not in _delete_tree: a replaced session keeps its numbers reserved
            await conn.execute("DELETE FROM event_numbers WHERE session_id = ANY(%s)", (ids,))
            await self._audit(conn, _deleted(session_id, ids))
            return ids

        return await self._tx(tx)

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
            where.append("directory = %s")
            params.append(_esc(directory))
        if parent_id is None:
            where.append("parent_id IS NULL")
        elif parent_id is not UNSET:
            where.append("parent_id = %s")
            params.append(check_id(parent_id, "parent id"))
        if cursor is not None:
            at, sid = decode_cursor(cursor)
            where.append("(updated_at, id) < (%s, %s)")
            params.extend((at, sid))
        sql = f"SELECT {_SESSION_COLS} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, id DESC LIMIT %s"
        rows = await self._read(sql, (*params, limit + 1))
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
        check_id(session_id, "session id")
        n = len(bodies)
        if not n:
            raise InvalidInput("append needs at least one entry")
        times = check_created_at(created_at, n)
        kinds, payloads, roles = _appended(bodies)  # bad input fails here, before any round trip
        messages, t_in, t_out, cost = message_counters(bodies)
        explicit_title: str | None = None
        has_revert = False
        for body in bodies:
            if type(body) is TitleChange:
                explicit_title = body.title
            elif type(body) is Revert:
                has_revert = True
        title = explicit_title if explicit_title is not None else title_candidate(bodies)
        title_mode = None if title is None else ("set" if explicit_title is not None else "default")
        params: dict[str, Any] = {
            "sid": session_id,
            "n": n,
            "messages": messages,
            "t_in": t_in,
            "t_out": t_out,
            "cost": decimal_to_pico(cost) if cost else 0,
            "title_mode": title_mode,
            "title": _esc(title or None),
            "expect": expect_seq,
        }
        if n == 1:  # the common case, with no arrays to build: a third less time on the client
            sql = _APPEND_ONE_SQL
            params.update(kind=kinds[0], payload=payloads[0], time=times[0] if times else None)
            params.update(role=roles[0])
        else:
            sql = _APPEND_SQL
            params.update(kinds=kinds, payloads=payloads, times=times if times is not None else [None] * n)
            params.update(roles=roles)

        async def statement(conn: Any) -> tuple[int, float]:
            params["now"] = time.time()
            row = await (await _cursor(conn).execute(sql, params)).fetchone()
            if row is None:  # no such session, or another writer moved it past expect_seq: nothing written
                at = await (await conn.execute(_POSITION_SQL, (session_id,))).fetchone()
                if at is None:
                    raise SessionNotFound(session_id)
                raise SeqConflict(session_id, expect_seq or 0, int(at[0]) + 1)
            return int(row[0]) + 1, float(row[1])

        if audit and not has_revert:  # the records are sealed in the append's own statement
            sql = sql[: sql.rindex("SELECT base, at FROM s")] + _APPEND_SEALED_TAIL
            params.update(_audit_params(audit))
            first, now = await self._write(statement, "append to")
        elif has_revert or audit:

            async def tx(conn: Any) -> tuple[int, float]:
                if has_revert:  # a revert is checked at its position: the session's row is held meanwhile
                    at = await (await conn.execute(_POSITION_SQL + " FOR UPDATE", (session_id,))).fetchone()
                    if at is None:
                        raise SessionNotFound(session_id)
                    if expect_seq is not None and expect_seq != at[0] + 1:
                        raise SeqConflict(session_id, expect_seq, int(at[0]) + 1)
                    validate_bodies(bodies, int(at[0]) + 1)
                first, now = await statement(conn)
                for record in [*audit, *(_reverted(session_id, bodies, first, now) if has_revert else ())]:
                    await self._audit(conn, record)
                return first, now

            first, now = await self._tx(tx, "append to")
        else:
            first, now = await self._write(statement, "append to")
        self._unindexed += n  # every entry was queued (`_APPEND_MARK`)
        if self._unindexed >= INDEX_EVERY:
            self._index_later()
        return [Entry(first + i, now if times is None else times[i], body) for i, body in enumerate(bodies)]

    def _decode_rows(self, session_id: str, rows: list[Any]) -> list[Entry]:
        out: list[Entry] = []
        for seq, created_at, payload in rows:
            try:
                out.append(Entry(seq, created_at, decode_body(payload)))
            except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as e:
                self.on_corrupt(CorruptEntry(session_id, seq, str(e)))
        return out

    async def _require_session(self, session_id: str) -> None:
        if not await self._read("SELECT 1 FROM sessions WHERE id = %s", (session_id,)):
            raise SessionNotFound(session_id)

    async def read(self, session_id: str, start: int = 1, end: int | None = None) -> list[Entry]:
        check_id(session_id, "session id")
        rows = await self._read(
            "SELECT seq, created_at, payload FROM entries WHERE session_id = %s AND seq >= %s AND seq <= %s"
            " ORDER BY seq",
            (session_id, max(1, start), end if end is not None else 2**62),
        )
        if not rows:
            await self._require_session(session_id)
        return self._decode_rows(session_id, rows)

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        check_id(session_id, "session id")
        if n <= 0:
            await self._require_session(session_id)
            return []
        rows = await self._read(
            "SELECT seq, created_at, payload FROM entries WHERE session_id = %s ORDER BY seq DESC LIMIT %s",
            (session_id, n),
        )
        if not rows:
            await self._require_session(session_id)
        rows.reverse()
        return self._decode_rows(session_id, rows)

    async def iter_entries(self, session_id: str, start: int = 1, *, batch: int = 500) -> AsyncIterator[Entry]:
        check_id(session_id, "session id")
        seq = max(1, start)
        first = True
        while True:
            rows = await self._read(
                "SELECT seq, created_at, payload FROM entries WHERE session_id = %s AND seq >= %s ORDER BY seq"
                " LIMIT %s",
                (session_id, seq, batch),
            )
            if not rows:
                if first:
                    await self._require_session(session_id)
                return
            first = False
            for entry in self._decode_rows(session_id, rows):
                yield entry
            seq = rows[-1][0] + 1

    async def _usage(self, conn: Any, session_id: str, first: int, last: int) -> tuple[int, int, int, int]:
        """(messages, input tokens, output tokens, cost in picodollars) of entries first..last, as `append`
        counted them; an entry that does not decode counts for nothing."""
        cur = await conn.execute(
            "SELECT payload FROM entries WHERE session_id = %s AND seq BETWEEN %s AND %s AND kind = 'message'",
            (session_id, first, last),
        )
        bodies: list[EntryBody] = []
        for (payload,) in await cur.fetchall():
            try:
                bodies.append(decode_body(payload))
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
        messages, t_in, t_out, cost = message_counters(bodies)
        return messages, t_in, t_out, decimal_to_pico(cost) if cost else 0

    async def fork(
        self, session_id: str, at_seq: int | None = None, *, id: str | None = None, title: str | None = None
    ) -> SessionInfo:
        check_id(session_id, "session id")
        fork_id = check_id(id, "session id") if id is not None else new_session_id()
        if title is not None:
            check_new_session(None, None, "active", {"title": title})

        async def tx(conn: Any) -> SessionInfo:
            src = await self._get_row(conn, session_id, lock=True)  # no append moves it while it is copied
            at = src.entry_count if at_seq is None else at_seq
            if not 0 <= at <= src.entry_count:
                raise InvalidInput(f"cannot fork {session_id} at {at}: it has {src.entry_count} entries")
            now = time.time()
            total = (src.message_count, src.input_tokens, src.output_tokens, decimal_to_pico(src.cost))
            if at == src.entry_count:
                counters = total
            elif at <= src.entry_count - at:
                counters = await self._usage(conn, session_id, 1, at)
            else:
                after = await self._usage(conn, session_id, at + 1, src.entry_count)
                counters = tuple(whole - part for whole, part in zip(total, after, strict=True))  # type: ignore[assignment]
            cur = await conn.execute(
                "INSERT INTO sessions (id, forked_from, forked_at, title, directory, agent, model, state,"
                " system_prompt, created_at, updated_at, metadata, entry_count, message_count, input_tokens,"
                " output_tokens, cost_pico)"
                " SELECT %s, id, %s, %s, directory, agent, model, 'active', system_prompt, %s, %s, metadata, %s,"
                " %s, %s, %s, %s FROM sessions WHERE id = %s ON CONFLICT (id) DO NOTHING RETURNING id",
                (fork_id, at, _esc(title if title is not None else src.title), now, now, at, *counters, session_id),
            )
            if await cur.fetchone() is None:
                raise InvalidInput(f"session {fork_id} already exists")
            await conn.execute(  # one statement, one snapshot: each copied message is queued or has its terms
                "WITH e AS (INSERT INTO entries (session_id, seq, kind, created_at, payload, role)"
                " SELECT %(fork)s, seq, kind, created_at, payload, role FROM entries"
                " WHERE session_id = %(sid)s AND seq <= %(at)s),"
                " q AS (INSERT INTO search_queue (session_id, seq) SELECT %(fork)s, seq FROM search_queue"
                " WHERE session_id = %(sid)s AND seq <= %(at)s ON CONFLICT DO NOTHING)"
                " INSERT INTO entry_terms (session_id, seq, role, created_at, terms)"
                " SELECT %(fork)s, seq, role, created_at, terms FROM entry_terms"
                " WHERE session_id = %(sid)s AND seq <= %(at)s" + _TERMS_CONFLICT,
                {"fork": fork_id, "sid": session_id, "at": at},
            )
            await self._audit(conn, _forked(fork_id, session_id, at, now))
            return await self._get_row(conn, fork_id)

        return await self._tx(tx)

    def _importing(self, info: SessionInfo, entries: Sequence[Entry]) -> Callable[[Any], Awaitable[SessionInfo]]:
        """The import of one session, checked and encoded now, written when the returned function runs (in
        the caller's transaction)."""
        sid = validate_import(info, entries)
        kinds, payloads, roles, docs = _encoded([e.body for e in entries])
        messages, t_in, t_out, cost = message_counters([e.body for e in entries])
        meta = encode_json(info.metadata).decode()
        rows = {
            "sid": sid,
            "seqs": [e.seq for e in entries],
            "kinds": kinds,
            "payloads": payloads,
            "times": [e.created_at for e in entries],
            "roles": roles,
            "docs": docs,
        }

        async def tx(conn: Any) -> SessionInfo:
            if info.parent_id is not None and not await self._exists(conn, info.parent_id):
                raise SessionNotFound(info.parent_id)
            cur = await conn.execute(
                "INSERT INTO sessions (id, parent_id, forked_from, forked_at, title, directory, agent, model,"
                " state, system_prompt, created_at, updated_at, entry_count, message_count, input_tokens,"
                " output_tokens, cost_pico, metadata) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)"
                f" ON CONFLICT (id) DO NOTHING RETURNING {_SESSION_COLS}",
                (
                    sid, info.parent_id, info.forked_from, info.forked_at, _esc(info.title), _esc(info.directory),
                    _esc(info.agent), _esc(info.model), info.state, _esc(info.system_prompt), info.created_at,
                    info.updated_at, len(entries), messages, t_in, t_out, decimal_to_pico(cost), meta,
                ),
            )  # fmt: skip
            made = await cur.fetchone()
            if made is None:
                raise InvalidInput(f"session {sid} already exists")
            if entries:
                await conn.execute(_INSERT_ENTRIES_SQL, rows)
            return self._row_to_info(made)

        return tx

    async def import_session(self, info: SessionInfo, entries: Sequence[Entry]) -> SessionInfo:
        write = self._importing(info, entries)
        record = _imported(info, len(entries))

        async def tx(conn: Any) -> SessionInfo:
            imported = await write(conn)
            await self._audit(conn, record)
            return imported

        return await self._tx(tx, "import into")

    async def replace_session(
        self, session_id: str, sessions: Sequence[tuple[SessionInfo, Sequence[Entry]]], record: AuditDraft
    ) -> list[SessionInfo]:
        check_id(session_id, "session id")
        writes = [self._importing(info, entries) for info, entries in sessions]

        async def tx(conn: Any) -> list[SessionInfo]:
            await self._delete_tree(conn, session_id)
            made = [await write(conn) for write in writes]
            await self._audit(conn, record)
            return made

        return await self._tx(tx)

    # --- search ------------------------------------------------------------------------------------
    # Each message's words are stemmed into `entry_terms` (a GIN index; `pgschema._V8`) by a flush after its
    # append, not by the append (a third of its time on the server): the append queues it (`search_queue`),
    # and a flush takes a batch off the queue and writes their terms, insert-only, beside the journal (an
    # UPDATE of the entries' rows cost half as much again as the append had). The flushes: one in the
    # background every `INDEX_EVERY` messages a store appends, one of what it queued when it closes, and the
    # one each search makes first, so a search sees every committed append. An import writes its entries'
    # terms itself. Ranking is `ts_rank`.

    def _index_later(self) -> None:
        """Flush this store's appends in a task of their own, one at a time per event loop: the append that
        started it is not kept waiting, and a flush that fails leaves its rows for the next one (a search's, or
        a later append's)."""
        here = self._loops.get(asyncio.get_running_loop())
        if here is None or here.indexing is not None:
            return
        self._unindexed = 0
        task = here.indexing = asyncio.get_running_loop().create_task(self._index_quietly(INDEX_EVERY * 2))
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if here.indexing is t:
                here.indexing = None

        task.add_done_callback(done)

    def _indexing(self) -> asyncio.Task[None] | None:
        """The background flush under way on this event loop, if any."""
        here = self._loops.get(asyncio.get_running_loop())
        return None if here is None else here.indexing

    async def _index_quietly(self, limit: int) -> None:
        try:
            await self._index_pending(limit)
        except StoreClosed:
            pass
        except Exception:  # the rows wait, durably, for the next flush
            log.warning("a background flush of the search terms of %s failed", self.where, exc_info=True)

    async def _index_pending(self, limit: int) -> tuple[int, set[str]]:
        """Make the search terms of up to `limit` queued messages, `INDEX_BATCH` at a time (`_INDEX_SQL`).
        Returns the queued messages taken and their sessions. Entries without words (change marks only,
        `pgschema._V9`) are taken off on the way and not counted: a search's limit is of messages."""
        count, sessions = 0, set()
        while count < limit:
            batch = min(INDEX_BATCH, limit - count)
            rows = await self._read(_QUEUED_SQL, (batch,))
            if rows:
                params = _index_params(rows)

                async def write(conn: Any, p: dict[str, Any] = params) -> None:
                    await conn.execute(_INDEX_SQL, p)

                await self._write(write, "index the search terms of")
            count += sum(1 for r in rows if r[2] is not None)
            sessions |= {r[0] for r in rows}
            if len(rows) < batch:
                break
        return count, sessions

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
        terms = query_terms(query)
        tsquery = _tsquery(terms)
        if tsquery is None:
            return []
        stems = [t for term in terms for t in term.tokens]
        try:  # an empty queue costs the one read that finds it empty
            await self._index_pending(SEARCH_INDEX)
        except StoreClosed:
            raise
        except StoreError as e:  # a read-only role, a hot standby, a lock held too long: search what is there
            log.warning("searching %s without its latest messages, which it could not index: %s", self.where, e)
        where = ["e.terms @@ q.q"]
        params: list[Any] = [tsquery]
        if session_id is not None:
            where.append("e.session_id = %s")
            params.append(session_id)
        if directory is not None:
            where.append("e.session_id IN (SELECT id FROM sessions WHERE directory = %s)")
            params.append(_esc(directory))
        if role is not None:
            where.append("e.role = %s")
            params.append(ROLES.get(role, 0))
        if since is not None:
            where.append("e.created_at >= %s")
            params.append(since)
        if until is not None:
            where.append("e.created_at < %s")
            params.append(until)
        sql = (
            "WITH q AS (SELECT to_tsquery('tether_search', %s) AS q),"
            " hits AS MATERIALIZED (SELECT e.session_id, e.seq, ts_rank(e.terms, q.q) AS rank FROM entry_terms e, q"
            f" WHERE {' AND '.join(where)} ORDER BY rank DESC, e.session_id, e.seq LIMIT %s)"
            " SELECT h.session_id, h.seq, h.rank, s.title, s.directory, e.created_at, e.payload FROM hits h"
            " JOIN sessions s ON s.id = h.session_id JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq"
            " ORDER BY h.rank DESC, h.session_id, h.seq"
        )
        fetch = limit if include_reverted else limit + 16
        while True:
            rows = await self._read(sql, (*params, fetch))
            hits = await self._hits(rows, stems, include_reverted)
            if len(hits) >= limit or len(rows) < fetch:
                return hits[:limit]
            fetch *= 4  # reverts hid many of the best: look further down

    async def _reverts_of(self, session_ids: list[str]) -> dict[str, list[RevertSpan]]:
        rows = await self._read(
            "SELECT session_id, seq, payload FROM entries WHERE session_id = ANY(%s) AND kind = 'revert'",
            (session_ids,),
        )
        reverts: dict[str, list[tuple[int, int]]] = {}
        for sid, seq, payload in rows:
            try:
                body = decode_body(payload)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if type(body) is Revert:
                reverts.setdefault(sid, []).append((seq, body.to_seq))
        return {sid: hidden_spans(found) for sid, found in reverts.items()}

    async def _hits(self, rows: list[Any], stems: list[str], include_reverted: bool) -> list[SearchHit]:
        spans = await self._reverts_of(sorted({r[0] for r in rows})) if rows else {}
        out: list[SearchHit] = []
        for sid, seq, rank, title, directory, created_at, payload in rows:
            reverted = is_hidden(seq, spans.get(sid, ()))
            if reverted and not include_reverted:
                continue
            try:
                body = decode_body(payload)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            text = indexed_text(body)
            if text is None:
                continue
            out.append(
                SearchHit(
                    session_id=sid,
                    seq=seq,
                    role=body.role,  # type: ignore[union-attr]  # indexed_text: messages only
                    created_at=created_at,
                    score=float(rank),
                    excerpt=excerpt_of(text, stems),
                    title=_unesc(title),
                    directory=_unesc(directory),
                    metadata=body.metadata,  # type: ignore[union-attr]
                    reverted=reverted,
                )
            )
        return out

    async def reverted_spans(self, session_id: str) -> list[RevertSpan]:
        check_id(session_id, "session id")
        await self._require_session(session_id)
        return (await self._reverts_of([session_id])).get(session_id, [])

    async def search_backlog(self, *, before: float | None = None) -> int:
        # the queue holds every appended entry (its change mark); those with words to index have a role
        sql = "SELECT count(*) FROM search_queue q JOIN entries e USING (session_id, seq) WHERE e.role IS NOT NULL"
        if before is None:
            return int((await self._read(sql))[0][0])
        return int((await self._read(sql + " AND e.created_at < %s", (before,)))[0][0])

    async def backfill_search(self, *, batch: int = 500) -> AsyncIterator[BackfillProgress]:
        check_limit(batch)
        done = indexed = 0
        while True:
            got, sessions = await self._index_pending(batch)
            if not got:
                return
            indexed += got
            (row,) = await self._read(
                "SELECT count(*), count(DISTINCT q.session_id), count(DISTINCT q.session_id) FILTER"
                " (WHERE q.session_id = ANY(%s)) FROM search_queue q JOIN entries e USING (session_id, seq)"
                " WHERE e.role IS NOT NULL",
                (sorted(sessions),),
            )
            done += len(sessions) - int(row[2])
            yield BackfillProgress(
                sessions_done=done, sessions_left=int(row[1]), entries_indexed=indexed, backlog=int(row[0])
            )

    # --- the sessions' change cursor ----------------------------------------------------------------

    async def changed_sessions(self, after: int = 0, *, limit: int = 1000) -> ChangedSessions:
        """Positions are transaction ids (`pgschema._V3`): every row written by a transaction at or after
        `after` comes back (`limit` is not applied: a position cannot fall inside a transaction), with the
        oldest transaction still running now as the next position. An append's mark is its queue row until a
        flush moves it into `session_changes` in the statement that deletes the row (`pgschema._V9`): one
        snapshot reads both, so a mark is seen in one or the other."""
        check_changed_sessions(after, limit)
        cols = ", ".join(f"s.{c.strip()}" for c in _SESSION_COLS.split(","))
        rows = await self._read(
            f"SELECT c.session_id, c.xid::text::bigint, pg_snapshot_xmin(pg_current_snapshot())::text::bigint,"
            f" s.id, {cols.partition(', ')[2]} FROM ("
            " SELECT DISTINCT ON (session_id) session_id, xid FROM ("
            "  SELECT session_id, xid FROM session_changes WHERE xid >= %(after)s::text::xid8"
            "  UNION ALL SELECT session_id, xid FROM search_queue WHERE xid >= %(after)s::text::xid8"
            " ) m ORDER BY session_id, xid DESC"
            ") c LEFT JOIN sessions s ON s.id = c.session_id ORDER BY c.xid, c.session_id",
            {"after": str(after)},
        )
        if not rows:
            now = await self._read("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            return ChangedSessions(sessions=[], deleted=[], position=max(after, int(now[0][0])))
        sessions = [self._row_to_info(r[3:]) for r in rows if r[3] is not None]
        deleted = [r[0] for r in rows if r[3] is None]
        return ChangedSessions(sessions=sessions, deleted=deleted, position=int(rows[0][2]))

    # --- artifacts ---------------------------------------------------------------------------------

    async def put_artifact(self, data: bytes, media_type: str = "text/plain") -> str:
        aid = artifact_id(data)

        async def go(conn: Any) -> str:
            await conn.execute(
                "INSERT INTO artifacts (id, media_type, size, created_at, data) VALUES (%s,%s,%s,%s,%s)"
                " ON CONFLICT (id) DO NOTHING",
                (aid, _esc(media_type), len(data), time.time(), bytes(data)),
            )
            return aid

        return await self._write(go)

    async def get_artifact(self, artifact_id: str) -> bytes:
        check_artifact_id(artifact_id)
        rows = await self._read("SELECT data FROM artifacts WHERE id = %s", (artifact_id,))
        if not rows:
            raise NotFound(f"no artifact {artifact_id}")
        return bytes(rows[0][0])

    async def list_artifacts(self, *, after: str | None = None, limit: int = 1000) -> list[ArtifactInfo]:
        check_artifact_listing(after, limit)
        rows = await self._read(
            "SELECT id, media_type, size FROM artifacts WHERE id > %s ORDER BY id LIMIT %s", (after or "", limit)
        )
        return [ArtifactInfo(id=aid, media_type=_unesc(media) or "", size=size) for aid, media, size in rows]

    # --- leases ------------------------------------------------------------------------------------------
    # As in SqliteStore: a session's lease row stays until the session goes; releasing sets expires_at to 0.
    # Taking a free (or dead holder's) lease is one conditional UPDATE; the rest runs under the session's
    # advisory lease lock, so that two first takers of a session never both insert its row.

    @staticmethod
    def _lease(session_id: str, row: Sequence[Any]) -> Lease | None:
        if row[0] is None:
            return None
        return Lease(
            session_id=session_id,
            holder=row[0],
            pid=row[1],
            host=_unesc(row[2]),
            since=row[3],
            expires_at=row[4],
            request=row[5] if row[5] in LEASE_REQUESTS else None,
        )

    async def _lease_row(self, conn: Any, session_id: str) -> Lease | None:
        row = await (await conn.execute(_LEASE_SQL, (session_id,))).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return self._lease(session_id, row)

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
            take_from = None  # a live lease of its own is renewed (its request stays)

        async def tx(conn: Any) -> Lease:
            now = time.time()
            expires_at = now + ttl
            cur = await conn.execute(
                _LEASE_TAKE_FREE_SQL, (holder, pid, _esc(host), now, expires_at, session_id, now, take_from)
            )
            if cur.rowcount:
                return Lease(session_id=session_id, holder=holder, pid=pid, host=host, since=now, expires_at=expires_at)
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (pgschema.LEASE_LOCK_SPACE, session_id)
            )
            current = await self._lease_row(conn, session_id)
            if current is not None and current.expires_at <= now:
                current = None  # expired meanwhile: free
            if current is not None and current.holder != holder:
                if take_from is None or current.holder != take_from:
                    raise current.busy()
                current = None
            since = current.since if current is not None else now
            request = current.request if current is not None else None
            await conn.execute(
                "INSERT INTO leases (session_id, holder, pid, host, since, expires_at, request)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder,"
                " pid = excluded.pid, host = excluded.host, since = excluded.since,"
                " expires_at = excluded.expires_at, request = excluded.request",
                (session_id, holder, pid, _esc(host), since, expires_at, request),
            )
            return Lease(
                session_id=session_id,
                holder=holder,
                pid=pid,
                host=host,
                since=since,
                expires_at=expires_at,
                request=request,
            )

        return await self._tx(tx, "take a lease in")

    async def renew_lease(self, session_id: str, holder: str, *, ttl: float) -> Lease:
        check_lease(session_id, holder, ttl)

        async def go(conn: Any) -> Lease:
            now = time.time()
            cur = await conn.execute(
                "UPDATE leases l SET expires_at = %s WHERE session_id = %s AND holder = %s AND expires_at > %s"
                f" RETURNING {_LEASE_COLS}",
                (now + ttl, session_id, holder, now),
            )
            row = await cur.fetchone()
            if row is not None:
                lease = self._lease(session_id, row)
                assert lease is not None
                return lease
            current = await self._lease_row(conn, session_id)
            raise lease_lost(session_id, holder, current if current is not None and current.expires_at > now else None)

        return await self._write(go, "renew a lease in")

    async def release_lease(self, session_id: str, holder: str) -> bool:
        check_lease(session_id, holder)

        async def go(conn: Any) -> bool:
            cur = await conn.execute(
                "UPDATE leases SET expires_at = 0 WHERE session_id = %s AND holder = %s AND expires_at > 0",
                (session_id, holder),
            )
            return bool(cur.rowcount)

        return await self._write(go, "release a lease in")

    async def request_lease(self, session_id: str, request: LeaseRequest) -> Lease | None:
        check_lease_request(session_id, request)

        async def go(conn: Any) -> Lease | None:
            cur = await conn.execute(
                "UPDATE leases l SET request = CASE WHEN request = 'cancel' THEN request ELSE %s END"
                f" WHERE session_id = %s AND expires_at > %s RETURNING {_LEASE_COLS}",
                (request, session_id, time.time()),
            )
            row = await cur.fetchone()
            if row is not None:
                return self._lease(session_id, row)
            if not await self._exists(conn, session_id):
                raise SessionNotFound(session_id)
            return None

        return await self._write(go, "ask a lease's holder in")

    async def get_lease(self, session_id: str) -> Lease | None:
        check_id(session_id, "session id")
        rows = await self._read(_LEASE_SQL, (session_id,))
        if not rows:
            raise SessionNotFound(session_id)
        lease = self._lease(session_id, rows[0])
        return lease if lease is not None and lease.expires_at > time.time() else None

    # --- streams -------------------------------------------------------------------------------------------

    async def save_stream(self, session_id: str, after_seq: int, message: Message) -> None:
        payload = check_stream(session_id, after_seq, message).decode()

        async def go(conn: Any) -> int:
            cur = await conn.execute(_STREAM_SQL, (session_id, after_seq, time.time(), payload, session_id))
            return int(cur.rowcount)

        if not await self._write(go, "save a stream in"):
            raise SessionNotFound(session_id)

    async def get_stream(self, session_id: str) -> StreamRecord | None:
        check_id(session_id, "session id")
        rows = await self._read(
            "SELECT s.id, t.after_seq, t.updated_at, t.payload FROM sessions s"
            " LEFT JOIN streams t ON t.session_id = s.id WHERE s.id = %s",
            (session_id,),
        )
        if not rows:
            raise SessionNotFound(session_id)
        row = rows[0]
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

        async def go(conn: Any) -> bool:
            cur = await conn.execute("DELETE FROM streams WHERE session_id = %s", (session_id,))
            return bool(cur.rowcount)

        return await self._write(go, "drop a stream in")

    # --- shares --------------------------------------------------------------------------------------------

    async def create_share(
        self, session_id: str, token_hash: bytes, *, expires_at: float | None = None, id: str | None = None
    ) -> Share:
        check_share(session_id, token_hash, expires_at, id)
        share = Share(id=id or new_id("shr"), session_id=session_id, created_at=time.time(), expires_at=expires_at)

        async def tx(conn: Any) -> Share:
            if not await self._exists(conn, session_id):
                raise SessionNotFound(session_id)
            cur = await conn.execute(
                "INSERT INTO shares (id, session_id, token_hash, created_at, expires_at) VALUES (%s,%s,%s,%s,%s)"
                " ON CONFLICT DO NOTHING",
                (share.id, session_id, bytes(token_hash), share.created_at, expires_at),
            )
            if not cur.rowcount:
                raise InvalidInput("a share with this id or token already exists")
            await self._audit(conn, _share_made(share))
            return share

        return await self._tx(tx)

    async def share_by_token(self, token_hash: bytes) -> Share | None:
        check_token_hash(token_hash)
        rows = await self._read(f"SELECT {_SHARE_COLS} FROM shares WHERE token_hash = %s", (bytes(token_hash),))
        return _share(rows[0]) if rows else None

    async def list_shares(self, session_id: str | None = None) -> list[Share]:
        if session_id is None:
            return [_share(r) for r in await self._read(f"SELECT {_SHARE_COLS} FROM shares ORDER BY created_at, id")]
        check_id(session_id, "session id")
        await self._require_session(session_id)
        rows = await self._read(
            f"SELECT {_SHARE_COLS} FROM shares WHERE session_id = %s ORDER BY created_at, id", (session_id,)
        )
        return [_share(r) for r in rows]

    async def share_records(self, session_id: str) -> list[tuple[Share, bytes]]:
        check_id(session_id, "session id")
        await self._require_session(session_id)
        rows = await self._read(
            f"SELECT {_SHARE_COLS}, token_hash FROM shares WHERE session_id = %s ORDER BY created_at, id", (session_id,)
        )
        return [(_share(r[:5]), bytes(r[5])) for r in rows]

    async def restore_share(self, share: Share, token_hash: bytes) -> bool:
        check_restored_share(share, token_hash)

        async def tx(conn: Any) -> bool:
            if not await self._exists(conn, share.session_id):
                raise SessionNotFound(share.session_id)
            cur = await conn.execute(
                "INSERT INTO shares (id, session_id, token_hash, created_at, expires_at, revoked_at)"
                " VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                (share.id, share.session_id, bytes(token_hash), share.created_at, share.expires_at, share.revoked_at),
            )
            if cur.rowcount:
                return True
            taken = await (await conn.execute("SELECT id FROM shares WHERE id = %s", (share.id,))).fetchone()
            if taken is None:
                raise InvalidInput("another share has this token")
            return False

        return await self._tx(tx)

    async def revoke_share(self, share_id: str) -> Share:
        check_id(share_id, "share id")

        async def tx(conn: Any) -> Share:
            cur = await conn.execute(
                "UPDATE shares SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL", (time.time(), share_id)
            )
            revoked = cur.rowcount
            row = await (await conn.execute(f"SELECT {_SHARE_COLS} FROM shares WHERE id = %s", (share_id,))).fetchone()
            if row is None:
                raise NotFound(f"no share {share_id}")
            if revoked:
                await self._audit(conn, _share_revoked(_share(row)))
            return _share(row)

        return await self._tx(tx)

    # --- the audit trail --------------------------------------------------------------------------------------

    async def _audit(self, conn: Any, draft: AuditDraft) -> AuditRecord:
        """Append `draft` after the head, in the caller's transaction, under the trail's advisory lock (held
        to the commit: writers in every process keep one chain), sealed by the server (`pgschema._V5`)."""
        cur = await conn.execute(_AUDIT_SEAL_SQL, _audit_params([draft]))
        return self._sealed(draft, await cur.fetchone())

    def _sealed(self, draft: AuditDraft, row: Sequence[Any]) -> AuditRecord:
        record = seal(int(row[0]), str(row[1]), draft)
        if record.hash != row[2]:  # the server hashed other bytes than `audit.record_bytes`: never silently
            raise StoreUnavailable(f"PostgreSQL at {self.where} sealed audit record {row[0]} with another hash")
        return record

    async def append_audit(self, draft: AuditDraft) -> AuditRecord:
        async def go(conn: Any) -> AuditRecord:  # one statement: its own transaction
            return await self._audit(conn, draft)

        return await self._write(go, "append to the audit trail of")

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
        where, params = audit_where(after, since, until, session_id, kind, mark="%s")
        sql = f"SELECT {_AUDIT_COLS} FROM audit WHERE {where} ORDER BY seq LIMIT %s"
        return [_audit_record(row) for row in await self._read(sql, (*params, limit))]

    async def audit_head(self) -> tuple[int, str] | None:
        rows = await self._read("SELECT seq, hash FROM audit_head WHERE id = 1")
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    async def prune_audit(self, before: float) -> int:
        now = time.time()

        async def tx(conn: Any) -> int:
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (pgschema.AUDIT_LOCK_KEY,))
            row = await (await conn.execute("SELECT max(seq) FROM audit WHERE at < %s", (before,))).fetchone()
            through = row[0] if row is not None else None
            if through is None:
                return 0
            last = await (await conn.execute("SELECT hash FROM audit WHERE seq = %s", (through,))).fetchone()
            count = int((await conn.execute("DELETE FROM audit WHERE seq <= %s", (through,))).rowcount)
            await self._audit(conn, pruned_draft(int(through), str(last[0]), count, before, now))
            return count

        return await self._tx(tx, "prune the audit trail of")

    # --- event sinks' positions -----------------------------------------------------------------------------

    async def sink_positions(self, sink: str) -> dict[str, int]:
        rows = await self._read("SELECT session_id, seq FROM sink_positions WHERE sink = %s", (_esc(sink),))
        return {str(r[0]): int(r[1]) for r in rows}

    async def save_sink_positions(self, sink: str, positions: dict[str, int]) -> None:
        if not positions:
            return
        sids = list(positions)

        async def go(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO sink_positions (sink, session_id, seq) SELECT %s, t.sid, t.seq"
                " FROM unnest(%b::text[], %b::int8[]) AS t(sid, seq) ON CONFLICT (sink, session_id)"
                " DO UPDATE SET seq = greatest(sink_positions.seq, excluded.seq)",
                (_esc(sink), sids, [positions[s] for s in sids]),
            )

        await self._write(go, "save sink positions in")

    # --- event numbers and the change feed --------------------------------------------------------------------

    async def reserve_numbers(self, session_id: str, floor: int, count: int) -> int:
        check_reservation(session_id, floor, count)

        async def go(conn: Any) -> int:
            cur = await conn.execute(
                "INSERT INTO event_numbers AS n (session_id, hi) VALUES (%(sid)s, %(floor)s + %(count)s)"
                " ON CONFLICT (session_id) DO UPDATE SET hi = greatest(n.hi, %(floor)s) + %(count)s"
                " RETURNING n.hi - %(count)s + 1",
                {"sid": session_id, "floor": floor, "count": count},
            )
            row = await cur.fetchone()
            return int(row[0])

        return await self._write(go, "reserve event numbers in")

    async def append_change(
        self, kind: str, *, session_id: str | None = None, data: dict[str, Any] | None = None
    ) -> Change:
        body = check_change(kind, session_id, {} if data is None else data)
        at = time.time()

        async def go(conn: Any) -> Any:
            # One statement, its own transaction: the feed's lock is taken (`l`, scanned before the row and
            # its id are made) and held to the commit, never for a round trip to this process.
            cur = await conn.execute(
                "WITH l AS (SELECT pg_advisory_xact_lock(%s)) INSERT INTO changes (at, kind, session_id, data)"
                " SELECT %s, %s, %s, %s FROM l RETURNING id",
                (pgschema.CHANGES_LOCK_KEY, at, kind, session_id, body.decode()),
            )
            return await cur.fetchone()

        row = await self._write(go, "record a change in")
        change_id = int(row[0])
        return Change(id=change_id, at=at, kind=kind, session_id=session_id, data=json.loads(body))

    # --- the prompt queue (migration 6) ------------------------------------------------------------------

    async def enqueue_prompt(self, session_id: str, body: bytes) -> QueuedPrompt:
        check_id(session_id, "session id")
        data, now = bytes(body), time.time()

        async def tx(conn: Any) -> QueuedPrompt:
            cur = await conn.execute(
                "INSERT INTO prompt_queue (session_id, after_seq, queued_at, body)"
                " SELECT id, entry_count, %s, %s FROM sessions WHERE id = %s RETURNING id, after_seq",
                (now, data, session_id),
            )
            row = await cur.fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            return QueuedPrompt(id=int(row[0]), session_id=session_id, after_seq=int(row[1]), body=data, queued_at=now)

        return await self._tx(tx, "queue a prompt in")

    async def queued_prompts(self, session_id: str) -> list[QueuedPrompt]:
        rows = await self._read(
            "SELECT id, session_id, after_seq, body, queued_at FROM prompt_queue WHERE session_id = %s ORDER BY id",
            (session_id,),
        )
        return [
            QueuedPrompt(id=int(i), session_id=str(s), after_seq=int(a), body=bytes(b), queued_at=float(q))
            for i, s, a, b, q in rows
        ]

    async def queued_sessions(self) -> list[str]:
        return [str(r[0]) for r in await self._read("SELECT DISTINCT session_id FROM prompt_queue ORDER BY 1")]

    async def drop_prompt(self, session_id: str, prompt_id: int) -> bool:
        async def tx(conn: Any) -> bool:
            cur = await conn.execute(
                "DELETE FROM prompt_queue WHERE session_id = %s AND id = %s", (session_id, prompt_id)
            )
            return bool(cur.rowcount)

        return await self._tx(tx, "take a queued prompt from")

    async def changes_after(self, after: int, limit: int = 500) -> list[Change]:
        check_changes_after(after, limit)
        rows = await self._read(
            "SELECT id, at, kind, session_id, data FROM changes WHERE id > %s ORDER BY id LIMIT %s", (after, limit)
        )
        return [
            Change(id=int(r[0]), at=float(r[1]), kind=str(r[2]), session_id=r[3], data=json.loads(r[4])) for r in rows
        ]

    async def last_change_id(self) -> int:
        """The last id the sequence gave, read once no change is being recorded (so a deleted last row still
        counts, and an id taken by a change not yet committed is never said)."""

        async def tx(conn: Any) -> int:
            await conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (pgschema.CHANGES_LOCK_KEY,))
            cur = await conn.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM changes_id_seq")
            row = await cur.fetchone()
            return int(row[0])

        async def go(conn: Any) -> int:
            async with conn.transaction():
                return await tx(conn)

        return await self._run(go, "read the change feed of")


def _tsquery(terms: Sequence[Any]) -> str | None:
    """The `to_tsquery` text of a query's terms: each term's tokens as a phrase (``<->``), a prefix term's
    last one with ``:*``, the alternatives OR-ed. Tokens are letters and digits only (`searchtext.tokens`),
    and each is quoted besides: nothing of the user's text is read as tsquery syntax."""
    parts: list[str] = []
    for term in terms:
        quoted = ["'" + t.replace("'", "''").replace("\\", "\\\\") + "'" for t in term.tokens]
        if term.prefix:
            quoted[-1] += ":*"
        parts.append(quoted[0] if len(quoted) == 1 else "(" + " <-> ".join(quoted) + ")")
    return " | ".join(parts) if parts else None


def _share(row: Sequence[Any]) -> Share:
    return Share(id=row[0], session_id=row[1], created_at=row[2], expires_at=row[3], revoked_at=row[4])


def _audit_record(row: Sequence[Any]) -> AuditRecord:
    try:
        detail = json.loads(row[6])
    except ValueError:
        detail = {"unreadable": str(row[6])[:200]}
    return AuditRecord(
        seq=row[0],
        at=row[1],
        kind=row[2],
        session_id=row[3],
        actor=_unesc(row[4]),
        outcome=_unesc(row[5]),
        detail=detail if isinstance(detail, dict) else {"value": detail},
        prev=row[7],
        hash=row[8],
    )
