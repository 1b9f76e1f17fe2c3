"""The checks every backend runs before it writes or searches, so that all of them refuse the same input
with the same typed error: ids, session fields, states, entry bodies, imports, limits, search filters,
artifact ids and lease terms. Pure functions; no backend copies them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from ..errors import InvalidInput
from ..ids import check_id
from ..messages import Entry, EntryBody, Message, Revert, encode_body, encode_json
from .audit import KIND_RE
from .records import LEASE_REQUESTS, SEARCH_ROLES, SESSION_STATES, UNSET, UPDATABLE_FIELDS, SessionInfo

MAX_RESERVATION = 1_000_000
"""The most event numbers one `reserve_numbers` call may reserve."""
CHANGE_KIND_RE = re.compile(r"^[a-z][a-z0-9]*(?:[._][a-z0-9]+)*$")

MAX_LEASE_TTL = 24 * 3600.0
"""The longest lease one call may take: a holder that wants more renews it."""


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


def check_state(state: object) -> None:
    if state not in SESSION_STATES:
        raise InvalidInput(f"state must be 'active' or 'paused', not {state!r}")


def check_new_session(
    session_id: str | None, parent_id: str | None, state: object, fields: dict[str, Any]
) -> str | None:
    """What `create_session` checks before it writes; returns the id, checked (None: the backend makes one)."""
    sid = check_id(session_id, "session id") if session_id is not None else None
    check_session_fields(fields)
    if parent_id is not None:
        check_id(parent_id, "parent id")
    check_state(state)
    return sid


def check_update(session_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """What `update_session` checks: the fields given (UNSET dropped), each updatable and storable."""
    check_id(session_id, "session id")
    changes = {k: v for k, v in fields.items() if v is not UNSET}
    check_session_fields(changes)
    bad = set(changes) - set(UPDATABLE_FIELDS)
    if bad:
        raise InvalidInput(f"cannot update {', '.join(sorted(bad))}")
    if "state" in changes:
        check_state(changes["state"])
    return changes


def validate_bodies(bodies: Sequence[EntryBody], first_seq: int) -> None:
    """What an append checks of its bodies once it knows where they go: at least one, and reverts that
    point before themselves."""
    if not bodies:
        raise InvalidInput("append needs at least one entry")
    for i, body in enumerate(bodies):
        if type(body) is Revert:
            seq = first_seq + i
            if not 0 <= body.to_seq < seq:
                raise InvalidInput(f"a revert at seq {seq} must point before itself, not to {body.to_seq}")


def check_created_at(created_at: Sequence[float] | None, n: int) -> list[float] | None:
    """The times an append was given for its bodies: one finite number per body, or None (commit time)."""
    if created_at is None:
        return None
    times = list(created_at)
    if len(times) != n:
        raise InvalidInput(f"append got {len(times)} created_at times for {n} entries")
    for t in times:
        if isinstance(t, bool) or not isinstance(t, int | float) or t != t or t in (float("inf"), float("-inf")):
            raise InvalidInput(f"created_at must be a finite number of seconds, not {t!r}")
    return [float(t) for t in times]


def validate_import(info: SessionInfo, entries: Sequence[Entry]) -> str:
    """What `import_session` checks before it writes: ids, a known state, dense seqs from 1, reverts that
    point back. Returns the session id."""
    sid = check_id(info.id, "session id")
    if info.parent_id is not None:
        check_id(info.parent_id, "parent id")
    check_state(info.state)
    for i, entry in enumerate(entries, 1):
        if entry.seq != i:
            raise InvalidInput(f"imported entries must have seqs 1..n in order: entry {i} has seq {entry.seq}")
    if entries:
        validate_bodies([e.body for e in entries], 1)
    return sid


def check_limit(limit: int) -> int:
    if not isinstance(limit, int) or limit < 1 or limit > 10_000:
        raise InvalidInput(f"limit must be an integer from 1 to 10000, not {limit!r}")
    return limit


def check_reservation(session_id: str, floor: int, count: int) -> None:
    """What every backend checks before it reserves event numbers (`EventNumbers.reserve_numbers`)."""
    check_id(session_id, "session id")
    if type(floor) is not int or floor < 0:
        raise InvalidInput(f"floor must be an event number (0 or more), not {floor!r}")
    if type(count) is not int or not 1 <= count <= MAX_RESERVATION:
        raise InvalidInput(f"count must be an integer from 1 to {MAX_RESERVATION}, not {count!r}")


def check_change(kind: str, session_id: str | None, data: object) -> bytes:
    """What every backend checks before it appends a change (`Changes.append_change`): its `data` as JSON."""
    if not (isinstance(kind, str) and CHANGE_KIND_RE.match(kind)):
        raise InvalidInput(f"a change kind is a lowercase word or words joined by '_' or '.', not {kind!r}")
    if session_id is not None:
        check_id(session_id, "session id")
    if not isinstance(data, dict):
        raise InvalidInput(f"a change's data is a JSON object, not {type(data).__name__}")
    try:
        return encode_json(data)
    except (TypeError, ValueError, msgspec.MsgspecError) as exc:
        raise InvalidInput(f"a change's data must be JSON: {exc}") from None


def check_changes_after(after: int, limit: int) -> None:
    """What every backend checks before it lists changes."""
    check_limit(limit)
    if type(after) is not int or after < 0:
        raise InvalidInput(f"after must be a change id (0 or more), not {after!r}")


def check_audit_filters(after: int, session_id: str | None, kind: str | None, limit: int) -> None:
    """What every backend checks before it lists the audit trail."""
    check_limit(limit)
    if kind is not None and not (isinstance(kind, str) and KIND_RE.match(kind)):
        raise InvalidInput(
            f"an audit kind is lowercase words joined by dots (tool.call, or a family: tool), not {kind!r}"
        )
    if not isinstance(after, int) or after < 0:
        raise InvalidInput(f"after must be a seq (0 or more), not {after!r}")
    if session_id is not None:
        check_id(session_id, "session id")


def check_search_filters(role: str | None, limit: int, session_id: str | None) -> None:
    """What every backend checks before it searches."""
    check_limit(limit)
    if role is not None and role not in SEARCH_ROLES:
        raise InvalidInput(f"role must be one of {', '.join(SEARCH_ROLES)}, not {role!r}")
    if session_id is not None:
        check_id(session_id, "session id")


def check_artifact_id(value: str) -> str:
    if not (isinstance(value, str) and value.startswith("art_") and len(value) == 68):
        raise InvalidInput(f"invalid artifact id {value!r}")
    # not int(x, 16): it lets spaces, "_" and "0x" through, and artifact ids end up in paths and URLs
    if not set(value[4:]) <= set("0123456789abcdef"):
        raise InvalidInput(f"invalid artifact id {value!r}")
    return value


def check_lease(session_id: str, holder: str, ttl: float | None = None) -> None:
    """A lease names a session and a holder (non-empty text), and lasts a positive time up to a day."""
    check_id(session_id, "session id")
    if not isinstance(holder, str) or not holder.strip() or len(holder) > 200:
        raise InvalidInput(f"a lease holder is a non-empty name of up to 200 characters, not {holder!r}")
    check_text(holder, "lease holder")
    if ttl is not None and not (isinstance(ttl, int | float) and 0 < ttl <= MAX_LEASE_TTL):
        raise InvalidInput(f"a lease lasts more than 0 and at most {MAX_LEASE_TTL:.0f} seconds, not {ttl!r}")


def check_lease_request(session_id: str, request: object) -> None:
    check_id(session_id, "session id")
    if request not in LEASE_REQUESTS:
        raise InvalidInput(f"a lease request is one of {', '.join(LEASE_REQUESTS)}, not {request!r}")


SHARE_HASH_BYTES = 32
"""A share's token is stored as its sha256: 32 bytes."""


