"""opencode's sessions into tether sessions, from any of its stores (the SQLite database it keeps since
v1.2, the JSON folder before it, a session ``opencode export`` wrote: read by `opencode_sources`). One
opencode session becomes one tether session:

- the session: its directory, title (a later rename a `TitleChange`), times, parent (a sub-agent's session
  is a child session, linked to the ``task`` call that ran it), and the rest of its record in the session's
  metadata under ``opencode``; a revert (``session.revert``) a `Revert` to just before the message it names.
- a user message: a user `Message` (text, and files and images from its ``file`` parts); one that asks for
  a compaction, with the assistant's ``summary`` answer after it, a `Compaction`.
- an assistant message: one assistant `Message` per model step (``step-start`` .. ``step-finish``: reasoning
  as thinking with its provider's signature, text, tool calls; the step's tokens and cost as its usage),
  each followed by a ``tool`` message with the step's results (an ``error`` state as an error, a call still
  ``pending`` or ``running`` as interrupted). opencode's tools are tether's where they mean the same
  (`TOOL_NAMES`, the original name kept in the message's metadata); others keep their name and input.
  What tether has no field for (the message's ids, agent, path, errors; tool states' titles, metadata and
  times; snapshot, patch, agent, subtask and retry parts) stays in the message's metadata under
  ``opencode``; a part of a type tether does not know is a `Marker` ``opencode.part`` with its JSON.

Importing again appends only the messages added since (opencode's message ids grow with time: the import
keeps the last one it took). An assistant message still being written (not completed, no error) is left,
with what follows it, for the next import, unless its session has been idle for `IDLE_AFTER` seconds (then
it was interrupted, and is imported as opencode left it)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec

from .. import markers
from ..messages import (
    Compaction,
    EntryBody,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Part,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
    encode_body,
)
from ..store.protocols import Journal
from ..store.records import IMPORTED, SessionInfo
from .jsonl import (
    BATCH_BYTES,
    BATCH_ENTRIES,
    FileResult,
    Problem,
    decode_data_uri,
    existing,
    import_mark,
    source_session_id,
)
from .opencode_sources import (
    MessageRecord,
    OpencodeSource,
    SessionRecord,
    SourceError,
    default_root,
    json_object,
    looks_like_export,
    looks_like_opencode,
    open_source,
    seconds,
)

FORMAT = "opencode"

__all__ = [
    "FORMAT",
    "IDLE_AFTER",
    "TOOL_NAMES",
    "default_root",
    "import_opencode",
    "looks_like_export",
    "looks_like_opencode",
]

IDLE_AFTER = 600.0
"""Seconds without a change after which a session's unfinished assistant message counts as interrupted."""

TOOL_NAMES: dict[str, tuple[str, dict[str, str]]] = {
    # opencode's tool: (tether's tool of the same meaning, argument renames). Other arguments are kept as
    # they are; bash's timeout is in milliseconds, tether's in seconds: it is kept as `timeout_ms`.
    "bash": ("bash", {"timeout": "timeout_ms"}),
    "read": ("read", {"filePath": "path"}),
    "write": ("write", {"filePath": "path"}),
    "edit": (
        "edit",
        {"filePath": "path", "oldString": "old_string", "newString": "new_string", "replaceAll": "replace_all"},
    ),
    "glob": ("glob", {}),
    "grep": ("grep", {"include": "glob"}),
    "list": ("list", {}),
    "task": ("task", {"subagent_type": "agent"}),
}
"""The tool's own name is kept in the message's metadata (``opencode.tool_names``: call id → name)."""

_KEPT_PARTS = frozenset({"step-start", "snapshot", "patch", "agent", "subtask", "retry"})
"""Parts tether has no part for but that belong to their message: kept in its metadata, in order."""


# --- the import of one session ---------------------------------------------------------------------------


def _decimal(value: object) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = Decimal(str(value))
    except InvalidOperation:
        return None
    return result if result.is_finite() and result >= 0 else None


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


