"""`RunJournal`: how a run writes and numbers. Every entry a run journals goes through it, with the known
secrets redacted, to the session handle (stating the seq it expects), into the context engine's view of the
history, and out again as the entry's durable events; every live event gets its number here (see
`tether.events`): after an entry this journal appended, from that span's first part, which no other run can
number (no store write); after the entry the run started from, from blocks reserved durably in the store
(`Store.reserve_numbers`: `open` at a run's start, `reserve_through` before an event leaves the run), so that
no process gives a number another one gave; a sub-agent's events pass through unchanged (`forward`).
`replay_events` gives the durable events of a session after any number, from the journal, with the numbers
the run gave them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import msgspec

from ..context.engine import ContextEngine
from ..errors import SeqConflict
from ..events import (
    EVENT_SPAN,
    Event,
    durable_events,
    first_reserved,
    is_live,
    live_number,
    reserved_number,
    span_last,
)
from ..messages import Entry, EntryBody
from ..redaction import Redactor
from ..store.audit import AuditDraft
from ..store.protocols import Store
from .handle import SessionHandle

EventHook = Callable[[Event], None]
log = logging.getLogger("tether.runtime")

NUMBER_BLOCK = 4096
"""Live event numbers reserved in the store at a time (one durable write per block)."""


class RunJournal:
    """The one append path of a run (see the module docstring). Durable events of what it appends, and the
    live events given to `note`, wait in `pending` until the loop yields them, in the order they happened.
    `redactor` replaces the values of known secrets in every body (text, tool calls' arguments, tool
    results, marker data) before it is written: what a command printed or a model echoed is never stored."""

    def __init__(
        self, session: SessionHandle, engine: ContextEngine | None = None, *, redactor: Redactor | None = None
    ) -> None:
        self.session = session
        self.engine = engine
        self.redactor = redactor or Redactor()
        self.pending: list[Event] = []
        self.audit: list[AuditDraft] = []
        """Audit records for the next append's transaction (a tool call's, with its result)."""
        self.reported = asyncio.Event()
        """Set when `note` or `forward` queued an event while the loop waits on tool calls (it wakes to yield it)."""
        self._next = 0
        """The next live number to give (at least the first of the current entry's span)."""
        self._reserved = 0
        """The highest live number reserved in the store for this journal: what is above it is given only
        once `reserve_through` made it durable."""
        self._appended = 0
        """The seq of the last entry this journal appended: the live events after it are this run's alone."""

    @property
    def last_seq(self) -> int:
        return self.session.info.entry_count

    async def append(self, *bodies: EntryBody, expect_seq: int | None = None) -> list[Entry]:
        """Journal `bodies` after the last entry this run knows of (or at `expect_seq`): another writer that
        got there first is a `SeqConflict`, never an interleaving."""
        expect = self.last_seq + 1 if expect_seq is None else expect_seq
        if self.redactor:
            bodies = tuple(self.redactor.value(body) for body in bodies)
        records, self.audit = self.audit, []
        try:
            stored = await self.session.append(*bodies, expect_seq=expect, audit=records)
        except BaseException:
            self.audit[:0] = records  # kept for the next append
            raise
        if self.engine is not None:
            self.engine.observe(self.session.id, stored)
        for entry in stored:
            self.pending.extend(durable_events(entry, self.session.id))
        if stored:
            self._appended = stored[-1].seq
        return stored

    async def append_for_engine(self, bodies: Sequence[EntryBody], expect_seq: int) -> list[Entry]:
        """The append the context engine makes (a compaction), through the same path. The engine read the
        session to decide; if that is not where this run stands, another writer came between them: a
        `SeqConflict`, and the engine appends nothing."""
        if expect_seq != self.last_seq + 1:
            raise SeqConflict(self.session.id, self.last_seq + 1, expect_seq)
        return await self.append(*bodies, expect_seq=expect_seq)

    async def open(self) -> None:
        """Reserve the first block of live numbers (a run's start): above every number any run of the
        session reserved before, in this process or one that died mid-stream."""
        await self.reserve_through(reserved_number(self.last_seq, 0))

    def next_number(self) -> int:
        """The number of the next live event: after the last one given, in the span of the last entry (the
        last number of its part once that is full): its first part when this journal appended that entry,
        else its reserved part, which the journal's outlet (`AgentRun.events`) makes durable with
        `reserve_through` before the event leaves the run."""
        seq = self.last_seq
        if seq and seq == self._appended:
            first, last = live_number(seq, 0), reserved_number(seq, 0) - 1
        else:
            first, last = reserved_number(seq, 0), span_last(seq)
        n = min(max(self._next, first), last)
        self._next = n + 1
        return n

    async def reserve_through(self, n: int) -> int:
        """Make sure live number `n` is reserved in the store (a block from it when it is not), so that no
        later process gives it again; returns `n`. A store that gives a block above `n` means another
        writer numbers the session at once (a run without a lease beside another): it is logged, and the
        numbers go on after that block."""
        if n <= self._reserved or not is_live(n) or n < first_reserved(n):
            return n  # reserved already, durable, or in the first part of a span this run appended
        count = max(1, min(NUMBER_BLOCK, span_last(n // EVENT_SPAN) - n + 1))
        first = await self.session.store.reserve_numbers(self.session.id, n - 1, count)
        if first != n:
            if self._reserved:  # a run's start takes whatever comes first; later, someone numbered beside us
                log.warning(
                    "session %s: live numbers %d to %d were reserved by another writer", self.session.id, n, first - 1
                )
            self._next = max(self._next, first)
        self._reserved = first + count - 1
        return n

    def number(self, event: Event) -> Event:
        """`event`, a live one made elsewhere, with this session and its number."""
        return msgspec.structs.replace(event, session_id=self.session.id, n=self.next_number())

    def note(self, event: Event) -> None:
        """Queue an event that an engine reports while it works behind what is pending. A numbered one is a
        durable event of an entry that went through `append` (the context engine reports the compaction it
        journaled): it is already queued, in its place."""
        if event.n:
            return
        self.pending.append(self.number(event))
        self.reported.set()

    def forward(self, event: Event) -> None:
        """Queue an event of another session as it is, its session and number kept: a sub-agent's, which
        its parent's run passes on to whoever follows the parent (numbered in the child's session, where
        the child's journal replays it)."""
        self.pending.append(event)
        self.reported.set()

    def drain(self) -> list[Event]:
        """What is pending, in order; the queue is emptied."""
        out, self.pending = self.pending, []
        return out


async def stray_number(store: Store, session_id: str, after: int) -> int:
    """A live number for an event given outside a run's journal (the end of a run cancelled before it
    started), after event number `after`: reserved in the store as a run's are."""
    floor = max(after, first_reserved(after) - 1)
    return await store.reserve_numbers(session_id, floor, 1)


async def replay_events(store: Store, session_id: str, after: int = 0, *, batch: int = 500) -> AsyncIterator[Event]:
    """The durable events of a session numbered after `after`, in order, derived from the journal exactly as
    the run that wrote it emitted them. Reads from the entry that `after` falls in, `batch` entries at a time."""
    start = max(1, after // EVENT_SPAN)
    async for entry in store.iter_entries(session_id, start, batch=batch):
        for event in durable_events(entry, session_id):
            if event.n > after:
                yield event
