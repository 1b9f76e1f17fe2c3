"""The semantic side: turn vectors kept in step with the store (incremental, pruned when sessions go),
query expansion with stored words close in meaning, and re-ranking. Most tests use a small deterministic
embedder with a known geometry; one runs the real all-MiniLM-L6-v2 when the `embeddings` extra is there."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from tether.errors import MissingExtra
from tether.messages import Message
from tether.recall import Tuning, recall
from tether.recall.embeddings import SemanticIndex, default_vector_path, vocabulary_words
from tether.store import MemoryStore, SqliteStore, Store

# words that mean the same thing share a direction; every other word gets its own
SYNONYMS = {"violin": "instrument", "clarinet": "instrument", "instruments": "instrument", "cello": "instrument"}


class ToyEmbedder:
    """Bag of words hashed to 256 dimensions, synonyms folded together, unit length."""

    name = "toy"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls.append(len(texts))
        out = np.zeros((len(texts), 256), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in vocabulary_words(text) or {"empty"}:
                word = SYNONYMS.get(word, word)
                out[i, int(hashlib.sha1(word.encode()).hexdigest(), 16) % 256] += 1.0
            out[i] /= np.linalg.norm(out[i])
        return out


async def seed(store: Store) -> tuple[str, str]:
    a = await store.create_session(directory="/w")
    await store.append(
        a.id,
        [Message.user("Melanie plays the clarinet in a band"), Message.assistant("Lovely, how long?")],
    )
    b = await store.create_session(directory="/w")
    await store.append(b.id, [Message.user("Melanie likes camping with the band kids")])
    return a.id, b.id


async def test_sync_is_incremental_and_prunes_deleted_sessions(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    embedder = ToyEmbedder()
    index = SemanticIndex(store, embedder)
    assert index.path == str(tmp_path / "t.db") + ".vectors" == default_vector_path(store)
    a, b = await seed(store)
    assert await index.sync() == 3
    assert await index.sync() == 0  # nothing new
    await store.append(a, [Message.user("and the violin")])
    assert await index.sync(directory="/w") == 1
    assert set(index.vectors([(a, 1), (a, 3), (b, 1), (b, 9)])) == {(a, 1), (a, 3), (b, 1)}
    await store.delete_session(b)
    await index.sync()
    assert set(index.vectors([(b, 1)])) == set()
    index.close()
    await store.close()


async def test_expansion_adds_stored_words_close_to_the_query_words() -> None:
    store = MemoryStore()
    await seed(store)
    index = SemanticIndex(store, ToyEmbedder())
    await index.sync()
    analysis = await index.analyze("What instruments does Melanie play?")
    assert "clarinet" in analysis.expansions
    assert not {"melanie", "instruments", "play", "plays"} & set(analysis.expansions)  # its own words, by stem


async def test_semantic_recall_finds_what_shares_no_word_with_the_query() -> None:
    store = MemoryStore()
    a, _ = await seed(store)
    index = SemanticIndex(store, ToyEmbedder())
    await index.sync()
    lexical = await recall(store, "which instruments", tuning=Tuning(before=0, after=0, second=0))
    assert lexical.hits == []
    hybrid = await recall(store, "which instruments", semantic=index, tuning=Tuning(before=0, after=0, second=0))
    assert hybrid.semantic and [(h.session_id, h.seq) for h in hybrid.hits] == [(a, 1)]


async def test_turns_not_embedded_yet_keep_their_word_rank() -> None:
    store = MemoryStore()
    await seed(store)
    index = SemanticIndex(store, ToyEmbedder())  # never synced
    result = await recall(store, "Melanie band", semantic=index)
    assert {h.seq for h in result.hits} >= {1}


def test_vocabulary_words_are_plain_words() -> None:
    assert vocabulary_words("The snake_case x2 café violin, Violin! ab") == {"snake", "case", "cafe", "violin"}


async def test_the_real_model_when_installed(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers", reason="the `embeddings` extra is not installed")
    from tether.recall.embeddings import load_embedder

    try:
        embedder = load_embedder(threads=1)
    except MissingExtra as e:
        pytest.skip(str(e))
    vectors = embedder.embed(["I play the violin", "my instrument is a fiddle", "the tax return is due"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    store = MemoryStore()
    await seed(store)
    index = SemanticIndex(store, embedder, path=tmp_path / "v.db")
    await index.sync()
    assert "clarinet" in (await index.analyze("which musical instruments")).expansions
    index.close()
    small = load_embedder(threads=1, int8=True)
    assert small.name != embedder.name  # its vectors are stored apart from the float model's
    assert float(small.embed(["I play the violin"])[0] @ vectors[0]) > 0.9


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_sentence_transformers(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("sentence_transformers"):
            raise ImportError(name=name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_sentence_transformers)
    from tether.recall.embeddings import load_embedder

    with pytest.raises(MissingExtra, match=r"tether\[embeddings\]"):
        load_embedder()