def _usage(tokens: object, cost: object) -> Usage | None:
    if not isinstance(tokens, dict):
        return None
    cache = json_object(tokens.get("cache"))
    return Usage(
        input_tokens=_int(tokens.get("input")), output_tokens=_int(tokens.get("output")),
        reasoning_tokens=_int(tokens.get("reasoning")), cache_read_tokens=_int(cache.get("read")),
        cache_write_tokens=_int(cache.get("write")), cost=_decimal(cost),
    )  # fmt: skip


def _file_part(part: dict[str, Any]) -> Part | None:
    mime, url = part.get("mime"), part.get("url")
    if not isinstance(mime, str) or not isinstance(url, str):
        return None
    name = part.get("filename") if isinstance(part.get("filename"), str) else None
    decoded = decode_data_uri(url)
    data, uri = (decoded[1], None) if decoded is not None else (None, url)
    if mime.startswith("image/"):
        return ImagePart(media_type=mime, data=data, uri=uri)
    return FilePart(media_type=mime, data=data, uri=uri, name=name)


def _thinking(part: dict[str, Any]) -> ThinkingPart:
    meta = json_object(part.get("metadata"))
    anthropic = json_object(meta.get("anthropic"))
    openai = json_object(meta.get("openai"))
    text = str(part.get("text") or "")
    if isinstance(anthropic.get("signature"), str) or isinstance(anthropic.get("redactedData"), str):
        return ThinkingPart(
            text=text, signature=anthropic.get("signature"), redacted=anthropic.get("redactedData"),
            provider="anthropic",
        )  # fmt: skip
    encrypted = openai.get("reasoningEncryptedContent")
    if isinstance(encrypted, str):
        return ThinkingPart(text=text, redacted=encrypted, provider="openai")
    return ThinkingPart(text=text)


@dataclass
class _Step:
    parts: list[Part] = field(default_factory=list)
    results: list[ToolResultPart] = field(default_factory=list)
    at: float | None = None
    done: float | None = None
    usage: Usage | None = None
    finish: str | None = None
    kept: list[dict[str, Any]] = field(default_factory=list)
    tools: dict[str, Any] = field(default_factory=dict)
    part_meta: dict[str, Any] = field(default_factory=dict)


