"""tether's own exports coming back (`tether sessions export --format claude-code|codex`): the file's first line
names the tether session it came from, the entries that session had and the lines the export wrote. When that
session is in this store, those lines are its own and are not imported again; the lines the tool appended
(the session continued there) are appended to it, or, when it was continued in tether too since the export,
to a fork of it at the export point. When it is not (another machine's tether), the file imports as a copy
that records where it came from. The record of what was taken is kept on the original session."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ..messages import Compaction, Marker, Message
from ..store.protocols import Journal
from ..store.records import SessionInfo
from .foreign_export import TETHER_KEY
from .jsonl import (
    FileOutcome,
    Problem,
    SessionWriter,
    decode_json,
    existing,
    head_digest,
    read_lines,
    source_session_id,
)

__all__ = [
    "CONTINUED",
    "ExportMark",
    "Plan",
    "begin_continuation",
    "continuation_of",
    "continuation_writer",
    "copy_note",
    "export_mark_of",
    "first_object",
    "plan_continuation",
    "record_continuation",
]

CONTINUED = "continued_in"
"""The original session's metadata key of what was imported back from its exports: one record per exported
file (``"<format>:<its session id>"``): where its lines went (``into``), how many entries that session had
then (``entries``), and how far the file was read (``offset``, ``size``, ``head``, ``lines``)."""

TOOLS = {"claude-code": "Claude Code", "codex": "Codex"}


@dataclass(frozen=True)
class ExportMark:
    """What an exported file says of its origin: the tether session, the entries it had when exported and
    the lines the export wrote (None for exports by a tether that did not write them)."""

    origin: str
    entries: int | None
    lines: int | None


def export_mark_of(value: Any) -> ExportMark | None:
    """The mark under an exported line's (or Codex meta's) ``tether`` key, or None when there is none."""
    if not isinstance(value, dict) or not isinstance(value.get("exported_from"), str):
        return None

    def count(name: str) -> int | None:
        n = value.get(name)
        return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None

    return ExportMark(value["exported_from"], count("entries"), count("lines"))


def first_object(path: str) -> Any:
    """The first JSON value of a JSONL file (None when it has none that parses, or cannot be read)."""
    try:
        for line in read_lines(path):
            if not line.data.strip():
                continue
            try:
                return decode_json(line.data)
            except msgspec.DecodeError:
                return None
    except OSError:
        return None
    return None


@dataclass
class Plan:
    """How a file exported from session `origin` comes back. `outcome` "unchanged": nothing beyond what was
    exported (or imported back already). "continue": the file's lines after `skip` (tether's own) are
    entries `start`+1... of session `into`, which holds `known` of them already; `fork` (session, at) when
    `into` must first be made as a fork (the original was continued in tether too)."""

    fmt: str
    path: str
    key: str
    mark: ExportMark
    origin: SessionInfo
    outcome: Literal["unchanged", "continue"]
    into: str
    start: int
    known: int
    skip: int
    fork: tuple[str, int] | None = None
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def tool(self) -> str:
        return TOOLS.get(self.fmt, self.fmt)

    def file_outcome(self, entries: int, dry_run: bool) -> FileOutcome:
        """What became of the exported file: nothing new, or the tool's entries appended (to the original)
        or imported (into a fork), or that they would be."""
        if not entries:
            return "unchanged"
        if dry_run:
            return "would import" if self.fork is not None else "would append"
        return "imported" if self.fork is not None else "grown"

    def note(self, entries: int, dry_run: bool) -> str:
        """What this import did (or would do), in words."""
        where = f"exported from tether session {self.origin.id}"
        if self.outcome == "unchanged" or not entries:
            held = f"; what {self.tool} added is in {self.into} already" if self.into != self.origin.id else ""
            return f"{where}, unchanged{held}"
        n = f"{entries} entr{'y' if entries == 1 else 'ies'}"
        verb = "would append" if dry_run else "appended"
        if self.fork is not None:
            made = "would fork" if dry_run else "forked"
            return (
                f"{where}, continued in {self.tool} and in tether since the export: {made} "
                f"{self.fork[0]} at entry {self.fork[1]} as {self.into} for {self.tool}'s {n}"
            )
        return f"{where}, continued in {self.tool}: {n} {verb} to {self.into}"


async def plan_continuation(
    store: Journal, path: str, fmt: str, source_id: str, mark: ExportMark, size: int
) -> Plan | Problem | None:
    """How the exported file at `path` (its session id in the tool: `source_id`) comes back: None when its
    origin is not in this store or the export did not say how far it goes (it imports as a copy), a `Problem`
    when it cannot (the file was rewritten since it was read), else the `Plan`."""
    origin = await existing(store, mark.origin)
    if origin is None or mark.entries is None or mark.lines is None or mark.entries > origin.entry_count:
        return None  # not this store's session (another tether's, or one deleted and made anew): a copy
    key = f"{fmt}:{source_id}"
    records = origin.metadata.get(CONTINUED)
    record = records.get(key) if isinstance(records, dict) else None
    if not isinstance(record, dict) or record.get("mark") != [mark.entries, mark.lines]:
        record = None  # never imported back, or exported anew since (a new mark): from the export's end
    into, synced = (origin.id, mark.entries) if record is None else (str(record["into"]), int(record["entries"]))
    base = dict(fmt=fmt, path=path, key=key, mark=mark, origin=origin, start=mark.entries, skip=mark.lines)
    if record is not None:
        offset = int(record.get("offset", 0))
        try:
            same = size >= offset and record.get("head") == head_digest(path, offset)
        except OSError as e:
            return Problem(path, None, f"cannot read it: {e.strerror or e}")
        if not same:
            return Problem(
                path, None, f"it was rewritten since it was imported back into {into} (not only appended to)"
            )
        if size == record.get("size"):
            return Plan(**base, outcome="unchanged", into=into, known=synced, record=record)  # type: ignore[arg-type]
    elif not _has_more_lines(path, mark.lines):
        return Plan(**base, outcome="unchanged", into=into, known=synced)  # type: ignore[arg-type]
    target = await existing(store, into)
    if target is None:  # the session the tool's lines went to was deleted since: they go back to the origin
        into, synced, record = origin.id, mark.entries, None
        target = origin
    if target.entry_count == synced:
        return Plan(**base, outcome="continue", into=into, known=synced, record=record or {})  # type: ignore[arg-type]
    if record is not None and record.get("pending") and await _all_from(store, fmt, into, synced + 1):
        # an import of this file was stopped (killed) after it wrote some of its entries, before it said so
        return Plan(**base, outcome="continue", into=into, known=target.entry_count, record=record or {})  # type: ignore[arg-type]
    # continued in tether since: the tool's continuation is a fork at the point the tool's file reflects
    fork_id = source_session_id(fmt, f"{source_id}/continued-{into}-{synced}")
    made = await existing(store, fork_id)
    return Plan(
        **base,  # type: ignore[arg-type]
        outcome="continue",
        into=fork_id,
        known=made.entry_count if made is not None else synced,
        fork=None if made is not None else (into, synced),
        record=record or {},
    )


async def _all_from(store: Journal, fmt: str, session_id: str, start: int) -> bool:
    """Whether every entry of the session from `start` on came from a `fmt` file (a message or compaction
    keeping the tool's fields, a marker of one of its lines): written by an import of the file that was cut
    short (killed) before it recorded how far it got, not by tether continuing the session."""
    key = fmt.replace("-", "_")
    async for entry in store.iter_entries(session_id, start):
        body = entry.body
        if isinstance(body, Message | Compaction):
            if not isinstance(body.metadata.get(key), dict):
                return False
        elif not (isinstance(body, Marker) and body.name.startswith(f"{fmt}.")):
            return False
    return True


async def continuation_of(store: Journal, path: str, fmt: str, source_id: str) -> str | None:
    """The session the lines the tool added to tether's export at `path` go to (the original, or the fork
    made of it), when the file is one whose origin is in this store; else None."""
    first = first_object(path)
    if fmt == "codex" and isinstance(first, dict):
        first = first.get("payload")
    mark = export_mark_of(first.get(TETHER_KEY)) if isinstance(first, dict) else None
    origin = await existing(store, mark.origin) if mark is not None else None
    if origin is None:
        return None
    records = origin.metadata.get(CONTINUED)
    record = records.get(f"{fmt}:{source_id}") if isinstance(records, dict) else None
    return str(record["into"]) if isinstance(record, dict) and isinstance(record.get("into"), str) else origin.id


def _has_more_lines(path: str, lines: int) -> bool:
    """Whether the file has a line after its first `lines` (a blank one does not count)."""
    try:
        for line in read_lines(path):
            if line.no > lines and line.data.strip():
                return True
    except OSError:
        return True  # let the import read it and say why it cannot
    return False


def copy_note(origin: str) -> str:
    """What an import says of an export whose origin is not in this store (it imports as a copy)."""
    return f"exported from tether session {origin}, which is not in this store: a copy"


def continuation_writer(store: Journal, plan: Plan, *, dry_run: bool) -> SessionWriter:
    """The writer of what the tool appended to an export: before its first entry it notes on the original
    that entries are being written (`begin_continuation`)."""

    async def begin() -> None:
        if not dry_run:
            await begin_continuation(store, plan)

    return SessionWriter(store, plan.into, start=plan.start, known=plan.known, dry_run=dry_run, create=begin)


async def begin_continuation(store: Journal, plan: Plan) -> None:
    """Before the first entry is written: make the fork a diverged continuation goes to (when the plan needs
    one), and note on the original that entries are being written to it (so that an import killed midway
    is taken up where it stopped, not mistaken for the session continued in tether)."""
    if plan.fork is not None:
        await _fork(store, plan, *plan.fork)
    origin = await store.get_session(plan.origin.id)
    records = origin.metadata.get(CONTINUED)
    records = dict(records) if isinstance(records, dict) else {}
    records[plan.key] = {
        **(plan.record or {"offset": 0, "head": head_digest(plan.path, 0)}),
        "format": plan.fmt,
        "path": plan.path,
        "mark": [plan.mark.entries, plan.mark.lines],
        "into": plan.into,
        "entries": plan.known,
        "size": None,
        "pending": True,
    }
    await store.update_session(origin.id, metadata={**origin.metadata, CONTINUED: records})


async def _fork(store: Journal, plan: Plan, source: str, at: int) -> None:
    base = await store.get_session(source)
    title = f"{base.title or 'untitled'} (continued in {plan.tool})"
    forked = await store.fork(source, at, id=plan.into, title=title)
    await store.update_session(
        forked.id,
        metadata={**forked.metadata, "continued_from": {"session": plan.origin.id, "format": plan.fmt,
                                                        "path": plan.path, "at": at}},
    )  # fmt: skip


async def record_continuation(
    store: Journal, plan: Plan, *, offset: int, size: int, lines: int, extra: dict[str, Any] | None = None
) -> None:
    """Keep on the original session how far the file was taken, and where to: the next import goes on from
    there (and a file that did not grow since is not read again)."""
    into = await store.get_session(plan.into)
    origin = await store.get_session(plan.origin.id)
    records = origin.metadata.get(CONTINUED)
    records = dict(records) if isinstance(records, dict) else {}
    records[plan.key] = {
        "format": plan.fmt,
        "path": plan.path,
        "mark": [plan.mark.entries, plan.mark.lines],
        "into": plan.into,
        "entries": into.entry_count,
        "offset": offset,
        "size": size if offset == size else offset,
        "head": head_digest(plan.path, offset),
        "lines": lines,
        "at": time.time(),
        **(extra or {}),
    }
    await store.update_session(origin.id, metadata={**origin.metadata, CONTINUED: records})
