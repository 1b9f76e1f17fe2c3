"""The `Store` protocol: a durable journal of sessions and their entries, the listing index, artifacts and
run leases. Backends (`SqliteStore`, `MemoryStore`, later PostgreSQL) implement it and pass one
conformance suite; logic that only needs the protocol (the active history) lives here once."""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

from ..errors import CorruptEntry, InvalidInput
from ..ids import check_id
from ..messages import Entry, EntryBody, Message, Revert, TextPart, encode_json

T = TypeVar("T")
SessionState = Literal["active", "paused"]
Durability = Literal["normal", "full"]
log = logging.getLogger("tether.store")

TITLE_MAX = 47


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


class Page(msgspec.Struct, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


UPDATABLE_FIELDS = ("title", "directory", "agent", "model", "state", "system_prompt", "metadata")


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


@runtime_checkable
class Store(Protocol):
    """What every backend provides. All methods are coroutines except `iter_entries` (an async iterator)."""

    durability: Durability

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
        """Delete the session, its entries and, recursively, its child sessions (those whose `parent_id` is
        it: sub-agent runs belong to their parent). Forks are independent copies and are kept. Returns the
        ids deleted."""
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
        self, session_id: str, bodies: Sequence[EntryBody], *, expect_seq: int | None = None
    ) -> list[Entry]:
        """Append atomically, giving each body the next dense seq. With `expect_seq` (the seq the first new
        entry must get) a writer that lost a race gets `SeqConflict` and nothing is written."""
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
        `include_reverted`. A query with nothing searchable in it returns []. The index is maintained in
        the append transaction, so a committed entry is searchable at once."""
        ...

    async def reverted_spans(self, session_id: str) -> list[tuple[int, int]]:
        """The seq ranges (lo, hi] that the session's reverts hide from its active history (see
        `hidden_spans`); read from the index, not by reading the history."""
        ...

    async def search_backlog(self) -> int:
        """Entries committed but not in the search index yet: a migrated file's older entries until they are
        backfilled, and on some backends the latest appends until the next search indexes them."""
        ...

    def backfill_search(self, *, batch: int = 500) -> AsyncIterator[BackfillProgress]:
        """Index the backlog, `batch` entries per transaction (memory stays bounded by the batch), yielding
        progress after each. Safe to interrupt and to run again; appends go on meanwhile."""
        ...

    async def put_artifact(self, data: bytes, media_type: str = "text/plain") -> str:
        """Store a large payload, content-addressed; returns its id (``art_`` + sha256)."""
        ...

    async def get_artifact(self, artifact_id: str) -> bytes: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Store:
        """`async with open_store() as store:` closes the store on the way out."""
        ...

    async def __aexit__(self, *exc: object) -> None: ...


# --- helpers every backend shares ---------------------------------------------------------------------


def default_title(text: str) -> str | None:
    """The first user message cut to 47 characters plus '...' (whitespace folded)."""
    # Fold only a prefix: on every append of a long message, folding all of it would be wasted work.
    window = 4 * TITLE_MAX
    folded = " ".join(text[:window].split())
    while len(folded) <= TITLE_MAX and window < len(text):
        window *= 4
        folded = " ".join(text[:window].split())
    if not folded:
        return None
    if len(folded) <= TITLE_MAX:
        return folded  # the loop above folded the whole text
    return folded[:TITLE_MAX] + "..."


def title_candidate(bodies: Sequence[EntryBody]) -> str | None:
    for body in bodies:
        if type(body) is Message and body.role == "user":
            for part in body.parts:
                if type(part) is TextPart:
                    title = default_title(part.text)
                    if title:
                        return title
    return None


PICO = Decimal(10) ** 12
MAX_PICO = 2**63 - 1


def decimal_to_pico(cost: Decimal) -> int:
    """Costs are counted in integer picodollars (1e-12 USD), so counters add up exactly inside SQL and
    every backend rounds the same way."""
    pico = int((cost * PICO).to_integral_value(rounding=ROUND_HALF_EVEN))
    if abs(pico) > MAX_PICO:
        raise InvalidInput(f"a cost of ${cost} is beyond what a session can count (about $9.2 million)")
    return pico


def pico_to_decimal(value: int) -> Decimal:
    """Back to dollars, without trailing zeros and without an exponent ($100, not $1E+2)."""
    if not value:
        return Decimal(0)
    dollars = Decimal(value).scaleb(-12)
    return dollars.quantize(Decimal(1)) if dollars == dollars.to_integral_value() else dollars.normalize()


def check_text(value: object, what: str) -> None:
    """Refuse text that cannot be stored as UTF-8 (lone surrogates), with a typed error."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"{what} holds a character that is not valid Unicode (a lone surrogate)") from None


def check_session_fields(fields: dict[str, Any]) -> None:
    """Refuse session fields that cannot be stored: text that is not valid Unicode, metadata that is not JSON."""
    for name, value in fields.items():
        if name == "metadata" and value is not None and value is not UNSET:
            try:
                encode_json(value)
            except (TypeError, ValueError) as e:
                raise InvalidInput(f"metadata cannot be stored as JSON: {e}") from None
        else:
            check_text(value, name)


