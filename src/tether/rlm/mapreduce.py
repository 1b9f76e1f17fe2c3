"""Chunked map-reduce over a text too large for one call: each chunk, sized in the model's own tokens to fit
its window with a stated margin (`sizing`), is asked the question; the notes that found something are merged
(in rounds, while they are too long for one call) and a last call answers from them. RLM's fallback, and the
whole method when no model can write code."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from ..context.tokens import TokenCounter
from .sizing import text_budget

Ask = Callable[[str, str], Awaitable[str]]
"""``await ask(system, prompt)``: one model call, its text answer."""

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)`` with stage ``"map"`` or ``"reduce"``."""

NOTHING = "NOTHING RELEVANT"

MAP_SYSTEM = (
    "You read one part of a long text and take notes for a question about the whole text. Write down "
    "everything in this part that helps answer the question, quoting names, numbers and key phrases exactly. "
    f"If this part holds nothing relevant, reply with exactly: {NOTHING}"
)
MERGE_SYSTEM = (
    "You merge notes taken on different parts of a long text into one set of notes for a question. Keep "
    "every relevant fact, name and number; drop repetition."
)
ANSWER_SYSTEM = (
    "You answer a question about a long text from notes taken on each of its parts. Answer fully and "
    "precisely from the notes; say so when they do not contain the answer."
)
DIRECT_SYSTEM = "Answer the question about the text you are given, fully and precisely, from the text alone."

# What each call's user message says before the text or notes it carries.
MAP_PROMPT = "The question: {question}\n\nPart {index} of {total} of the text:\n"
DIRECT_PROMPT = "The question: {question}\n\nThe text:\n"
MERGE_PROMPT = "The question: {question}\n\nNotes to merge:\n\n"
ANSWER_PROMPT = "The question: {question}\n\nNotes from the {total} parts of the text:\n\n"
NOTE_JOIN = "\n\n"
CUT_MARK = " [...]"
_LARGEST_PART = 10**9  # a part number no text reaches: the framing is counted at its longest


def call_budgets(question: str, counter: TokenCounter, *, window: int, reply_tokens: int) -> tuple[int, int]:
    """``(chunk_tokens, notes_tokens)``: the most tokens of text that a map call (or the one call of a text
    that fits) and of notes that a merge or answer call may carry in `window`, each call's system prompt,
    question and framing counted by `counter` (the model's own), with `reply_tokens` left for the answer."""

    def fixed(system: str, prompt: str) -> int:
        return counter.count(system) + counter.count(
            prompt.format(question=question, index=_LARGEST_PART, total=_LARGEST_PART)
        )

    reading = max(fixed(MAP_SYSTEM, MAP_PROMPT), fixed(DIRECT_SYSTEM, DIRECT_PROMPT))
    merging = max(fixed(MERGE_SYSTEM, MERGE_PROMPT), fixed(ANSWER_SYSTEM, ANSWER_PROMPT))
    return text_budget(window, reply_tokens, reading), text_budget(window, reply_tokens, merging)


def _cut(text: str, start: int, max_chars: int) -> int:
    """Where a piece of at most `max_chars` characters from `start` ends: at a paragraph break, else a line
    break, else a space, when one falls in its last fifth; otherwise where the limit is."""
    end = start + max_chars
    if end >= len(text):
        return len(text)
    floor = start + max_chars * 4 // 5
    for separator in ("\n\n", "\n", " "):
        cut = text.rfind(separator, floor, end)
        if cut > start:
            return cut + len(separator)
    return end


def split_text(text: str, max_chars: int) -> list[str]:
    """Cut `text` into pieces of at most `max_chars` characters, each ending at a paragraph break, else a
    line break, else a space, when one falls in the piece's last fifth; otherwise cut where the limit is."""
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = _cut(text, start, max_chars)
        pieces.append(text[start:end])
        start = end
    return pieces or [text]


