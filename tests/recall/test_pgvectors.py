"""The turn vectors of a PostgreSQL store in its own tables (`recall/pgvectors.py`): embedded incrementally
from the change cursor, dropped with a deleted session, shared by another node, and used by recall's
semantic side (expansion and re-ranking) as on SQLite. A small deterministic embedder (the real model needs
the `embeddings` extra); real PostgreSQL."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import psycopg

from tether.messages import Message
from tether.recall import Tuning, recall
from tether.recall.embeddings import SemanticIndex
from tether.recall.pgvectors import PgSemanticIndex, semantic_index
from tether.store import SqliteStore
from tether.store.postgres import PostgresStore

_spec = importlib.util.spec_from_file_location("embedding_helpers", Path(__file__).with_name("test_embeddings.py"))
assert _spec is not None and _spec.loader is not None
_helpers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("embedding_helpers", _helpers)
_spec.loader.exec_module(_helpers)
ToyEmbedder, seed = _helpers.ToyEmbedder, _helpers.seed


async def test_vectors_sync_from_the_cursor_into_the_stores_tables(postgres_store_url: str, tmp_path: Path) -> None:
    async with PostgresStore(postgres_store_url) as store:
        index = semantic_index(store, ToyEmbedder())
        assert isinstance(index, PgSemanticIndex)
        a, b = await seed(store)
        assert await index.sync() == 3
        assert await index.sync() == 0  # nothing new
        await store.append(a, [Message.user("and the violin")])
        assert await index.sync(directory="/w") == 1
        assert set(await index._vectors([(a, 1), (a, 3), (b, 1), (b, 9)])) == {(a, 1), (a, 3), (b, 1)}
        await store.delete_session(b)
        await index.sync()
        with psycopg.connect(postgres_store_url) as conn:
            assert conn.execute("SELECT count(*) FROM recall_vectors WHERE session_id = %s", (b,)).fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM recall_vectors").fetchone() == (3,)
        # another node (another store object) finds them made: nothing embedded again
        async with PostgresStore(postgres_store_url) as node:
            other = ToyEmbedder()
            assert await PgSemanticIndex(node, other).sync() == 0 and other.calls == []
    lite = SqliteStore(tmp_path / "t.db")
    assert isinstance(semantic_index(lite, ToyEmbedder()), SemanticIndex)
    await lite.close()


async def test_semantic_recall_on_postgresql_finds_what_shares_no_word_with_the_query(
    postgres_store_url: str,
) -> None:
    async with PostgresStore(postgres_store_url) as store:
        a, _ = await seed(store)
        index = PgSemanticIndex(store, ToyEmbedder())
        await index.sync()
        analysis = await index.analyze("What instruments does Melanie play?")
        assert "clarinet" in analysis.expansions
        flat = Tuning(before=0, after=0, second=0)
        assert (await recall(store, "which instruments", tuning=flat)).hits == []
        hybrid = await recall(store, "which instruments", semantic=index, tuning=flat)
        assert hybrid.semantic and [(h.session_id, h.seq) for h in hybrid.hits][:1] == [(a, 1)]