def check_share(session_id: str, token_hash: object, expires_at: object, share_id: str | None) -> None:
    """What `create_share` checks: the ids, a 32-byte token hash, and an expiry that is a finite time."""
    check_id(session_id, "session id")
    if share_id is not None:
        check_id(share_id, "share id")
    check_token_hash(token_hash)
    if expires_at is not None and (
        not isinstance(expires_at, (int, float)) or isinstance(expires_at, bool) or not 0 < expires_at < 1e12
    ):
        raise InvalidInput(f"a share's expiry must be a time in seconds since the epoch, not {expires_at!r}")


def check_token_hash(token_hash: object) -> None:
    if not isinstance(token_hash, bytes) or len(token_hash) != SHARE_HASH_BYTES:
        raise InvalidInput("a share is stored by the sha256 of its token: 32 bytes")


def check_stream(session_id: str, after_seq: int, message: Message) -> bytes:
    """A streamed answer's record: a session, a seq at or after 0, an assistant message that encodes (its
    texts valid Unicode). Returns the message's JSON."""
    check_id(session_id, "session id")
    if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
        raise InvalidInput(f"a streamed answer follows an entry seq of 0 or more, not {after_seq!r}")
    if not isinstance(message, Message) or message.role != "assistant":
        raise InvalidInput("a streamed answer is an assistant message")
    return encode_body(message)
