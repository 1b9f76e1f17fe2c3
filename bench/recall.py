"""The recall benchmark. On a LoCoMo file: store each conversation (one tether session per LoCoMo session,
dated), then for every question that has evidence recall turns and score recall@5/10/25 of the evidence
dialog ids, per category and overall, with and without the semantic side; index build time and query
latency. With --scale N: N generated messages over many sessions and directories, the query latency over
them and the cost the index adds to an append. Readable rows, then one JSON object as the last line.

    python bench/recall.py ../shared/data/locomo-dev.json [--no-semantic] [--dir DIR]
    python bench/recall.py --scale 1000000 [--append-sample 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import dataclasses
import itertools
import json
import os
import platform
import random
import re
import sqlite3
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_DATA,
    REPO_ROOT,
    BenchError,
    Report,
    Target,
    filesystem_of,
    load_chat_data,
    long_conversation,
    median,
    percentile,
    scratch_dir,
    to_message,
)

from tether.errors import MissingExtra
from tether.ids import new_session_id
from tether.messages import Entry, Message, TextPart, ToolCallPart, ToolResultPart
from tether.recall import DEFAULT_TUNING, Tuning, recall
from tether.recall.keys import KeyIndex, default_key_path
from tether.store import SqliteStore, searchindex
from tether.store.records import SessionInfo
from tether.store.searchtext import indexed_text, tokens

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (5, 10, 25)
LOCOMO_TARGETS = (
    Target("loo_recall_at_5", ">=", 0.75),
    Target("loo_recall_at_10", ">=", 0.85),
    Target("p50_ms", "<=", 20),
)
SCALE_TARGETS = (Target("scale_p50_ms", "<=", 100), Target("index_append_ratio", "<=", 1.5))


# --- LoCoMo ---------------------------------------------------------------------------------------------


@dataclass
class Question:
    conversation: str
    text: str
    category: int
    evidence: set[str]


@dataclass
class Conversation:
    sample_id: str
    sessions: list[tuple[datetime, str, list[dict[str, Any]]]]  # (date, date text, turns)
    questions: list[Question] = field(default_factory=list)


_DATE = re.compile(r"(\d{1,2}):(\d\d)\s*(am|pm)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)


def parse_date(text: str) -> datetime:
    """LoCoMo's session dates look like ``1:56 pm on 8 May, 2023``."""
    m = _DATE.search(text)
    if m is None:
        raise BenchError(f"cannot read the LoCoMo session date {text!r}")
    hour, minute, half, day, month, year = m.groups()
    hour_24 = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime.strptime(f"{day} {month} {year} {hour_24}:{minute}", "%d %B %Y %H:%M")


def evidence_ids(raw: Sequence[Any]) -> set[str]:
    """Evidence strings, some holding two ids joined by ';' (a quirk of the file)."""
    out: set[str] = set()
    for item in raw:
        for piece in re.split(r"[;,]", str(item)):
            piece = piece.strip()
            if piece:
                out.add(piece)
    return out


def load_locomo(path: Path) -> list[Conversation]:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise BenchError(
            f"cannot read {path}: {e}. It is a LoCoMo file (github.com/snap-research/LoCoMo, data/locomo10.json "
            "or the 2-conversation ../shared/data/locomo-dev.json)."
        ) from None
    if not isinstance(raw, list) or not all(isinstance(c, dict) and "conversation" in c for c in raw):
        raise BenchError(f"{path} is not a LoCoMo file: expected a list of objects with a 'conversation'")
    out: list[Conversation] = []
    for item in raw:
        conv = item["conversation"]
        sessions = []
        i = 1
        while f"session_{i}" in conv:
            date_text = conv.get(f"session_{i}_date_time", "")
            sessions.append((parse_date(date_text), date_text, conv[f"session_{i}"]))
            i += 1
        c = Conversation(str(item.get("sample_id", f"conv-{len(out)}")), sessions)
        for qa in item.get("qa") or []:
            ev = evidence_ids(qa.get("evidence") or [])
            if ev:
                c.questions.append(Question(c.sample_id, str(qa["question"]), int(qa.get("category", 0)), ev))
        out.append(c)
    return out


CAPTIONS = True
"""Whether a shared photo's caption (LoCoMo's `blip_caption`) joins its turn's text; --no-captions: not, as a
text-only tether session holding an image part would have it."""


def turn_message(turn: dict[str, Any], speaker_a: str) -> Message:
    """A LoCoMo turn as a tether message: the first speaker as the user, the other as the assistant, the
    speaker's name and the dialog id in metadata, a shared photo as its caption (what a text model sees)."""
    parts = [TextPart(text=str(turn.get("text", "")))]
    caption = turn.get("blip_caption")
    if caption and CAPTIONS:
        parts.append(TextPart(text=f"[shares a photo: {caption}]"))
    speaker = str(turn.get("speaker", ""))
    return Message(
        role="user" if speaker == speaker_a else "assistant",
        parts=parts,
        metadata={"name": speaker, "dia_id": str(turn.get("dia_id", ""))},
    )