class _SessionImport:
    """One opencode session into its tether session: created, or appended to with the messages after the
    last one an earlier import took."""

    def __init__(self, store: Journal, source: OpencodeSource, session: SessionRecord, *, dry_run: bool) -> None:
        self.store = store
        self.source = source
        self.session = session
        self.dry_run = dry_run
        self.session_id = source_session_id(FORMAT, session.id)
        self.problems: list[Problem] = []
        self.bodies: list[EntryBody] = []
        self.times: list[float] = []
        self.size = 0
        self.count = 0  # the seq of the last entry placed
        self.written = 0
        self.first_seq: dict[str, int] = {}  # opencode message id -> the seq of its first entry (this run)
        self.pending_compaction: tuple[MessageRecord, dict[str, Any]] | None = None
        self.children: dict[str, str] = {}  # child session id -> the task call that ran it
        self.info: SessionInfo | None = None
        self._pending_markers: list[tuple[Marker, float | None]] = []
        self.revert_seq: int | None = None
        self.model: str | None = None

    async def run(self) -> FileResult:
        s = self.session
        result = FileResult(s.where, FORMAT, "imported", session_id=self.session_id, title=s.title)
        info = self.info = await existing(self.store, self.session_id)
        mark = import_mark(info)
        last = self.source.last_message(s.id)
        if info is not None:
            if (
                mark.get("updated") == s.updated
                and mark.get("seen") == last
                and mark.get("title") == s.title
                and mark.get("revert") == _revert_key(s.revert)
                and not mark.get("waiting")
            ):
                result.outcome, result.title = "unchanged", info.title
                return result
            if mark.get("confirmed") and info.entry_count != mark.get("entries", info.entry_count):
                result.outcome = "failed"
                result.problems = [
                    Problem(
                        s.where, None,
                        f"session {self.session_id} was continued in tether after its import, so what opencode "
                        "added since is not appended to it; fork it (`tether sessions fork`) to keep both",
                    )
                ]  # fmt: skip
                return result
            result.outcome = "would append" if self.dry_run else "grown"
        elif self.dry_run:
            result.outcome = "would import"
        self.count = info.entry_count if info else 0
        after = await self._resume_point(info, mark)
        await self._revert_cleared(mark, after)  # before what opencode wrote since, which it does not hide
        taken, waiting = after, False
        now = time.time()
        messages = 0
        for message in self.source.messages(s.id, after):
            if message.cut and message.id == last and now - s.updated < IDLE_AFTER:
                waiting = True  # its record is still being written: the next import takes it
                break
            if not message.info:
                continue  # reported by the source
            if now - s.updated < IDLE_AFTER and (
                _unfinished(message.info) or (message.id == last and message.info.get("role") == "user")
            ):
                # an answer still being written, or a prompt whose parts opencode may still be writing (it
                # writes the message, then each part): both wait until the turn has moved on
                waiting = True
                break
            await self._message(message)
            messages += 1
            taken = message.id
            if len(self.bodies) >= BATCH_ENTRIES or self.size >= BATCH_BYTES:
                await self._flush()  # whole messages per append: an interrupted import resumes after one
        await self._close_compaction()
        if info is None and not self.bodies:
            result.outcome = "unchanged"  # no message (or none finished) yet: no session until there is one
            result.problems = self.problems
            return result
        await self._title(mark, info)
        await self._revert(mark)
        await self._flush()
        result.entries, result.lines = self.written, messages
        result.title = s.title or (info.title if info else None)
        if not self.dry_run:
            await self._finish(mark, taken, last, waiting)
        result.sessions = [self.session_id] if self.written else []
        if result.outcome == "grown" and not self.written:
            result.outcome = "unchanged"
        result.problems = self.problems
        return result

    async def _resume_point(self, info: SessionInfo | None, mark: dict[str, Any]) -> str | None:
        """The last message already in the tether session: the mark's, or later when an import was cut
        short after an append (every append ends with a whole message, whose id its entries carry)."""
        after = mark.get("last") if isinstance(mark.get("last"), str) else None
        if info is None or info.entry_count == mark.get("entries"):
            return after
        for entry in reversed(await self.store.tail(self.session_id, 20)):
            oid = _entry_message_id(entry.body)
            if oid is not None:
                return oid if after is None or oid > after else after
        return after

    async def _create(self) -> None:
        s = self.session
        parent_id: str | None = None
        extra: dict[str, Any] = {}
        if s.parent is not None:
            tether_parent = source_session_id(FORMAT, s.parent)
            parent = await existing(self.store, tether_parent)
            if parent is not None:
                parent_id = tether_parent
                call = import_mark(parent).get("children", {}).get(s.id)
                agent = s.kept.get("agent")
                extra["task"] = {
                    **({"agent": agent} if isinstance(agent, str) else {}),
                    **({"call_id": call} if call else {}),
                }
            else:
                extra["imported_parent_id"] = tether_parent
        model = s.kept.get("model")
        model_id = model.get("id") if isinstance(model, dict) else None
        await self.store.create_session(
            id=self.session_id, directory=os.path.normpath(s.directory) if s.directory else None,
            parent_id=parent_id, title=s.title, agent=s.kept.get("agent") if isinstance(s.kept.get("agent"), str) else None,
            model=model_id if isinstance(model_id, str) else None,
            metadata={IMPORTED: self._mark(), "opencode": s.kept, **extra}, created_at=s.created,
        )  # fmt: skip

    def _mark(self) -> dict[str, Any]:
        return {
            "source": self.source.path, "format": FORMAT, "at": time.time(), "tool": FORMAT,
            "path": self.session.where, "source_id": self.session.id,
        }  # fmt: skip

    async def _finish(self, mark: dict[str, Any], taken: str | None, last: str | None, waiting: bool) -> None:
        current = await self.store.get_session(self.session_id)
        new_mark = {
            **import_mark(current), **self._mark(), "updated": self.session.updated, "seen": last,
            "title": self.session.title, "revert": _revert_key(self.session.revert), "entries": current.entry_count,
        }  # fmt: skip
        if taken is not None:
            new_mark["last"] = taken
        if waiting:
            new_mark["waiting"] = True
        else:
            new_mark.pop("waiting", None)
        if self.children:
            new_mark["children"] = {**new_mark.get("children", {}), **self.children}
        if self.revert_seq is not None:
            new_mark["revert_seq"] = self.revert_seq
        elif self.session.revert is None and new_mark.get("revert") is None:
            new_mark.pop("revert_seq", None)
        fields: dict[str, Any] = {"metadata": {**current.metadata, IMPORTED: new_mark}}
        if self.model is not None and current.model != self.model:
            fields["model"] = self.model  # the model of its last answer (opencode's session may not say)
        await self.store.update_session(current.id, **fields)

    # --- entries ---

    def _add(self, body: EntryBody, at: float | None) -> int:
        encode_body(body)
        self.count += 1
        self.bodies.append(body)
        self.times.append(at or self.session.created or time.time())
        return self.count

    async def _flush(self) -> None:
        if not self.bodies:
            return
        if self.info is None and not self.written and not self.dry_run:
            await self._create()
        if not self.dry_run:
            await self.store.append(self.session_id, self.bodies, created_at=self.times)
        self.written += len(self.bodies)
        self.bodies, self.times, self.size = [], [], 0

    async def _title(self, mark: dict[str, Any], info: SessionInfo | None) -> None:
        title = self.session.title
        if info is not None and title and mark.get("title") != title and info.title != title:
            self._add(TitleChange(title=title), self.session.updated)

    async def _revert_cleared(self, mark: dict[str, Any], after: str | None) -> None:
        """opencode cleared the revert an earlier import saw, or reverted and deleted messages between two
        imports. A revert is cleared two ways: undone (``unrevert``: the messages are back), which tether
        undoes too, or made final (the next prompt deletes the reverted messages), which stays."""
        if self.session.revert is not None or self.info is None:
            return
        prior = mark.get("revert_seq")
        if mark.get("revert") is not None:
            target = str(mark.get("revert")).split("/")[0]
            if isinstance(prior, int) and prior > 1 and self.source.has_message(self.session.id, target):
                self._add(Revert(to_seq=prior - 1, reason="opencode: revert undone"), self.session.updated)
            return
        if after is not None and not self.source.has_message(self.session.id, after):
            await self._vanished(mark)

    async def _revert(self, mark: dict[str, Any]) -> None:
        key = _revert_key(self.session.revert)
        if key is None:
            return
        if key == mark.get("revert"):
            self.revert_seq = mark.get("revert_seq") if isinstance(mark.get("revert_seq"), int) else None
            return
        revert = self.session.revert or {}
        target = revert.get("messageID")
        seq = self.first_seq.get(target) if isinstance(target, str) else None
        if seq is None and isinstance(target, str):
            seq = await self._find_seq(target)
        if seq is None:
            self.problems.append(
                Problem(
                    self.session.where, None, f"the session's revert names message {target!r}, which it lacks; ignored"
                )
            )
            return
        part = f", part {revert['partID']}" if isinstance(revert.get("partID"), str) else ""
        self.revert_seq = self._add(
            Revert(to_seq=seq - 1, reason=f"opencode: reverted from message {target}{part}"), self.session.updated
        )

    async def _vanished(self, mark: dict[str, Any]) -> None:
        """Messages imported before are gone from opencode (a revert made final by the next prompt): the
        history is reverted to just before the first of them."""
        prior = mark.get("revert_seq")
        checked: set[str] = set()
        async for entry in self.store.iter_entries(self.session_id, 1 if not isinstance(prior, int) else prior + 1):
            oid = _entry_message_id(entry.body)
            if oid is None or oid in checked:
                continue
            checked.add(oid)
            if not self.source.has_message(self.session.id, oid):
                self.revert_seq = self._add(
                    Revert(to_seq=entry.seq - 1, reason=f"opencode: message {oid} and those after it were removed"),
                    self.session.updated,
                )
                return

    async def _find_seq(self, message_id: str) -> int | None:
        if self.info is None:
            return None
        async for entry in self.store.iter_entries(self.session_id):
            oid = _entry_message_id(entry.body)
            if oid is not None and oid >= message_id:
                return entry.seq
        return None

    async def _message(self, message: MessageRecord) -> None:
        info = message.info
        self.size += message.size
        role = info.get("role")
        if role == "user":
            await self._user(message)
        elif role == "assistant":
            await self._assistant(message)
        else:
            await self._close_compaction()
            self.problems.append(Problem(message.where, None, f"a message with role {role!r}; kept as a marker"))
            self._add(
                Marker(name="opencode.message", data={"id": message.id, "info": info, "parts": message.parts}),
                seconds((info.get("time") or {}).get("created")) if isinstance(info.get("time"), dict) else None,
            )

    async def _user(self, message: MessageRecord) -> None:
        await self._close_compaction()
        info = message.info
        at = seconds(info["time"].get("created")) if isinstance(info.get("time"), dict) else None
        compaction = next((p for p in message.parts if p.get("type") == "compaction"), None)
        if compaction is not None and all(p.get("type") == "compaction" for p in message.parts):
            self.pending_compaction = (message, compaction)
            return
        parts: list[Part] = []
        kept: list[dict[str, Any]] = []
        synthetic: list[int] = []
        for part in message.parts:
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                if part.get("ignored") is True:
                    kept.append(part)
                    continue
                if part.get("synthetic") is True:
                    synthetic.append(len(parts))
                parts.append(TextPart(text=part["text"]))
            elif kind == "file":
                converted = _file_part(part)
                if converted is None:
                    kept.append(part)
                else:
                    if part.get("source") is not None or part.get("synthetic"):
                        kept.append({k: v for k, v in part.items() if k != "url" or not str(v).startswith("data:")})
                    parts.append(converted)
            elif kind in _KEPT_PARTS or kind == "compaction":
                kept.append(part)
            else:
                self._unknown(message, part, at)
        meta: dict[str, Any] = {
            "id": message.id,
            **{k: v for k, v in info.items() if k not in ("id", "sessionID", "role")},
        }
        if kept:
            meta["parts"] = kept
        if synthetic:
            meta["synthetic"] = synthetic
        model = json_object(info.get("model"))
        seq = self._add(
            Message(role="user", parts=parts, model=model.get("modelID"), provider=model.get("providerID"), metadata={"opencode": meta}),
            at,
        )  # fmt: skip
        self.first_seq.setdefault(message.id, seq)
        self._emit_markers(message)

    def _unknown(self, message: MessageRecord, part: dict[str, Any], at: float | None) -> None:
        self._pending_markers.append((Marker(name="opencode.part", data={"message": message.id, "raw": part}), at))

    async def _assistant(self, message: MessageRecord) -> None:
        info = message.info
        times = json_object(info.get("time"))
        at, done = seconds(times.get("created")), seconds(times.get("completed"))
        if info.get("summary") is True and self.pending_compaction is not None:
            await self._compaction(message, at)
            return
        await self._close_compaction()
        if isinstance(info.get("modelID"), str):
            self.model = info["modelID"]
        steps: list[_Step] = []
        step: _Step | None = None
        names: dict[str, str] = {}
        for part in message.parts:
            kind = part.get("type")
            if step is None or (kind == "step-start" and (step.parts or step.results or step.usage)):
                step = _Step(at=at)
                steps.append(step)
            if kind == "text" and isinstance(part.get("text"), str):
                step.parts.append(TextPart(text=part["text"]))
                self._note_part(step, part)
            elif kind == "reasoning" and isinstance(part.get("text"), str):
                step.parts.append(_thinking(part))
                self._note_part(step, part)
            elif kind == "tool" and isinstance(part.get("callID"), str) and isinstance(part.get("tool"), str):
                call, result = self._tool(part, names, done or at)
                step.parts.append(call)
                step.results.append(result)
                state = json_object(part.get("state"))
                span = json_object(state.get("time"))
                step.done = seconds(span.get("end")) or step.done
                kept_state = {k: v for k, v in state.items() if k not in ("input", "output", "raw")}
                extra = {
                    k: v
                    for k, v in part.items()
                    if k not in ("id", "sessionID", "messageID", "type", "callID", "tool", "state")
                }
                step.tools[part["callID"]] = {"part": part.get("id"), **kept_state, **extra}
            elif kind == "file":
                converted = _file_part(part)
                if converted is not None:
                    step.parts.append(converted)
                else:
                    step.kept.append(part)
            elif kind == "step-finish":
                step.usage = _usage(part.get("tokens"), part.get("cost"))
                step.finish = part.get("reason") if isinstance(part.get("reason"), str) else None
                step.kept.append({k: v for k, v in part.items() if k not in ("tokens", "cost")})
            elif kind in _KEPT_PARTS or kind == "compaction":
                step.kept.append(part)
            else:
                self._unknown(message, part, at)
        if not steps:
            steps.append(_Step(at=at))
        if len(steps) == 1 and steps[0].usage is None:
            steps[0].usage = _usage(info.get("tokens"), info.get("cost"))
        meta = {
            "id": message.id,
            **{
                k: v
                for k, v in info.items()
                if k not in ("id", "sessionID", "role", "tokens", "cost", "modelID", "providerID", "finish")
            },
        }
        if len(steps) > 1:
            meta["message_usage"] = {"tokens": info.get("tokens"), "cost": info.get("cost")}
        if names:
            meta["tool_names"] = names
        error = info.get("error")
        only_error = error is not None and all(not s.parts and not s.results for s in steps)
        if only_error:
            seq = self._add(_error_marker(message.id, error, meta), done or at)
            self.first_seq.setdefault(message.id, seq)
        else:
            for i, step in enumerate(steps):
                step_meta: dict[str, Any] = dict(meta) if i == 0 else {"id": message.id, "step": i}
                if step.kept:
                    step_meta["parts"] = step.kept
                if step.tools:
                    step_meta["tools"] = step.tools
                if step.part_meta:
                    step_meta["part_metadata"] = step.part_meta
                last = i == len(steps) - 1
                finish = step.finish or (info.get("finish") if last and isinstance(info.get("finish"), str) else None)
                if last and error is not None:
                    finish = "error"
                body = Message(
                    role="assistant", parts=step.parts, model=info.get("modelID") if isinstance(info.get("modelID"), str) else None,
                    provider=info.get("providerID") if isinstance(info.get("providerID"), str) else None,
                    usage=step.usage, finish_reason=finish, metadata={"opencode": step_meta},
                )  # fmt: skip
                seq = self._add(body, step.at or at)
                self.first_seq.setdefault(message.id, seq)
                if step.results:
                    self._add(
                        Message(
                            role="tool",
                            parts=list[Part](step.results),
                            metadata={"opencode": {"id": message.id, "step": i}},
                        ),
                        step.done or done or at,
                    )
            if error is not None:  # e.g. aborted while it was written: what it had, then why it stopped
                self._add(_error_marker(message.id, error, None), done or at)
        self._emit_markers(message)

    def _emit_markers(self, message: MessageRecord) -> None:
        """The message's parts of types tether does not know, after it, each a marker with its JSON."""
        for marker, when in self._pending_markers:
            self.problems.append(
                Problem(message.where, None, f"a part of type {marker.data['raw'].get('type')!r}; kept as a marker")
            )
            self._add(marker, when)
        self._pending_markers = []

    def _note_part(self, step: _Step, part: dict[str, Any]) -> None:
        extra = {k: v for k, v in part.items() if k in ("metadata", "time", "synthetic", "ignored") and v is not None}
        if extra:
            step.part_meta[str(len(step.parts) - 1)] = extra

    def _tool(
        self, part: dict[str, Any], names: dict[str, str], at: float | None
    ) -> tuple[ToolCallPart, ToolResultPart]:
        tool, call_id = part["tool"], part["callID"]
        state = json_object(part.get("state"))
        arguments = json_object(state.get("input"))
        name = tool
        mapped = TOOL_NAMES.get(tool)
        if mapped is not None:
            name, renames = mapped
            arguments = {renames.get(k, k): v for k, v in arguments.items()}
            names[call_id] = tool
        if not arguments and isinstance(state.get("raw"), str) and state["raw"].strip():
            call = ToolCallPart.from_raw(call_id, name, state["raw"])
        else:
            call = ToolCallPart(id=call_id, name=name, arguments=arguments)
        status = state.get("status")
        if status == "completed":
            output = state.get("output")
            content = output if isinstance(output, str) else "" if output is None else str(output)
            result = ToolResultPart(call_id=call_id, content=content, name=name)
        elif status == "error":
            error = state.get("error")
            result = ToolResultPart(
                call_id=call_id, content=error if isinstance(error, str) else str(error), is_error=True, name=name
            )
        else:
            result = ToolResultPart(
                call_id=call_id, is_error=True, name=name, metadata={"status": status},
                content=f"[the tool call was interrupted: opencode left it {status or 'without a state'}]",
            )  # fmt: skip
        metadata = json_object(state.get("metadata"))
        meta_session = metadata.get("sessionId")
        if tool == "task" and isinstance(meta_session, str):
            self.children[meta_session] = call_id
        if tool == "task" and isinstance(state.get("output"), str):
            child = _task_session(state["output"])
            if child is not None:
                self.children.setdefault(child, call_id)
        return call, result

    async def _compaction(self, message: MessageRecord, at: float | None) -> None:
        assert self.pending_compaction is not None
        request, part = self.pending_compaction
        self.pending_compaction = None
        texts = [p["text"] for p in message.parts if p.get("type") == "text" and isinstance(p.get("text"), str)]
        info = message.info
        usage = _usage(info.get("tokens"), info.get("cost"))
        seq = self.count + 1
        tail = part.get("tail_start_id")
        first_kept = self.first_seq.get(tail, seq) if isinstance(tail, str) else seq
        meta = {
            "request": request.id, "id": message.id, "part": part, "request_info": request.info,
            "info": {k: v for k, v in info.items() if k not in ("id", "sessionID")},
            "parts": [p for p in message.parts if p.get("type") != "text"],
        }  # fmt: skip
        if usage is not None:
            meta["usage"] = msgspec.to_builtins(usage)
        self._add(
            Compaction(summary="\n".join(texts), first_kept_seq=min(first_kept, seq), strategy="opencode", metadata={"opencode": meta}),
            at,
        )  # fmt: skip
        self.first_seq.setdefault(request.id, seq)
        self.first_seq.setdefault(message.id, seq)

    async def _close_compaction(self) -> None:
        """A compaction request without the summary after it (it failed, or is the last message): a marker."""
        if self.pending_compaction is None:
            return
        request, part = self.pending_compaction
        self.pending_compaction = None
        times = json_object(request.info.get("time"))
        seq = self._add(
            Marker(name="opencode.compaction", data={"message": request.id, "info": request.info, "part": part}),
            seconds(times.get("created")),
        )
        self.first_seq.setdefault(request.id, seq)


