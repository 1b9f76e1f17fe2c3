"""The runtime's side of the audit trail (the store keeps it: `tether.store.audit`): the records a run, a
server and the configuration make, each one call from where it happens, redacted as the journal is.

`record` appends one now (a failure to record is logged, never raised into a run: the trail reports what
happened, it does not decide it). `note` is for synchronous code with no store at hand (accepting a
workspace's configuration): the record waits in this process and is written, in order, before the next one
`record` writes, or by `flush`. `retain` applies ``[audit] keep_days``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ..errors import TetherError
from ..messages import ToolCallPart, ToolResultPart
from ..redaction import Redactor
from ..store.audit import AuditDraft, AuditRecord, draft
from ..store.protocols import Audit

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("tether.audit")

KINDS: dict[str, str] = {
    "tool.call": "a tool call: its decision and who made it, its outcome and duration",
    "approval.requested": "a call that asked a person",
    "approval.answered": "the answer (who, yes or no, how far it reaches)",
    "session.created": "a session made (a run, a server, an importer)",
    "session.deleted": "a session and its sub-agents deleted",
    "session.forked": "a fork made",
    "session.imported": "a session imported whole (a tether export, a backup)",
    "session.exported": "a session written out (a file, a download)",
    "session.reverted": "a revert journaled",
    "session.archived": "a session moved to object storage (where, its checksum)",
    "session.restored": "an archived session brought back",
    "share.created": "a share link made",
    "share.opened": "a share link opened",
    "share.revoked": "a share link revoked",
    "server.refused": "a request the server refused (a bad Host or Origin, a body too large)",
    "server.unauthorized": "a request without the right token (a failed sign-in)",
    "config.accepted": "a workspace's permissions accepted by its user",
    "config.changed": "a workspace's configuration written by tether (an 'always, in this project')",
    "audit.pruned": "records older than [audit] keep_days removed; the rest continue from the hash it names",
}
"""Every kind of record tether makes, and what it means (`tether audit --help` shows them)."""

_pending: list[AuditDraft] = []
_pending_lock = threading.Lock()


async def walk_trail(store: Audit, *, batch: int = 1000) -> AsyncIterator[AuditRecord]:
    """Every record of the trail, oldest first, read `batch` at a time."""
    after = 0
    while True:
        page = await store.list_audit(after=after, limit=batch)
        for item in page:
            yield item
        if len(page) < batch:
            return
        after = page[-1].seq


async def record(
    store: object,
    kind: str,
    *,
    session_id: str | None = None,
    actor: str | None = None,
    outcome: str | None = None,
    detail: dict[str, Any] | None = None,
    redactor: Redactor | None = None,
) -> AuditRecord | None:
    """Append a record of `kind` now (after any noted ones); None when the store keeps no trail or the record
    could not be written (logged)."""
    if getattr(store, "append_audit", None) is None:  # (an isinstance of the protocol costs 30 us a call)
        return None
    try:
        made = draft(
            kind, at=time.time(), session_id=session_id, actor=actor, outcome=outcome, detail=detail, redactor=redactor
        )
        trail: Audit = store  # type: ignore[assignment]
        await flush(trail)
        return await trail.append_audit(made)
    except TetherError as exc:
        log.warning("the audit record %s could not be written: %s", kind, exc)
        return None


def note(kind: str, *, outcome: str | None = None, detail: dict[str, Any] | None = None) -> None:
    """Keep a record for the next `record` or `flush` of this process (synchronous code, no store at hand)."""
    made = draft(kind, at=time.time(), outcome=outcome, detail=detail)
    with _pending_lock:
        _pending.append(made)


async def flush(store: Audit) -> int:
    """Write the noted records, oldest first. Returns how many."""
    with _pending_lock:
        waiting = list(_pending)
        _pending.clear()
    for i, made in enumerate(waiting):
        try:
            await store.append_audit(made)
        except BaseException:
            with _pending_lock:  # kept for the next try, in their order
                _pending[:0] = waiting[i:]
            raise
    return len(waiting)


def tool_call(
    store: object,
    session_id: str,
    call: ToolCallPart,
    result: ToolResultPart,
    seconds: float,
    *,
    allowed: bool,
    decided_by: str,
    reason: str = "",
    redactor: Redactor | None = None,
) -> AuditDraft | None:
    """The record of one tool call, decided (by `decided_by`: a rule, the mode, a person) and run or refused:
    a draft for the journal to write with the call's result, in its transaction (None: the store keeps no
    trail)."""
    if getattr(store, "append_audit", None) is None:
        return None
    outcome = "denied" if not allowed else "error" if result.is_error else "ok"
    detail: dict[str, Any] = {
        "call_id": call.id,
        "tool": call.name,
        "arguments": call.arguments,
        "decision": "allow" if allowed else "deny",
        "decided_by": decided_by,
        "duration_ms": round(seconds * 1000, 3),
    }
    if reason:
        detail["reason"] = reason
    sandbox = result.metadata.get("sandbox")
    if sandbox is not None:
        detail["sandbox"] = sandbox
    try:
        return draft(
            "tool.call", at=time.time(), session_id=session_id, outcome=outcome, detail=detail, redactor=redactor
        )
    except TetherError as exc:
        log.warning("the audit record of %s could not be made: %s", call.name, exc)
        return None


_last_retain: dict[int, float] = {}
RETAIN_EVERY = 3600.0
"""Seconds between two prunes of one store by one process."""


async def retain(store: object, config: Config | None) -> int:
    """Apply ``[audit] keep_days`` (at most once an hour per store and process). Returns records removed."""
    keep = config.audit.keep_days if config is not None else None
    if keep is None or not isinstance(store, Audit):
        return 0
    now = time.time()
    if now - _last_retain.get(id(store), 0.0) < RETAIN_EVERY:
        return 0
    _last_retain[id(store)] = now
    try:
        return await store.prune_audit(now - keep * 86400.0)
    except TetherError as exc:
        log.warning("the audit trail could not be pruned: %s", exc)
        return 0