async def store_locomo(store: SqliteStore, conversations: list[Conversation]) -> None:
    for conv in conversations:
        speaker_a = str(conv.sessions[0][2][0].get("speaker", "")) if conv.sessions and conv.sessions[0][2] else ""
        for index, (date, date_text, turns) in enumerate(conv.sessions, 1):
            start = date.timestamp()
            entries = [Entry(i, start + i, turn_message(t, speaker_a)) for i, t in enumerate(turns, 1)]
            info = SessionInfo(
                id=new_session_id(),
                created_at=start,
                updated_at=start + len(entries),
                title=f"{conv.sample_id} session {index}, {date_text}",
                directory=f"/locomo/{conv.sample_id}",
                metadata={"date": date.isoformat(), "locomo_session": index},
            )
            await store.import_session(info, entries)


def recall_at(found: Sequence[str], evidence: set[str], k: int) -> float:
    return len(evidence & set(found[:k])) / len(evidence)


@dataclass
class Outcome:
    """What one configuration did on every question: recall@k per question (in `questions` order) and the
    latency of each call."""

    at: dict[int, list[float]]
    latencies: list[float]


def mean_of(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


class MemoStore:
    """The store as recall sees it, with every read remembered: while constants are tuned, the same
    searches and reads come back thousands of times, and only the engine's own ranking has to run again.
    Used for tuning only, never for the figures timed as shipped."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._memo: dict[Any, Any] = {}

    async def search(self, query: str, **filters: Any) -> Any:
        key = ("search", query, tuple(sorted(filters.items())))
        if key not in self._memo:
            self._memo[key] = await self._store.search(query, **filters)
        return self._memo[key]

    async def read(self, session_id: str, start: int, end: int) -> Any:
        key = ("read", session_id, start, end)
        if key not in self._memo:
            self._memo[key] = await self._store.read(session_id, start, end)
        return self._memo[key]

    async def reverted_spans(self, session_id: str) -> Any:
        key = ("spans", session_id)
        if key not in self._memo:
            self._memo[key] = await self._store.reverted_spans(session_id)
        return self._memo[key]

    async def get_session(self, session_id: str) -> Any:
        key = ("session", session_id)
        if key not in self._memo:
            self._memo[key] = await self._store.get_session(session_id)
        return self._memo[key]

    async def list_sessions(self, **kw: Any) -> Any:
        key = ("list", tuple(sorted(kw.items())))
        if key not in self._memo:
            self._memo[key] = await self._store.list_sessions(**kw)
        return self._memo[key]

    async def search_backlog(self, *, before: float | None = None) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class MemoKeys(KeyIndex):
    """The turn keys with every search remembered (by its query, filters and `previous` weight), for tuning:
    synced once, before."""

    def __init__(self, inner: KeyIndex) -> None:
        self.inner = inner
        self._memo: dict[Any, Any] = {}

    async def sync(self, store: Any, **kw: Any) -> bool:
        return True

    async def search(self, store: Any, query: str, **kw: Any) -> Any:
        key = (query, tuple(sorted(kw.items())))
        if key not in self._memo:
            self._memo[key] = await self.inner.search(store, query, **kw)
        return self._memo[key]


class CachedEmbedder:
    """An embedder that remembers what it embedded: the turns on disk across runs (a file keyed by model
    and text), so a rerun does not spend a minute embedding the same 2,000 turns again; queries in memory,
    for tuning. While `live` (the run timed as shipped) every call goes to the model."""

    def __init__(self, inner: Any, path: Path | None) -> None:
        self.inner = inner
        self.name = inner.name
        self.live = False
        self.embedded = 0
        self._queries: dict[tuple[str, ...], Any] = {}
        self._db = sqlite3.connect(
            path if path is not None else ":memory:", isolation_level=None, check_same_thread=False
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS v (model TEXT, text TEXT, vec BLOB, PRIMARY KEY (model, text))")

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        texts = list(texts)
        if self.live:
            return self.inner.embed(texts)
        if len(texts) <= 16:  # a query and its words
            key = tuple(texts)
            if key not in self._queries:
                self._queries[key] = self.inner.embed(texts)
            return self._queries[key]
        found: dict[str, Any] = {}
        for i in range(0, len(texts), 500):
            chunk = texts[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for text, blob in self._db.execute(
                f"SELECT text, vec FROM v WHERE model = ? AND text IN ({marks})", (self.name, *chunk)
            ):
                found[text] = np.frombuffer(blob, dtype=np.float32)
        missing = sorted({t for t in texts if t not in found})
        if missing:
            vectors = self.inner.embed(missing)
            self.embedded += len(missing)
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO v VALUES (?, ?, ?)",
                [(self.name, t, v.astype(np.float32).tobytes()) for t, v in zip(missing, vectors, strict=True)],
            )
            self._db.execute("COMMIT")
            found.update(zip(missing, vectors, strict=True))
        return np.stack([found[t] for t in texts]).astype(np.float32)


async def evaluate(
    store: Any, conversations: list[Conversation], *, semantic: Any, tuning: Tuning, keys: KeyIndex | bool = True
) -> Outcome:
    at: dict[int, list[float]] = {k: [] for k in KS}
    latencies: list[float] = []
    for conv in conversations:
        # LoCoMo's questions are asked after the conversation: "in June" means the June before its end
        asked = max(date for date, _, _ in conv.sessions).timestamp() + 86400
        for q in conv.questions:
            t0 = time.perf_counter()
            result = await recall(
                store, q.text, directory=f"/locomo/{conv.sample_id}", limit=max(KS), context=0,
                semantic=semantic, keys=keys, tuning=tuning, now=asked,
            )  # fmt: skip
            latencies.append((time.perf_counter() - t0) * 1000)
            found = [str(h.metadata.get("dia_id", "")) for h in result.hits]
            for k in KS:
                at[k].append(recall_at(found, q.evidence, k))
    return Outcome(at, latencies)


# The constants the engine is tuned with, and the values leave-one-out tries for each (the shipped value is
# always tried too). Coordinate ascent from the shipped constants, one constant at a time.
SPACE: dict[str, tuple[float, ...]] = {
    "previous": (0.0, 0.1, 0.2, 0.3),
    "after_question": (0.0, 0.5, 1.0, 1.5),
    "after": (0.0, 0.15, 0.3, 0.5),
    "before": (0.0, 0.15, 0.3, 0.5),
    "second": (0.0, 0.1, 0.2, 0.35),
    "author": (0.0, 0.1, 0.2, 0.4),
    "when": (0.0, 0.3, 0.6, 1.0),
    "period": (0.0, 0.3, 0.6, 1.0),
    "semantic": (0.5, 1.0, 1.5, 2.5),
    "expansion": (0.0, 0.2, 0.4, 0.7),
    "expand_similarity": (0.45, 0.55, 0.65),
}
SEMANTIC_ONLY = {"semantic", "expansion", "expand_similarity", "expand_per_word"}
MIN_GAIN = 0.002
"""A constant moves only when the training conversations gain this much (mean of recall@5 and @10): less
is noise that the held-out conversation would not confirm."""


class Tuner:
    """Leave-one-conversation-out: for each conversation, the constants are chosen on the others (coordinate
    ascent over `SPACE` on the mean of recall@5 and @10) and scored on it. Every configuration tried is
    evaluated once on every question (memoized by its constants), so the folds share the work."""

    def __init__(self, store: Any, conversations: list[Conversation], semantic: Any, keys: KeyIndex) -> None:
        self.store = MemoStore(store)
        self.keys = MemoKeys(keys)
        self.conversations = conversations
        self.semantic = semantic
        self.memo: dict[Tuning, Outcome] = {}
        self.owner = [i for i, c in enumerate(conversations) for _ in c.questions]

    async def outcome(self, tuning: Tuning) -> Outcome:
        if tuning not in self.memo:
            self.memo[tuning] = await evaluate(
                self.store, self.conversations, semantic=self.semantic, tuning=tuning, keys=self.keys
            )
        return self.memo[tuning]

    async def objective(self, tuning: Tuning, train: set[int]) -> float:
        out = await self.outcome(tuning)
        picked = [i for i, c in enumerate(self.owner) if c in train]
        return mean_of([(out.at[5][i] + out.at[10][i]) / 2 for i in picked])

    async def tune(self, train: set[int], start: Tuning, passes: int = 2) -> Tuning:
        current = start
        best = await self.objective(current, train)
        fields = {f.name for f in dataclasses.fields(Tuning)}
        for _ in range(passes):
            moved = False
            for name, values in SPACE.items():
                if name not in fields or (self.semantic is None and name in SEMANTIC_ONLY):
                    continue
                for value in values:
                    if value == getattr(current, name):
                        continue
                    trial = dataclasses.replace(current, **{name: value})
                    score = await self.objective(trial, train)
                    if score > best + MIN_GAIN:
                        best, current, moved = score, trial, True
            if not moved:
                break
        return current

    async def leave_one_out(self, start: Tuning) -> tuple[dict[int, list[float]], list[Tuning]]:
        """recall@k per question, each scored with constants chosen without its conversation; and the
        constants each fold chose."""
        at: dict[int, list[float]] = {k: [0.0] * len(self.owner) for k in KS}
        chosen: list[Tuning] = []
        everyone = set(range(len(self.conversations)))
        for held in range(len(self.conversations)):
            tuning = await self.tune(everyone - {held}, start)
            chosen.append(tuning)
            out = await self.outcome(tuning)
            for i, c in enumerate(self.owner):
                if c == held:
                    for k in KS:
                        at[k][i] = out.at[k][i]
        return at, chosen


def changed(tuning: Tuning, base: Tuning = DEFAULT_TUNING) -> dict[str, Any]:
    return {
        f.name: getattr(tuning, f.name)
        for f in dataclasses.fields(Tuning)
        if getattr(tuning, f.name) != getattr(base, f.name)
    }


def breakdown(
    at: dict[int, list[float]], questions: list[Question], owner: list[int], conversations: list[Conversation]
) -> dict[str, Any]:
    """Figures overall, per conversation (with their spread) and per category."""
    out: dict[str, Any] = {f"recall_at_{k}": round(mean_of(at[k]), 4) for k in KS}
    per_conv: dict[str, Any] = {}
    for c, conv in enumerate(conversations):
        idx = [i for i, o in enumerate(owner) if o == c]
        per_conv[conv.sample_id] = {"questions": len(idx)} | {
            f"recall_at_{k}": round(mean_of([at[k][i] for i in idx]), 4) for k in KS
        }
    out["conversations"] = per_conv
    if len(per_conv) > 1:
        for k in (5, 10):
            values = [v[f"recall_at_{k}"] for v in per_conv.values()]
            out[f"spread_at_{k}"] = {
                "min": min(values),
                "max": max(values),
                "stdev": round(statistics.stdev(values), 4),
            }
    per_cat: dict[str, Any] = {}
    for cat in sorted({q.category for q in questions}):
        idx = [i for i, q in enumerate(questions) if q.category == cat]
        per_cat[str(cat)] = {"name": CATEGORIES.get(cat, str(cat)), "questions": len(idx)} | {
            f"recall_at_{k}": round(mean_of([at[k][i] for i in idx]), 4) for k in KS
        }
    out["categories"] = per_cat
    return out


def show_table(report: Report, figures: dict[str, dict[str, Any]], loo: dict[str, dict[str, Any]]) -> None:
    """Per conversation and per category, every configuration side by side: as shipped @5/@10, leave-one-out
    @5/@10."""
    names = list(figures)
    head = "".join(f"  {n[:14]:>14} @5   @10  loo@5 loo@10" for n in names)
    report.note(f"{'':<22}{head}")
    first = figures[names[0]]
    rows: list[tuple[str, str, str]] = [("conversations", c, c) for c in first["conversations"]]
    rows += [("categories", c, f"{c} {v['name']}") for c, v in first["categories"].items()]
    rows.append(("", "", "all"))
    for group, key, label in rows:
        cells = []
        for n in names:
            shipped = figures[n][group][key] if group else figures[n]
            held = (loo[n][group][key] if group else loo[n]) if n in loo else None
            n_q = shipped.get("questions", "")
            cells.append(
                f"  {'':>14} {shipped['recall_at_5']:.3f} {shipped['recall_at_10']:.3f}"
                + (f"  {held['recall_at_5']:.3f}  {held['recall_at_10']:.3f}" if held else "     -      -")
            )
        count = f"({n_q})" if n_q != "" else ""
        report.note(f"{label[:15]:<15}{count:>7}" + "".join(cells))
    for n in names:
        for k in (5, 10):
            for source, fig in (("shipped", figures[n]), ("loo", loo.get(n))):
                if fig and f"spread_at_{k}" in fig:
                    s = fig[f"spread_at_{k}"]
                    report.note(
                        f"{n} {source} @{k} across conversations: {s['min']:.3f} to {s['max']:.3f} (stdev {s['stdev']:.3f})"
                    )


async def run_locomo(args: argparse.Namespace, report: Report) -> None:
    path = Path(args.path).expanduser()
    if not path.is_file():
        raise BenchError(
            f"{path} is not a file. Give a LoCoMo file: ../shared/data/locomo-dev.json next to the repository, "
            "or data/locomo10.json from github.com/snap-research/LoCoMo (CC BY-NC 4.0)."
        )
    conversations = load_locomo(path)
    questions = [q for c in conversations for q in c.questions]
    owner = [i for i, c in enumerate(conversations) for _ in c.questions]
    turns = sum(len(t) for c in conversations for _, _, t in c.sessions)
    report.section(
        f"LoCoMo: {path.name}: {len(conversations)} conversations, {turns} turns, {len(questions)} questions"
    )
    report.set("data", str(path))
    figures: dict[str, dict[str, Any]] = {}
    loo: dict[str, dict[str, Any]] = {}
    with scratch_dir(args.dir, keep=args.keep) as where:
        report.set("filesystem", filesystem_of(where))
        store = SqliteStore(where / "recall.db")
        keys = KeyIndex(where / "recall.db.keys")
        try:
            t0 = time.perf_counter()
            await store_locomo(store, conversations)
            stored = time.perf_counter() - t0
            async for _ in store.backfill_search(batch=1000):
                pass
            indexed = time.perf_counter() - t0
            await keys.sync(store, limit=1 << 62)
            lexical_build = time.perf_counter() - t0
            report.row("store the sessions (import_session)", "store_s", stored, "s", digits=2)
            report.row("  ... and index them (FTS5)", "index_build_s", indexed, "s", digits=2)
            report.row("  ... and their turn keys (FTS5)", "keys_build_s", lexical_build - indexed, "s", digits=2)
            runs: list[tuple[str, Any, float]] = [("lexical", None, lexical_build)]
            if not args.no_semantic:
                try:
                    from tether.recall.embeddings import SemanticIndex, load_embedder

                    for name, int8 in (("hybrid", False), ("hybrid-int8", True)):
                        if int8 and not args.int8:
                            continue
                        cache = None if args.no_embed_cache else Path(args.embed_cache).expanduser()
                        if cache is not None:
                            cache.parent.mkdir(parents=True, exist_ok=True)
                        t1 = time.perf_counter()
                        embedder = CachedEmbedder(load_embedder(int8=int8), cache)
                        semantic = SemanticIndex(store, embedder, path=where / f"{name}.vectors")
                        count = await semantic.sync()
                        embed_s = time.perf_counter() - t1
                        report.row(
                            f"  ... and embed them ({count} turns, {embedder.embedded} not cached, {embedder.name})",
                            f"embed_build_s_{name}",
                            embed_s,
                            "s",
                        )
                        runs.append((name, semantic, lexical_build + embed_s))
                except MissingExtra as e:
                    report.note(f"semantic side skipped: {e}")
            for name, semantic, build in runs:
                report.section(f"configuration {name!r}: as shipped (its default constants, nothing tuned)")
                if semantic is not None:
                    semantic.embedder.live = True  # the query's embedding is part of what is timed
                out = await evaluate(store, conversations, semantic=semantic, tuning=DEFAULT_TUNING, keys=keys)
                if semantic is not None:
                    semantic.embedder.live = False
                fig = breakdown(out.at, questions, owner, conversations)
                fig["index_build_s"] = round(build, 3)
                fig["p50_ms"] = round(median(out.latencies), 3)
                fig["p95_ms"] = round(percentile(out.latencies, 95), 3)
                report.note("  ".join(f"recall@{k} {fig[f'recall_at_{k}']:.3f}" for k in KS))
                report.note(f"query latency p50 {fig['p50_ms']:.2f} ms, p95 {fig['p95_ms']:.2f} ms")
                figures[name] = fig
                if len(conversations) < 2 or args.no_loo:
                    continue
                report.section(f"configuration {name!r}: leave one conversation out")
                t2 = time.perf_counter()
                tuner = Tuner(store, conversations, semantic, keys)
                held_at, chosen = await tuner.leave_one_out(DEFAULT_TUNING)
                held = breakdown(held_at, questions, owner, conversations)
                held["chosen"] = {c.sample_id: changed(t) for c, t in zip(conversations, chosen, strict=True)}
                held["tried"] = len(tuner.memo)
                held["tuning_s"] = round(time.perf_counter() - t2, 1)
                for conv, t in zip(conversations, chosen, strict=True):
                    report.note(f"without {conv.sample_id}: {changed(t) or 'the shipped constants'}")
                report.note(
                    "  ".join(f"loo recall@{k} {held[f'recall_at_{k}']:.3f}" for k in (5, 10))
                    + f"  ({held['tried']} configurations tried, {held['tuning_s']} s)"
                )
                loo[name] = held
        finally:
            keys.close()
            await store.close()
    report.section("per conversation and per category: as shipped, and leave-one-out")
    show_table(report, figures, loo)

    # the configuration reported: the one with the best held-out figures (as shipped where there is no LOO)
    def merit(n: str) -> tuple[float, float]:
        src = loo.get(n, figures[n])
        return src["recall_at_5"] + src["recall_at_10"], -figures[n]["p50_ms"]

    best = max(figures, key=merit)
    report.section(f"best configuration: {best}")
    report.set("config", best)
    for key in ("recall_at_5", "recall_at_10", "recall_at_25"):
        report.row(f"{key} (as shipped)", key, figures[best][key], "", digits=3)
    report.row("query latency p50", "p50_ms", figures[best]["p50_ms"], "ms", digits=2)
    report.row("query latency p95", "p95_ms", figures[best]["p95_ms"], "ms", digits=2)
    for key in ("recall_at_5", "recall_at_10"):
        value = loo[best][key] if best in loo else None
        report.row(f"{key} (leave one conversation out)", f"loo_{key}", value, "", digits=3)
    for name in figures:
        if name != best:
            report.note(
                f"{name}: as shipped @5 {figures[name]['recall_at_5']:.3f} @10 {figures[name]['recall_at_10']:.3f}"
                + (
                    f", loo @5 {loo[name]['recall_at_5']:.3f} @10 {loo[name]['recall_at_10']:.3f}"
                    if name in loo
                    else ""
                )
                + f", p50 {figures[name]['p50_ms']:.2f} ms"
            )
    configs = {n: figures[n] | ({"loo": loo[n]} if n in loo else {}) for n in figures}
    report.set("configs", configs)
    report.set("questions", len(questions))
    report.set("reference_dragon", {"recall_at_5": 0.567, "recall_at_10": 0.662, "recall_at_25": 0.767})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", help="a LoCoMo JSON file")
    parser.add_argument("--scale", type=int, metavar="N", help="generate N messages and measure at that scale")
    parser.add_argument("--no-semantic", action="store_true", help="skip the configuration with embeddings")
    parser.add_argument("--int8", action="store_true", help="also the semantic side with the model in int8")
    parser.add_argument("--no-loo", action="store_true", help="skip leave-one-conversation-out (as shipped only)")
    parser.add_argument(
        "--no-captions",
        action="store_true",
        help="leave LoCoMo's photo captions out of the turns' text (a text-only session would not hold them)",
    )
    parser.add_argument(
        "--embed-cache",
        default=str(REPO_ROOT / ".bench-out" / "embed-cache.sqlite"),
        help="where turn vectors are kept between runs (default: .bench-out/embed-cache.sqlite)",
    )
    parser.add_argument("--no-embed-cache", action="store_true", help="embed every turn again")
    parser.add_argument("--dir", help="where the scratch files go (default: .bench-out/ in the repository)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch files")
    parser.add_argument("--queries", type=int, default=200, help="scale: queries timed (default 200)")
    parser.add_argument(
        "--append-sample", type=int, default=10_000, help="scale: appends per round (default 10000: flushes included)"
    )
    parser.add_argument("--append-rounds", type=int, default=10, help="scale: rounds with and without the index")
    parser.add_argument("--per-session", type=int, default=200, help="scale: messages per session (default 200)")
    args = parser.parse_args(argv)
    if (args.path is None) == (args.scale is None):
        parser.error("give a LoCoMo file, or --scale N")
    report = Report(targets=LOCOMO_TARGETS if args.path else SCALE_TARGETS)
    global CAPTIONS
    CAPTIONS = not args.no_captions
    report.set("captions", CAPTIONS)
    report.set("cpus", os.cpu_count())
    report.set("loadavg_start", [round(x, 2) for x in os.getloadavg()])
    report.set("python", platform.python_version())
    report.set("sqlite", sqlite3.sqlite_version)
    try:
        if args.path:
            asyncio.run(run_locomo(args, report))
        else:
            asyncio.run(run_scale(args, report))
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report.set("loadavg_end", [round(x, 2) for x in os.getloadavg()])
    report.finish()
    return 0


# --- scale ----------------------------------------------------------------------------------------------

_SYLLABLES = [a + b for a in "bcdfghjklmnprstvwz" for b in ("a", "e", "i", "o", "u", "ai", "ou", "ar", "en", "il")]
_COMMON = [
    "the",
    "a",
    "to",
    "of",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "you",
    "this",
    "with",
    "on",
    "be",
    "not",
    "are",
    "as",
    "have",
    "i",
    "we",
    "can",
    "but",
    "what",
    "will",
    "so",
    "if",
    "at",
    "do",
    "from",
    "or",
    "by",
    "my",
    "test",
    "file",
    "error",
    "run",
    "fix",
    "code",
    "function",
    "add",
    "change",
    "check",
    "build",
    "now",
    "then",
    "line",
    "use",
    "need",
    "should",
]


class Corpus:
    """Messages shaped like a coding agent's sessions: user asks, assistant answers and calls tools, tools
    return code and listings. Words follow a Zipf law over a 30,000-word vocabulary (common English words
    first), with snake_case identifiers and file paths mixed in, so that term frequencies look like real
    text and not like a uniform draw."""

    def __init__(self, seed: int = 7, vocabulary: int = 30_000) -> None:
        self.rng = random.Random(seed)
        words = list(_COMMON)
        seen = set(words)
        while len(words) < vocabulary:
            n = self.rng.choice((2, 2, 3, 3, 4))
            word = "".join(self.rng.choice(_SYLLABLES) for _ in range(n))
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words = words
        weights = [1 / (rank + 1) ** 1.07 for rank in range(len(words))]
        total = sum(weights)
        self.cumulative = list(itertools.accumulate(w / total for w in weights))

    def word(self) -> str:
        return self.words[min(bisect.bisect_left(self.cumulative, self.rng.random()), len(self.words) - 1)]

    def sentence(self, lo: int, hi: int) -> str:
        out = []
        for _ in range(self.rng.randint(lo, hi)):
            r = self.rng.random()
            if r < 0.03:
                out.append(f"{self.word()}_{self.word()}")
            elif r < 0.05:
                out.append(f"src/{self.word()}/{self.word()}.py")
            else:
                out.append(self.word())
        return " ".join(out)

    def message(self, i: int) -> Message:
        kind = i % 4
        if kind == 0:
            return Message.user(self.sentence(8, 40))
        if kind == 1:
            call = ToolCallPart(id=f"c{i}", name="read", arguments={"path": f"src/{self.word()}/{self.word()}.py"})
            return Message.assistant(self.sentence(10, 50), tool_calls=[call])
        if kind == 2:
            return Message.tool(ToolResultPart(call_id=f"c{i - 1}", content=self.sentence(30, 120), name="read"))
        return Message.assistant(self.sentence(15, 70))


async def populate(store: SqliteStore, corpus: Corpus, n: int, per_session: int, directories: int) -> list[str]:
    """`n` messages in sessions of `per_session`, spread over `directories`, written with `import_session`
    (one transaction per session). Returns the session ids."""
    ids: list[str] = []
    made = 0
    start = time.time() - n  # a second per message, so time filters have something to cut
    while made < n:
        count = min(per_session, n - made)
        entries = [Entry(i, start + made + i, corpus.message(made + i)) for i in range(1, count + 1)]
        info = SessionInfo(
            id=new_session_id(),
            created_at=start + made,
            updated_at=start + made + count,
            directory=f"/scale/project-{len(ids) % directories:03d}",
        )
        await store.import_session(info, entries)
        ids.append(info.id)
        made += count
        if len(ids) % 500 == 0:
            print(f"   ... {made:,} messages stored", flush=True)
    return ids


async def scale_queries(
    store: SqliteStore, ids: list[str], count: int, rng: random.Random
) -> tuple[list[float], list[float], float]:
    """Recall latency for queries made of words of a random stored message (what a model looking for
    something it saw would type), scoped to the message's directory and unscoped; and how often that
    message came back in the top 10 of the scoped search."""
    scoped: list[float] = []
    unscoped: list[float] = []
    found = 0
    for _ in range(count):
        sid = rng.choice(ids)
        info = await store.get_session(sid)
        seq = rng.randint(1, info.entry_count)
        (entry,) = await store.read(sid, seq, seq)
        words = tokens(indexed_text(entry.body) or "")
        query = " ".join(rng.sample(words, min(len(words), rng.randint(3, 6))))
        t0 = time.perf_counter()
        result = await recall(store, query, directory=info.directory, limit=10)
        scoped.append((time.perf_counter() - t0) * 1000)
        found += any(h.session_id == sid and h.seq == seq for h in result.hits)
        t0 = time.perf_counter()
        await recall(store, query, limit=10)
        unscoped.append((time.perf_counter() - t0) * 1000)
    return scoped, unscoped, found / count


async def append_costs(
    store: SqliteStore, messages: list[Message], rounds: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per-append time through `store.append`, one message at a time, with the index and without it,
    alternating rounds so that the machine's load falls on both alike. The append transaction writes nothing
    for the index; what the index costs an append is the flush that one append in `FLUSH_EVERY` runs. So
    "without" never flushes, and "with" is charged for every entry it appended: its mean adds the time of a
    last flush of what its own flushes left. Each round starts from an index with nothing pending (flushed
    untimed). Returns (mean with, mean without, median with, median without) per round, in microseconds."""
    flush_every = searchindex.FLUSH_EVERY
    means: dict[bool, list[float]] = {True: [], False: []}
    medians: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(rounds):
            for indexed in (True, False):
                async for _ in store.backfill_search(batch=10_000):
                    pass
                searchindex.FLUSH_EVERY = flush_every if indexed else 1 << 62
                sid = (await store.create_session(directory="/scale/appends")).id
                times: list[float] = []
                for message in messages:
                    t0 = time.perf_counter_ns()
                    await store.append(sid, [message])
                    times.append((time.perf_counter_ns() - t0) / 1000)
                total = sum(times)
                if indexed:
                    t0 = time.perf_counter_ns()
                    async for _ in store.backfill_search(batch=10_000):
                        pass
                    total += (time.perf_counter_ns() - t0) / 1000
                means[indexed].append(total / len(times))
                medians[indexed].append(statistics.median(times))
    finally:
        searchindex.FLUSH_EVERY = flush_every
    return means[True], means[False], medians[True], medians[False]


async def run_scale(args: argparse.Namespace, report: Report) -> None:
    n = args.scale
    if n < 1000:
        raise BenchError("--scale needs at least 1000 messages")
    per_session = args.per_session
    directories = max(1, n // 10_000)
    report.section(f"scale: {n:,} messages, {max(1, n // per_session):,} sessions, {directories} directories")
    corpus = Corpus()
    rng = random.Random(3)
    with scratch_dir(args.dir, keep=args.keep) as where:
        report.set("filesystem", filesystem_of(where))
        store = SqliteStore(where / "scale.db")
        try:
            t0 = time.perf_counter()
            ids = await populate(store, corpus, n, per_session, directories)
            stored = time.perf_counter() - t0
            t0 = time.perf_counter()
            async for step in store.backfill_search(batch=10_000):
                if step.sessions_done % 500 < 100:
                    print(f"   ... {step.entries_indexed:,} messages indexed", flush=True)
            indexed = time.perf_counter() - t0
            t0 = time.perf_counter()
            keys = KeyIndex(default_key_path(store))  # where recall's own finds it
            await keys.sync(store, limit=1 << 62)
            keys.close()
            keyed = time.perf_counter() - t0
            report.row("store (import_session, one transaction a session)", "scale_store_s", stored, "s")
            report.row("index them (FTS5, batches of 10,000, then merged)", "scale_index_s", indexed, "s")
            report.row("  per message", "scale_index_us_per_message", indexed / n * 1e6, "us")
            report.row("their turn keys (recall's side FTS5 file)", "scale_keys_s", keyed, "s")
            size = sum(f.stat().st_size for f in where.iterdir() if f.name.startswith("scale.db"))
            report.row("database size", "scale_db_mb", size / 1e6, "MB")
            scoped, unscoped, found = await scale_queries(store, ids, args.queries, rng)
            report.row(
                f"recall in one directory, p50 ({args.queries} queries)", "scale_p50_ms", median(scoped), "ms", digits=2
            )
            report.row("recall in one directory, p95", "scale_p95_ms", percentile(scoped, 95), "ms", digits=2)
            report.row("recall across all directories, p50", "scale_p50_ms_all", median(unscoped), "ms", digits=2)
            report.row(
                "recall across all directories, p95", "scale_p95_ms_all", percentile(unscoped, 95), "ms", digits=2
            )
            report.row("the message the query came from, in the top 10", "scale_found_at_10", found, "", digits=3)
            messages = [corpus.message(i) for i in range(args.append_sample)]
            with_mean, without_mean, with_median, without_median = await append_costs(
                store, messages, args.append_rounds
            )
            # every round appends as many entries: the ratio of the means of all rounds is that of total times
            ratio = statistics.mean(with_mean) / statistics.mean(without_mean)
            report.row(
                "append with the index, mean (flushes included)", "append_us_indexed", statistics.mean(with_mean), "us"
            )
            report.row("append without the index, mean", "append_us_unindexed", statistics.mean(without_mean), "us")
            report.row("index_append_ratio (means)", "index_append_ratio", ratio, "", digits=3)
            report.row(
                "  ratio of medians (the flushes fall outside)",
                "index_append_ratio_median",
                median(with_median) / median(without_median),
                "",
                digits=3,
            )
            if DEFAULT_DATA.is_file():
                # the same measure with real agent messages (tau-bench's airline trajectories)
                tau = long_conversation(load_chat_data(None).trajectories, args.append_sample)
                tau_with, tau_without, _, _ = await append_costs(
                    store, [to_message(m) for m in tau], args.append_rounds
                )
                report.row(
                    "index_append_ratio with tau-bench messages (means)",
                    "index_append_ratio_tau",
                    statistics.mean(tau_with) / statistics.mean(tau_without),
                    "",
                    digits=3,
                )
            report.set(
                "scale_sizes",
                {"messages": n, "sessions": len(ids), "directories": directories, "append_rounds": args.append_rounds,
                 "appends_per_round": args.append_sample, "queries": args.queries},
            )  # fmt: skip
        finally:
            await store.close()


if __name__ == "__main__":
    sys.exit(main())
