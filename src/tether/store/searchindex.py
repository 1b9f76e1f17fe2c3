"""The full-text index of a `SqliteStore`: an FTS5 table (``porter unicode61``, BM25) over the indexed text
of every message, fed in batches from what the entries' transactions committed, and the SQL that keeps it
consistent through append, import, fork, delete, revert, a crash and the backfill of older files.

The FTS table is contentless (``content=''``): it holds the terms, not the text, which the journal already
has. A search reads the text of its few winners from ``entries``; deleting a session tells FTS5 the text of
each of its indexed entries again (`document(indexed_text(...))` of the stored entry, which is why those
functions' output must never change without a reindex: see SCHEMA_VERSION in sqlite.py).

Each indexed entry is one FTS row whose rowid is ``num << 34 | seq << 2 | role``: `num` is a small integer
standing for the session (``search_sessions``, AUTOINCREMENT so a number is never reused), so one session's
rows are one rowid range (a session filter is a range scan); `role` is the message's role (`ROLES`), so a
role filter reads nothing but the rowid. Reverts are recorded in ``search_reverts`` so that searches can
leave out what a revert hid."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from ..messages import EntryBody, Revert, decode_body
from .faults import is_corrupt
from .records import RevertSpan, SearchHit
from .reverts import hidden_spans, is_hidden
from .searchtext import QueryTerm, document, excerpt_of, indexed_text, match_expression, query_terms

SEQ_BITS = 32
SEQ_MASK = (1 << SEQ_BITS) - 1
ROLE_BITS = 2
NUM_SHIFT = SEQ_BITS + ROLE_BITS
ROLES = {"user": 1, "assistant": 2, "tool": 3}
"""The role bits of a rowid, for each of searchtext's `INDEXED_ROLES`."""


def rowid(num: int, seq: int, role: str) -> int:
    return (num << NUM_SHIFT) | (seq << ROLE_BITS) | ROLES[role]


def session_rowids(num: int) -> tuple[int, int]:
    """The first and last rowid a session's rows can have."""
    return num << NUM_SHIFT, ((num + 1) << NUM_SHIFT) - 1


SCHEMA = """
CREATE TABLE IF NOT EXISTS search_sessions (
    num INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL UNIQUE,
    indexed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS search_state (
    key TEXT PRIMARY KEY,
    value REAL NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5(
    body, tokenize = 'porter unicode61', detail = full, content = ''
);
INSERT INTO search_fts (search_fts, rank) VALUES ('automerge', 16);
INSERT INTO search_fts (search_fts, rank) VALUES ('crisismerge', 32);
INSERT INTO search_fts (search_fts, rank) VALUES ('pgsz', 4000);
INSERT INTO search_fts (search_fts, rank) VALUES ('hashsize', 8388608);
CREATE TABLE IF NOT EXISTS search_reverts (
    num INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    to_seq INTEGER NOT NULL,
    PRIMARY KEY (num, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS search_pending (
    session_id TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    PRIMARY KEY (session_id, first_seq)
) WITHOUT ROWID;
"""
"""Entries reach the FTS table in batches (`flush`), not one append at a time: FTS5 pays a fixed ~90 us per
transaction that touches it (it writes a new segment each time), three times what a whole append costs.
Every search flushes first, so a search sees every committed entry, and a crash loses nothing: what is
unindexed is found again from what is committed.

What a flush has to index is known two ways, neither of which adds a write to an append's transaction:
- appends: `search_sessions.indexed` is the seq up to which a session's entries are in the index, and the
  append already writes the session's row with its new `entry_count` and an `updated_at` within a second
  of the append (the store's rule). So the sessions updated since the last flush (`search_state`'s
  `flushed_at`, less `SLACK`) whose `entry_count` passed `indexed` are the work: an index range scan.
- bulk writes (a fork's copy, an import, a migrated file's backlog), whose `updated_at` says nothing about
  when they were written: `search_pending` names their seq ranges.

The FTS5 settings are for a store of a million messages, where a flush costs ~15 us an entry to tokenize
and write and FTS5's merging of segments as much again with its defaults: `automerge` 16 (a level's
segments are merged into one of the next when there are 16, not 4: each entry is rewritten half as
often), `crisismerge` 32 (so that those merges stay spread over the flushes), `pgsz` 4000 (a leaf fills
a SQLite page), `hashsize` 8 MB (a flush of `FLUSH_EVERY` entries makes one segment, not several).
``detail = full`` because phrase queries (compound words, paths) need positions: with ``detail = none`` or
``column`` FTS5 refuses them ("phrase queries are not supported")."""
SLACK = 2.0
"""Seconds a flush looks back before the previous one: an append leaves `updated_at` at most a second
behind its commit, and clocks of processes on one machine may step a little."""

