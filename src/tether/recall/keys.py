"""Turn keys: each stored turn as recall finds it, by its own words and, weighted lower, by the words of the
turn before it in its session's active history (the question a reply answers, the request a tool output
serves), in a side SQLite FTS5 file beside the store (`KeyIndex`; a PostgreSQL store keeps them in its own
tables, `pgkeys.PgKeyIndex`: `TurnKeys` is what both share). Kept up to date
from the store's entries by `sync`, which recall runs before it searches, from the store's change cursor
(`SessionChanges`: the sessions written since the position the last sync saved here); never on the append
path, and never by listing every session."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..messages import Entry, Revert
from ..store.health import open_read_only
from ..store.protocols import Store
from ..store.records import SearchHit, SessionInfo
from ..store.reverts import ActiveWalk, hidden_spans, is_hidden
from ..store.searchtext import QueryTerm, document, excerpt_of, indexed_text, match_expression, query_terms
from ..store.walfile import connect_wal
from .backfill import changes_since, side_path

KEY_VERSION = 1
"""Bump when what a key holds changes (`indexed_text`, `PREVIOUS_CHARS`, the columns): the file is then
built again."""

PREVIOUS_CHARS = 1_000
"""Of the turn before, its last this many characters join a turn's key: a question, or the end of a long
tool output, not 30,000 characters that would drown the turn's own words in BM25's length normalisation."""

SYNC_LIMIT = 8_000
"""Entries a recall reads into the keys before it searches; past that (a large store's first recall) the
rest waits for the next one and this recall searches the store's own index."""

COMMON = 10_000
"""As the store's index does: a query word in more turns than this is dropped when the query has rarer words."""

_SEQ_BITS = 32
_ROLE_BITS = 2
_NUM_SHIFT = _SEQ_BITS + _ROLE_BITS
_ROLES = {"user": 1, "assistant": 2, "tool": 3}
_ROLE_NAMES = {v: k for k, v in _ROLES.items()}
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_ROLE_MASK = (1 << _ROLE_BITS) - 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (
    num INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL UNIQUE,
    directory TEXT,
    created_at REAL NOT NULL,
    upto INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_directory ON sessions (directory);
CREATE TABLE IF NOT EXISTS reverts (num INTEGER NOT NULL, seq INTEGER NOT NULL, to_seq INTEGER NOT NULL,
    PRIMARY KEY (num, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS times (rid INTEGER PRIMARY KEY, created_at REAL NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS keys_fts USING fts5(
    own, previous, tokenize = 'porter unicode61', detail = full, content = ''
);
"""


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(_SCHEMA)


"""Rows are turns, their rowid ``num << 34 | seq << 2 | role`` as in the store's index (a session is a rowid
range, a role is two bits). The FTS table is contentless: it keeps terms, not text. SQLite before 3.43
cannot forget a contentless row without its text, so a session that goes (deleted, or replaced under its
id) only loses its ``sessions`` row: searches join on it, and its rows wait, counted in ``meta.orphans``,
for a rebuild once they are a quarter of the file."""


def default_key_path(store: Store) -> str:
    """Where a store's turn keys file lives: beside its SQLite file; in memory for a store without a file (a
    PostgreSQL store's keys are its tables: `pgkeys.PgKeyIndex`, which `engine.default_keys` opens)."""
    return side_path(store, ".keys")


def check_keys(path: str) -> str | None:
    """What is wrong with the turn keys file at `path`, read without writing to it (its pages, and every
    term of its FTS index walked), or None when it reads whole."""
    try:
        conn = open_read_only(path)
    except sqlite3.Error as e:
        return " ".join(str(e).split())
    try:
        verdict = " ".join(str(conn.execute("PRAGMA quick_check(1)").fetchone()[0]).split())
        if verdict != "ok":
            return verdict
        conn.execute("CREATE VIRTUAL TABLE temp.keys_vocab USING fts5vocab(main, keys_fts, 'instance')")
        conn.execute("SELECT count(*) FROM temp.keys_vocab").fetchone()
        return None
    except sqlite3.Error as e:
        return " ".join(str(e).split())
    finally:
        conn.close()


def _rid(num: int, seq: int, role: str) -> int:
    return (num << _NUM_SHIFT) | (seq << _ROLE_BITS) | _ROLES[role]


Row = tuple[int, str, str, str, float]
"""A turn's key as a sync builds it: seq, role, its own text and the previous turn's tail (both as
`document` made them), created_at."""


class TurnKeys:
    """What every home of the turn keys shares: `sync` from the store's change cursor, a session's entries
    read into keys a batch at a time (one transaction each, resumable, another writer's keys left standing),
    and hits read back from the store. A subclass keeps them (`KeyIndex`: a SQLite FTS5 file; `PgKeyIndex`
    in `pgkeys.py`: tables of a PostgreSQL store) through the hooks below."""

    def __init__(self) -> None:
        self._infos: dict[str, SessionInfo] = {}
        self._whole: dict[str, tuple[float, int, str | None]] = {}  # session -> what it was when keyed whole
        self._position = 0  # the cursor's position this object last read or saved

    # --- what a home of the keys provides -------------------------------------------------------------

    async def _load_position(self) -> int:
        raise NotImplementedError

    async def _save_position(self, after: int) -> None:
        raise NotImplementedError

    async def _known(self, session_ids: list[str]) -> dict[str, tuple[int, float, int, str | None]]:
        """What the keys hold of these sessions: num, created_at, upto, directory."""
        raise NotImplementedError

    async def _set_directory(self, num: int, directory: str | None) -> None:
        raise NotImplementedError

    async def _drop(self, session_ids: Iterable[str]) -> None:
        """Forget these sessions' keys (deleted, or replaced under their id)."""
        raise NotImplementedError

    async def _register(self, info: SessionInfo) -> int:
        """The session's number in the keys, made when it has none."""
        raise NotImplementedError

    async def _write(self, num: int, upto: int, last: int, rows: list[Row], reverts: list[tuple[int, int]]) -> bool:
        """One transaction: the rows, the reverts and the new `upto` (`last`), unless another writer moved
        `upto` first (then False, and nothing written)."""
        raise NotImplementedError

    async def _compact(self) -> bool:
        """After a whole sync: True when the home was emptied to be read again (too many orphaned rows)."""
        return False

    def close(self) -> None:
        raise NotImplementedError

    async def search(
        self,
        store: Store,
        query: str,
        *,
        previous: float,
        directory: str | None = None,
        session_id: str | None = None,
        role: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
        include_reverted: bool = False,
    ) -> list[SearchHit]:
        """What `store.search` returns, ranked on the keys (see the subclasses)."""
        raise NotImplementedError

    # --- sync ---------------------------------------------------------------------------------------

    async def sync(
        self,
        store: Store,
        *,
        directory: str | None = None,
        session_id: str | None = None,
        limit: int = SYNC_LIMIT,
        batch: int = 512,
        progress: Callable[[int], None] | None = None,
    ) -> bool:
        """Read into the keys what the store gained since the last sync, at most `limit` entries; True when
        nothing is left behind. What changed is asked of the store's change cursor (`changed_sessions`, from
        the position the last complete sync saved with the keys), so a sync costs what changed, never a
        listing of every session. A session the store deleted, or replaced under its id, is dropped.
        `session_id`: that session only (its row read directly). `directory` is accepted for the callers'
        sake: the keys are one index of every session, brought up to date whole. Memory is bounded by
        `batch` turns. `progress` is told the entries read so far after each session."""
        if session_id is not None:
            try:
                info = await store.get_session(session_id)
            except LookupError:
                return True  # nothing to find in it: the search says so
            return await self._sync_infos(store, [info], limit, batch, progress)
        position = await self._load_position()
        if position < self._position:
            self._whole.clear()  # another process reset the keys: what this object keyed may be gone
        self._position = position
        infos, deleted, after = await changes_since(store, position)
        await self._drop(deleted)
        if not await self._sync_infos(store, infos, limit, batch, progress):
            return False  # the position stays: the next sync reads these changes again, and skips what is done
        if after != position:
            await self._save_position(after)
            self._position = after
        if await self._compact():
            return await self.sync(store, limit=limit, batch=batch, progress=progress)
        return True

    async def _sync_infos(
        self,
        store: Store,
        infos: list[SessionInfo],
        limit: int,
        batch: int,
        progress: Callable[[int], None] | None,
    ) -> bool:
        """Keys for what these sessions hold past what the keys have read of them, at most `limit` entries;
        False when the limit stopped it."""
        # what this object synced itself and saw unchanged since needs no look at the keys (the common case:
        # the session the cursor's position stands on, read again by every sync)
        infos = [i for i in infos if self._whole.get(i.id) != (i.created_at, i.entry_count, i.directory)]
        known = await self._known([info.id for info in infos]) if infos else {}
        budget = limit
        for info in infos:
            self._infos[info.id] = info
            num, created_at, upto, where = known.get(info.id, (None, info.created_at, 0, info.directory))
            if num is not None and (created_at != info.created_at or info.entry_count < upto):
                await self._drop([info.id])  # another session under the same id
                self._infos[info.id] = info
                num, upto = None, 0
            if num is not None and where != info.directory:
                await self._set_directory(num, info.directory)
            gone = False
            while info.entry_count > upto:
                if budget <= 0:
                    return False
                end = min(info.entry_count, upto + budget)
                try:
                    read, whole = await self._sync_session(store, info, num, upto, end, batch)
                except LookupError:  # deleted since the cursor said it changed: its keys go now
                    await self._drop([info.id])
                    gone = True
                    break
                budget -= read
                if progress is not None:
                    progress(limit - budget)
                if whole and end == info.entry_count:
                    break
                # the limit, or another process that wrote some of these keys first: from where they stand
                num, _, upto, _ = (await self._known([info.id])).get(info.id, (None, info.created_at, 0, None))
            if not gone:
                self._whole[info.id] = (info.created_at, info.entry_count, info.directory)
        return True

    async def _sync_session(
        self, store: Store, info: SessionInfo, num: int | None, upto: int, end: int, batch: int
    ) -> tuple[int, bool]:
        """Keys for entries upto+1..end of one session; returns how many entries were read, and False when
        another process had written some of them first (its keys stand)."""
        if num is None:
            num = await self._register(info)
        start = upto
        previous = await _previous_text(store, info.id, upto) if upto else ""
        rows: list[Row] = []
        reverts: list[tuple[int, int]] = []
        last = upto
        async for entry in store.iter_entries(info.id, upto + 1, batch=batch):
            if entry.seq > end:
                break
            last = entry.seq
            body = entry.body
            if type(body) is Revert:
                reverts.append((entry.seq, body.to_seq))
                # what comes next follows the turn the revert went back to (or, when it only hid a revert,
                # the turns that one had hidden)
                previous = await _previous_text(store, info.id, entry.seq)
                continue
            text = indexed_text(body)
            if text is None:
                continue
            role: str = body.role  # type: ignore[union-attr]  # indexed_text: messages only
            rows.append((entry.seq, role, document(text), document(previous[-PREVIOUS_CHARS:]), entry.created_at))
            previous = text
            if len(rows) >= batch:
                if not await self._write(num, upto, entry.seq, rows, reverts):
                    return last - start, False  # another process got there first: its keys stand
                upto, rows, reverts = entry.seq, [], []
        return last - start, await self._write(num, upto, last, rows, reverts)

    # --- hits ---------------------------------------------------------------------------------------

    async def _hits(
        self,
        store: Store,
        found: list[tuple[str, int, str, float, bool]],
        stems: list[str],
        entries: dict[tuple[str, int], Entry] | None = None,
    ) -> list[SearchHit]:
        """(session, seq, role, score, reverted) as the store's hits: their entries (those not in `entries`,
        when given) read from the store, a run of neighbouring seqs at a time."""
        wanted: dict[str, list[int]] = {}
        entries = {} if entries is None else entries
        for sid, seq, _, _, _ in found:
            if (sid, seq) not in entries:
                wanted.setdefault(sid, []).append(seq)
        for sid, seqs in wanted.items():
            try:
                for lo, hi in _runs(sorted(seqs)):
                    for read in await store.read(sid, lo, hi):
                        entries[sid, read.seq] = read
            except LookupError:
                continue  # deleted since the last sync
        out: list[SearchHit] = []
        for sid, seq, role, score, reverted in found:
            entry = entries.get((sid, seq))
            text = indexed_text(entry.body) if entry is not None else None
            if entry is None or text is None:
                continue
            info = self._infos.get(sid)
            if info is None:
                try:
                    info = self._infos[sid] = await store.get_session(sid)
                except LookupError:
                    continue
            out.append(
                SearchHit(
                    session_id=sid,
                    seq=entry.seq,
                    role=role,
                    created_at=entry.created_at,
                    score=score,
                    excerpt=excerpt_of(text, stems),
                    title=info.title,
                    directory=info.directory,
                    metadata=dict(getattr(entry.body, "metadata", {})),
                    reverted=reverted,
                )
            )
        return out


class KeyIndex(TurnKeys):
    """The turn keys of a store's sessions in their own SQLite file (`path`, default beside the store).
    `sync(store)` reads what the store gained since the last sync; `search(store, query, ...)` is the store's
    `search` over these keys, `previous` weighting the words of the turn before."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = connect_wal(self.path, setup=_setup)
        self._lock = threading.Lock()
        try:
            version = self._meta("version")
            if version != KEY_VERSION:
                if version is not None:
                    self._reset()
                self._set_meta("version", KEY_VERSION)
        except BaseException:
            self._conn.close()  # a file that is not a database, or is damaged: nothing left open on it
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _meta(self, key: str) -> int | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row is not None else None

    def _set_meta(self, key: str, value: int) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def reset(self) -> None:
        """Forget every key, in place, to be read again from the store by the next `sync`: what a rebuild
        does. `sqlite3.Error` when the file is damaged beyond that (then it is made anew)."""
        self._reset()
        with self._lock:
            verdict = " ".join(str(self._conn.execute("PRAGMA quick_check(1)").fetchone()[0]).split())
        if verdict != "ok":
            raise sqlite3.DatabaseError(f"the turn keys in {self.path} are damaged ({verdict})")
        self._infos.clear()
        self._whole.clear()

    def _reset(self) -> None:
        """Everything again from nothing: an old format, or too many orphaned rows."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            for table in ("sessions", "reverts", "times"):
                self._conn.execute(f"DELETE FROM {table}")
            self._conn.execute("DELETE FROM meta WHERE key = 'position'")
            self._conn.execute("INSERT INTO keys_fts (keys_fts) VALUES ('delete-all')")
            self._set_meta("orphans", 0)
            self._set_meta("rows", 0)
            self._conn.execute("COMMIT")
        self._whole.clear()

    def count(self) -> int:
        """Turns with a key (orphaned rows left out)."""
        with self._lock:
            return (self._meta("rows") or 0) - (self._meta("orphans") or 0)

    # --- the hooks of `TurnKeys` ----------------------------------------------------------------------

    async def _load_position(self) -> int:
        with self._lock:
            return self._meta("position") or 0

    async def _save_position(self, after: int) -> None:
        with self._lock:
            self._set_meta("position", after)

    async def _compact(self) -> bool:
        with self._lock:
            rows, orphans = self._meta("rows") or 0, self._meta("orphans") or 0
        if orphans > 1000 and orphans * 4 > rows:
            self._reset()
            return True
        return False

    async def _known(self, session_ids: list[str]) -> dict[str, tuple[int, float, int, str | None]]:
        sql = "SELECT num, session_id, created_at, upto, directory FROM sessions"
        rows: list[tuple[int, str, float, int, str | None]] = []
        with self._lock:
            for i in range(0, len(session_ids), 500):
                chunk = session_ids[i : i + 500]
                rows += self._conn.execute(f"{sql} WHERE session_id IN ({','.join('?' * len(chunk))})", chunk)
        return {sid: (num, created_at, upto, where) for num, sid, created_at, upto, where in rows}

    async def _set_directory(self, num: int, directory: str | None) -> None:
        with self._lock:
            self._conn.execute("UPDATE sessions SET directory = ? WHERE num = ?", (directory, num))

    async def _drop(self, session_ids: Iterable[str]) -> None:
        with self._lock:
            for sid in session_ids:
                row = self._conn.execute("SELECT num FROM sessions WHERE session_id = ?", (sid,)).fetchone()
                if row is None:
                    continue
                lo, hi = row[0] << _NUM_SHIFT, ((row[0] + 1) << _NUM_SHIFT) - 1
                self._conn.execute("BEGIN IMMEDIATE")
                (gone,) = self._conn.execute(
                    "SELECT count(*) FROM times WHERE rid BETWEEN ? AND ?", (lo, hi)
                ).fetchone()
                self._conn.execute("DELETE FROM times WHERE rid BETWEEN ? AND ?", (lo, hi))
                self._conn.execute("DELETE FROM reverts WHERE num = ?", (row[0],))
                self._conn.execute("DELETE FROM sessions WHERE num = ?", (row[0],))
                self._set_meta("orphans", (self._meta("orphans") or 0) + int(gone))
                self._conn.execute("COMMIT")
                self._infos.pop(sid, None)
                self._whole.pop(sid, None)

    async def _register(self, info: SessionInfo) -> int:
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO sessions (session_id, directory, created_at, upto) VALUES (?, ?, ?, 0)",
                (info.id, info.directory, info.created_at),
            )
            return int(self._conn.execute("SELECT num FROM sessions WHERE session_id = ?", (info.id,)).fetchone()[0])

    async def _write(self, num: int, upto: int, last: int, rows: list[Row], reverts: list[tuple[int, int]]) -> bool:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute("SELECT upto FROM sessions WHERE num = ?", (num,)).fetchone()
                if row is None or row[0] != upto:
                    self._conn.execute("ROLLBACK")
                    return False
                self._conn.executemany(
                    "INSERT INTO keys_fts (rowid, own, previous) VALUES (?, ?, ?)",
                    [(_rid(num, seq, role), own, prev) for seq, role, own, prev, _ in rows],
                )
                self._conn.executemany(
                    "INSERT INTO times (rid, created_at) VALUES (?, ?)",
                    [(_rid(num, seq, role), at) for seq, role, _, _, at in rows],
                )
                self._conn.executemany(
                    "INSERT OR REPLACE INTO reverts (num, seq, to_seq) VALUES (?, ?, ?)",
                    [(num, seq, to_seq) for seq, to_seq in reverts],
                )
                self._conn.execute("UPDATE sessions SET upto = ? WHERE num = ?", (last, num))
                self._set_meta("rows", (self._meta("rows") or 0) + len(rows))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return True

    def _session_ids(self, nums: list[int]) -> dict[int, str]:
        marks = ",".join("?" * len(nums))
        return dict(self._conn.execute(f"SELECT num, session_id FROM sessions WHERE num IN ({marks})", nums).fetchall())

    # --- search -------------------------------------------------------------------------------------

    async def search(
        self,
        store: Store,
        query: str,
        *,
        previous: float,
        directory: str | None = None,
        session_id: str | None = None,
        role: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
        include_reverted: bool = False,
    ) -> list[SearchHit]:
        """What `store.search` returns, ranked on the keys: BM25 over a turn's own words and, weighted by
        `previous`, the words of the turn before it (the length normalisation counts both). Call `sync`
        first; the hits' text, times and metadata are read from the store."""
        terms = query_terms(query)
        stems = [t for term in terms for t in term.tokens]
        with self._lock:
            match = match_expression(self._without_common_terms(terms))
            if match is None:
                return []
            where = ["keys_fts MATCH ?"]
            params: list[Any] = [match]
            joins = ""
            if session_id is not None:
                row = self._conn.execute("SELECT num FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
                if row is None:
                    return []
                where.append("f.rowid BETWEEN ? AND ?")
                params += [row[0] << _NUM_SHIFT, ((row[0] + 1) << _NUM_SHIFT) - 1]
            elif directory is not None:
                where.append(f"(f.rowid >> {_NUM_SHIFT}) IN (SELECT num FROM sessions WHERE directory = ?)")
                params.append(directory)
            elif self._meta("orphans"):
                where.append(f"(f.rowid >> {_NUM_SHIFT}) IN (SELECT num FROM sessions)")
            if role is not None:
                where.append(f"(f.rowid & {(1 << _ROLE_BITS) - 1}) = ?")
                params.append(_ROLES.get(role, 0))
            if since is not None or until is not None:
                joins = " JOIN times t ON t.rid = f.rowid"
                if since is not None:
                    where.append("t.created_at >= ?")
                    params.append(since)
                if until is not None:
                    where.append("t.created_at < ?")
                    params.append(until)
            sql = (
                f"SELECT f.rowid, bm25(keys_fts, 1.0, ?) AS rank FROM keys_fts f{joins}"
                f" WHERE {' AND '.join(where)} ORDER BY rank LIMIT ?"
            )
            fetch = limit if include_reverted else limit + 16
            while True:
                rows = self._conn.execute(sql, (previous, *params, fetch)).fetchall()
                found = self._visible(rows, include_reverted)
                if len(found) >= limit or len(rows) < fetch:
                    break
                fetch *= 4  # reverts hid many of the best: look further down
            sessions = self._session_ids(sorted({rid >> _NUM_SHIFT for rid, _, _ in found[:limit]}))
        hits = [
            (sid, (rid >> _ROLE_BITS) & _SEQ_MASK, _ROLE_NAMES[rid & _ROLE_MASK], -rank, reverted)
            for rid, rank, reverted in found[:limit]
            if (sid := sessions.get(rid >> _NUM_SHIFT)) is not None
        ]
        return await self._hits(store, hits, stems)

    def _without_common_terms(self, terms: list[QueryTerm]) -> list[QueryTerm]:
        if len(terms) < 2:
            return terms
        rare = []
        for term in terms:
            (n,) = self._conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM keys_fts WHERE keys_fts MATCH ? LIMIT ?)",
                (f"own : {term.fts()}", COMMON + 1),
            ).fetchone()
            if n <= COMMON:
                rare.append(term)
        return rare or terms

    def _visible(self, rows: list[tuple[int, float]], include_reverted: bool) -> list[tuple[int, float, bool]]:
        """(rowid, rank, reverted) of the rows, those a revert hid left out unless `include_reverted`."""
        nums = sorted({rid >> _NUM_SHIFT for rid, _ in rows})
        spans: dict[int, list[tuple[int, int]]] = {}
        if nums:
            marks = ",".join("?" * len(nums))
            for num, seq, to_seq in self._conn.execute(
                f"SELECT num, seq, to_seq FROM reverts WHERE num IN ({marks})", nums
            ):
                spans.setdefault(num, []).append((seq, to_seq))
        effective = {num: hidden_spans(reverts) for num, reverts in spans.items()}
        out = []
        for rid, rank in rows:
            reverted = is_hidden((rid >> _ROLE_BITS) & _SEQ_MASK, effective.get(rid >> _NUM_SHIFT, ()))
            if include_reverted or not reverted:
                out.append((rid, rank, reverted))
        return out


def _runs(seqs: list[int], gap: int = 4) -> list[tuple[int, int]]:
    """Sorted seqs as ranges to read: seqs at most `gap` apart share one read."""
    out: list[tuple[int, int]] = []
    for seq in seqs:
        if out and seq - out[-1][1] <= gap:
            out[-1] = (out[-1][0], seq)
        else:
            out.append((seq, seq))
    return out


async def _previous_text(store: Store, session_id: str, last_seq: int) -> str:
    """The text of the last message of the active history up to `last_seq` ("" when there is none)."""
    async for entry in ActiveWalk(store, session_id, last_seq):
        text = indexed_text(entry.body)
        if text is not None:
            return text
    return ""
