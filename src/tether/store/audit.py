"""The audit trail's records and their chain, for every backend: what a record is made of (`AuditDraft`, then
`AuditRecord` once a store gave it its place), the canonical bytes its hash covers, the check that walks a
trail (`verify`), and who is acting now (`ACTOR`, set by the faces: the CLI's user, the server's token).

Each record carries the sha256 of the one before it (`prev`; the first one `GENESIS`), and its own `hash`,
the sha256 of its canonical bytes (its fields and `prev`, as sorted-key JSON). A backend appends by reading
the last record and inserting the next in one write transaction, so writers in several processes keep one
chain, and keeps the head (the last seq and hash) beside the rows, so that removing the last records is seen
too. Pruning (`PRUNED`) removes a prefix and appends a record naming the seq and hash the rest continues
from: what remains still verifies, from there on."""

from __future__ import annotations

import contextvars
import functools
import hashlib
import os
import re
import time
from collections.abc import AsyncIterable, Sequence
from typing import Any

import msgspec

from ..errors import InvalidInput
from ..ids import check_id
from ..messages import EntryBody, Revert
from ..redaction import Redactor, SecretPolicy
from .records import SessionInfo, Share

GENESIS = "0" * 64
"""The `prev` of the first record of a trail."""
PRUNED = "audit.pruned"
"""The kind of the record a prune appends: ``{"through": SEQ, "hash": HASH, "count": N, "before": TIME}``."""
MAX_DETAIL_BYTES = 16_384
"""The most a record's detail may take as JSON; longer strings in it are cut (see `bounded`)."""
KIND_RE = re.compile(r"[a-z][a-z_]*(\.[a-z_]+){0,3}\Z")

ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("tether_audit_actor", default=None)
"""Who acts in this context: ``token``/``cookie``/``share``/``open`` with the client's address on the server,
``cli user@host`` in a command. A record made without an actor of its own takes this one (or `local_actor`)."""


class AuditDraft(msgspec.Struct, kw_only=True, frozen=True):
    """A record before a store gave it its place in the trail."""

    kind: str
    at: float
    session_id: str | None = None
    actor: str | None = None
    outcome: str | None = None
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


class AuditRecord(msgspec.Struct, kw_only=True, frozen=True):
    """One record of the audit trail, at its place (`seq`, from 1, dense until a prune) with its chain."""

    seq: int
    at: float
    kind: str
    session_id: str | None
    actor: str | None
    outcome: str | None
    detail: dict[str, Any]
    prev: str
    hash: str


class AuditProblem(msgspec.Struct, kw_only=True, frozen=True):
    """What `verify` found wrong, at a position (the seq the record has or should have)."""

    seq: int
    problem: str


class AuditReport(msgspec.Struct, kw_only=True, frozen=True):
    """The result of `verify`: records checked, the first and last seq seen, and the problems (none: intact)."""

    records: int
    first: int | None
    last: int | None
    problems: list[AuditProblem]

    @property
    def ok(self) -> bool:
        return not self.problems


@functools.lru_cache(maxsize=1)
def audit_where(
    after: int, since: float | None, until: float | None, session_id: str | None, kind: str | None, *, mark: str
) -> tuple[str, list[Any]]:
    """The WHERE clause of an audit listing and its parameters, in a backend's placeholder `mark` (``?`` or
    ``%s``): records after seq `after`, at or after `since`, before `until`, of `session_id`, of `kind` or
    its subkinds (``session`` is also ``session.created``)."""
    where: list[str] = [f"seq > {mark}"]
    params: list[Any] = [after]
    if since is not None:
        where.append(f"at >= {mark}")
        params.append(since)
    if until is not None:
        where.append(f"at < {mark}")
        params.append(until)
    if session_id is not None:
        where.append(f"session_id = {mark}")
        params.append(session_id)
    if kind is not None:
        where.append(f"(kind = {mark} OR substr(kind, 1, {mark}) = {mark})")
        params += [kind, len(kind) + 1, kind + "."]
    return " AND ".join(where), params