PENDING_SQL = "INSERT INTO search_pending (session_id, first_seq, last_seq) VALUES (?, ?, ?)"
FLUSH_EVERY = 4096
"""Appends by one store between flushes: one append in this many pays for indexing the others (~100 ms
at a million messages, the event loop held meanwhile). FTS5's cost per entry falls with the batch (fewer
distinct terms per entry to write), and bigger segments mean fewer levels for each entry to be merged
through: at a million messages, on an index left unmerged by a bulk build, appends cost 1.53x unindexed
ones with batches of 2,048 and 1.38-1.51x with 4,096 (bench/recall.py --scale with OPTIMIZE_AFTER disabled;
runs on this 2-core machine vary by about 0.1)."""
SEARCH_FLUSH = 8_000
"""A search indexes at most this many pending entries first; past that (a migrated file's backlog) it
searches what is indexed and the caller is told how much is missing (`backlog`)."""

OPTIMIZE_AFTER = 50_000
"""A backfill that indexed at least this many entries ends by merging the index into one segment
(`optimize`, ~4.5 s for a million messages, a sixth of building it). A bulk build leaves dozens of
segments of its batches' size; left as they are, every later query reads them all, and the next appends'
flushes pay, through FTS5's automatic merging, for merging the build's segments rather than their own."""

_NUM_SQL = "SELECT num FROM search_sessions WHERE session_id = ?"
_INSERT_FTS = "INSERT INTO search_fts (rowid, body) VALUES (?, ?)"
_DELETE_FTS = "INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', ?, ?)"


def _num(conn: sqlite3.Connection, session_id: str) -> int:
    row = conn.execute(_NUM_SQL, (session_id,)).fetchone()
    if row is not None:
        return int(row[0])
    cur = conn.execute("INSERT INTO search_sessions (session_id) VALUES (?)", (session_id,))
    return int(cur.lastrowid or 0)


def delete(conn: sqlite3.Connection, session_id: str) -> None:
    """Remove a session from the index; call in the transaction that deletes its entries, before it does:
    a contentless FTS5 table forgets a row only when told the text it indexed, which is read back from
    the entries (its indexed rows are its messages up to `indexed`)."""
    conn.execute("DELETE FROM search_pending WHERE session_id = ?", (session_id,))
    row = conn.execute("SELECT num, indexed FROM search_sessions WHERE session_id = ?", (session_id,)).fetchone()
    if row is None:
        return
    num, indexed = row
    conn.executemany(
        _DELETE_FTS, _documents(num, _decoded(conn.execute(_MESSAGES_SQL, (session_id, 1, indexed))), None)
    )
    conn.execute("DELETE FROM search_reverts WHERE num = ?", (num,))
    conn.execute("DELETE FROM search_sessions WHERE num = ?", (num,))


def mark_pending(conn: sqlite3.Connection, session_id: str, first_seq: int, last_seq: int) -> None:
    """Entries first_seq..last_seq of a session await indexing (an append, an import, a fork's copy)."""
    if last_seq >= first_seq:
        conn.execute(PENDING_SQL, (session_id, first_seq, last_seq))


TABLES = ("search_fts", "search_sessions", "search_state", "search_reverts", "search_pending")
"""The index's tables: all derived from the journal, dropped and made again at any time."""

SHADOW_TABLES = tuple(f"search_fts_{name}" for name in ("data", "idx", "docsize", "config", "content"))
"""The tables FTS5 keeps `search_fts` in (a contentless table has no ``content``)."""


def drop(conn: sqlite3.Connection) -> None:
    """On migrating a file of schema 2 or 3, whose FTS table held the text too, or on a rebuild: the index
    tables go, to be made again (`SCHEMA`) and filled from the journal (`mark_all_pending`)."""
    for table in TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def mark_all_pending(conn: sqlite3.Connection) -> None:
    """On migrating a file written before the index existed: every stored entry is backlog."""
    conn.execute(
        "INSERT OR IGNORE INTO search_pending (session_id, first_seq, last_seq)"
        " SELECT id, 1, entry_count FROM sessions WHERE entry_count > 0"
    )


