"""`Session`: a thin handle on one stored session: create or open it, append to its journal, read its
active history, fork, revert and retitle it. The agent loop drives a session; this handle only records."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from .messages import Entry, EntryBody, Message, Revert, TitleChange, Usage
from .store.base import SessionInfo, SessionState, Store, active_entries, active_tail

if TYPE_CHECKING:
    from .events import Event
    from .providers.base import Provider


class RunResult(msgspec.Struct, kw_only=True):
    """What `Session.prompt` returns: the final text, where it was recorded, and what it cost."""

    text: str
    session_id: str
    usage: Usage
    steps: int
    reason: str


def canonical_directory(directory: str | os.PathLike[str] | None) -> str:
    """The canonical workspace path (absolute, symlinks resolved) that sessions are filed under."""
    return os.path.realpath(os.path.expanduser(os.fspath(directory if directory is not None else os.getcwd())))


class Session:
    """A handle on one stored session. `info` is the row as last read or written through this handle."""

    def __init__(self, store: Store, info: SessionInfo) -> None:
        self.store = store
        self.info = info

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.info.title!r} entries={self.info.entry_count}>"

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
    ) -> Session:
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
    async def open(cls, store: Store, session_id: str) -> Session:
        return cls(store, await store.get_session(session_id))

    @classmethod
    async def last(cls, store: Store, directory: str | os.PathLike[str] | None = None) -> Session | None:
        """The most recently updated top-level session of `directory` (default: the current one)."""
        info = await store.last_session(canonical_directory(directory))
        return cls(store, info) if info is not None else None

    async def refresh(self) -> SessionInfo:
        self.info = await self.store.get_session(self.id)
        return self.info

    async def append(self, *bodies: EntryBody, expect_seq: int | None = None) -> list[Entry]:
        """Append messages or markers atomically; returns them as stored entries (with their seqs)."""
        entries = await self.store.append(self.id, bodies, expect_seq=expect_seq)
        await self.refresh()
        return entries

    async def append_many(self, bodies: Sequence[EntryBody], *, expect_seq: int | None = None) -> list[Entry]:
        return await self.append(*bodies, expect_seq=expect_seq)

    async def tail(self, n: int = 200, *, active: bool = True) -> list[Entry]:
        """The last `n` entries: of the active history (reverted spans left out) or of the raw journal."""
        if active:
            return await active_tail(self.store, self.id, n)
        return await self.store.tail(self.id, n)

    async def read(self, start: int = 1, end: int | None = None) -> list[Entry]:
        """Raw journal entries start..end (inclusive)."""
        return await self.store.read(self.id, start, end)

    async def entries(self) -> list[Entry]:
        """The whole active history."""
        return await active_entries(self.store, self.id)

    async def messages(self) -> list[Message]:
        """The messages of the active history, in order."""
        return [e.body for e in await self.entries() if isinstance(e.body, Message)]

    def history(self, start: int = 1) -> AsyncIterator[Entry]:
        """Every journal entry in order, reverted or not, without loading them all at once."""
        return self.store.iter_entries(self.id, start)

    async def fork(self, at: int | None = None, *, title: str | None = None) -> Session:
        """A new session with this one's journal up to entry `at` (default: all of it)."""
        return Session(self.store, await self.store.fork(self.id, at, title=title))

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

    # --- running the agent loop ------------------------------------------------------------------------

    def stream(
        self,
        prompt: str | Message | None,
        *,
        provider: Provider,
        model: str | None = None,
        **options: Any,
    ) -> AsyncIterator[Event]:
        """Run the agent loop on this session and yield its events. `prompt=None` continues where the
        session stopped (a step limit, a cancel, a crash). `options` are `tether.agent.RunOptions` fields."""
        from .agent import AgentRun, RunOptions

        run = AgentRun(self, provider, RunOptions(model=model or self.info.model or "default", **options))
        return run.events(prompt)

    async def prompt(
        self,
        prompt: str | Message | None,
        *,
        provider: Provider,
        model: str | None = None,
        **options: Any,
    ) -> RunResult:
        """Run the loop to its end; raise on a run that ends in error."""
        from .errors import TetherError
        from .events import Done, Error

        async for event in self.stream(prompt, provider=provider, model=model, **options):
            if isinstance(event, Done):
                await self.refresh()
                return RunResult(
                    text=event.text, session_id=self.id, usage=event.usage, steps=event.steps, reason=event.reason
                )
            if isinstance(event, Error):
                await self.refresh()
                raise TetherError(f"run failed ({event.code}): {event.message}")
        raise TetherError("the run ended without a result")
