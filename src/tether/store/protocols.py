"""The store's protocols, one per role: the `Journal` of sessions and their entries, the `SearchIndex` over
them, `Artifacts` for large payloads, `Leases`, the busy lock of a run, `Streams`, the answer a run is streaming
now, `Shares`, read-only links to a transcript, the `Audit` trail, the `SinkPositions` of the event sinks,
`EventNumbers`, live event numbers reserved in blocks, `Changes`, the global change feed, and
`SessionChanges`, the cursor that what is derived from the journal follows.
`Store` is all eleven; a backend implements it and passes one conformance suite (tests/store/test_conformance.py,
tests/store/test_shares.py, tests/store/test_streams.py, tests/store/test_audit.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from ..messages import Entry, EntryBody, Message
from .audit import AuditDraft, AuditRecord
from .records import (
    UNSET,
    ArtifactInfo,
    BackfillProgress,
    Change,
    ChangedSessions,
    Durability,
    Lease,
    LeaseRequest,
    Page,
    QueuedPrompt,
    RevertSpan,
    SearchHit,
    SessionInfo,
    SessionState,
    Share,
    StreamRecord,
)


@runtime_checkable
class Journal(Protocol):
    """Sessions and their append-only journals. All methods are coroutines except `iter_entries` (an async
    iterator). Nothing rewrites an entry; only `delete_session` removes any."""

    async def create_session(
        self,
        *,
        id: str | None = None,
        directory: str | None = None,
        parent_id: str | None = None,
        title: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
        state: SessionState = "active",
        metadata: dict[str, Any] | None = None,
        created_at: float | None = None,
    ) -> SessionInfo: ...

    async def get_session(self, session_id: str) -> SessionInfo:
        """The session's row; raises `SessionNotFound`."""
        ...

    async def update_session(self, session_id: str, **fields: Any) -> SessionInfo:
        """Set any of `UPDATABLE_FIELDS` (None clears it); returns the new row."""
        ...

    async def delete_session(self, session_id: str) -> list[str]:
        """Delete the session, its entries, its lease, its shares and, recursively, its child sessions (those whose
        `parent_id` is it: sub-agent runs belong to their parent). Forks are independent copies and are
        kept. Returns the ids deleted."""
        ...

    async def list_sessions(
        self,
        *,
        directory: str | None = None,
        parent_id: str | None = UNSET,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[SessionInfo]:
        """Most recently updated first. `parent_id=None` lists top-level sessions only; UNSET lists all."""
        ...

    async def last_session(self, directory: str) -> SessionInfo | None:
        """The most recently updated top-level session of `directory`."""
        ...

    async def append(
        self,
        session_id: str,
        bodies: Sequence[EntryBody],
        *,
        expect_seq: int | None = None,
        created_at: Sequence[float] | None = None,
        audit: Sequence[AuditDraft] = (),
    ) -> list[Entry]:
        """Append atomically, giving each body the next dense seq, and update the row's counters (and its
        default title) in the same transaction, with the `audit` records given (a tool call's record goes with
        its result: no transaction of its own on a run's steps). With `expect_seq` (the seq the first new entry must get) a
        writer that lost a race gets `SeqConflict` and nothing is written. `created_at` (one time per body)
        keeps the times an importer read from its source; by default every entry gets the commit time. The
        session's `updated_at` is the commit time either way."""
        ...

    async def read(self, session_id: str, start: int = 1, end: int | None = None) -> list[Entry]:
        """Entries with start <= seq <= end (end None: to the last), in order. Corrupt ones are skipped
        and reported."""
        ...

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        """The last `n` entries of the raw journal, in order."""
        ...

    def iter_entries(self, session_id: str, start: int = 1, *, batch: int = 500) -> AsyncIterator[Entry]:
        """Every entry from `start` in order, read `batch` at a time."""
        ...

    async def fork(
        self, session_id: str, at_seq: int | None = None, *, id: str | None = None, title: str | None = None
    ) -> SessionInfo:
        """A new session holding a copy of entries 1..at_seq (default: all), recording where it came from."""
        ...

    async def import_session(self, info: SessionInfo, entries: Sequence[Entry]) -> SessionInfo:
        """Create a session exactly as `info` describes it (id, timestamps, title, lineage, metadata) holding
        `entries` with their seqs (1..n) and `created_at` kept, in one transaction: all of it or nothing.
        Counters are computed from the entries, not taken from `info`. For restoring exports and backups;
        an id that exists or a parent that does not raises and writes nothing."""
        ...

    async def replace_session(
        self, session_id: str, sessions: Sequence[tuple[SessionInfo, Sequence[Entry]]], record: AuditDraft
    ) -> list[SessionInfo]:
        """In one transaction, all of it or nothing: delete the session and its descendants (as `delete_session`),
        import `sessions` in order (each as `import_session`, parents first), and append the audit `record`.
        The archive swaps a session for its stub this way, and back."""
        ...


@runtime_checkable
class SearchIndex(Protocol):
    """Full-text search over message text, kept consistent with the journal by the backend."""

    async def search(
        self,
        query: str,
        *,
        directory: str | None = None,
        session_id: str | None = None,
        role: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
        include_reverted: bool = False,
    ) -> list[SearchHit]:
        """Entries matching `query` (free text: its words are OR-ed, stop words dropped, stems matched),
        best first by BM25, within the filters: a session's `directory`, one session, a role (user,
        assistant, tool) and `since <= created_at < until`. Entries hidden by a revert are left out unless
        `include_reverted`. A query with nothing searchable in it returns []. A committed entry is
        searchable at once (backends that index in batches flush what is pending before searching)."""
        ...

    async def reverted_spans(self, session_id: str) -> list[RevertSpan]:
        """The spans that the session's reverts hide from its active history (see `reverts.hidden_spans`);
        read from the index, not by reading the history."""
        ...

    async def search_backlog(self, *, before: float | None = None) -> int:
        """Entries committed but not in the search index yet: a migrated file's older entries until they are
        backfilled, and on some backends the latest appends until the next search indexes them. With `before`
        (a time), only the entries made before it: after a search that began then, what it could not find
        (appends that came while it ran are not its backlog)."""
        ...

    def backfill_search(self, *, batch: int = 500) -> AsyncIterator[BackfillProgress]:
        """Index the backlog, `batch` entries per transaction (memory stays bounded by the batch), yielding
        progress after each. Safe to interrupt and to run again; appends go on meanwhile."""
        ...


@runtime_checkable
class Artifacts(Protocol):
    """Large payloads (the full text of a tool output that was cut in the transcript), content-addressed."""

    async def put_artifact(self, data: bytes, media_type: str = "text/plain") -> str:
        """Store a payload; returns its id (``art_`` + sha256). Storing the same bytes again is a no-op."""
        ...

    async def get_artifact(self, artifact_id: str) -> bytes:
        """The payload; raises `NotFound`."""
        ...

    async def list_artifacts(self, *, after: str | None = None, limit: int = 1000) -> list[ArtifactInfo]:
        """The artifacts whose id sorts after `after` (from the first when None), in id order, at most
        `limit`: how `tether migrate` finds every payload to copy."""
        ...


@runtime_checkable
class Leases(Protocol):
    """Which run holds a session now: one run per session, across processes (and, on a shared backend,
    machines). A lease lasts `ttl` seconds unless renewed; an expired lease may be taken over."""

    async def acquire_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl: float,
        pid: int | None = None,
        host: str | None = None,
        take_from: str | None = None,
    ) -> Lease:
        """Take the session's lease for `holder`: when it is free, expired, or already `holder`'s (a live one
        is then renewed and keeps its `since`; an expired one starts anew), or held by `take_from` (a holder
        the caller knows is dead: its process is gone). Held by another holder: `SessionBusy`, which names
        it. Raises `SessionNotFound`."""
        ...

    async def renew_lease(self, session_id: str, holder: str, *, ttl: float) -> Lease:
        """Extend `holder`'s live lease to `ttl` seconds from now. `LeaseLost` when it is not: it expired
        (whether or not another holder took it since), or it was released."""
        ...

    async def release_lease(self, session_id: str, holder: str) -> bool:
        """Give the lease up; False when `holder` did not hold it (nothing changes then)."""
        ...

    async def get_lease(self, session_id: str) -> Lease | None:
        """The live lease on the session, or None when it is free (an expired lease counts as free)."""
        ...

    async def request_lease(self, session_id: str, request: LeaseRequest) -> Lease | None:
        """Ask the holder of the session's live lease to stop (``cancel``) or to stop at its next step
        (``pause``): the request waits in the lease, which its holder reads as it renews. A cancel is not
        overwritten by a pause. None when nobody holds the session (nothing to ask)."""
        ...


