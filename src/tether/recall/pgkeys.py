"""Turn keys in a PostgreSQL store's own tables (migration 4 of `store/pgschema.py`): one inverted index that
every node shares, synced from the store's change cursor by whichever recall runs (`TurnKeys.sync`: never on
the append path, never by listing every session), and ranked by the BM25 that SQLite's FTS5 computes for
`keys.py`, in SQL.

The index: `recall_sessions` (a session's number, directory, creation time and `upto`, how far its entries
are keyed), `recall_turns` (each turn's role, time and token count per column: its own words, and the tail of
the turn before), `recall_postings` (per term and turn, the term's positions in each column: their count is
the term frequency, and phrases need them), `recall_reverts`, and in `recall_meta` the cursor's `position`
and the totals BM25 needs (`docs`, `tokens`). Terms are made in Python exactly as FTS5's ``porter
unicode61`` makes them, by FTS5 itself: the text goes through an in-memory FTS5 table of this process's SQLite
(the library the SQLite keys use), read back from its vocabulary and rolled back (`Fts5Terms`). A Python
copy of the tokenizer would differ on the edges of Unicode (FTS5 keeps Unicode 6.1's classes, folds
diacritics but not compatibility forms: "ﬁ", "½", "①" are terms of their own); this way the same query ranks
the same turns the same way on either store.

Writers: a batch of one session's keys is one transaction that first locks the session's row and checks its
`upto` (a second node that keyed the same entries first wins, the other writes nothing), and adds its counts
to the totals in the same transaction; deletions likewise. Two nodes syncing at once neither corrupt nor
count twice. The SQL runs on the store's own pool (`PostgresStore._run`/`_tx`: its errors are the store's), and
a search reads its turns' entries from the store's `entries` table in its own round trip (decoded by the store,
`_decode_rows`), not one `read` per run of turns."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from ..messages import Entry
from ..store.protocols import Store
from ..store.records import SearchHit, SessionInfo
from ..store.reverts import hidden_spans, is_hidden
from ..store.searchtext import QueryTerm, query_terms
from .keys import COMMON, Row, TurnKeys

R = TypeVar("R")

K1 = 1.2
B = 0.75
"""FTS5's `bm25()` constants (k1, b): the SQLite keys rank with them."""

MAX_TERM_BYTES = 256
"""A term longer than this (a hash, a blob of base64) is kept as its first 64 characters and a digest: a
btree key has a size limit, and nobody searches for such a word by its prefix."""

_ROLES = {"user": 1, "assistant": 2, "tool": 3}
_ROLE_NAMES = {v: k for k, v in _ROLES.items()}


class Pooled(Protocol):
    """What the keys use of a `PostgresStore`: its URL, and its pool's reads and transactions."""

    url: str

    async def _run(self, fn: Callable[[Any], Awaitable[R]], doing: str) -> R: ...

    async def _tx(self, fn: Callable[[Any], Awaitable[R]], doing: str = ...) -> R: ...

    def _decode_rows(self, session_id: str, rows: list[Any]) -> list[Entry]: ...


def is_postgres(store: object) -> bool:
    """Whether `store` is a `PostgresStore` (without importing psycopg when no one has)."""
    module = sys.modules.get("tether.store.postgres")
    return module is not None and isinstance(store, module.PostgresStore)


def term_key(term: str) -> str:
    """The term as the postings keep it (see `MAX_TERM_BYTES`)."""
    if len(term.encode()) <= MAX_TERM_BYTES:
        return term
    return term[:64] + "#" + hashlib.sha256(term.encode()).hexdigest()[:32]  # "#" is never in a token


