"""The semantic side: turn vectors kept in step with the store (incremental, pruned when sessions go),
query expansion with stored words close in meaning, and re-ranking. Most tests use a small deterministic
embedder with a known geometry; one runs the real all-MiniLM-L6-v2 when the `embeddings` extra is there."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from tether.errors import MissingExtra
from tether.messages import Message
from tether.recall import Tuning, recall
from tether.recall.embeddings import (
    MiniLMEmbedder,
    SemanticIndex,
    _onnx,
    _trace,
    default_vector_path,
    vocabulary_words,
)
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
    # first; the reply after it follows, found by the expansion ("clarinet") in the turn before it
    assert hybrid.semantic and [(h.session_id, h.seq) for h in hybrid.hits][:1] == [(a, 1)]


async def test_turns_not_embedded_yet_keep_their_word_rank() -> None:
    store = MemoryStore()
    await seed(store)
    index = SemanticIndex(store, ToyEmbedder())  # never synced
    result = await recall(store, "Melanie band", semantic=index)
    assert {h.seq for h in result.hits} >= {1}


def test_vocabulary_words_are_plain_words() -> None:
    assert vocabulary_words("The snake_case x2 café violin, Violin! ab") == {"snake", "case", "cafe", "violin"}


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def minilm(model_cache: Path) -> MiniLMEmbedder:
    pytest.importorskip("sentence_transformers", reason="the `embeddings` extra is not installed")
    from tether.recall.embeddings import load_embedder

    try:
        embedder = load_embedder(threads=1, cache=model_cache)
    except MissingExtra as e:
        pytest.skip(str(e))
    assert isinstance(embedder, MiniLMEmbedder)
    return embedder


async def test_the_real_model_when_installed(minilm: MiniLMEmbedder, tmp_path: Path) -> None:
    from tether.recall.embeddings import load_embedder

    vectors = minilm.embed(["I play the violin", "my instrument is a fiddle", "the tax return is due"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    store = MemoryStore()
    await seed(store)
    index = SemanticIndex(store, minilm, path=tmp_path / "v.db")
    await index.sync()
    assert "clarinet" in (await index.analyze("which musical instruments")).expansions
    index.close()
    small = load_embedder(threads=1, int8=True, cache=tmp_path / "models")
    assert small.name != minilm.name  # its vectors are stored apart from the float model's
    assert float(small.embed(["I play the violin"])[0] @ vectors[0]) > 0.9
    assert isinstance(small, MiniLMEmbedder) and small._small is not None  # int8 is traced ...
    assert not (tmp_path / "models").exists()  # ... not exported
    texts = ["I play the violin", "fiddle", "the tax return is due on Friday, said Caroline"]
    assert _agreement(small.embed(texts), small._encode(texts)) > 0.99999  # and agrees with its encode


QUERIES = [
    "which musical instruments",
    "violin",
    "When did Caroline go to the LGBTQ support group, and what did she say about it afterwards?",
    "",
    "word " * 400,  # past the model's 256 word pieces: cut the same way on both paths
]


def _agreement(a: np.ndarray, b: np.ndarray) -> float:  # type: ignore[type-arg]
    """The lowest cosine of matching rows (unit vectors)."""
    assert a.shape == b.shape
    return float((a * b).sum(axis=1).min())


def _check_agrees(run: Callable[[list[str]], np.ndarray], minilm: MiniLMEmbedder) -> None:  # type: ignore[type-arg]
    reference = np.asarray(minilm._encode(QUERIES), dtype=np.float32)
    assert _agreement(np.asarray(run(QUERIES)), reference) > 0.99999
    assert _agreement(np.concatenate([run([q]) for q in QUERIES]), reference) > 0.99999


def test_queries_and_stored_turns_get_the_same_vectors(
    minilm: MiniLMEmbedder, model_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few short texts (a query and its words) take onnxruntime, batches and long texts take
    sentence-transformers' encode: a vector stored by one compares with a query vector made by the other."""
    assert [p.suffix for p in model_cache.iterdir()] == [".onnx"]  # the ONNX way was taken, its file kept
    fast = minilm._small
    assert fast is not None
    taken: list[int] = []

    def counted(texts: list[str]) -> np.ndarray:  # type: ignore[type-arg]
        taken.append(len(texts))
        return fast(texts)  # type: ignore[no-any-return]

    monkeypatch.setattr(minilm, "_small", counted)
    short = QUERIES[:4]
    few = minilm.embed(short)  # padded to the longest
    one_by_one = np.concatenate([minilm.embed([q]) for q in QUERIES])
    batch = minilm.embed(QUERIES * 4)  # more than SMALL texts
    assert taken == [4, 1, 1, 1, 1]  # not the long text, not the batch
    assert len(QUERIES) * 4 > MiniLMEmbedder.SMALL and len(QUERIES[-1]) > MiniLMEmbedder.SMALL_CHARS
    reference = np.asarray(minilm._encode(QUERIES), dtype=np.float32)
    for vectors in (few, one_by_one[: len(short)], batch[: len(short)]):
        assert vectors.dtype == np.float32
        assert _agreement(vectors, reference[: len(short)]) > 0.99999
    assert _agreement(one_by_one, reference) > 0.99999 and _agreement(batch[-len(QUERIES) :], reference) > 0.99999
    assert minilm.embed([]).shape[0] == 0
    _check_agrees(fast, minilm)  # long texts too, though encode takes them
    traced = _trace(minilm._model)  # the way without onnxruntime
    assert traced is not None
    _check_agrees(traced, minilm)


def test_the_exported_model_is_kept_and_replaced_when_it_does_not_fit(
    minilm: MiniLMEmbedder, model_cache: Path, tmp_path: Path
) -> None:
    (kept,) = model_cache.iterdir()
    made = kept.stat()
    run = _onnx(minilm._model, 1, model_cache)  # read from the cache, not made again
    assert run is not None and kept.stat().st_ino == made.st_ino and kept.stat().st_mtime_ns == made.st_mtime_ns
    _check_agrees(run, minilm)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / kept.name).write_bytes(b"not a model")
    run = _onnx(minilm._model, 1, broken)  # a damaged file is made again
    assert run is not None and (broken / kept.name).stat().st_size == made.st_size
    _check_agrees(run, minilm)
    assert [p.name for p in broken.iterdir()] == [kept.name]  # no half-written file left
    unwritable = tmp_path / "a-file"
    unwritable.write_text("")
    run = _onnx(minilm._model, 1, unwritable)  # exported at every load, still used
    assert run is not None
    _check_agrees(run, minilm)


def test_a_model_the_fast_ways_do_not_fit_keeps_encode(
    minilm: MiniLMEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both fast ways hard-code mean pooling; a model pooled otherwise takes neither (so keeps its vectors)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, Pooling

    transformer = minilm._model[0]
    cls_pooled = SentenceTransformer(modules=[transformer, Pooling(384, pooling_mode="cls"), Normalize()], device="cpu")
    assert _trace(cls_pooled) is None
    assert _onnx(cls_pooled, 1, tmp_path) is None
    assert _trace(object()) is None
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # not installed: the traced way instead
    assert _onnx(minilm._model, 1, tmp_path) is None


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