def split_tokens(text: str, max_tokens: int, counter: TokenCounter) -> list[str]:
    """Cut `text` into pieces of at most `max_tokens` tokens by `counter`, each ending at a break as in
    `split_text` (a single character over the limit stands alone). A piece's length is guessed from the
    characters a token of the piece before, then counted, and cut shorter while it is over: about one
    count of the text in all, however its kind changes along the way."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    pieces: list[str] = []
    start = 0
    chars_per_token = 4.0
    while start < len(text):
        size = max(1, int(max_tokens * chars_per_token))
        while True:
            end = _cut(text, start, size)
            tokens = counter.count(text[start:end])
            if tokens <= max_tokens or end - start == 1:
                break
            # the measured density, a little under, so the next try lands inside the limit
            size = max(1, min(end - start - 1, int((end - start) * max_tokens / tokens * 0.95)))
        pieces.append(text[start:end])
        chars_per_token = (end - start) / max(1, tokens)
        start = end
    return pieces or [text]


async def map_reduce(
    text: str,
    question: str,
    ask: Ask,
    *,
    chunk_tokens: int,
    notes_tokens: int,
    counter: TokenCounter,
    concurrency: int = 4,
    progress: Progress | None = None,
) -> str:
    """Answer `question` about `text` with calls that carry at most `chunk_tokens` tokens of it each, and at
    most `notes_tokens` tokens of notes in a merge or the answer, all counted by `counter`, which should be
    the model's own (`call_budgets` makes both bounds fit a window). The number of calls is about the text's
    tokens over `chunk_tokens`, plus the merges: bounded by the text, not by any model's behaviour."""
    # Counting a long text takes a while (the embedded model's tokenizer reads about 1 MB a second): off
    # the event loop.
    chunks = await asyncio.to_thread(split_tokens, text, chunk_tokens, counter)
    if len(chunks) == 1:
        return await ask(DIRECT_SYSTEM, DIRECT_PROMPT.format(question=question) + text)

    total = len(chunks)
    done = 0
    gate = asyncio.Semaphore(max(1, concurrency))

    async def read(index: int, chunk: str) -> str:
        nonlocal done
        async with gate:
            note = await ask(MAP_SYSTEM, MAP_PROMPT.format(question=question, index=index + 1, total=total) + chunk)
        done += 1
        if progress is not None:
            progress("map", done, total)
        return note

    notes = await asyncio.gather(*(read(i, c) for i, c in enumerate(chunks)))
    relevant = [f"[part {i + 1}] {n.strip()}" for i, n in enumerate(notes) if n.strip() and NOTHING not in n.upper()]
    if not relevant:
        return f"No part of the text ({total} parts read) held anything relevant to the question."

    join = counter.count(NOTE_JOIN)
    rounds = 0
    while _size(relevant, counter, join) > notes_tokens and len(relevant) > 1:
        rounds += 1
        groups = _group(relevant, notes_tokens, counter, join)
        if progress is not None:
            progress("reduce", rounds, 0)

        async def merge(group: Sequence[str]) -> str:
            if len(group) == 1:
                return group[0]
            async with gate:
                return await ask(MERGE_SYSTEM, MERGE_PROMPT.format(question=question) + NOTE_JOIN.join(group))

        merged = list(await asyncio.gather(*(merge(g) for g in groups)))
        if len(merged) >= len(relevant):
            break  # every note is too long to pair with another: cut them below instead
        relevant = merged
    share = max(1, (notes_tokens - join * (len(relevant) - 1)) // len(relevant))
    cut_mark = counter.count(CUT_MARK)
    joined = NOTE_JOIN.join(
        n if counter.count(n) <= share else _head(n, share - cut_mark, counter) + CUT_MARK for n in relevant
    )
    if progress is not None:
        progress("reduce", rounds + 1, rounds + 1)
    return await ask(ANSWER_SYSTEM, ANSWER_PROMPT.format(question=question, total=total) + joined)


def _size(notes: Sequence[str], counter: TokenCounter, join: int) -> int:
    return sum(counter.count(n) for n in notes) + join * max(0, len(notes) - 1)


def _group(notes: Sequence[str], max_tokens: int, counter: TokenCounter, join: int) -> list[list[str]]:
    """Consecutive notes packed into groups of at most `max_tokens` tokens, joins included (a longer note
    stands alone)."""
    groups: list[list[str]] = []
    size = 0
    for note in notes:
        tokens = counter.count(note)
        if groups and size + join + tokens <= max_tokens:
            groups[-1].append(note)
            size += join + tokens
        else:
            groups.append([note])
            size = tokens
    return groups


def _head(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """A start of `text` of at most `max_tokens` tokens (nearly the longest: cut at the measured density,
    then shorter while over)."""
    if max_tokens <= 0:
        return ""
    end, tokens = len(text), counter.count(text)
    while tokens > max_tokens:
        end = min(end - 1, int(end * max_tokens / tokens * 0.95))
        tokens = counter.count(text[:end])
    return text[:end]
