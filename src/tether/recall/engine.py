"""The recall engine: finds what was said in earlier sessions. BM25 over the turn keys (`keys`: a turn's words
and, weighted lower, those of the turn before it; the store's own search when they cannot be kept) gives
candidates; they are re-ranked as conversation turns, not as isolated documents: a match passes part of its score to
its neighbours (the answer after a matching question above all), an author named in the query and a
period the query names count, and an optional semantic side adds meaning where words differ. The best
turns come back with their neighbours as context and with where they come from."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import InvalidInput
from ..messages import Entry, Message
from ..store.protocols import Store
from ..store.records import ContextLine, RevertSpan, SearchHit, SessionInfo
from ..store.reverts import is_hidden
from ..store.searchtext import excerpt_of, indexed_text, query_terms, tokens
from .candidate import Candidate
from .keys import KeyIndex, TurnKeys, default_key_path
from .pgkeys import PgKeyIndex, is_postgres
from .query import Period, asks_when, content_words, periods, places_in_time, subject_of

if TYPE_CHECKING:
    from .embeddings import Semantic
    from .facts import Facts

log = logging.getLogger("tether.recall")

MAX_QUERY_CHARS = 10_000
"""Longer queries are cut: nobody recalls with more, and a pasted log should not cost a full scan."""


@dataclass(frozen=True)
class Tuning:
    """The weights of the re-ranking. Defaults are what leave-one-conversation-out agrees on (bench/recall.py
    chooses each fold's constants on the other conversations and prints them): a value ships only when the
    folds choose it, not because it scores best on the whole file."""

    candidates: int = 200
    """BM25 hits taken before re-ranking."""
    previous: float = 0.2
    """Weight of the previous turn's words in a turn's key (its own count 1). A reply seldom repeats the
    question's words; with them in its key at a fifth of the weight, the answer is found by the question's
    words, and a short turn ("Is that recent?") no longer outranks longer ones on one shared word, since
    BM25's length normalisation counts the key's whole length. On LoCoMo's development conversations,
    recall@10 rose on every one of them (see bench/README.md)."""
    after_question: float = 1.0
    """Share of a matching question's score passed to the turn that follows it (most often its answer)."""
    after: float = 0.3
    """Share of any other matching turn's score passed to the turn that follows it."""
    before: float = 0.3
    """Share passed to the turn before a match (the question it answers, the context it refers to)."""
    second: float = 0.2
    """Share passed two turns away in either direction."""
    author: float = 0.2
    """Boost (x 1 + author) of a turn whose author (metadata ``name``) the query names; when it names
    several and one is the question's subject ("What did Jon say about Gina's store?"), that one only."""
    when: float = 0.6
    """Boost (x 1 + when) of a turn that places something in time (a date, a weekday, "yesterday", "two
    weeks ago") when the query asks when: the answer to "When did ..." is the turn that says when, not
    every turn about the same thing (in LoCoMo, temporal questions @10 0.89 -> 0.97 on both conversations)."""
    period: float = 0.6
    """Bonus (in units of the best match) for a turn from a period the query names. 0.6, not 0.3: every
    leave-one-conversation-out fold on LoCoMo's four development conversations chose it (recall@5 +0.004);
    a date beside an exact identifier or error still loses to the turn that has them."""
    semantic: float = 1.0
    """Weight of the cosine similarity of query and turn, when a semantic index is given."""
    expansion: float = 0.4
    """Weight of the words the semantic side adds to the query, against the query's own words."""
    expand_per_word: int = 3
    """Stored words added per query word by the semantic side ("instruments" also searches "violin")."""
    expand_similarity: float = 0.55
    """How close in meaning (cosine of single-word embeddings) an added word must be."""
    facts: float = 0.5
    """Bonus (in units of the best fact match) of a turn whose model-written facts match the query, when a
    fact index is given. Not tuned: no capable model was at hand to write LoCoMo's facts (see README)."""


DEFAULT_TUNING = Tuning()


class RecallHit(SearchHit, omit_defaults=False):
    """A recalled turn and where it comes from: session (id, title, directory), position (seq), time,
    role, its text (cut to an excerpt around the match) and its neighbours as context. The store's
    `SearchHit` with the engine's fused score; every field shown in JSON output."""


class RecallResult(msgspec.Struct, kw_only=True):
    """What a recall found. `backlog` > 0: that many stored entries are not indexed yet (an older store
    that needs `tether recall --backfill`); `semantic`: whether the semantic side took part."""

    query: str
    hits: list[RecallHit]
    took_ms: float
    backlog: int = 0
    semantic: bool = False


async def recall(
    store: Store,
    query: str,
    *,
    directory: str | None = None,
    session_id: str | None = None,
    role: str | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int = 10,
    context: int = 1,
    include_reverted: bool = False,
    semantic: Semantic | None = None,
    facts: Facts | None = None,
    keys: TurnKeys | bool = True,
    tuning: Tuning = DEFAULT_TUNING,
    now: float | None = None,
) -> RecallResult:
    """Find the turns of stored sessions that best answer `query`, best first.

    Filters (directory, one session, role, created_at in [since, until)) narrow what is searched;
    `context` neighbouring entries on each side come with every hit. Entries hidden by a revert are left
    out unless `include_reverted`. With `semantic` (see `tether.recall.embeddings`), the similarity of
    meaning joins the word match. `keys`: the turn keys to search (`tether.recall.keys`), True for the
    store's default ones (beside its file, synced first), False for the store's own search, which is also
    what a recall falls back to when the keys cannot be opened or are far behind. An empty or unsearchable
    query returns no hits."""
    started = time.perf_counter()
    begun = time.time()  # what was appended after this is not a backlog the note should speak of
    if not isinstance(query, str):
        raise InvalidInput("the query must be a string")
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInput(f"limit must be an integer from 1 to 1000, not {limit!r}")
    if not isinstance(context, int) or not 0 <= context <= 20:
        raise InvalidInput(f"context must be an integer from 0 to 20, not {context!r}")
    query = query[:MAX_QUERY_CHARS]
    filters: dict[str, Any] = {
        "directory": directory,
        "session_id": session_id,
        "role": role,
        "since": since,
        "until": until,
        "limit": max(tuning.candidates, limit),
        "include_reverted": include_reverted,
    }
    # The model embeds the query in a worker thread while SQLite searches here: both release the GIL.
    analyzing = (
        asyncio.ensure_future(
            semantic.analyze(query, per_word=tuning.expand_per_word, min_similarity=tuning.expand_similarity)
        )
        if semantic is not None
        else None
    )
    if analyzing is not None:
        await asyncio.sleep(0)  # let it hand the query to the model before the search holds this thread
    try:
        search, by_keys = await _searcher(store, keys, tuning, directory, session_id)
        hits = await search(query, **filters)
    except BaseException:
        if analyzing is not None:
            analyzing.cancel()
        raise
    # the keys read every entry of the scope; the store's search indexed what it could first
    backlog = 0 if by_keys else await store.search_backlog(before=begun)
    analysis = await analyzing if analyzing is not None else None
    if analysis is not None and analysis.expansions and tuning.expansion:
        hits = _merge(hits, await search(" ".join(analysis.expansions), **filters), tuning.expansion)
    by_facts = (
        await facts.find(query, directory=directory, session_id=session_id, limit=tuning.candidates)
        if facts is not None and tuning.facts
        else []
    )
    if not hits and not by_facts:
        took = (time.perf_counter() - started) * 1000
        return RecallResult(query=query, hits=[], took_ms=took, backlog=backlog)
    ranked = _rerank(hits, query, tuning, periods(query, now=now if now is not None else time.time())) if hits else []
    if by_facts:
        ranked = _add_facts(ranked, by_facts, tuning.facts)
    if semantic is not None and analysis is not None:
        ranked = await semantic.rerank(analysis, ranked, weight=tuning.semantic)
    out = await _materialize(
        store,
        ranked,
        query,
        limit=limit,
        context=context,
        role=role,
        since=since,
        until=until,
        include_reverted=include_reverted,
    )
    took = (time.perf_counter() - started) * 1000
    return RecallResult(query=query, hits=out, took_ms=took, backlog=backlog, semantic=semantic is not None)


_DEFAULT_KEYS: weakref.WeakKeyDictionary[Store, TurnKeys] = weakref.WeakKeyDictionary()


def default_keys(store: Store) -> TurnKeys:
    """The turn keys of a store, opened once per store object: for a PostgreSQL store its tables
    (`pgkeys.py`, shared by every node); otherwise beside its file (in memory for other stores)."""
    try:
        return _DEFAULT_KEYS[store]
    except KeyError:
        index: TurnKeys = PgKeyIndex(store) if is_postgres(store) else KeyIndex(default_key_path(store))
        _DEFAULT_KEYS[store] = index
        return index


def forget_default_keys(store: Store) -> None:
    """Close the turn keys `default_keys` holds open for `store` (a rebuild makes them again)."""
    index = _DEFAULT_KEYS.pop(store, None)
    if index is not None:
        index.close()


Search = Callable[..., Awaitable[list[SearchHit]]]


async def _searcher(
    store: Store, keys: TurnKeys | bool, tuning: Tuning, directory: str | None, session_id: str | None
) -> tuple[Search, bool]:
    """The search the candidates come from: the turn keys, synced with the store first, or the store's own
    search when they are not wanted, cannot be opened or written, or are too far behind to catch up now."""
    if keys is False:
        return store.search, False
    try:
        index = default_keys(store) if keys is True else keys
        if await index.sync(store, directory=directory, session_id=session_id):

            async def search(query: str, **filters: Any) -> list[SearchHit]:
                return await index.search(store, query, previous=tuning.previous, **filters)

            return search, True
    except (sqlite3.Error, OSError) as e:  # the keys' own file; a store's error (PostgreSQL's keys too) is the store's
        log.warning("recall searches without its turn keys: %s", e)
    return store.search, False


def _merge(hits: list[SearchHit], extra: list[SearchHit], weight: float) -> list[SearchHit]:
    """The query's own hits, with the hits of its expansion words added at `weight` (BM25 scores of one
    index add up: a turn that matches both ranks above one that matches either)."""
    merged = {(h.session_id, h.seq): h for h in hits}
    for h in extra:
        key = (h.session_id, h.seq)
        own = merged.get(key)
        merged[key] = msgspec.structs.replace(own or h, score=(own.score if own else 0.0) + weight * h.score)
    return sorted(merged.values(), key=lambda h: -h.score)


def _add_facts(ranked: list[Candidate], found: list[tuple[str, int, float]], weight: float) -> list[Candidate]:
    """The candidates with the fact matches added: `weight` x the fact's BM25 over the best fact's; a turn
    that only its facts matched joins them."""
    best = max(score for _, _, score in found) or 1.0
    by_key = {(c.session_id, c.seq): c for c in ranked}
    for sid, seq, score in found:
        cand = by_key.get((sid, seq))
        if cand is None:
            cand = by_key[sid, seq] = Candidate(sid, seq)
        cand.score += weight * score / best
        cand.extra["facts"] = score
    return sorted(by_key.values(), key=lambda c: -c.score)


def _is_question(text: str) -> bool:
    tail = text.rstrip()
    return tail.endswith("?") or "?" in tail[-40:]


def _rerank(hits: Sequence[SearchHit], query: str, tuning: Tuning, named: list[Period]) -> list[Candidate]:
    best = max(h.score for h in hits) or 1.0
    words = content_words(query)
    when = tuning.when if asks_when(query) else 0.0
    names = {name for h in hits if isinstance(name := h.metadata.get("name"), str)}  # metadata is anything
    author_words = {name: set(tokens(name)) for name in names}
    subject = subject_of(query, words & set().union(*author_words.values()))
    scores: dict[tuple[str, int], float] = {}
    found: dict[tuple[str, int], SearchHit] = {}
    spread = ((-1, tuning.before), (2, tuning.second), (-2, tuning.second))
    for h in hits:
        score = h.score / best
        if when and places_in_time(h.excerpt):
            score *= 1 + when
        name = h.metadata.get("name")
        by = author_words.get(name) if isinstance(name, str) else None
        if tuning.author and by is not None and ((subject in by) if subject is not None else bool(words & by)):
            score *= 1 + tuning.author
        sid, seq = h.session_id, h.seq
        found[sid, seq] = h
        scores[sid, seq] = scores.get((sid, seq), 0.0) + score
        forward = tuning.after_question if _is_question(h.excerpt) else tuning.after
        for offset, weight in ((1, forward), *spread):
            if weight and seq + offset >= 1:
                key = (sid, seq + offset)
                scores[key] = scores.get(key, 0.0) + weight * score
    if named and tuning.period:
        for key, h in found.items():
            if any(p.contains(h.created_at) for p in named):
                scores[key] += tuning.period
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    return [Candidate(sid, seq, score, found.get((sid, seq))) for (sid, seq), score in ranked]


async def _materialize(
    store: Store,
    ranked: list[Candidate],
    query: str,
    *,
    limit: int,
    context: int,
    role: str | None,
    since: float | None,
    until: float | None,
    include_reverted: bool,
) -> list[RecallHit]:
    """The best `limit` candidates as hits with context. Neighbours that a match lifted were never checked
    against the filters by the store, so they are checked here; the entries are read once per session."""
    stems = [t for term in query_terms(query) for t in term.tokens]
    spans: dict[str, list[RevertSpan]] = {}
    sessions: dict[str, SessionInfo] = {}
    windows: dict[str, dict[int, Entry]] = {}
    out: list[RecallHit] = []
    for cand in ranked:
        if len(out) >= limit:
            break
        sid = cand.session_id
        if sid not in windows:
            windows[sid] = {}
        lo, hi = cand.seq - context, cand.seq + context
        missing = [s for s in range(max(1, lo), hi + 1) if s not in windows[sid]]
        if missing:
            try:
                for read in await store.read(sid, missing[0], missing[-1]):
                    windows[sid][read.seq] = read
            except LookupError:
                continue  # deleted while we looked
        entry = windows[sid].get(cand.seq)
        if entry is None:
            continue
        text = indexed_text(entry.body)
        if text is None:
            continue  # a neighbour that is not a message (a marker, a revert): nothing to show
        message: Message = entry.body  # type: ignore[assignment]  # indexed_text: messages only
        hit = cand.hit
        reverted = hit.reverted if hit is not None else False
        if hit is None:
            if role is not None and message.role != role:
                continue
            if (since is not None and entry.created_at < since) or (until is not None and entry.created_at >= until):
                continue
            if sid not in spans:
                spans[sid] = await store.reverted_spans(sid)
            reverted = is_hidden(cand.seq, spans[sid])
            if reverted and not include_reverted:
                continue
        lines = []
        for seq in range(max(1, lo), hi + 1):
            neighbour = windows[sid].get(seq)
            if seq == cand.seq or neighbour is None:
                continue
            ntext = indexed_text(neighbour.body)
            if ntext is not None:
                lines.append(ContextLine(seq=seq, role=neighbour.body.role, text=excerpt_of(ntext, stems, 300)))  # type: ignore[union-attr]
        out.append(
            RecallHit(
                session_id=sid,
                seq=cand.seq,
                role=message.role,
                created_at=entry.created_at,
                score=round(cand.score, 6),
                excerpt=hit.excerpt if hit is not None else excerpt_of(text, stems),
                title=hit.title if hit is not None else (await _info(store, sid, sessions)).title,
                directory=hit.directory if hit is not None else (await _info(store, sid, sessions)).directory,
                metadata=dict(message.metadata),
                reverted=reverted,
                context=lines,
            )
        )
    return out


async def _info(store: Store, session_id: str, cache: dict[str, SessionInfo]) -> SessionInfo:
    if session_id not in cache:
        cache[session_id] = await store.get_session(session_id)
    return cache[session_id]