_APPENDED_SQL = (
    "SELECT s.id, s.entry_count, coalesce(x.indexed, 0) FROM sessions s"
    " LEFT JOIN search_sessions x ON x.session_id = s.id"
    " WHERE s.updated_at > ? AND s.entry_count > coalesce(x.indexed, 0)"
    " AND NOT EXISTS (SELECT 1 FROM search_pending p WHERE p.session_id = s.id)"
)

_MADE_BEFORE_SQL = "SELECT count(*) FROM entries WHERE session_id = ? AND seq > ? AND created_at < ?"


def _flushed_at(conn: sqlite3.Connection) -> float:
    row = conn.execute("SELECT value FROM search_state WHERE key = 'flushed_at'").fetchone()
    return float(row[0]) if row is not None else float("-inf")


def _appended(conn: sqlite3.Connection) -> list[tuple[str, int, int]]:
    """(session, entry_count, indexed) of the sessions appended to since the last flush, unindexed."""
    since = _flushed_at(conn) - SLACK
    return [(r[0], int(r[1]), int(r[2])) for r in conn.execute(_APPENDED_SQL, (since,))]


def has_pending(conn: sqlite3.Connection) -> bool:
    if conn.execute("SELECT 1 FROM search_pending LIMIT 1").fetchone() is not None:
        return True
    return conn.execute(_APPENDED_SQL + " LIMIT 1", (_flushed_at(conn) - SLACK,)).fetchone() is not None


def backlog(conn: sqlite3.Connection, before: float | None = None) -> tuple[int, int]:
    """(entries, sessions) waiting to be indexed; entries counts non-message entries too. With `before`, of the
    appends since the last flush only those made before that time (the bulk ranges are older than any search)."""
    row = conn.execute(
        "SELECT coalesce(sum(last_seq - first_seq + 1), 0), count(DISTINCT session_id) FROM search_pending"
    ).fetchone()
    appended = _appended(conn)
    if before is None:
        waiting = [count - indexed for _, count, indexed in appended]
    else:
        waiting = [
            int(conn.execute(_MADE_BEFORE_SQL, (sid, indexed, before)).fetchone()[0]) for sid, _, indexed in appended
        ]
    waiting = [n for n in waiting if n]
    return int(row[0]) + sum(waiting), int(row[1]) + len(waiting)


def flush(conn: sqlite3.Connection, limit: int) -> tuple[int, int]:
    """Index up to `limit` unindexed entries: bulk ranges first, then what appends added since the last
    flush. Call in a write transaction. Returns (entries read, sessions finished); memory is bounded by
    `limit` entries."""
    started = time.time()
    budget = limit
    read = finished = 0
    work: list[tuple[int, int, int, str]] = []  # (num, lo, hi, session)
    # A session's pending ranges are contiguous (seqs are dense and each bulk write names its own range).
    for session_id, lo, hi in conn.execute(
        "SELECT session_id, min(first_seq), max(last_seq) FROM search_pending GROUP BY session_id LIMIT ?", (limit,)
    ).fetchall():
        if budget <= 0:
            break
        take = min(hi, lo + budget - 1)
        work.append((_indexed(conn, session_id, take), lo, take, session_id))
        conn.execute("DELETE FROM search_pending WHERE session_id = ?", (session_id,))
        if take < hi:
            conn.execute(PENDING_SQL, (session_id, take + 1, hi))
        read += take - lo + 1
        budget -= take - lo + 1
        finished += take == hi
    complete = budget > 0
    if complete:
        # after the bulk ranges' bookkeeping: a session whose bulk range is done has its appends found here
        for session_id, count, indexed in _appended(conn):
            if budget <= 0:
                complete = False
                break
            take = min(count, indexed + budget)
            work.append((_indexed(conn, session_id, take), indexed + 1, take, session_id))
            read += take - indexed
            budget -= take - indexed
            finished += take == count
    # FTS5 writes what it holds out as a new segment whenever a rowid is not above the last one: ranges in
    # rowid order make one segment of a flush, not one a session.
    work.sort()
    for num, lo, hi, session_id in work:
        _index_range(conn, num, session_id, lo, hi)
    if complete:
        # Everything committed before this write transaction began is indexed: the next flush looks back
        # from here (appends are serialized behind this transaction's write lock).
        conn.execute(
            "INSERT INTO search_state (key, value) VALUES ('flushed_at', ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (started,),
        )
    return read, finished