def _task_session(output: str) -> str | None:
    """The child session's id in a task tool's output (``<task id="ses_..."`` or ``task_id: ses_...``)."""
    for marker in ('<task id="', "task_id: "):
        start = output.find(marker)
        if start >= 0:
            rest = output[start + len(marker) :]
            end = next((i for i, c in enumerate(rest) if not (c.isalnum() or c == "_")), len(rest))
            if rest[:end].startswith("ses_"):
                return rest[:end]
    return None


def _unfinished(info: dict[str, Any]) -> bool:
    if info.get("role") != "assistant" or info.get("error") is not None:
        return False
    times = info.get("time")
    return not (isinstance(times, dict) and times.get("completed") is not None)


def _revert_key(revert: dict[str, Any] | None) -> str | None:
    if not revert:
        return None
    mid, pid = revert.get("messageID"), revert.get("partID")
    return f"{mid}/{pid}" if isinstance(pid, str) else str(mid)


def _entry_message_id(body: EntryBody) -> str | None:
    meta: Any = None
    if isinstance(body, Message | Compaction):
        meta = body.metadata.get("opencode")
    elif isinstance(body, Marker) and body.name.startswith("opencode."):
        value = body.data.get("message") or body.data.get("id")
        return value if isinstance(value, str) else None
    value = meta.get("id") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def _depth(session: SessionRecord, by_id: dict[str, SessionRecord]) -> int:
    depth, seen, current = 0, set(), session
    while current.parent is not None and current.parent in by_id and current.id not in seen:
        seen.add(current.id)
        current = by_id[current.parent]
        depth += 1
    return depth