def artifact_id(data: bytes) -> str:
    return "art_" + hashlib.sha256(data).hexdigest()


def check_artifact_id(value: str) -> str:
    if not (isinstance(value, str) and value.startswith("art_") and len(value) == 68):
        raise InvalidInput(f"invalid artifact id {value!r}")
    # not int(x, 16): it lets spaces, "_" and "0x" through, and artifact ids end up in paths and URLs
    if not set(value[4:]) <= set("0123456789abcdef"):
        raise InvalidInput(f"invalid artifact id {value!r}")
    return value


def check_limit(limit: int) -> int:
    if not isinstance(limit, int) or limit < 1 or limit > 10_000:
        raise InvalidInput(f"limit must be an integer from 1 to 10000, not {limit!r}")
    return limit


def validate_bodies(bodies: Sequence[EntryBody], first_seq: int) -> None:
    if not bodies:
        raise InvalidInput("append needs at least one entry")
    for i, body in enumerate(bodies):
        if type(body) is Revert:
            seq = first_seq + i
            if not 0 <= body.to_seq < seq:
                raise InvalidInput(f"a revert at seq {seq} must point before itself, not to {body.to_seq}")


def validate_import(info: SessionInfo, entries: Sequence[Entry]) -> None:
    """What `import_session` checks before it writes: a known state, dense seqs from 1, reverts that point back."""
    if info.state not in ("active", "paused"):
        raise InvalidInput(f"state must be 'active' or 'paused', not {info.state!r}")
    for i, entry in enumerate(entries, 1):
        if entry.seq != i:
            raise InvalidInput(f"imported entries must have seqs 1..n in order: entry {i} has seq {entry.seq}")
    if entries:
        validate_bodies([e.body for e in entries], 1)


def encode_cursor(updated_at: float, session_id: str) -> str:
    raw = f"{updated_at!r}|{session_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, sid = raw.split("|", 1)
        return float(at), sid
    except Exception:
        raise InvalidInput(f"invalid cursor {cursor!r}") from None


def message_counters(bodies: Sequence[EntryBody]) -> tuple[int, int, int, Decimal]:
    """(messages, input tokens, output tokens, cost) that appending `bodies` adds to a session."""
    messages = tokens_in = tokens_out = 0
    cost = Decimal(0)
    for body in bodies:
        if isinstance(body, Message):
            messages += 1
            if body.usage is not None:
                tokens_in += body.usage.input_tokens
                tokens_out += body.usage.output_tokens
                if body.usage.cost is not None:
                    cost += body.usage.cost
    return messages, tokens_in, tokens_out, cost


CorruptHandler = Callable[[CorruptEntry], None]


def log_corrupt(error: CorruptEntry) -> None:
    log.warning("skipping %s", error)


# --- the active history -------------------------------------------------------------------------------


async def active_tail(store: Store, session_id: str, n: int, *, chunk: int | None = None) -> list[Entry]:
    """The last `n` entries of the active history: entries hidden by a revert are skipped, and the revert
    markers themselves are left out. Reads backwards in chunks, so the cost is bounded by the tail and the
    reverted spans it jumps over, not by the history."""
    info = await store.get_session(session_id)
    hi = info.entry_count  # the highest seq that may still be visible
    out: list[Entry] = []
    step = chunk or max(n + 8, 64)
    while hi >= 1 and len(out) < n:
        lo = max(1, hi - step + 1)
        for entry in reversed(await store.read(session_id, lo, hi)):
            if entry.seq > hi:
                continue  # inside a span that a later revert hid
            if isinstance(entry.body, Revert):
                hi = entry.body.to_seq
                continue
            out.append(entry)
            hi = entry.seq - 1
            if len(out) >= n:
                break
        else:
            hi = min(hi, lo - 1)
    out.reverse()
    return out


def hidden_spans(reverts: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The seq ranges (lo, hi], inclusive of hi, that a session's reverts hide from its active history,
    given each revert as (its seq, its to_seq). A revert that a later revert hid has no effect, exactly
    as `active_tail` reads the journal; the revert markers themselves fall inside the spans."""
    spans: list[tuple[int, int]] = []
    hi = 2**62
    for seq, to_seq in sorted(reverts, reverse=True):
        if seq > hi:
            continue  # inside a span that a later revert hid
        spans.append((to_seq, seq))
        hi = to_seq
    return spans


def is_hidden(seq: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(lo < seq <= hi for lo, hi in spans)


def check_search_filters(role: str | None, limit: int, session_id: str | None) -> None:
    """What every backend checks before it searches."""
    check_limit(limit)
    if role is not None and role not in SEARCH_ROLES:
        raise InvalidInput(f"role must be one of {', '.join(SEARCH_ROLES)}, not {role!r}")
    if session_id is not None:
        check_id(session_id, "session id")


async def active_entries(store: Store, session_id: str) -> list[Entry]:
    """The whole active history in order (reverted spans and revert markers left out)."""
    info = await store.get_session(session_id)
    return await active_tail(store, session_id, max(info.entry_count, 1))