def local_actor() -> str:
    """The user of this process, as the CLI's records name them."""
    try:
        import getpass

        user = getpass.getuser()
    except (ImportError, KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"cli {user}@{os.uname().nodename if hasattr(os, 'uname') else 'localhost'}"


@functools.lru_cache(maxsize=1)
def _environment_redactor() -> Redactor:
    return SecretPolicy().redactor(os.environ)


def draft(
    kind: str,
    *,
    at: float,
    session_id: str | None = None,
    actor: str | None = None,
    outcome: str | None = None,
    detail: dict[str, Any] | None = None,
    redactor: Redactor | None = None,
) -> AuditDraft:
    """A checked draft: a kind such as ``tool.call`` or ``session.created``, the actor of the context when none
    is given, the detail made plain JSON, cut to `MAX_DETAIL_BYTES`, and with every known secret value
    (`redactor`, and those of this process's environment) replaced."""
    if not isinstance(kind, str) or not KIND_RE.match(kind):
        raise InvalidInput(f"an audit kind is lowercase words joined by dots (tool.call), not {kind!r}")
    if session_id is not None:
        check_id(session_id, "session id")
    actor = actor if actor is not None else (ACTOR.get() or local_actor())
    plain = _plain(detail or {})
    if not isinstance(plain, dict):
        raise InvalidInput("an audit record's detail is a mapping")
    for r in (redactor, _environment_redactor()):
        if r:
            plain = r.value(plain)
            actor = r.text(actor)
            outcome = r.text(outcome) if outcome is not None else None
    return AuditDraft(
        kind=kind, at=float(at), session_id=session_id, actor=actor, outcome=outcome, detail=bounded(plain)
    )


def _plain(value: Any) -> Any:
    """`value` as JSON data: structs and tuples converted, anything else as its text."""
    return _decoder.decode(_encoder.encode(value))


def _text(value: Any) -> Any:
    return str(value)


_encoder = msgspec.json.Encoder(enc_hook=_text, order="sorted")
_decoder = msgspec.json.Decoder()


def bounded(detail: dict[str, Any], limit: int = MAX_DETAIL_BYTES) -> dict[str, Any]:
    """`detail` whose JSON fits `limit` bytes: its longest strings cut (saying so) until it does."""
    size = len(canonical_json(detail))
    if size <= limit:
        return detail
    cut = 4096
    while size > limit and cut >= 16:
        detail = _cut_strings(detail, cut)
        size = len(canonical_json(detail))
        cut //= 2
    if size > limit:
        return {"truncated": True, "bytes": size}
    return detail


def _cut_strings(value: Any, cut: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= cut else value[:cut] + f"... [{len(value) - cut} more characters]"
    if isinstance(value, list):
        return [_cut_strings(v, cut) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, cut) for k, v in value.items()}
    return value


def canonical_json(value: Any) -> bytes:
    """The one encoding hashes are made of: compact JSON, keys sorted, UTF-8, floats in their shortest form."""
    return _encoder.encode(value)


def record_bytes(seq: int, prev: str, d: AuditDraft) -> bytes:
    """What a record's hash covers: every field but the hash itself, as canonical JSON."""
    return canonical_json([seq, d.at, d.kind, d.session_id, d.actor, d.outcome, d.detail, prev])


def seal(seq: int, prev: str, d: AuditDraft) -> AuditRecord:
    """The record `d` becomes at `seq`, after the record whose hash is `prev`."""
    digest = hashlib.sha256(record_bytes(seq, prev, d)).hexdigest()
    return AuditRecord(
        seq=seq,
        at=d.at,
        kind=d.kind,
        session_id=d.session_id,
        actor=d.actor,
        outcome=d.outcome,
        detail=d.detail,
        prev=prev,
        hash=digest,
    )


def recomputed(record: AuditRecord) -> str:
    as_draft = AuditDraft(
        kind=record.kind,
        at=record.at,
        session_id=record.session_id,
        actor=record.actor,
        outcome=record.outcome,
        detail=record.detail,
    )
    return hashlib.sha256(record_bytes(record.seq, record.prev, as_draft)).hexdigest()


def pruned_draft(through: int, last_hash: str, count: int, before: float, at: float) -> AuditDraft:
    detail = {"through": through, "hash": last_hash, "count": count, "before": before}
    return AuditDraft(kind=PRUNED, at=at, actor="tether (retention)", detail=detail)


def kind_matches(kind: str, wanted: str) -> bool:
    """``--kind session`` finds ``session.created`` and the others; ``--kind session.created`` only it."""
    return kind == wanted or kind.startswith(wanted + ".")


async def verify(records: AsyncIterable[AuditRecord], head: tuple[int, str] | None) -> AuditReport:
    """Walk a trail in order and say what does not hold: a record whose hash is not its content's (edited), one
    whose `prev` is not the hash of the one before (edited, or one removed and the seqs renumbered), a gap
    in the seqs (removed), a start that no prune record accounts for, and a last record that is not the head
    the store kept (removed at the end). Each problem names its position."""
    problems: list[AuditProblem] = []
    count = 0
    first: AuditRecord | None = None
    previous: AuditRecord | None = None
    anchor: tuple[int, str] | None = None  # (through, hash) of the latest prune record seen
    async for record in records:
        count += 1
        if first is None:
            first = record
        if recomputed(record) != record.hash:
            problems.append(AuditProblem(seq=record.seq, problem="changed: its hash is not that of its content"))
        if previous is not None:
            if record.seq != previous.seq + 1:
                gap = f"{previous.seq + 1}" + (f"-{record.seq - 1}" if record.seq - 1 > previous.seq + 1 else "")
                problems.append(AuditProblem(seq=previous.seq + 1, problem=f"missing: record {gap} was removed"))
            elif record.prev != previous.hash:
                problems.append(
                    AuditProblem(seq=previous.seq, problem="changed: the record after it does not continue from it")
                )
        if record.kind == PRUNED:
            through, last_hash = record.detail.get("through"), record.detail.get("hash")
            if isinstance(through, int) and isinstance(last_hash, str):
                anchor = (through, last_hash)
        previous = record
    if first is None or previous is None:
        if head is not None and head[0] > 0:
            problems.append(AuditProblem(seq=1, problem=f"missing: records 1-{head[0]} were removed"))
        return AuditReport(records=0, first=None, last=None, problems=problems)
    if first.seq == 1:
        if first.prev != GENESIS:
            problems.append(AuditProblem(seq=1, problem="changed: the first record does not start the chain"))
    elif anchor != (first.seq - 1, first.prev):
        gap = "1" if first.seq == 2 else f"1-{first.seq - 1}"
        problems.append(
            AuditProblem(seq=first.seq - 1, problem=f"missing: record {gap} was removed, and no prune accounts for it")
        )
    if head is None:
        problems.append(AuditProblem(seq=previous.seq, problem="the trail's head is missing (it was removed)"))
    elif head[0] > previous.seq:
        gap = f"{previous.seq + 1}" + (f"-{head[0]}" if head[0] > previous.seq + 1 else "")
        problems.append(AuditProblem(seq=previous.seq + 1, problem=f"missing: record {gap} was removed from the end"))
    elif head != (previous.seq, previous.hash):
        problems.append(
            AuditProblem(seq=previous.seq, problem="changed: the last record is not the one the head names")
        )
    return AuditReport(records=count, first=first.seq, last=previous.seq, problems=problems)


# --- the records a backend makes itself, in the transaction of what it records ---------------------------------


def created(
    session_id: str,
    at: float,
    directory: str | None,
    parent_id: str | None,
    title: str | None,
    metadata: dict[str, Any] | None,
) -> AuditDraft:
    detail: dict[str, Any] = {"directory": directory}
    if parent_id is not None:
        detail["parent_id"] = parent_id
    if title:
        detail["title"] = title
    for key in ("task", "source", "imported_from"):
        if metadata and key in metadata:
            detail[key] = metadata[key]
    return draft("session.created", at=at, session_id=session_id, detail=detail)


def deleted(session_id: str, ids: list[str]) -> AuditDraft:
    return draft("session.deleted", at=time.time(), session_id=session_id, detail={"deleted": ids})


def forked(session_id: str, source: str, at_seq: int, at: float) -> AuditDraft:
    return draft("session.forked", at=at, session_id=session_id, detail={"from": source, "at": at_seq})


def imported(info: SessionInfo, entries: int) -> AuditDraft:
    detail = {"title": info.title, "directory": info.directory, "entries": entries}
    return draft("session.imported", at=time.time(), session_id=info.id, detail=detail)


def reverted(session_id: str, bodies: Sequence[EntryBody], first: int, at: float) -> list[AuditDraft]:
    return [
        draft(
            "session.reverted",
            at=at,
            session_id=session_id,
            detail={"seq": first + i, "to": body.to_seq, "reason": body.reason},
        )
        for i, body in enumerate(bodies)
        if isinstance(body, Revert)
    ]


def share_made(share: Share) -> AuditDraft:
    detail = {"share": share.id, "expires_at": share.expires_at}
    return draft("share.created", at=share.created_at, session_id=share.session_id, detail=detail)


def share_revoked(share: Share) -> AuditDraft:
    return draft(
        "share.revoked", at=share.revoked_at or time.time(), session_id=share.session_id, detail={"share": share.id}
    )