class Fts5Terms:
    """FTS5's ``porter unicode61`` tokenizer, run by SQLite in this process: an in-memory contentless table with
    the keys' two columns, written in a transaction, read back through `fts5vocab` and rolled back."""

    def __init__(self) -> None:
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._conn.execute(
            "CREATE VIRTUAL TABLE t USING fts5(own, previous, tokenize = 'porter unicode61', detail = full,"
            " content = '')"
        )
        self._conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, t, 'instance')")
        self._lock = threading.Lock()

    def documents(
        self, docs: Sequence[tuple[str, str]]
    ) -> list[tuple[int, int, dict[str, tuple[list[int], list[int]]]]]:
        """For each (own, previous): the token count of each column and each term's positions in each."""
        out: list[tuple[int, int, dict[str, tuple[list[int], list[int]]]]] = [(0, 0, {}) for _ in docs]
        counts = [[0, 0] for _ in docs]
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany(
                    "INSERT INTO t (rowid, own, previous) VALUES (?, ?, ?)",
                    [(i + 1, own, previous) for i, (own, previous) in enumerate(docs)],
                )
                rows = self._conn.execute("SELECT term, doc, col, offset FROM v").fetchall()
            finally:
                self._conn.execute("ROLLBACK")
        for term, doc, col, offset in rows:
            i, c = doc - 1, 0 if col == "own" else 1
            counts[i][c] += 1
            where = out[i][2].setdefault(term_key(term), ([], []))
            where[c].append(offset)
        return [(own, previous, out[i][2]) for i, (own, previous) in enumerate(counts)]

    def phrase(self, words: Sequence[str]) -> list[str]:
        """The terms FTS5 makes of a quoted phrase of `words`, in order."""
        ((_, _, found),) = self.documents([(" ".join(words), "")])
        at = sorted((offset, term) for term, (own, _) in found.items() for offset in own)
        return [term for _, term in at]


TERMS = Fts5Terms()


def postings(text: str) -> tuple[int, dict[str, list[int]]]:
    """The token count of `text` and each term's positions in it, as FTS5's ``porter unicode61`` indexes it."""
    ((count, _, found),) = TERMS.documents([(text, "")])
    return count, {term: own for term, (own, _) in found.items()}


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def term_sql(term: QueryTerm) -> tuple[str, list[Any]]:
    """A query of the turns that hold `term` (a word, a phrase of several tokens, either with its last token a
    prefix): (num, seq, fo, fp), its frequency in the turn's own words and in the previous turn's, as FTS5
    counts a phrase's instances."""
    stems = TERMS.phrase(term.tokens)
    n = len(stems)
    if not n:
        return "SELECT 0::bigint AS num, 0::bigint AS seq, 0::float8 AS fo, 0::float8 AS fp WHERE false", []

    def cond(j: int) -> tuple[str, str]:
        if j == n - 1 and term.prefix:
            return f"p{j}.term LIKE %s", _like(stems[j])
        return f"p{j}.term = %s", stems[j]

    if n == 1:
        where, param = cond(0)
        if term.prefix:
            sql = (
                "SELECT num, seq, sum(cardinality(own))::float8 AS fo, sum(cardinality(previous))::float8 AS fp"
                f" FROM recall_postings p0 WHERE {where} GROUP BY num, seq"
            )
        else:
            sql = (
                "SELECT num, seq, cardinality(own)::float8 AS fo, cardinality(previous)::float8 AS fp"
                f" FROM recall_postings p0 WHERE {where}"
            )
        return sql, [param]
    joins, params = [], []
    for j in range(1, n):
        where, param = cond(j)
        joins.append(f"JOIN recall_postings p{j} ON p{j}.num = p0.num AND p{j}.seq = p0.seq AND {where}")
        params.append(param)
    first, param = cond(0)
    params.append(param)

    def count(column: str) -> str:
        follow = " AND ".join(f"x + {j} = ANY(p{j}.{column})" for j in range(1, n))
        return f"(SELECT count(*) FROM unnest(p0.{column}) AS x WHERE {follow})"

    inner = (
        f"SELECT p0.num, p0.seq, {count('own')} AS fo, {count('previous')} AS fp"
        f" FROM recall_postings p0 {' '.join(joins)} WHERE {first}"
    )
    sql = (
        f"SELECT num, seq, sum(fo)::float8 AS fo, sum(fp)::float8 AS fp FROM ({inner}) q"
        " GROUP BY num, seq HAVING sum(fo) + sum(fp) > 0"
    )
    return sql, params