@runtime_checkable
class Streams(Protocol):
    """The answer being streamed in each session, made durable as it comes (`StreamRecord`): one record per
    session, replaced in place at each write, never a journal entry. The journal stays append-only; what a
    killed run was streaming is journaled from here by whoever next takes the session
    (`tether.runtime.streaming`)."""

    async def save_stream(self, session_id: str, after_seq: int, message: Message) -> None:
        """Replace the session's record with `message`, streamed in the step after entry `after_seq`.
        Raises `SessionNotFound`, `InvalidInput` (text that is not valid Unicode, a negative seq)."""
        ...

    async def get_stream(self, session_id: str) -> StreamRecord | None:
        """The session's record, stale or not, or None. Raises `SessionNotFound`."""
        ...

    async def drop_stream(self, session_id: str) -> bool:
        """Delete the session's record; False when it had none."""
        ...


@runtime_checkable
class Shares(Protocol):
    """Read-only links to one session's transcript (`Share`). A backend keeps the sha256 of each link's token,
    never the token, and finds a link by that hash (an indexed equality lookup: nothing compares secrets
    byte by byte). Deleting a session deletes its shares, so a link to a deleted session never serves."""

    async def create_share(
        self, session_id: str, token_hash: bytes, *, expires_at: float | None = None, id: str | None = None
    ) -> Share:
        """Record a share of the session, found later by `token_hash` (32 bytes, the token's sha256; one
        already recorded raises `InvalidInput`). Raises `SessionNotFound`."""
        ...

    async def share_by_token(self, token_hash: bytes) -> Share | None:
        """The share whose token hashes to `token_hash`, live or not (the caller checks `Share.live`), or
        None."""
        ...

    async def list_shares(self, session_id: str | None = None) -> list[Share]:
        """The shares of one session (raises `SessionNotFound`) or of all, oldest first, revoked and expired
        ones too."""
        ...

    async def share_records(self, session_id: str) -> list[tuple[Share, bytes]]:
        """The session's shares, oldest first, each with its token hash: what a migration copies to another
        store (links made here keep opening there). Raises `SessionNotFound`."""
        ...

    async def restore_share(self, share: Share, token_hash: bytes) -> bool:
        """Record `share` exactly as given (id, times, revocation), found by `token_hash`: a share copied from
        another store. False, and nothing written, when a share with its id exists; `InvalidInput` when
        another share has this token hash. Raises `SessionNotFound`."""
        ...

    async def revoke_share(self, share_id: str) -> Share:
        """Revoke the share now; it never serves again. Revoking it again changes nothing (the first time
        stays). Raises `NotFound`."""
        ...


