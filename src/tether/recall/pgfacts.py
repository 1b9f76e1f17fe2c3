"""The fact lines (`facts.py`) of a PostgreSQL store, in its own tables (migration 4 of `store/pgschema.py`):
`recall_facts` (a line per row, with its words as a `tsvector` of the store's `tether_search` configuration,
the one its own search uses), `recall_fact_progress` (how far each session's turns were read), and the change
cursor's position in `recall_meta` (``facts_position``). Every node shares them: a build on one node serves
all, and a batch another node saved first for the same turns is not saved twice (the session's progress row is
locked and checked in the transaction that writes the lines).

Ranked by PostgreSQL's `ts_rank` of a turn's best line: the facts add a bonus in units of the best fact match
(`Tuning.facts`, untuned), so their order within one query is what counts, not BM25's exact figures."""

from __future__ import annotations

from typing import Any

from ..store.protocols import Store
from ..store.searchtext import document, query_terms, tokens
from .facts import Facts
from .pgkeys import Pooled, is_postgres


class PgFactIndex(Facts):
    """Fact lines of a `PostgresStore`'s turns in its tables (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        if not is_postgres(store):
            raise TypeError("PgFactIndex keeps the facts of a PostgresStore")
        super().__init__(store)
        self._pg: Pooled = store  # type: ignore[assignment]  # a PostgresStore: checked above

    def close(self) -> None:
        """Nothing to close: the store's pool is the store's."""

    async def _read(self, sql: str, params: Any = ()) -> list[Any]:
        async def go(conn: Any) -> list[Any]:
            cur = await conn.execute(sql, params)
            return list(await cur.fetchall())

        return await self._pg._run(go, "read the facts of")

    async def total(self) -> int:
        """Fact lines kept."""
        return int((await self._read("SELECT count(*) FROM recall_facts"))[0][0])

    async def facts_of(self, session_id: str, seq: int) -> list[str]:
        rows = await self._read(
            "SELECT line FROM recall_facts WHERE session_id = %s AND seq = %s ORDER BY id", (session_id, seq)
        )
        return [line for (line,) in rows]

    async def _position(self) -> int:
        rows = await self._read("SELECT value FROM recall_meta WHERE key = 'facts_position'")
        return int(rows[0][0]) if rows else 0

    async def _save_position(self, after: int) -> None:
        async def go(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO recall_meta (key, value) VALUES ('facts_position', %s) ON CONFLICT (key)"
                " DO UPDATE SET value = greatest(recall_meta.value, EXCLUDED.value)",
                (after,),
            )

        await self._pg._tx(go, "save the facts' position in")

    async def _progress(self) -> dict[str, int]:
        return {sid: int(upto) for sid, upto in await self._read("SELECT session_id, upto FROM recall_fact_progress")}

    async def _save(self, session_id: str, directory: str | None, rows: list[tuple[int, str]], upto: int) -> None:
        async def tx(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO recall_fact_progress (session_id, upto) VALUES (%s, 0) ON CONFLICT DO NOTHING",
                (session_id,),
            )
            cur = await conn.execute(
                "SELECT upto FROM recall_fact_progress WHERE session_id = %s FOR UPDATE", (session_id,)
            )
            (done,) = await cur.fetchone()
            if done >= upto:
                return  # another node saved these turns' facts first
            if rows:
                async with conn.cursor() as c:
                    await c.executemany(
                        "INSERT INTO recall_facts (session_id, seq, directory, line, terms)"
                        " VALUES (%s, %s, %s, %s, to_tsvector('tether_search', %s))",
                        [(session_id, seq, directory, line, " ".join(tokens(document(line)))) for seq, line in rows],
                    )
            await conn.execute("UPDATE recall_fact_progress SET upto = %s WHERE session_id = %s", (upto, session_id))

        await self._pg._tx(tx, "write the facts of")

    async def find(
        self, query: str, *, directory: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[tuple[str, int, float]]:
        from ..store.postgres import _tsquery  # the store's own safe tsquery of a query's terms

        tsquery = _tsquery(query_terms(query))
        if tsquery is None:
            return []
        where, params = "", [tsquery]
        if session_id is not None:
            where, params = " AND f.session_id = %s", [tsquery, session_id]
        elif directory is not None:
            where, params = " AND f.directory = %s", [tsquery, directory]
        rows = await self._read(
            "WITH q AS (SELECT to_tsquery('tether_search', %s) AS q)"
            " SELECT f.session_id, f.seq, max(ts_rank(f.terms, q.q)) AS best FROM recall_facts f, q"
            f" WHERE f.terms @@ q.q{where} GROUP BY f.session_id, f.seq ORDER BY best DESC, f.session_id, f.seq"
            " LIMIT %s",
            (*params, limit),
        )
        return [(sid, int(seq), float(best)) for sid, seq, best in rows]
