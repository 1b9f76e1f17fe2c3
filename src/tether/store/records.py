"""The records a store hands out and takes in: a session's row, a page of them, search hits, backfill
progress, run leases and share links, plus the listing cursor. Plain data shared by every backend and its callers."""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Generic, Literal, NamedTuple, TypeVar

import msgspec

from ..errors import CorruptEntry, LeaseLost, SessionBusy, UnknownName
from ..messages import Message

T = TypeVar("T")
SessionState = Literal["active", "paused"]
SESSION_STATES: tuple[SessionState, ...] = ("active", "paused")
Durability = Literal["normal", "full"]
log = logging.getLogger("tether.store")


class _Unset:
    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()
"""Marks an argument that was not given (so that None can mean 'clear this field')."""


class SessionInfo(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A session's row: identity, lineage, metadata and counters kept up to date on every append."""

    id: str
    created_at: float
    updated_at: float
    title: str | None = None
    directory: str | None = None
    parent_id: str | None = None
    forked_from: str | None = None
    forked_at: int | None = None
    agent: str | None = None
    model: str | None = None
    state: SessionState = "active"
    system_prompt: str | None = None
    entry_count: int = 0
    message_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def last_seq(self) -> int:
        """Seqs are dense from 1, so the last one is the entry count."""
        return self.entry_count


IMPORTED = "imported"
"""The metadata key that marks a session a store imported (from a file, another agent): ``{"source": ...,
"format": ..., "at": ...}``, and ``"confirmed"`` once a person agreed to run it here."""

UPDATABLE_FIELDS = ("title", "directory", "agent", "model", "state", "system_prompt", "metadata")


class Page(msgspec.Struct, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


class ContextLine(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A neighbouring entry shown around a search hit: its position, role and indexed text."""

    seq: int
    role: str
    text: str


class SearchHit(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One entry that a search found, with where it comes from. `score` is higher for better matches
    (BM25 from the store; the recall engine replaces it with its fused score). `metadata` is the
    message's own metadata (an importer's source ids, a speaker's name). `reverted`: a later revert hid
    it from the active history. `context` holds neighbouring entries when the caller asked for them."""

    session_id: str
    seq: int
    role: str
    created_at: float
    score: float
    excerpt: str
    title: str | None = None
    directory: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    reverted: bool = False
    context: list[ContextLine] = msgspec.field(default_factory=list)


class BackfillProgress(msgspec.Struct, kw_only=True):
    """Where a backfill of the search index stands: sessions finished and left, entries indexed so far."""

    sessions_done: int
    sessions_left: int
    entries_indexed: int
    backlog: int
    """Entries still waiting to be indexed (an upper bound: non-message entries count too)."""


SEARCH_ROLES = ("user", "assistant", "tool")


class RevertSpan(NamedTuple):
    """What one revert hides from the active history: every entry after `after` (the revert's `to_seq`) up
    to and including the revert entry itself, at `revert`. See `tether.store.reverts`."""

    after: int
    revert: int

    def hides(self, seq: int) -> bool:
        return self.after < seq <= self.revert

    @property
    def entries(self) -> range:
        """The seqs of the entries it hides, the revert marker left out (empty for a revert to just before
        itself)."""
        return range(self.after + 1, self.revert)


LeaseRequest = Literal["cancel", "pause"]
LEASE_REQUESTS: tuple[LeaseRequest, ...] = ("cancel", "pause")


class Lease(msgspec.Struct, kw_only=True, frozen=True):
    """Who runs a session now: the busy lock. `holder` is the run's own id; `pid` and `host` say where it
    lives, for people and for telling a dead holder from a live one; the lease is the holder's until
    `expires_at` (store clock, seconds since the epoch) unless renewed. `request` is what someone else asked
    of the holder (``cancel``, ``pause``): the holder reads it when it renews."""

    session_id: str
    holder: str
    pid: int | None = None
    host: str | None = None
    since: float
    expires_at: float
    request: LeaseRequest | None = None

    def describe(self) -> str:
        where = ", ".join(x for x in (f"pid {self.pid}" if self.pid is not None else "", self.host or "") if x)
        return f"{self.holder}" + (f" ({where})" if where else "")

    def busy(self) -> SessionBusy:
        """The error for someone else who wants the session while this lease holds."""
        return SessionBusy(
            self.session_id, self.holder, pid=self.pid, host=self.host, since=self.since, expires_at=self.expires_at
        )


class StreamRecord(msgspec.Struct, kw_only=True, frozen=True):
    """The answer a run's model is streaming now, as far as it was made durable (`Streams`): the partial
    assistant message (thinking, text, the tool calls complete so far; the one whose arguments were still
    coming in `metadata["cut_calls"]`), for the step that began when the session had `after_seq` entries.
    A record whose `after_seq` is no longer the session's last seq is stale: the step's answer (or the
    partial a cancel kept) was journaled after it."""

    session_id: str
    after_seq: int
    updated_at: float
    message: Message


def lease_lost(session_id: str, holder: str, current: Lease | None) -> LeaseLost:
    """The error for a `holder` whose lease is gone: taken by `current`, or expired or released (None)."""
    if current is None:
        return LeaseLost(session_id, holder, message=f"run {holder} no longer holds session {session_id}'s lease")
    return LeaseLost(
        session_id,
        current.holder,
        pid=current.pid,
        host=current.host,
        since=current.since,
        expires_at=current.expires_at,
        message=f"run {holder} lost session {session_id}'s lease to run {current.describe()}",
    )


class Share(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """A read-only link to one session's transcript. The store keeps only `token_hash` (the sha256 of the
    link's secret token), so a copy of the database opens no link; the token itself is shown once, when the
    share is made. A share serves while it is neither revoked nor expired and its session exists."""

    id: str
    session_id: str
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None

    def live(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


class ChangedSessions(msgspec.Struct, kw_only=True):
    """What `Changes.changed_sessions` found: the sessions written since the position asked about (their rows
    as they are now), the ids of those deleted since, and the `position` to ask from next time (opaque: only
    ever passed back to the same store). `more`: the page was full, ask again from `position` at once."""

    sessions: list[SessionInfo]
    deleted: list[str]
    position: int
    more: bool = False


class ArtifactInfo(msgspec.Struct, kw_only=True, frozen=True):
    """One stored artifact as `Artifacts.list_artifacts` names it: its id (``art_`` + the sha256 of its
    bytes), media type and size in bytes."""

    id: str
    media_type: str
    size: int


CorruptHandler = Callable[[CorruptEntry], None]


def log_corrupt(error: CorruptEntry) -> None:
    log.warning("skipping %s", error)


def encode_cursor(updated_at: float, session_id: str) -> str:
    raw = f"{updated_at!r}|{session_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, sid = raw.split("|", 1)
        return float(at), sid
    except Exception:
        raise UnknownName(f"invalid cursor {cursor[:80]!r}: give the next_cursor of a page") from None


class Change(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One change in the store's global change feed (`Changes`): what `/events` tells and every process
    or node of a store follows. `id` comes from a sequence the backend never reuses (it increases with
    every change, and may leave holes a rolled-back insert took); `kind` names what happened (an activity's
    tag: ``session_created``, ``status_changed``...), `session_id` the session it is about, and `data` its
    body as JSON-able values."""

    id: int
    at: float
    kind: str
    session_id: str | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


class QueuedPrompt(msgspec.Struct, kw_only=True, frozen=True):
    """A prompt waiting in a session's durable queue (`PromptQueue`): `id` increases in the order prompts
    were queued (never reused), `after_seq` is the session's last seq when it was queued (its run's prompt,
    if one took it, is journaled after it), `body` what the runtime wrote (the prompt and its run's
    settings, JSON)."""

    id: int
    session_id: str
    after_seq: int
    body: bytes
    queued_at: float