@runtime_checkable
class Audit(Protocol):
    """One append-only trail of who did what, apart from the sessions (deleting a session keeps its records):
    each record carries the hash of the one before (`tether.store.audit`). The backend appends a record
    itself for what it does to sessions and shares (``session.created``, ``.deleted``, ``.forked``,
    ``.imported``, ``.reverted``; ``share.created``, ``share.revoked``), in the same transaction; the runtime
    and the faces append the others."""

    async def append_audit(self, draft: AuditDraft) -> AuditRecord:
        """Append `draft` (made by `audit.draft`: checked and redacted) after the last record, reading the
        head and writing the record in one write transaction: writers in several processes keep one chain."""
        ...

    async def list_audit(
        self,
        *,
        after: int = 0,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        kind: str | None = None,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        """Records with seq > `after`, oldest first, within the filters: `since <= at < until`, one session,
        a kind (``session`` matches ``session.created`` and the others of that family)."""
        ...

    async def audit_head(self) -> tuple[int, str] | None:
        """The seq and hash of the last record appended, kept apart from the records (None: none ever was)."""
        ...

    async def prune_audit(self, before: float) -> int:
        """Remove the records made before `before` (a prefix of the trail) and append an ``audit.pruned``
        record naming the seq and hash the rest continues from, in one transaction. Returns how many went."""
        ...


@runtime_checkable
class SinkPositions(Protocol):
    """How far each event sink (`tether.runtime.sinks`) has delivered each session: the last seq whose events
    it wrote, kept in the store so that a restart resumes with no gap."""

    async def sink_positions(self, sink: str) -> dict[str, int]:
        """Session id -> the last seq `sink` delivered (sessions it never delivered are absent)."""
        ...

    async def save_sink_positions(self, sink: str, positions: dict[str, int]) -> None:
        """Record these positions of `sink`, in one transaction (a position never moves back)."""
        ...


@runtime_checkable
class EventNumbers(Protocol):
    """Live event numbers that no process gives twice (`tether.events`): a run reserves a block of them
    before it gives any out, so a process that dies leaves its numbers reserved, and the next holder of the
    session numbers after them. One durable write per block (hi/lo allocation)."""

    async def reserve_numbers(self, session_id: str, floor: int, count: int) -> int:
        """Reserve `count` numbers for the session's live events, all above `floor` and above every number
        reserved for it before (by any process), durably before it returns; the first of them (the block is
        that and the `count - 1` after it). A deleted session's reservations go with it."""
        ...


@runtime_checkable
class SessionChanges(Protocol):
    """Which sessions changed since a position: the durable cursor that what is derived from the journal
    outside the append path (recall's turn keys, embeddings and facts) follows, so that bringing it up to
    date costs what changed, never a listing of every session. Every write to a session's row (created,
    appended to, updated, imported, forked into, replaced) and its deletion moves it past every position
    handed out before the write committed."""

    async def changed_sessions(self, after: int = 0, *, limit: int = 1000) -> ChangedSessions:
        """The sessions written, and the ids of those deleted, since position `after` (0: since the start),
        oldest change first, with the position to pass next time. A backend whose positions are not dense
        (PostgreSQL's are transaction ids) may return more than `limit`, and a session more than once across
        calls (what a reader does with a session is idempotent); it never leaves out a commit."""
        ...


@runtime_checkable
class Changes(Protocol):
    """The store's global change feed: what happened to its sessions (created, updated, deleted, where
    their runs stand, approvals waiting), one record per change, numbered by a sequence that is never
    reused, so that a follower who reconnects (to this process or another, before or after a restart)
    replays what it missed from `changes_after` or learns that it cannot."""

    async def append_change(
        self, kind: str, *, session_id: str | None = None, data: dict[str, Any] | None = None
    ) -> Change:
        """Record one change, durably; returns it with its id (greater than every id given before)."""
        ...

    async def changes_after(self, after: int, limit: int = 500) -> list[Change]:
        """The changes whose id is above `after`, oldest first, at most `limit`."""
        ...

    async def last_change_id(self) -> int:
        """The id of the last change recorded (0: none ever was)."""
        ...


@runtime_checkable
class PromptQueue(Protocol):
    """Prompts accepted to run after the session's run in progress, kept durably until a run took them: a
    process that dies with prompts queued (or that another process of the service queued for it) leaves them
    to whoever runs the session next. Taking one is the runtime's (`runtime/queued.py`): its run journals the
    prompt with the prompt's id, then the prompt is dropped here; a run that finds it already journaled (its
    taker died in between) drops it without running it again."""

    async def enqueue_prompt(self, session_id: str, body: bytes) -> QueuedPrompt:
        """Queue `body` at the end of the session's queue, committed before this returns (`SessionNotFound`
        when there is no such session); returns it with its id and the session's last seq now."""
        ...

    async def queued_prompts(self, session_id: str) -> list[QueuedPrompt]:
        """The session's queued prompts, oldest first."""
        ...

    async def queued_sessions(self) -> list[str]:
        """The sessions with at least one queued prompt (an index, never a scan of every session)."""
        ...

    async def drop_prompt(self, session_id: str, prompt_id: int) -> bool:
        """Remove one queued prompt; False when it was not there (taken already). Deleting a session drops
        its queue."""
        ...


@runtime_checkable
class Store(
    Journal,
    SearchIndex,
    Artifacts,
    Leases,
    Streams,
    Shares,
    Audit,
    SinkPositions,
    EventNumbers,
    Changes,
    SessionChanges,
    PromptQueue,
    Protocol,
):
    """What every backend provides: the twelve roles, its durability, and closing."""

    durability: Durability

    async def close(self) -> None: ...

    async def __aenter__(self) -> Store:
        """`async with open_store() as store:` closes the store on the way out."""
        ...

    async def __aexit__(self, *exc: object) -> None: ...


# Two roles together, for callers that need both (a caller asks for the roles it uses, not the whole `Store`).


class JournalLeases(Journal, Leases, Protocol):
    """What reads and writes sessions under their lease (archiving a session: `runtime/archive.py`)."""


class JournalSearchIndex(Journal, SearchIndex, Protocol):
    """What reads sessions and searches them or their revert spans (search, the HTML transcript)."""


class JournalShares(Journal, Shares, Protocol):
    """What opens a share link: the share, then its session (`runtime/sharing.py`)."""


class JournalSinkPositions(Journal, SinkPositions, Protocol):
    """What compares the journal with how far each event sink delivered it (`runtime/sinks.lag`)."""