class PgKeyIndex(TurnKeys):
    """The turn keys of a `PostgresStore`, in its tables (see the module docstring). `sync(store)` and
    `search(store, query, ...)` as `KeyIndex`'s."""

    def __init__(self, store: Store) -> None:
        if not is_postgres(store):
            raise TypeError("PgKeyIndex keeps the keys of a PostgresStore")
        super().__init__()
        self._pg: Pooled = store  # type: ignore[assignment]  # a PostgresStore: checked above
        self.path = f"the tables recall_* of {getattr(store, 'where', 'the PostgreSQL store')}"

    def close(self) -> None:
        """Nothing to close: the store's pool is the store's."""

    async def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async def go(conn: Any) -> list[Any]:
            cur = await conn.execute(sql, params)
            return list(await cur.fetchall())

        return await self._pg._run(go, "read the turn keys of")

    async def count(self) -> int:
        """Turns with a key."""
        rows = await self._read("SELECT value FROM recall_meta WHERE key = 'docs'")
        return int(rows[0][0]) if rows else 0

    async def reset(self) -> None:
        """Forget every key, to be read again from the store by the next `sync` (a rebuild)."""

        async def tx(conn: Any) -> None:
            await conn.execute("TRUNCATE recall_postings, recall_turns, recall_reverts, recall_sessions, recall_meta")

        await self._pg._tx(tx, "empty the turn keys of")
        self._infos.clear()
        self._whole.clear()
        self._position = 0

    # --- the hooks of `TurnKeys` ----------------------------------------------------------------------

    async def _load_position(self) -> int:
        rows = await self._read("SELECT value FROM recall_meta WHERE key = 'position'")
        return int(rows[0][0]) if rows else 0

    async def _save_position(self, after: int) -> None:
        async def go(conn: Any) -> None:
            # never backwards: another node that synced further has keyed everything before its position
            await conn.execute(
                "INSERT INTO recall_meta (key, value) VALUES ('position', %s) ON CONFLICT (key)"
                " DO UPDATE SET value = greatest(recall_meta.value, EXCLUDED.value)",
                (after,),
            )

        await self._pg._tx(go, "save the turn keys' position in")

    async def _known(self, session_ids: list[str]) -> dict[str, tuple[int, float, int, str | None]]:
        rows = await self._read(
            "SELECT num, session_id, created_at, upto, directory FROM recall_sessions WHERE session_id = ANY(%s)",
            (session_ids,),
        )
        return {sid: (int(num), float(at), int(upto), where) for num, sid, at, upto, where in rows}

    async def _set_directory(self, num: int, directory: str | None) -> None:
        async def go(conn: Any) -> None:
            await conn.execute("UPDATE recall_sessions SET directory = %s WHERE num = %s", (directory, num))

        await self._pg._tx(go, "write the turn keys of")

    async def _drop(self, session_ids: Iterable[str]) -> None:
        ids = list(session_ids)
        if not ids:
            return

        async def tx(conn: Any) -> None:
            # the sessions' rows first (locked by the delete: a second node dropping them finds none), the
            # totals last, as every writer takes them
            cur = await conn.execute("DELETE FROM recall_sessions WHERE session_id = ANY(%s) RETURNING num", (ids,))
            nums = [r[0] for r in await cur.fetchall()]
            if not nums:
                return
            cur = await conn.execute(
                "WITH gone AS (DELETE FROM recall_turns WHERE num = ANY(%s) RETURNING own_len + previous_len AS n)"
                " SELECT count(*), coalesce(sum(n), 0) FROM gone",
                (nums,),
            )
            docs, tokens = await cur.fetchone()
            await conn.execute("DELETE FROM recall_postings WHERE num = ANY(%s)", (nums,))
            await conn.execute("DELETE FROM recall_reverts WHERE num = ANY(%s)", (nums,))
            await _add_totals(conn, -int(docs), -int(tokens))

        await self._pg._tx(tx, "drop sessions from the turn keys of")
        for sid in ids:
            self._infos.pop(sid, None)
            self._whole.pop(sid, None)

    async def _register(self, info: SessionInfo) -> int:
        async def go(conn: Any) -> int:
            await conn.execute(
                "INSERT INTO recall_sessions (session_id, directory, created_at) VALUES (%s, %s, %s)"
                " ON CONFLICT (session_id) DO NOTHING",
                (info.id, info.directory, info.created_at),
            )
            cur = await conn.execute("SELECT num FROM recall_sessions WHERE session_id = %s", (info.id,))
            return int((await cur.fetchone())[0])

        return await self._pg._tx(go, "write the turn keys of")

    async def _write(self, num: int, upto: int, last: int, rows: list[Row], reverts: list[tuple[int, int]]) -> bool:
        turns: list[tuple[int, int, int, float, int, int]] = []
        found: list[tuple[str, int, list[int], list[int]]] = []
        tokens = 0
        made = TERMS.documents([(own, previous) for _, _, own, previous, _ in rows])
        for (seq, role, _, _, at), (own_len, previous_len, posted) in zip(rows, made, strict=True):
            turns.append((num, seq, _ROLES[role], at, own_len, previous_len))
            tokens += own_len + previous_len
            found += [(term, seq, o, p) for term, (o, p) in posted.items()]

        async def tx(conn: Any) -> bool:
            cur = await conn.execute("SELECT upto FROM recall_sessions WHERE num = %s FOR UPDATE", (num,))
            row = await cur.fetchone()
            if row is None or row[0] != upto:
                return False  # another node keyed these entries first (or the session was dropped)
            if turns:
                async with conn.cursor() as c:
                    async with c.copy(
                        "COPY recall_turns (num, seq, role, created_at, own_len, previous_len) FROM STDIN"
                    ) as copy:
                        await copy.write("".join(f"{n}\t{q}\t{r}\t{at!r}\t{o}\t{p}\n" for n, q, r, at, o, p in turns))
                    async with c.copy("COPY recall_postings (term, num, seq, own, previous) FROM STDIN") as copy:
                        await copy.write("".join(_posting_lines(num, found)))
            if reverts:
                async with conn.cursor() as c:
                    await c.executemany(
                        "INSERT INTO recall_reverts (num, seq, to_seq) VALUES (%s, %s, %s)"
                        " ON CONFLICT (num, seq) DO UPDATE SET to_seq = EXCLUDED.to_seq",
                        [(num, seq, to_seq) for seq, to_seq in reverts],
                    )
            await conn.execute("UPDATE recall_sessions SET upto = %s WHERE num = %s", (last, num))
            if turns:
                await _add_totals(conn, len(turns), tokens)
            return True

        return await self._pg._tx(tx, "write the turn keys of")

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
        """What `store.search` returns, ranked on the keys as `KeyIndex.search` ranks them: FTS5's BM25
        (k1 1.2, b 0.75, idf floored at 1e-6) over a turn's own words and, weighted by `previous`, the words
        of the turn before it, the length normalisation counting both. Call `sync` first."""
        query_ = query_terms(query)
        stems = [t for term in query_ for t in term.tokens]
        chosen = await self._without_common_terms(query_)
        if not chosen:
            return []
        ctes, params = [], []
        for i, term in enumerate(chosen):
            sql, p = term_sql(term)
            ctes.append(f"t{i} AS ({sql})")
            params += p
        union = " UNION ALL ".join(
            f"SELECT {i} AS i, num, seq, fo + %s * fp AS f FROM t{i}" for i in range(len(chosen))
        )
        params += [previous] * len(chosen)
        where: list[str] = []
        if session_id is not None:
            where.append("s.session_id = %s")
            params.append(session_id)
        elif directory is not None:
            where.append("s.directory = %s")
            params.append(directory)
        if role is not None:
            where.append("d.role = %s")
            params.append(_ROLES.get(role, 0))
        if since is not None:
            where.append("d.created_at >= %s")
            params.append(since)
        if until is not None:
            where.append("d.created_at < %s")
            params.append(until)
        sql = (
            f"WITH {', '.join(ctes)}, m AS ({union}),"
            " h AS (SELECT i, count(*)::float8 AS n FROM m GROUP BY i),"
            " g AS (SELECT coalesce((SELECT value FROM recall_meta WHERE key = 'docs'), 0)::float8 AS docs,"
            " coalesce((SELECT value FROM recall_meta WHERE key = 'tokens'), 0)::float8 AS tokens),"
            " idf AS (SELECT h.i, CASE WHEN x <= 0 THEN 1e-6 ELSE x END AS v FROM h, g,"
            " LATERAL (SELECT ln((greatest(g.docs, h.n) - h.n + 0.5) / (h.n + 0.5)) AS x) l)"
            f" SELECT s.session_id, d.num, d.seq, d.role, sum(idf.v * m.f * {K1 + 1}"
            f" / (m.f + {K1} * ({1 - B} + {B} * (d.own_len + d.previous_len) / greatest(g.tokens / greatest(g.docs, 1), 1e-9))))"
            " AS score"
            " FROM m JOIN idf ON idf.i = m.i JOIN recall_turns d ON d.num = m.num AND d.seq = m.seq"
            " JOIN recall_sessions s ON s.num = d.num CROSS JOIN g"
            f"{' WHERE ' + ' AND '.join(where) if where else ''}"
            " GROUP BY s.session_id, d.num, d.seq, d.role ORDER BY score DESC, d.num, d.seq LIMIT %s"
        )
        # the turns' entries come with them, in the same round trip (what `store.read` would read)
        sql = (
            f"SELECT r.session_id, r.num, r.seq, r.role, r.score, e.created_at, e.payload FROM ({sql}) r"
            " LEFT JOIN entries e ON e.session_id = r.session_id AND e.seq = r.seq"
            " ORDER BY r.score DESC, r.num, r.seq"
        )
        fetch = limit if include_reverted else limit + 16
        while True:
            rows = await self._read(sql, (*params, fetch))
            found = await self._visible(rows, include_reverted)
            if len(found) >= limit or len(rows) < fetch:
                break
            fetch *= 4  # reverts hid many of the best: look further down
        entries: dict[tuple[str, int], Entry] = {}
        for sid, _, seq, _, _, at, payload in rows:
            if payload is not None:
                for entry in self._pg._decode_rows(sid, [(seq, at, payload)]):
                    entries[sid, entry.seq] = entry
        return await self._hits(store, found[:limit], stems, entries)

    async def _without_common_terms(self, chosen: list[QueryTerm]) -> list[QueryTerm]:
        """The `COMMON` rule of the SQLite keys: a term in the own words of more than `COMMON` turns is
        dropped when the query has rarer ones."""
        if len(chosen) < 2:
            return chosen
        counts, params = [], []
        for term in chosen:
            sql, p = term_sql(term)
            counts.append(f"(SELECT count(*) FROM (SELECT 1 FROM ({sql}) q WHERE fo > 0 LIMIT {COMMON + 1}) c)")
            params += p
        (row,) = await self._read(f"SELECT {', '.join(counts)}", params)
        rare = [term for term, n in zip(chosen, row, strict=True) if n <= COMMON]
        return rare or chosen

    async def _visible(self, rows: list[Any], include_reverted: bool) -> list[tuple[str, int, str, float, bool]]:
        """(session, seq, role, score, reverted) of the rows, those a revert hid left out unless
        `include_reverted`."""
        nums = sorted({int(r[1]) for r in rows})
        spans: dict[int, list[tuple[int, int]]] = {}
        if nums:
            for num, seq, to_seq in await self._read(
                "SELECT num, seq, to_seq FROM recall_reverts WHERE num = ANY(%s)", (nums,)
            ):
                spans.setdefault(int(num), []).append((int(seq), int(to_seq)))
        effective = {num: hidden_spans(reverts) for num, reverts in spans.items()}
        out = []
        for sid, num, seq, role, score, *_ in rows:
            reverted = is_hidden(int(seq), effective.get(int(num), ()))
            if include_reverted or not reverted:
                out.append((str(sid), int(seq), _ROLE_NAMES.get(int(role), "user"), float(score), reverted))
        return out


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _posting_lines(num: int, found: list[tuple[str, int, list[int], list[int]]]) -> Iterable[str]:
    """The postings as lines of COPY's text format (written whole: a row at a time through psycopg's
    adapters cost more than the rest of a sync)."""
    for term, seq, own, previous in found:
        yield (
            f"{term.translate(_COPY_ESCAPES)}\t{num}\t{seq}\t{{{','.join(map(str, own))}}}"
            f"\t{{{','.join(map(str, previous))}}}\n"
        )


async def _add_totals(conn: Any, docs: int, tokens: int) -> None:
    """BM25's totals moved by what a transaction adds or removes (the two rows always in this order)."""
    await conn.execute(
        "INSERT INTO recall_meta (key, value) VALUES ('docs', %s), ('tokens', %s) ON CONFLICT (key)"
        " DO UPDATE SET value = recall_meta.value + EXCLUDED.value",
        (docs, tokens),
    )