def optimize(conn: sqlite3.Connection) -> None:
    """Merge every segment of the FTS index into one. Call in a write transaction."""
    conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")


def _indexed(conn: sqlite3.Connection, session_id: str, seq: int) -> int:
    """Record that the session is indexed up to `seq` (the rows follow in this transaction); its number."""
    num = _num(conn, session_id)
    conn.execute("UPDATE search_sessions SET indexed = ? WHERE num = ?", (seq, num))
    return num


def _decoded(rows: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, EntryBody]]:
    for seq, payload in rows:
        try:
            yield seq, decode_body(payload)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, TypeError):
            continue  # a corrupt entry has nothing to index; readers report it


def _documents(
    num: int, entries: Iterable[tuple[int, EntryBody]], reverts: list[tuple[int, int]] | None
) -> list[tuple[int, str]]:
    """(rowid, text) of the entries that the index holds (messages); reverts go to `reverts`."""
    base = num << NUM_SHIFT
    docs: list[tuple[int, str]] = []
    for seq, body in entries:
        text = indexed_text(body)
        if text is not None:
            docs.append((base | (seq << ROLE_BITS) | ROLES[body.role], document(text)))  # type: ignore[union-attr]
        elif reverts is not None and type(body) is Revert:
            reverts.append((seq, body.to_seq))
    return docs


_RANGE_SQL = "SELECT seq, CAST(payload AS BLOB) FROM entries WHERE session_id = ? AND seq BETWEEN ? AND ?"
_MESSAGES_SQL = _RANGE_SQL + " AND kind = 'message'"
_REVERTS_SQL = _RANGE_SQL + " AND kind = 'revert'"


def _index_range(conn: sqlite3.Connection, num: int, session_id: str, lo: int, hi: int) -> None:
    reverts: list[tuple[int, int]] = []
    entries = _decoded(conn.execute(_RANGE_SQL, (session_id, lo, hi)))
    conn.executemany(_INSERT_FTS, _documents(num, entries, reverts))
    if reverts:
        conn.executemany(
            "INSERT OR REPLACE INTO search_reverts (num, seq, to_seq) VALUES (?, ?, ?)",
            [(num, seq, to_seq) for seq, to_seq in reverts],
        )


def reverted_spans(conn: sqlite3.Connection, session_id: str) -> list[RevertSpan]:
    """The session's effective revert spans: indexed reverts, and reverts among its pending entries."""
    reverts: list[tuple[int, int]] = []
    row = conn.execute(_NUM_SQL, (session_id,)).fetchone()
    if row is not None:
        reverts += conn.execute("SELECT seq, to_seq FROM search_reverts WHERE num = ?", (row[0],)).fetchall()
    unindexed = conn.execute(
        "SELECT first_seq, last_seq FROM search_pending WHERE session_id = ?", (session_id,)
    ).fetchall()
    tail = conn.execute(
        "SELECT coalesce(x.indexed, 0) + 1, s.entry_count FROM sessions s"
        " LEFT JOIN search_sessions x ON x.session_id = s.id WHERE s.id = ?",
        (session_id,),
    ).fetchone()
    if tail is not None and tail[0] <= tail[1]:
        unindexed.append(tail)
    for lo, hi in unindexed:
        for seq, body in _decoded(conn.execute(_REVERTS_SQL, (session_id, lo, hi))):
            if type(body) is Revert:
                reverts.append((seq, body.to_seq))
    return hidden_spans(reverts)


# --- search -------------------------------------------------------------------------------------------


COMMON = 10_000
"""A query word found in more entries than this is left out of the search when the query has rarer words:
BM25 gives it little weight anyway, and an OR over a word in a tenth of a million entries costs hundreds
of milliseconds. Stores smaller than this never drop a word."""


def _without_common_terms(conn: sqlite3.Connection, terms: list[QueryTerm]) -> list[QueryTerm]:
    if len(terms) < 2:
        return terms
    rare = []
    for term in terms:
        # counting stops at COMMON + 1, so the probe of a very common word costs what COMMON entries cost
        (n,) = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM search_fts WHERE search_fts MATCH ? LIMIT ?)", (term.fts(), COMMON + 1)
        ).fetchone()
        if n <= COMMON:
            rare.append(term)
    return rare or terms


