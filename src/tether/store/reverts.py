"""Revert semantics, in one place. A `Revert` entry at seq r pointing to `to_seq` hides the entries after
`to_seq` up to and including itself from the active history; a revert that a later revert hid has no
effect. Nothing is deleted: the raw journal keeps every entry. The store, the session handle, the context
engine, the exporters and the CLI all read the active history through these functions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Sequence

from ..messages import Entry, Revert
from .protocols import Journal
from .records import RevertSpan

DEFAULT_CHUNK = 256
"""Entries read per query while walking the journal backwards."""


def hidden_spans(reverts: Iterable[tuple[int, int]]) -> list[RevertSpan]:
    """The spans hidden from the active history, in seq order, given every revert as (its seq, its to_seq).
    Reverts are walked from the end back, exactly as `ActiveWalk` reads the journal."""
    spans: list[RevertSpan] = []
    hi = 2**62
    for seq, to_seq in sorted(reverts, reverse=True):
        if seq > hi:
            continue  # inside a span that a later revert hid
        spans.append(RevertSpan(to_seq, seq))
        hi = to_seq
    spans.reverse()
    return spans


def is_hidden(seq: int, spans: Sequence[tuple[int, int]]) -> bool:
    """Whether entry `seq` is outside the active history (revert markers of effective reverts included)."""
    return any(lo < seq <= hi for lo, hi in spans)


def effective_reverts(spans: Iterable[RevertSpan]) -> set[int]:
    """The seqs of the revert entries that take effect (a transcript shows these, though they are markers
    outside the active history)."""
    return {span.revert for span in spans}


class ActiveWalk:
    """The active entries of a session from `last_seq` back, newest first, revert markers left out:
    ``async for entry in ActiveWalk(journal, sid, last_seq)``. Reads `chunk` entries at a time and jumps over
    hidden spans, so the cost is what the caller consumes plus the reverts it passes, not the history. A
    caller that knows it needs nothing below some seq raises `stop` while it iterates; no read goes below."""

    def __init__(
        self,
        journal: Journal,
        session_id: str,
        last_seq: int,
        *,
        chunk: int = DEFAULT_CHUNK,
        newest: Sequence[Entry] = (),
    ) -> None:
        self.journal = journal
        self.session_id = session_id
        self.last_seq = last_seq
        self.chunk = chunk
        self.newest = newest
        """Entries the caller already read: every stored entry from `newest[0].seq` to `last_seq`, in order
        (a raw `tail`), walked before any read."""
        self.stop = 1

    async def __aiter__(self) -> AsyncIterator[Entry]:
        hi = self.last_seq  # the highest seq that may still be visible
        newest = self.newest
        while hi >= self.stop:
            if newest:
                lo = max(self.stop, newest[0].seq)
                got, newest = newest, ()
            else:
                lo = max(self.stop, hi - self.chunk + 1)
                got = await self.journal.read(self.session_id, lo, hi)
            for entry in reversed(got):
                if entry.seq > hi:
                    continue  # inside a span that a later revert hid
                if entry.seq < self.stop:
                    return
                if isinstance(entry.body, Revert):
                    hi = entry.body.to_seq
                    continue
                hi = entry.seq - 1
                yield entry
            hi = min(hi, lo - 1)


async def active_tail(
    journal: Journal, session_id: str, n: int, *, last_seq: int | None = None, chunk: int | None = None
) -> list[Entry]:
    """The last `n` entries of the active history, in order. `last_seq` is the session's entry count when
    the caller knows it. Without it the walk starts from a raw `tail` (one query: the newest entries say where
    the journal ends), not from the session's row and then a read (two)."""
    size = chunk or max(n + 8, 64)
    newest: list[Entry] = []
    if last_seq is None and n > 0:
        newest = await journal.tail(session_id, size)
        # An empty tail is an empty session, or one whose newest entries all failed to decode: ask the row.
        last_seq = newest[-1].seq if newest else None
    if last_seq is None:
        last_seq = (await journal.get_session(session_id)).entry_count
    out: list[Entry] = []
    if n > 0:
        async for entry in ActiveWalk(journal, session_id, last_seq, chunk=size, newest=newest):
            out.append(entry)
            if len(out) >= n:
                break
    out.reverse()
    return out


async def active_entries(journal: Journal, session_id: str, *, last_seq: int | None = None) -> list[Entry]:
    """The whole active history in order (reverted spans and revert markers left out)."""
    if last_seq is None:
        last_seq = (await journal.get_session(session_id)).entry_count
    return await active_tail(journal, session_id, max(last_seq, 1), last_seq=last_seq)


async def active_until(
    journal: Journal,
    session_id: str,
    last_seq: int,
    until: Callable[[Entry], int | None],
    *,
    chunk: int = DEFAULT_CHUNK,
) -> list[Entry]:
    """The active entries from the end back to where `until` first says, in order: `until(entry)` returns
    None to go on, or the lowest seq still needed. The context engine reads back to the kept start of the
    latest compaction with it."""
    out: list[Entry] = []
    walk = ActiveWalk(journal, session_id, last_seq, chunk=chunk)
    found = False
    async for entry in walk:
        out.append(entry)
        if not found and (lowest := until(entry)) is not None:
            found = True
            walk.stop = max(1, lowest)
    out.reverse()
    return out
