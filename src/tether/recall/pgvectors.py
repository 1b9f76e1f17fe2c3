"""The turn vectors (`embeddings.py`) of a PostgreSQL store, in its own tables (migration 4 of
`store/pgschema.py`): `recall_vectors` (a turn's vector as float32 bytes), `recall_vector_words` (the words that
expand queries, float16 bytes), `recall_vector_progress` (how far each session was embedded, per model), and
the change cursor's position per model in `recall_meta` (``vectors_position:<model>``). Every node shares them.

Vectors are `bytea`, not pgvector's type (not installed here, and not needed): the semantic side only
re-ranks the few hundred candidates the words found (`RERANK_DEPTH`), so their vectors are read by turn and
scored in Python (numpy), as on SQLite; no nearest-neighbour search over every vector is ever asked of the
database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..store.protocols import Store
from .embeddings import Embedder, Semantic, SemanticIndex
from .pgkeys import Pooled, is_postgres


class PgSemanticIndex(Semantic):
    """Turn vectors of a `PostgresStore`'s sessions in its tables (see the module docstring)."""

    def __init__(self, store: Store, embedder: Embedder) -> None:
        if not is_postgres(store):
            raise TypeError("PgSemanticIndex keeps the vectors of a PostgresStore")
        super().__init__(store, embedder)
        self._pg: Pooled = store  # type: ignore[assignment]  # a PostgresStore: checked above

    def close(self) -> None:
        """Nothing to close: the store's pool is the store's."""

    async def _read(self, sql: str, params: Any = ()) -> list[Any]:
        async def go(conn: Any) -> list[Any]:
            cur = await conn.execute(sql, params)
            return list(await cur.fetchall())

        return await self._pg._run(go, "read the vectors of")

    async def _write(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async def tx(conn: Any) -> None:
            async with conn.cursor() as c:
                await c.executemany(sql, rows)

        if rows:
            await self._pg._tx(tx, "write the vectors of")

    async def _position(self) -> int:
        rows = await self._read(
            "SELECT value FROM recall_meta WHERE key = %s", (f"vectors_position:{self.embedder.name}",)
        )
        return int(rows[0][0]) if rows else 0

    async def _save_position(self, after: int) -> None:
        await self._write(
            "INSERT INTO recall_meta (key, value) VALUES (%s, %s) ON CONFLICT (key)"
            " DO UPDATE SET value = greatest(recall_meta.value, EXCLUDED.value)",
            [(f"vectors_position:{self.embedder.name}", after)],
        )

    async def _known_words(self) -> set[str]:
        return {w for (w,) in await self._read("SELECT word FROM recall_vector_words")}

    async def _synced(self) -> dict[str, int]:
        rows = await self._read(
            "SELECT session_id, upto FROM recall_vector_progress WHERE model = %s", (self.embedder.name,)
        )
        return {sid: int(upto) for sid, upto in rows}

    async def _mark(self, session_id: str, upto: int) -> None:
        await self._write(
            "INSERT INTO recall_vector_progress (session_id, model, upto) VALUES (%s, %s, %s)"
            " ON CONFLICT (session_id, model) DO UPDATE SET upto = EXCLUDED.upto",
            [(session_id, self.embedder.name, upto)],
        )

    async def _put_words(self, rows: list[tuple[str, bytes]]) -> None:
        await self._write(
            "INSERT INTO recall_vector_words (word, vec) VALUES (%s, %s) ON CONFLICT (word) DO UPDATE SET vec = EXCLUDED.vec",
            rows,
        )

    async def _put_vectors(self, rows: list[tuple[str, int, bytes]]) -> None:
        await self._write(
            "INSERT INTO recall_vectors (session_id, seq, vec) VALUES (%s, %s, %s)"
            " ON CONFLICT (session_id, seq) DO UPDATE SET vec = EXCLUDED.vec",
            rows,
        )

    async def _drop(self, gone: Sequence[str]) -> None:
        async def tx(conn: Any) -> None:
            await conn.execute("DELETE FROM recall_vectors WHERE session_id = ANY(%s)", (list(gone),))
            await conn.execute("DELETE FROM recall_vector_progress WHERE session_id = ANY(%s)", (list(gone),))

        await self._pg._tx(tx, "drop sessions from the vectors of")

    async def _session_vectors(self, session_ids: list[str]) -> dict[str, dict[int, bytes]]:
        out: dict[str, dict[int, bytes]] = {}
        for sid, seq, vec in await self._read(
            "SELECT session_id, seq, vec FROM recall_vectors WHERE session_id = ANY(%s)", (session_ids,)
        ):
            out.setdefault(sid, {})[int(seq)] = bytes(vec)
        return out

    async def _word_rows(self) -> list[tuple[str, bytes]]:
        return [(w, bytes(v)) for w, v in await self._read("SELECT word, vec FROM recall_vector_words")]


def semantic_index(store: Store, embedder: Embedder) -> Semantic:
    """The turn vectors of `store`: its tables for a PostgreSQL store, a file beside a SQLite one
    (`SemanticIndex`), in memory for others."""
    return PgSemanticIndex(store, embedder) if is_postgres(store) else SemanticIndex(store, embedder)
