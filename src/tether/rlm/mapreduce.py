"""Chunked map-reduce over a text too large for one call: each window-sized chunk is asked the question, the
notes that found something are merged (in rounds, while they are too long for one call) and a last call
answers from them. RLM's fallback, and the whole method when no model can write code."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

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


def split_text(text: str, max_chars: int) -> list[str]:
    """Cut `text` into pieces of at most `max_chars` characters, each ending at a paragraph break, else a
    line break, else a space, when one falls in the piece's last fifth; otherwise cut where the limit is."""
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    pieces: list[str] = []
    start = 0
    while len(text) - start > max_chars:
        end = start + max_chars
        floor = start + max_chars * 4 // 5
        for separator in ("\n\n", "\n", " "):
            cut = text.rfind(separator, floor, end)
            if cut > start:
                end = cut + len(separator)
                break
        pieces.append(text[start:end])
        start = end
    if start < len(text) or not pieces:
        pieces.append(text[start:])
    return pieces


async def map_reduce(
    text: str,
    question: str,
    ask: Ask,
    *,
    chunk_chars: int,
    notes_chars: int,
    concurrency: int = 4,
    progress: Progress | None = None,
) -> str:
    """Answer `question` about `text` with calls of at most about `chunk_chars` characters of text each.

    `notes_chars` bounds what one merge or answer call is given. The number of calls is about
    ``len(text) / chunk_chars`` plus the merges: bounded by the text, not by any model's behaviour."""
    chunks = split_text(text, chunk_chars)
    if len(chunks) == 1:
        return await ask(DIRECT_SYSTEM, f"The question: {question}\n\nThe text:\n{text}")

    total = len(chunks)
    done = 0
    gate = asyncio.Semaphore(max(1, concurrency))

    async def read(index: int, chunk: str) -> str:
        nonlocal done
        async with gate:
            note = await ask(
                MAP_SYSTEM,
                f"The question: {question}\n\nPart {index + 1} of {total} of the text:\n{chunk}",
            )
        done += 1
        if progress is not None:
            progress("map", done, total)
        return note

    notes = await asyncio.gather(*(read(i, c) for i, c in enumerate(chunks)))
    relevant = [f"[part {i + 1}] {n.strip()}" for i, n in enumerate(notes) if n.strip() and NOTHING not in n.upper()]
    if not relevant:
        return f"No part of the text ({total} parts read) held anything relevant to the question."

    rounds = 0
    while sum(len(n) for n in relevant) > notes_chars and len(relevant) > 1:
        rounds += 1
        groups = _group(relevant, notes_chars)
        if progress is not None:
            progress("reduce", rounds, 0)

        async def merge(group: Sequence[str]) -> str:
            if len(group) == 1:
                return group[0]
            async with gate:
                return await ask(MERGE_SYSTEM, f"The question: {question}\n\nNotes to merge:\n\n" + "\n\n".join(group))

        merged = list(await asyncio.gather(*(merge(g) for g in groups)))
        if len(merged) >= len(relevant):
            break  # every note is too long to pair with another: cut them below instead
        relevant = merged
    budget = max(1, notes_chars // len(relevant))
    joined = "\n\n".join(n if len(n) <= budget else n[:budget] + " [...]" for n in relevant)
    if progress is not None:
        progress("reduce", rounds + 1, rounds + 1)
    return await ask(
        ANSWER_SYSTEM, f"The question: {question}\n\nNotes from the {total} parts of the text:\n\n{joined}"
    )


def _group(notes: Sequence[str], max_chars: int) -> list[list[str]]:
    """Consecutive notes packed into groups of at most `max_chars` characters (a longer note stands alone)."""
    groups: list[list[str]] = []
    size = 0
    for note in notes:
        if groups and size + len(note) <= max_chars:
            groups[-1].append(note)
            size += len(note)
        else:
            groups.append([note])
            size = len(note)
    return groups