def search(
    conn: sqlite3.Connection,
    query: str,
    *,
    directory: str | None,
    session_id: str | None,
    role: str | None,
    since: float | None,
    until: float | None,
    limit: int,
    include_reverted: bool,
) -> list[SearchHit]:
    terms = query_terms(query)
    stems = [t for term in terms for t in term.tokens]
    match = match_expression(_without_common_terms(conn, terms))
    if match is None:
        return []
    where = ["search_fts MATCH ?"]
    params: list[Any] = [match]
    joins = ""
    if session_id is not None:
        row = conn.execute(_NUM_SQL, (session_id,)).fetchone()
        if row is None:
            return []
        where.append("f.rowid BETWEEN ? AND ?")
        params += session_rowids(row[0])
    if directory is not None:
        # the directory's sessions, once, as a set of numbers: cheaper than two joins for every match
        where.append(
            f"(f.rowid >> {NUM_SHIFT}) IN (SELECT n.num FROM sessions s JOIN search_sessions n"
            " ON n.session_id = s.id WHERE s.directory = ?)"
        )
        params.append(directory)
    if role is not None:
        where.append(f"(f.rowid & {(1 << ROLE_BITS) - 1}) = ?")
        params.append(ROLES.get(role, 0))
    if since is not None or until is not None:
        joins = (
            f" JOIN search_sessions n ON n.num = (f.rowid >> {NUM_SHIFT})"
            f" JOIN entries e ON e.session_id = n.session_id AND e.seq = ((f.rowid >> {ROLE_BITS}) & {SEQ_MASK})"
        )
        if since is not None:
            where.append("e.created_at >= ?")
            params.append(since)
        if until is not None:
            where.append("e.created_at < ?")
            params.append(until)
    # Only (rowid, rank) go through the sort: the rest, text included, is read for the `limit` winners.
    inner = (
        f"SELECT f.rowid AS rid, bm25(search_fts) AS rank FROM search_fts f{joins}"
        f" WHERE {' AND '.join(where)} ORDER BY rank LIMIT ?"
    )
    sql = (
        f"WITH hits AS MATERIALIZED ({inner})"
        " SELECT h.rid, h.rank, n2.session_id, s2.title, s2.directory, e2.created_at, CAST(e2.payload AS BLOB)"
        f" FROM hits h JOIN search_sessions n2 ON n2.num = (h.rid >> {NUM_SHIFT})"
        " JOIN sessions s2 ON s2.id = n2.session_id"
        f" JOIN entries e2 ON e2.session_id = n2.session_id AND e2.seq = ((h.rid >> {ROLE_BITS}) & {SEQ_MASK})"
        " ORDER BY h.rank"
    )
    fetch = limit if include_reverted else limit + 16
    while True:
        rows = conn.execute(sql, (*params, fetch)).fetchall()
        hits = _hits(conn, rows, stems, include_reverted)
        if len(hits) >= limit or len(rows) < fetch:
            return hits[:limit]
        fetch *= 4  # reverts hid many of the best: look further down


def _hits(conn: sqlite3.Connection, rows: list[Any], stems: list[str], include_reverted: bool) -> list[SearchHit]:
    spans: dict[int, list[tuple[int, int]]] = {}
    nums = sorted({r[0] >> NUM_SHIFT for r in rows})
    if nums:
        marks = ",".join("?" * len(nums))
        for num, seq, to_seq in conn.execute(
            f"SELECT num, seq, to_seq FROM search_reverts WHERE num IN ({marks})", nums
        ).fetchall():
            spans.setdefault(num, []).append((seq, to_seq))
    effective = {num: hidden_spans(reverts) for num, reverts in spans.items()}
    out: list[SearchHit] = []
    for rid, rank, sid, title, directory, created_at, payload in rows:
        seq = (rid >> ROLE_BITS) & SEQ_MASK
        reverted = is_hidden(seq, effective.get(rid >> NUM_SHIFT, ()))
        if reverted and not include_reverted:
            continue
        try:
            body = decode_body(payload)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, TypeError):
            continue  # indexed, so it decoded once: the file was damaged since
        text = indexed_text(body)
        if text is None:
            continue
        out.append(
            SearchHit(
                session_id=sid,
                seq=seq,
                role=body.role,  # type: ignore[union-attr]  # indexed_text: messages only
                created_at=created_at,
                score=-rank,
                excerpt=excerpt_of(text, stems),
                title=title,
                directory=directory,
                metadata=body.metadata,  # type: ignore[union-attr]
                reverted=reverted,
            )
        )
    return out


