"""The streamed part of a step survives a crash. While the model streams, `StreamSaver` makes what it has
said so far (thinking, text, the tool calls complete so far and the arguments of the one still coming)
durable in the store's `Streams` record of the session: one record, replaced in place, never a journal
entry, so the journal stays append-only and a steady step that streams little writes nothing more.

When it saves: once `SAVE_CHARS` characters have come since the last save, or `SAVE_SECONDS` after the
first character that is not saved yet (a timer, so a stream that stalls is saved too). A kill -9 loses at
most the last half second of the stream, or its last 4 KB when a fast model sends more in that time; a
typical model (50-100 tokens a second) costs at most two small write transactions a second, a fast local
one about one per 4 KB (`bench/loop.py`'s `stream_checkpoint_overhead_ratio`).

After a kill, the record outlives its run. Whoever takes the session next journals it as the step's answer,
marked interrupted (`messages.INTERRUPTED_ANSWER`): the session's next run, before anything else
(`recover_stream`), or a reader that finds the session free (`settle_stream`, which `lookup.find_session`
calls for every face: `sessions show`, exports, the server's routes and event streams). A tool call that was
complete is journaled with a "not run" result, so that every provider's message shape holds; one whose
arguments were still coming is kept only in the message's metadata (``cut_calls``). A record is stale, and
ignored, once the session has entries after the one its step began after (the answer, or the partial a
cancel kept, was journaled)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

import msgspec

from ..errors import SeqConflict, SessionBusy, StoreError
from ..ids import new_id
from ..messages import INTERRUPTED_ANSWER, EntryBody, Message, ToolResultPart
from ..store.protocols import Store
from ..store.records import SessionInfo, StreamRecord
from .lease import LeaseTerms, RunLease

if TYPE_CHECKING:  # `lookup` imports this room: naming a session must not load the loop's engines
    from .state import RunState

log = logging.getLogger("tether.runtime")

SAVE_SECONDS = 0.5
"""At most this long between a streamed character and the save that makes it durable."""
SAVE_CHARS = 4096
"""A save as soon as this many characters (text, thinking, tool-call arguments) came since the last one."""

NOT_RUN = (
    "not run: tether stopped (crash or kill) while the model was still writing the answer that holds this call, "
    "so the call never started."
)


class PartialAnswer(Protocol):
    """What a model call has streamed so far (`model_call.PartialAnswer`)."""

    def message(self, model: str, provider: str) -> Message | None: ...


class StreamSaver:
    """Saves one model call's `PartialAnswer` at the rate above. `grew(n)` after each delta of `n`
    characters says whether a save is due now (the size bound; the caller awaits `save`); the time bound
    saves from a timer. `stop` ends the timer; `forget` drops the record once the answer is journaled."""

    def __init__(
        self,
        state: RunState,
        partial: PartialAnswer,
        *,
        seconds: float | None = None,
        chars: int | None = None,
    ) -> None:
        self.store: Store = state.session.store
        self.session_id = state.session_id
        self.after_seq = state.journal.last_seq
        self.model = state.options.model
        self.provider = state.provider.name
        self.journal = state.journal
        self.redactor = state.journal.redactor
        self.partial = partial
        self.seconds = SAVE_SECONDS if seconds is None else seconds
        self.chars = SAVE_CHARS if chars is None else chars
        self.enabled = state.options.durable_stream
        self.saves = 0
        self._unsaved = 0
        self._timer: asyncio.TimerHandle | None = None
        self._saving: asyncio.Task[None] | None = None

    def grew(self, n: int) -> bool:
        if not self.enabled:
            return False
        self._unsaved += n
        if self._unsaved >= self.chars:
            return True
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.seconds, self._on_timer)
        return False

    def _on_timer(self) -> None:
        self._timer = None
        if self._unsaved and (self._saving is None or self._saving.done()):
            self._saving = asyncio.ensure_future(self.save())

    async def save(self) -> None:
        """Replace the session's record with the answer so far (its secrets redacted, as the journal's)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        message = self.partial.message(self.model, self.provider)
        if message is None:
            return
        if self.redactor:
            message = self.redactor.value(message)
        self._unsaved = 0
        try:
            await self.store.save_stream(self.session_id, self.after_seq, message)
            self.saves += 1
        except StoreError:  # the stream goes on; the answer is journaled whole at its end as before
            log.warning("could not save the streamed answer of session %s", self.session_id, exc_info=True)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._saving is not None and not self._saving.done():
            self._saving.cancel()

    async def forget(self) -> None:
        """Once the answer (or the partial a cancel kept) is journaled, the record is stale: drop it. Kept
        when nothing was journaled after the step began (a cancel whose append failed): a later run takes it."""
        self.stop()
        if self.saves and self.journal.last_seq != self.after_seq:
            self.saves = 0
            with contextlib.suppress(StoreError):
                await self.store.drop_stream(self.session_id)


def interrupted_bodies(record: StreamRecord) -> list[EntryBody]:
    """What a stream record becomes in the journal: the partial answer marked interrupted and, for each tool
    call in it that was complete, a result saying it never ran."""
    message = msgspec.structs.replace(
        record.message,
        finish_reason="interrupted",
        metadata={**record.message.metadata, "partial": True, INTERRUPTED_ANSWER: True},
    )
    bodies: list[EntryBody] = [message]
    calls = message.tool_calls
    if calls:
        bodies.append(
            Message.tool(*(ToolResultPart(call_id=c.id, name=c.name, content=NOT_RUN, is_error=True) for c in calls))
        )
    return bodies


async def recover_stream(state: RunState) -> bool:
    """At a run's start (its lease held): journal what a killed run of the session had streamed, through the
    run's journal, so that its events go out as any entry's. True when something was journaled."""
    store, sid = state.session.store, state.session_id
    record = await store.get_stream(sid)
    if record is None:
        return False
    recovered = record.after_seq == state.journal.last_seq
    if recovered:
        await state.append(*interrupted_bodies(record))
    await store.drop_stream(sid)
    return recovered


async def settle_stream(store: Store, info: SessionInfo) -> SessionInfo:
    """For a reader: when a run that is gone left its streamed answer, journal it (as `recover_stream`)
    under the session's lease, and return the row as it is now. A session whose run lives (its lease is
    held) is left alone, and so is a store that cannot be written (the reader reads what is journaled)."""
    try:
        record = await store.get_stream(info.id)
        if record is None or record.after_seq != info.entry_count:
            return info
        lease = RunLease(store, info.id, new_id("settle"), LeaseTerms(ttl=10.0))
        try:
            await lease.acquire()
        except SessionBusy:
            return info  # its run is alive: the record is its answer so far
        try:
            record = await store.get_stream(info.id)
            info = await store.get_session(info.id)
            if record is not None:
                if record.after_seq == info.entry_count:
                    await store.append(info.id, interrupted_bodies(record), expect_seq=info.entry_count + 1)
                await store.drop_stream(info.id)
                info = await store.get_session(info.id)
        finally:
            await lease.release()
    except (StoreError, SeqConflict):
        log.warning("could not journal the streamed answer left in session %s", info.id, exc_info=True)
    return info


__all__ = [
    "NOT_RUN",
    "SAVE_CHARS",
    "SAVE_SECONDS",
    "PartialAnswer",
    "StreamSaver",
    "interrupted_bodies",
    "recover_stream",
    "settle_stream",
]