async def import_opencode(
    store: Journal,
    path: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    directory: str | None = None,
    since: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[FileResult]:
    """Import the sessions of opencode's store at `path` (its data folder, database or JSON folder), or
    append what each gained since it was last imported: one result per session (parents before their
    children), only those of workspace `directory` and changed since `since` when given; `progress` is told
    (sessions done, sessions in all) after each. A store that cannot be read at all is one `failed` result;
    bad records are skipped and reported."""
    where = os.fspath(path)
    try:
        sources = open_source(Path(where))
    except SourceError as e:
        return [FileResult(where, FORMAT, "failed", problems=[Problem(where, None, str(e))])]
    results: list[FileResult] = []
    done: set[str] = set()
    try:
        for source in sources:
            try:
                sessions = [s for s in source.sessions() if s.id not in done]
            except (sqlite3.Error, OSError) as e:
                results.append(
                    FileResult(
                        source.path,
                        FORMAT,
                        "failed",
                        problems=[*source.problems, Problem(source.path, None, f"cannot read it: {e}")],
                    )
                )
                continue
            by_id = {s.id: s for s in sessions}
            sessions.sort(key=lambda s: (_depth(s, by_id), s.created or 0.0, s.id))
            for number, session in enumerate(sessions, 1):
                if progress is not None:
                    progress(number - 1, len(sessions))
                done.add(session.id)
                if directory is not None and os.path.normpath(session.directory or "") != os.path.normpath(directory):
                    continue
                if since is not None and session.updated < since:
                    continue
                one = _SessionImport(store, source, session, dry_run=dry_run)
                try:
                    result = await one.run()
                except (sqlite3.Error, OSError) as e:
                    result = FileResult(session.where, FORMAT, "failed", session_id=one.session_id)
                    result.problems = [*one.problems, Problem(session.where, None, f"cannot read it: {e}")]
                result.problems = [*source.problems, *result.problems]  # the source's own first (a bad file)
                source.problems.clear()
                results.append(result)
            if progress is not None:
                progress(len(sessions), len(sessions))
            if source.problems:  # no session to report them with
                results.append(FileResult(source.path, FORMAT, "unchanged", problems=list(source.problems)))
    finally:
        for source in sources:
            source.close()
    return results


def _error_marker(message_id: str, error: Any, info: dict[str, Any] | None) -> Marker:
    """An opencode message's error (``{"name": "MessageAbortedError", "data": {"message": ...}}``, an API
    error, ...) as an error entry with its text; the error and the message's fields kept beside it."""
    name = error.get("name") if isinstance(error, dict) else None
    data = error.get("data") if isinstance(error, dict) else None
    detail = data.get("message") if isinstance(data, dict) else None
    if not isinstance(detail, str) or not detail:
        detail = error if isinstance(error, str) else None
    text = ": ".join(p for p in (name if isinstance(name, str) else None, detail) if p) or "an error"
    return markers.to_marker(
        markers.ErrorRecord(message=text, source="opencode", message_id=message_id, error=error, info=info)
    )