def _unreadable(conn: sqlite3.Connection) -> str | None:
    """What stops the FTS index from being read whole (its data blocks damaged or missing), or None: every
    term's every instance is walked, through an `fts5vocab` table in the connection's own temp schema (a
    read-only connection may make one)."""
    try:
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_vocab USING fts5vocab(main, search_fts, 'instance')"
        )
        try:
            conn.execute("SELECT count(*) FROM temp.search_vocab").fetchone()
        finally:
            conn.execute("DROP TABLE IF EXISTS temp.search_vocab")
    except sqlite3.Error as e:
        if not is_corrupt(e):
            raise
        return f"the index's own data cannot be read ({e})"
    return None


# --- consistency --------------------------------------------------------------------------------------


def check(conn: sqlite3.Connection, *, rows: bool = True) -> list[str]:
    """What is wrong with the index, read against the journal, in words (nothing: it is consistent); reads
    only. The cheap checks look at the bookkeeping: index rows of deleted sessions, sessions indexed past
    their last entry, appended entries that no flush would find. With `rows`, each indexed session's FTS
    rows and reverts are compared with those its entries make: a read of every message, O(the store)."""
    problems: list[str] = []
    (orphans,) = conn.execute(
        "SELECT count(*) FROM search_sessions x WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = x.session_id)"
    ).fetchone()
    if orphans:
        problems.append(f"{orphans} deleted session(s) are still in the index")
    (ahead,) = conn.execute(
        "SELECT count(*) FROM search_sessions x JOIN sessions s ON s.id = x.session_id WHERE x.indexed > s.entry_count"
    ).fetchone()
    if ahead:
        problems.append(f"{ahead} session(s) are indexed past their last entry")
    # A flush finds appended entries by the session's updated_at; one older than what flushes look back to,
    # with entries past `indexed` and no pending range, would never be indexed.
    (stranded,) = conn.execute(
        "SELECT count(*) FROM sessions s LEFT JOIN search_sessions x ON x.session_id = s.id"
        " WHERE s.entry_count > coalesce(x.indexed, 0) AND s.updated_at <= ?"
        " AND NOT EXISTS (SELECT 1 FROM search_pending p WHERE p.session_id = s.id)",
        (_flushed_at(conn) - SLACK,),
    ).fetchone()
    if stranded:
        problems.append(f"{stranded} session(s) have entries that no flush will index")
    if not rows:
        return problems
    unreadable = _unreadable(conn)
    if unreadable:
        return [*problems, unreadable]
    (strays,) = conn.execute(
        f"SELECT count(*) FROM search_fts WHERE (rowid >> {NUM_SHIFT}) NOT IN (SELECT num FROM search_sessions)"
    ).fetchone()
    if strays:
        problems.append(f"{strays} index row(s) belong to no session")
    missing = extra = wrong_reverts = 0
    for num, session_id, indexed in conn.execute("SELECT num, session_id, indexed FROM search_sessions").fetchall():
        lo, hi = session_rowids(num)
        actual = {r for (r,) in conn.execute("SELECT rowid FROM search_fts WHERE rowid BETWEEN ? AND ?", (lo, hi))}
        reverts: list[tuple[int, int]] = []
        expected: set[int] = set()
        for seq, body in _decoded(conn.execute(_RANGE_SQL, (session_id, 1, indexed))):
            if indexed_text(body) is not None:
                expected.add(rowid(num, seq, body.role))  # type: ignore[union-attr]  # indexed_text: messages only
            elif type(body) is Revert:
                reverts.append((seq, body.to_seq))
        missing += len(expected - actual)
        extra += len(actual - expected)
        stored = set(conn.execute("SELECT seq, to_seq FROM search_reverts WHERE num = ?", (num,)))
        wrong_reverts += len(stored ^ set(reverts))
    if missing:
        problems.append(f"{missing} indexed message(s) are missing from the index")
    if extra:
        problems.append(f"{extra} index row(s) match no message")
    if wrong_reverts:
        problems.append(f"{wrong_reverts} revert(s) differ between the index and the journal")
    return problems
