"""`SessionHandle`: the handle on one stored session. It creates or opens the session, appends to its journal
(the one append path: every writer of a run goes through `append`), keeps its row's counters as it writes
without reading the row back, reads the active history, forks, reverts and retitles."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from typing import Any, Self

import msgspec

from ..messages import Entry, EntryBody, Message, Revert, TitleChange
from ..paths import canonical_directory
from ..store.audit import AuditDraft
from ..store.bookkeeping import decimal_to_pico, message_counters, pico_to_decimal, title_candidate
from ..store.protocols import Store
from ..store.records import SessionInfo, SessionState
from ..store.reverts import active_entries, active_tail
from .archive import refuse_archived


class SessionHandle:
    """A handle on one stored session. `info` is the row as this handle last read or wrote it: its counters
    follow every append made through the handle (`refresh` reads the row again, for writes made elsewhere).
    `tether.Session` is this handle with the agent loop on it."""

    def __init__(self, store: Store, info: SessionInfo) -> None:
        self.store = store
        self.info = info

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.info.title!r} entries={self.info.entry_count}>"

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def title(self) -> str | None:
        return self.info.title

    @classmethod
    async def create(
        cls,
        store: Store,
        *,
        directory: str | os.PathLike[str] | None = None,
        title: str | None = None,
        model: str | None = None,
        agent: str | None = None,
        system_prompt: str | None = None,
        parent_id: str | None = None,
        state: SessionState = "active",
        metadata: dict[str, Any] | None = None,
    ) -> Self:
        """A new session filed under `directory` (default: the current directory, canonicalized)."""
        info = await store.create_session(
            directory=canonical_directory(directory),
            title=title,
            model=model,
            agent=agent,
            system_prompt=system_prompt,
            parent_id=parent_id,
            state=state,
            metadata=metadata,
        )
        return cls(store, info)

    @classmethod
    async def open(cls, store: Store, session_id: str) -> Self:
        info = await store.get_session(session_id)
        refuse_archived(info)  # says where it is and how to bring it back
        return cls(store, info)

    @classmethod
    async def last(cls, store: Store, directory: str | os.PathLike[str] | None = None) -> Self | None:
        """The most recently updated top-level session of `directory` (default: the current one)."""
        info = await store.last_session(canonical_directory(directory))
        if info is not None:
            refuse_archived(info)
        return cls(store, info) if info is not None else None

    async def refresh(self) -> SessionInfo:
        """Read the row again (for what other handles or processes wrote)."""
        self.info = await self.store.get_session(self.id)
        return self.info

    # --- the journal ----------------------------------------------------------------------------------

    async def append(
        self, *bodies: EntryBody, expect_seq: int | None = None, audit: Sequence[AuditDraft] = ()
    ) -> list[Entry]:
        """Append messages or markers atomically; returns them as stored entries (with their seqs). With
        `expect_seq` (the seq the first one must get) another writer that got there first is a `SeqConflict`
        and nothing is written. The handle's counters follow, as the store computes them. `audit`: records
        written in the same transaction."""
        if audit:
            entries = await self.store.append(self.id, bodies, expect_seq=expect_seq, audit=audit)
        else:
            entries = await self.store.append(self.id, bodies, expect_seq=expect_seq)
        if entries[0].seq == self.info.entry_count + 1:
            self._count(bodies, entries)
        else:  # another writer appended since this handle last did: its counters are in the row only
            await self.refresh()
        return entries

    async def append_many(self, bodies: Sequence[EntryBody], *, expect_seq: int | None = None) -> list[Entry]:
        return await self.append(*bodies, expect_seq=expect_seq)

    def _count(self, bodies: Sequence[EntryBody], entries: list[Entry]) -> None:
        """What the store added to the row in the append transaction, added here too (see `bookkeeping`)."""
        info = self.info
        messages, t_in, t_out, cost = message_counters(bodies)
        title = info.title
        explicit = [b for b in bodies if isinstance(b, TitleChange)]
        if explicit:
            title = explicit[-1].title or None
        elif title is None:
            title = title_candidate(bodies)
        self.info = msgspec.structs.replace(
            info,
            entry_count=entries[-1].seq,
            message_count=info.message_count + messages,
            input_tokens=info.input_tokens + t_in,
            output_tokens=info.output_tokens + t_out,
            cost=pico_to_decimal(decimal_to_pico(info.cost) + decimal_to_pico(cost)) if cost else info.cost,
            title=title,
            updated_at=max(info.updated_at, entries[-1].created_at),
        )

    async def tail(self, n: int = 200, *, active: bool = True) -> list[Entry]:
        """The last `n` entries: of the active history (reverted spans left out) or of the raw journal, with
        what every writer appended."""
        if active:
            return await active_tail(self.store, self.id, n)
        return await self.store.tail(self.id, n)

    async def read(self, start: int = 1, end: int | None = None) -> list[Entry]:
        """Raw journal entries start..end (inclusive)."""
        return await self.store.read(self.id, start, end)

    async def entries(self) -> list[Entry]:
        """The whole active history, with what every writer appended."""
        return await active_entries(self.store, self.id)

    async def messages(self) -> list[Message]:
        """The messages of the active history, in order."""
        return [e.body for e in await self.entries() if isinstance(e.body, Message)]

    def history(self, start: int = 1) -> AsyncIterator[Entry]:
        """Every journal entry in order, reverted or not, without loading them all at once."""
        return self.store.iter_entries(self.id, start)

    async def fork(self, at: int | None = None, *, title: str | None = None) -> Self:
        """A new session with this one's journal up to entry `at` (default: all of it)."""
        return type(self)(self.store, await self.store.fork(self.id, at, title=title))

    async def revert(self, to_seq: int, *, reason: str | None = None) -> Entry:
        """Hide every entry after `to_seq` from the active history. Nothing is deleted; the revert is an
        entry of its own, and a later revert to the seq just before it brings the span back."""
        (entry,) = await self.append(Revert(to_seq=to_seq, reason=reason))
        return entry

    async def set_title(self, title: str) -> Entry:
        (entry,) = await self.append(TitleChange(title=title))
        return entry

    async def update(self, **fields: Any) -> SessionInfo:
        self.info = await self.store.update_session(self.id, **fields)
        return self.info

    async def delete(self) -> list[str]:
        return await self.store.delete_session(self.id)
