"""`RunJournal`: how a run writes and numbers. Every entry a run journals goes through it, with the known
secrets redacted, to the session handle (stating the seq it expects), into the context engine's view of the
history, and out again as the entry's durable events; every live event gets its number here, and a
sub-agent's events pass through unchanged (`forward`).
`replay_events` gives the durable events of a session after any number, from the journal, with the numbers
the run gave them."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence

import msgspec

from ..context.engine import ContextEngine
from ..errors import SeqConflict
from ..events import EVENT_SPAN, Event, durable_events, live_number
from ..messages import Entry, EntryBody
from ..redaction import Redactor
from ..store.audit import AuditDraft
from ..store.protocols import Store
from .handle import SessionHandle

EventHook = Callable[[Event], None]

REMEMBERED_SESSIONS = 10_000
"""Sessions whose last live event number this process remembers (the least recently used are forgotten)."""

_last_live: OrderedDict[str, int] = OrderedDict()
"""The last live event number this process gave each session: a run that follows another with no entry in
between (a `--continue` with nothing to do, a chat turn, a server's next run on a new handle) numbers on from
there, so live numbers never repeat within a process. Live events never leave the process that made them."""


def _remember(session_id: str, n: int) -> None:
    _last_live[session_id] = n
    _last_live.move_to_end(session_id)
    if len(_last_live) > REMEMBERED_SESSIONS:
        _last_live.popitem(last=False)


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
        # live events numbered since the last entry, counting those of earlier runs in this process
        self._live = max(0, _last_live.get(session.id, 0) - live_number(self.last_seq, 0) + 1)

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
        self._live = 0
        return stored

    async def append_for_engine(self, bodies: Sequence[EntryBody], expect_seq: int) -> list[Entry]:
        """The append the context engine makes (a compaction), through the same path. The engine read the
        session to decide; if that is not where this run stands, another writer came between them: a
        `SeqConflict`, and the engine appends nothing."""
        if expect_seq != self.last_seq + 1:
            raise SeqConflict(self.session.id, self.last_seq + 1, expect_seq)
        return await self.append(*bodies, expect_seq=expect_seq)

    def next_number(self) -> int:
        """The number of the next live event."""
        n = live_number(self.last_seq, self._live)
        self._live += 1
        _remember(self.session.id, n)
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


async def replay_events(store: Store, session_id: str, after: int = 0, *, batch: int = 500) -> AsyncIterator[Event]:
    """The durable events of a session numbered after `after`, in order, derived from the journal exactly as
    the run that wrote it emitted them. Reads from the entry that `after` falls in, `batch` entries at a time."""
    start = max(1, after // EVENT_SPAN)
    async for entry in store.iter_entries(session_id, start, batch=batch):
        for event in durable_events(entry, session_id):
            if event.n > after:
                yield event
