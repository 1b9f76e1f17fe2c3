"""Codex rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``, the ``RolloutLine`` of
codex-rs/protocol: ``{"timestamp", "type", "payload"}``, and the older files whose lines are bare response
items after a first line of session metadata) into tether sessions:

- ``session_meta``: the session's id, directory (``cwd``), time and instructions (its system prompt); the
  rest is kept in the session's metadata under ``codex``.
- ``response_item``: the model's items of one response (``reasoning``, ``message``, ``function_call``,
  ``custom_tool_call``, ``local_shell_call``, and those tether has no part for, such as ``web_search_call``,
  kept in its metadata) make one assistant message; a user message one user message (images included); each
  tool output a ``tool`` message (a failed call's as an error). ``shell`` / ``local_shell_call`` /
  ``shell_command`` / ``exec_command`` calls are tether's ``bash`` (the command line as one string, the
  timeout in seconds; the call as it came is kept in the message's metadata, ``codex.calls``). An output
  that tether's export marked failed (``"tether": {"is_error": true}``) is an error.
- ``event_msg``: ``token_count`` is the usage of the response before it (and its cost, from tether's price
  list); ``user_message``, ``agent_message`` and ``agent_reasoning`` repeat response items for the UI and
  add nothing; ``thread_name_updated`` is a `TitleChange`; any other event is a `Marker` ``codex.<type>``
  with its JSON.
- ``compacted``: a `Compaction` (its replacement history kept in its metadata); ``turn_context``: the model
  of what follows, and a `Marker` with its JSON; a line type tether does not know: a `Marker` with its JSON.
- spawned threads (sub-agents): a rollout whose ``session_meta.source`` is
  ``{"subagent": {"thread_spawn": {"parent_thread_id", "depth", ...}}}`` is a child session of its parent's
  (when that was imported first: files are imported in path order, which is time order), linked to the
  parent's ``spawn_agent`` call through the parent's ``collab_agent_spawn_end`` event.

Importing again appends only what was added since (the session id is derived from the rollout's id)."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..messages import (
    Compaction,
    EntryBody,
    ImagePart,
    Message,
    Part,
    Role,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..store.protocols import Journal
from ..store.records import IMPORTED
from .continuation import (
    Plan,
    continuation_writer,
    copy_note,
    export_mark_of,
    first_object,
    plan_continuation,
    record_continuation,
)
from .foreign_export import TETHER_KEY
from .jsonl import (
    CannotAppend,
    FileResult,
    JsonLines,
    Line,
    Problem,
    SessionWriter,
    SourceChanged,
    decode_data_uri,
    decode_json,
    existing,
    head_digest,
    import_mark,
    parse_time,
    raw_marker,
    since_import,
    source_session_id,
)

FORMAT = "codex"

__all__ = ["FORMAT", "import_codex", "looks_like_codex", "session_key"]

ROLLOUT_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_UI_COPIES = frozenset(
    {"user_message", "agent_message", "agent_reasoning", "agent_reasoning_raw_content", "agent_reasoning_section_break"}
)
_MODEL_ITEMS = frozenset(
    {"reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call", "image_generation_call"}
)
# events Codex (0.1xx) writes between the items of one model response (the UI's view of each item): kept as
# markers after the response's message rather than splitting it
_WITHIN_RESPONSE = frozenset({"item_started", "item_updated", "item_completed"})
_SHELLS = frozenset({"shell", "container.exec", "shell_command", "exec_command", "local_shell"})
_UUID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})", re.I)


def looks_like_codex(first: dict[str, Any]) -> bool:
    """Whether a file's first JSON line is a Codex rollout's (a ``RolloutLine``, or the first line of an
    older rollout: its session's id, time and instructions)."""
    if first.get("type") in ROLLOUT_TYPES and "payload" in first:
        return True
    return "id" in first and "timestamp" in first and ("instructions" in first or "git" in first)


_JSON_ROLLOUT = re.compile(rb'\s*\{\s*"session"\s*:')


def is_json_rollout(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a rollout of the first Codex CLI (TypeScript, spring 2025): one JSON document
    ``{"session": {"timestamp", "id", "instructions"}, "items": [<response items>]}``, saved whole as
    ``~/.codex/sessions/rollout-<date>-<id>.json`` after each turn."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return _JSON_ROLLOUT.match(head.removeprefix(b"\xef\xbb\xbf")) is not None


class _JsonRollout:
    """A JSON rollout read as the older JSONL layout it matches: its session object as the first line, each
    item as a line of its own (numbered from 2), with `JsonLines`' `lines` and `consumed`. `ValueError` when
    it is not one."""

    def __init__(self, path: str) -> None:
        data = Path(path).read_bytes()
        try:
            doc = decode_json(data)
        except msgspec.DecodeError as e:
            raise ValueError(f"not JSON ({e})") from None
        items = doc.get("items") if isinstance(doc, dict) else None
        session = doc.get("session") if isinstance(doc, dict) else None
        if not isinstance(items, list) or not isinstance(session, dict):
            raise ValueError('not a Codex rollout: a JSON document without "session" and "items"')
        self.values: list[Any] = [{k: v for k, v in session.items() if k != "type"}, *items]
        self.size = len(data)
        self.lines = 0
        self.consumed = 0

    def __iter__(self) -> Iterator[tuple[Line, Any]]:
        for no, value in enumerate(self.values, 1):
            self.lines = no
            yield Line(no, 0, 0, b"", True), value
        self.consumed = self.size


def session_key(path: str) -> str:
    """A rollout's source key: the session id in its file name (``rollout-<time>-<uuid>.jsonl``)."""
    match = _UUID.search(Path(path).name)
    return match.group(1).lower() if match else Path(path).stem


@dataclass
class _Group:
    """The items of one model response, becoming one assistant message."""

    parts: list[Part] = field(default_factory=list)
    at: float | None = None
    size: int = 0
    calls: dict[str, Any] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    usage: Usage | None = None
    record: dict[str, Any] | None = None  # the response's `token_usage_record`
    done: bool = False  # its items are all in: what follows is held until its token count comes
    after: list[tuple[Any, float | None, int]] = field(default_factory=list)  # markers held until it closes


class _RolloutImport:
    def __init__(self, store: Journal, path: str, *, dry_run: bool) -> None:
        self.store = store
        self.path = path
        self.dry_run = dry_run
        self.key = session_key(path)
        self.session_id = source_session_id(FORMAT, self.key)
        self.problems: list[Problem] = []
        self.meta: dict[str, Any] = {}
        self.model: str | None = None
        self.directory: str | None = None
        self.first_time: float | None = None
        self.title: str | None = None
        self.named = False  # the rollout names its thread (`thread_name_updated`)
        self.group: _Group | None = None
        self.names: dict[str, str] = {}
        self.cuts: set[int] = set()
        self.catalog: Any = None
        self.writer: SessionWriter
        self.created = False
        self.spawned: dict[str, str] = {}  # a spawned thread's id -> the call that spawned it
        self.exported_from: str | None = None  # a tether export whose session is not in this store
        self.quiet = False  # reading the lines of a tether export coming back: nothing is written
        self.called: dict[str, str] = {}  # a call's id -> the tool name the model used
        self.failed: set[str] = set()  # calls whose item Codex recorded as failed (`status: "failed"`)
        self.digest: str | None = None  # a JSON rollout's fingerprint (it is saved whole, not appended to)
        self.total: dict[str, int] | None = None  # the last cumulative `token_count` total
        self.since_total = Usage()  # usage given to responses (`token_usage_record`) since that total
        self.unattached: Usage | None = None  # counts that came with no response to give them to

    async def run(self) -> FileResult:
        result = FileResult(self.path, FORMAT, "imported", session_id=self.session_id)
        try:
            st = os.stat(self.path)
        except OSError as e:
            return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
        first = first_object(self.path)
        payload = first.get("payload") if isinstance(first, dict) and first.get("type") == "session_meta" else None
        exported = export_mark_of(payload.get(TETHER_KEY)) if isinstance(payload, dict) else None
        if exported is not None and isinstance(payload, dict):
            source_id = str(payload.get("id") or self.key).lower()
            plan = await plan_continuation(self.store, self.path, FORMAT, source_id, exported, st.st_size)
            if isinstance(plan, Problem):
                return result.fail(self.problems, plan.reason)
            if plan is not None:
                return await self._continue(plan, result, st.st_size)
            self.exported_from = exported.origin
            result.note = copy_note(exported.origin)
        reading: JsonLines | _JsonRollout
        if not is_json_rollout(self.path) and not (isinstance(first, dict) and looks_like_codex(first)):
            what = "its first line is not JSON" if first is None else "its first line is no session_meta"
            return result.fail(self.problems, f"not a Codex rollout ({what}); nothing imported")
        if is_json_rollout(self.path):
            try:
                reading = _JsonRollout(self.path)
            except (OSError, ValueError) as e:
                return result.fail(self.problems, f"cannot read it: {getattr(e, 'strerror', None) or e}")
            self.digest = hashlib.sha256(Path(self.path).read_bytes()).hexdigest()[:32]
        else:
            reading = JsonLines(self.path, self.problems)
        info = await existing(self.store, self.session_id)
        mark = import_mark(info)
        if info is not None and mark and self.digest is not None:
            # saved whole after each turn, not appended to: the same document is unchanged, another one
            # is replayed, only the entries after those imported being written
            result.outcome = "unchanged" if mark.get("digest") == self.digest else "grown"
            if result.outcome == "unchanged":
                result.title = info.title
                return result
        elif info is not None and mark:
            try:
                result.outcome = since_import(self.path, st.st_size, self.session_id, info, mark)
            except OSError as e:
                return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
            except CannotAppend as e:
                return result.fail(self.problems, str(e))
            if result.outcome == "unchanged":
                result.title = info.title
                return result
            self.cuts = {int(n) for n in mark.get("cuts", []) if isinstance(n, int)}
        if self.dry_run:
            result.outcome = "would append" if info is not None else "would import"

        async def create() -> None:
            self.created = True
            if not self.dry_run:
                parent_id, link = await self._parent_link()
                await self.store.create_session(
                    id=self.session_id,
                    directory=self.directory,
                    parent_id=parent_id,
                    system_prompt=self._instructions(),
                    metadata={IMPORTED: self._mark(), "codex": self._meta_kept(), **link},
                    created_at=self.first_time,
                )

        self.writer = SessionWriter(
            self.store, self.session_id, known=info.entry_count if info else 0, dry_run=self.dry_run,
            create=None if info else create,
        )  # fmt: skip
        last = 0
        try:
            for line, obj in reading:
                last = line.no
                await self.place(obj, line.no, len(line.data))
                if line.no in self.cuts:
                    await self.close(force=True)  # where an earlier import stopped with a response still open
        except SourceChanged as e:
            return result.fail(self.problems, f"{e}; import it again")
        except OSError as e:
            return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
        finally:
            result.lines = reading.lines
        consumed = reading.consumed
        if self.group is not None and last:
            self.cuts.add(last)
        await self.close(force=True)
        await self.writer.flush()
        if not self.dry_run and self.writer.create is None:
            await self._finish(consumed, st.st_size)
        result.entries = self.writer.written
        result.sessions = [self.session_id] if self.writer.written else []
        result.title = self.title or (info.title if info else None)
        result.problems = self.problems
        return result

    async def _continue(self, plan: Plan, result: FileResult, size: int) -> FileResult:
        """A rollout tether exported, coming back: its own lines are only read (for what later lines refer
        to), the lines Codex appended go to the session the plan says."""
        result.session_id, result.title = plan.into, plan.origin.title
        if plan.outcome == "unchanged":
            result.outcome, result.note = "unchanged", plan.note(0, self.dry_run)
            return result
        self.session_id = plan.into
        self.cuts = {int(n) for n in plan.record.get("cuts", []) if isinstance(n, int)}

        self.writer = continuation_writer(self.store, plan, dry_run=self.dry_run)
        reading, last = JsonLines(self.path, self.problems), 0
        self.quiet = True
        try:
            for line, obj in reading:
                if self.quiet and line.no > plan.skip:
                    await self.close(force=True)  # a response the export left open is the session's own
                    self.quiet = False
                last = line.no
                await self.place(obj, line.no, len(line.data))
                if line.no in self.cuts:
                    await self.close(force=True)
        except SourceChanged as e:
            return result.fail(self.problems, f"{e}; import it again")
        except OSError as e:
            return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
        finally:
            result.lines = reading.lines
        if self.group is not None and last and not self.quiet:
            self.cuts.add(last)
        await self.close(force=True)
        await self.writer.flush()
        result.entries = self.writer.written
        result.sessions = [plan.into] if self.writer.written else []
        result.problems = self.problems
        result.note = plan.note(result.entries, self.dry_run)
        result.outcome = plan.file_outcome(result.entries, self.dry_run)
        if not self.dry_run and (result.entries or plan.record):
            extra = {"cuts": sorted(self.cuts)} if self.cuts else {}
            await record_continuation(
                self.store, plan, offset=reading.consumed, size=size, lines=reading.lines, extra=extra
            )
        return result

    def _spawned_by(self) -> dict[str, Any] | None:
        """The ``ThreadSpawn`` source of a sub-agent's rollout (``parent_thread_id``, ``depth``, ...), or None."""
        source = self.meta.get("source")
        sub = source.get("subagent", source.get("sub_agent")) if isinstance(source, dict) else None
        spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
        if isinstance(spawn, dict) and isinstance(spawn.get("parent_thread_id"), str):
            return spawn
        return None

    async def _parent_link(self) -> tuple[str | None, dict[str, Any]]:
        """A spawned thread's parent session (when it was imported) and the `task` link to its spawn call."""
        spawn = self._spawned_by()
        if spawn is None:
            return None, {}
        parent_key = str(spawn["parent_thread_id"]).lower()
        parent_id = source_session_id(FORMAT, parent_key)
        parent = await existing(self.store, parent_id)
        if parent is None:
            return None, {"imported_parent_id": parent_id}
        task: dict[str, Any] = {"thread_id": self.meta.get("id") or self.key}
        for key in ("depth", "agent_nickname", "agent_role"):
            if spawn.get(key) is not None:
                task[key] = spawn[key]
        if isinstance(spawn.get("agent_role"), str):
            task["agent"] = spawn["agent_role"]
        call_id = import_mark(parent).get("spawned", {}).get(self.key)
        if isinstance(call_id, str):
            task["call_id"] = call_id
        return parent_id, {"task": task}

    def _instructions(self) -> str | None:
        for key in ("instructions", "base_instructions"):
            value = self.meta.get(key)
            if isinstance(value, dict):
                value = value.get("text")
            if isinstance(value, str) and value:
                return value
        return None

    def _meta_kept(self) -> dict[str, Any]:
        return {k: v for k, v in self.meta.items() if k not in ("instructions", "base_instructions")}

    def _mark(self) -> dict[str, Any]:
        return {
            "source": self.path,
            "format": FORMAT,
            "at": time.time(),
            "tool": FORMAT,
            "path": self.path,
            "source_id": str(self.meta.get("id") or self.key),
            **({"exported_from": self.exported_from} if self.exported_from else {}),
        }

    async def _finish(self, consumed: int, size: int) -> None:
        current = await self.store.get_session(self.session_id)
        mark = {
            **import_mark(current),
            **self._mark(),
            "offset": consumed,
            "size": size if consumed == size else consumed,
            "head": head_digest(self.path, consumed),
            "entries": current.entry_count,
        }
        if self.digest is not None:
            mark["digest"] = self.digest
        if self.cuts:
            mark["cuts"] = sorted(self.cuts)
        if self.spawned:
            mark["spawned"] = {**mark.get("spawned", {}), **self.spawned}
        fields: dict[str, Any] = {"metadata": {**current.metadata, IMPORTED: mark}}
        if self.model and current.model != self.model:
            fields["model"] = self.model
        if self.title and self.created and not self.named and current.title != self.title:
            fields["title"] = self.title  # not the store's default (Codex's first user item is its context)
        await self.store.update_session(current.id, **fields)

    # --- lines ---

    async def emit(self, body_or_build: Any, at: float | None, size: int) -> None:
        if self.quiet:
            return  # a line of tether's own export, coming back: the session has its entry
        if self.group is not None and self.group.done:
            self.group.after.append((body_or_build, at, size))  # after a response still waiting for its usage
            return
        seq = self.writer.take()
        if self.writer.needs(seq):
            body = body_or_build() if callable(body_or_build) else body_or_build
            await self.writer.add(body, at or self.first_time or time.time(), size)

    async def close(self, *, force: bool = False) -> None:
        """The response in progress has all its items. Its usage may still come (Codex writes the
        ``token_count`` after the tool outputs that follow a response): until then, or until the next
        response, a user message or a compaction (`force`), what follows is held after it. Then it is
        journaled as one assistant message, with what was held after it."""
        group = self.group
        if group is None:
            return
        if not force:
            group.done = True
            return
        self.group = None
        if self.unattached is not None:  # counts that came between responses: the next one carries them
            group.usage = self.unattached if group.usage is None else group.usage + self.unattached
            self.unattached = None
        metadata: dict[str, Any] = {"lines": group.lines}
        if group.calls:
            metadata["calls"] = group.calls
        if group.items:
            metadata["items"] = group.items
        if group.record is not None:
            metadata["token_usage_record"] = group.record
        usage = group.usage

        def build() -> Message:
            return Message(
                role="assistant", parts=group.parts, model=self.model, provider="openai", usage=usage,
                metadata={"codex": metadata},
            )  # fmt: skip

        await self.emit(build, group.at, group.size)
        for marker, at, size in group.after:
            await self.emit(marker, at, size)

    async def place(self, obj: Any, no: int, size: int) -> None:
        if not isinstance(obj, dict):
            self.problems.append(
                Problem(self.path, no, f"not a rollout line (a JSON {type(obj).__name__}); kept as a marker")
            )
            await self.close()
            await self.emit(raw_marker("codex.unknown", no, obj), None, size)
            return
        at = parse_time(obj.get("timestamp"))
        if self.first_time is None and at is not None:
            self.first_time = at
        kind, payload = obj.get("type"), obj.get("payload")
        if kind in ROLLOUT_TYPES and isinstance(payload, dict):
            await self._rollout_item(kind, payload, obj, no, at, size)
        elif kind == "token_usage_record" and isinstance(payload, dict) and self.group is not None:
            # Codex 0.1xx: the usage of the response just streamed (then `token_count` repeats it as totals)
            usage = self._usage({"info": {"last_token_usage": payload.get("usage")}})
            if usage is None:
                await self.close()
                await self.emit(raw_marker("codex.token_usage_record", no, obj), at, size)
                return
            self.group.usage, self.group.record = usage, payload
            self.since_total = self.since_total + usage
            self.group.lines.append(no)
            await self.close()
        elif no == 1 and "id" in obj and "timestamp" in obj and "type" not in obj:
            self._session_meta(obj)  # an older rollout's first line
        elif isinstance(kind, str) and "payload" not in obj and "record_type" not in obj:
            await self._response_item(obj, no, at, size)  # an older rollout's bare response item
        else:
            name = obj.get("record_type") or kind
            await self.close()
            await self.emit(raw_marker(f"codex.{name if isinstance(name, str) else 'unknown'}", no, obj), at, size)

    def _session_meta(self, payload: dict[str, Any]) -> None:
        self.meta = payload
        if isinstance(payload.get("cwd"), str) and payload["cwd"]:
            self.directory = os.path.normpath(payload["cwd"])
        when = parse_time(payload.get("timestamp"))
        if when is not None:
            self.first_time = when

    async def _rollout_item(
        self, kind: str, payload: dict[str, Any], obj: dict[str, Any], no: int, at: float | None, size: int
    ) -> None:
        if kind == "session_meta":
            if not self.meta:
                self._session_meta(payload)
                return
            await self.close()
            await self.emit(raw_marker("codex.session_meta", no, obj), at, size)  # a second one (a fork's)
            return
        if kind == "response_item":
            await self._response_item(payload, no, at, size)
            return
        if kind == "event_msg":
            event = payload.get("type")
            if event in _UI_COPIES:
                return  # the response item it repeats is journaled
            if event in _WITHIN_RESPONSE:
                item = payload.get("item")
                if isinstance(item, dict) and item.get("status") == "failed" and isinstance(item.get("id"), str):
                    self.failed.add(item["id"])  # e.g. a command that exited non-zero: its output is an error
                if self.group is not None:
                    self.group.after.append((raw_marker(f"codex.{event}", no, payload), at, size))
                    return
            if (
                event == "thread_name_updated"
                and isinstance(payload.get("thread_name"), str)
                and payload["thread_name"]
            ):
                await self.close()
                self.named = True
                self.title = payload["thread_name"]
                await self.emit(TitleChange(title=payload["thread_name"]), at, size)
                return
            if event == "collab_agent_spawn_end":
                thread = payload.get("new_thread_id", payload.get("newThreadId"))
                call = payload.get("call_id", payload.get("callId"))
                if isinstance(thread, str) and isinstance(call, str):
                    self.spawned[thread.lower()] = call  # kept as a marker below, too
            if event == "token_count":
                usage = self._count(payload)
                if self.group is not None and usage is not None:
                    if usage.total_tokens or usage.reasoning_tokens or usage.cache_read_tokens:
                        group_usage = self.group.usage
                        self.group.usage = usage if group_usage is None else group_usage + usage
                    self.group.lines.append(no)
                    await self.close(force=True)
                    return
                if usage is not None and (usage.total_tokens or usage.cache_read_tokens):
                    self.unattached = usage if self.unattached is None else self.unattached + usage
        if kind == "turn_context" and isinstance(payload.get("model"), str):
            self.model = payload["model"]
        await self.close()
        if kind == "compacted":
            history = payload.get("replacement_history")
            message = payload.get("message")

            def build() -> EntryBody:
                return Compaction(
                    summary=message if isinstance(message, str) else "",
                    first_kept_seq=self.writer.count,
                    strategy="codex",
                    metadata={"codex": {"line": no, **({"replacement_history": history} if history else {})}},
                )

            await self.emit(build, at, size)
            return
        name = payload.get("type") if kind == "event_msg" else kind
        await self.emit(raw_marker(f"codex.{name if isinstance(name, str) else kind}", no, payload), at, size)

    async def _response_item(self, item: dict[str, Any], no: int, at: float | None, size: int) -> None:
        kind = item.get("type")
        role = item.get("role")
        if (kind == "message" and role == "assistant") or kind in _MODEL_ITEMS:
            group = self.group
            if group is not None and group.done:
                await self.close(force=True)  # the next response
                group = None
            if group is None:
                group = self.group = _Group(at=at)
            group.lines.append(no)
            group.size += size
            part = self._model_part(item, group)
            if part is not None:
                group.parts.append(part)
            elif kind != "message":
                group.items.append({"line": no, "item": item})
            return
        await self.close()
        if kind == "message":
            parts = _content_parts(item.get("content"))
            text = "".join(p.text for p in parts if isinstance(p, TextPart))
            tether_role: Role = "user" if role == "user" else "system"
            if tether_role == "user" and self.title is None and text.strip() and not text.lstrip().startswith("<"):
                self.title = " ".join(text.split())[:80]
            meta: dict[str, Any] = {"line": no}
            if role not in ("user", "system"):
                meta["role"] = role
            await self.emit(Message(role=tether_role, parts=parts, metadata={"codex": meta}), at, size)
            return
        if kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                content, is_error, extra, images = _output(item.get("output"))
                tether = item.get("tether")  # what tether's export keeps beside Codex's fields
                is_error = is_error or (isinstance(tether, dict) and tether.get("is_error") is True)
                # Codex's own verdicts: the item it recorded as failed; a call of a tool it does not have
                is_error = is_error or call_id in self.failed
                is_error = is_error or content == f"unsupported call: {self.called.get(call_id, '')}"
                if self.called.get(call_id) == "spawn_agent" and not is_error:
                    self._note_spawn(call_id, content)
                result = ToolResultPart(
                    call_id=call_id, content=content, is_error=is_error, name=self.names.get(call_id),
                    metadata=extra,
                )  # fmt: skip
                answer: list[Part] = [result, *images]
                await self.emit(Message(role="tool", parts=answer, metadata={"codex": {"line": no}}), at, size)
                return
        name = kind if isinstance(kind, str) else "unknown"
        await self.emit(raw_marker(f"codex.{name}", no, item), at, size)

    def _note_spawn(self, call_id: str, output: str) -> None:
        """Codex 0.1xx records no spawn event: the `spawn_agent` call's output names the thread it started
        (``{"agent_id": ...}``), which links the child's rollout to this call."""
        try:
            value = msgspec.json.decode(output)
        except msgspec.DecodeError:
            return
        agent = value.get("agent_id") if isinstance(value, dict) else None
        if isinstance(agent, str) and _UUID.fullmatch(agent):
            self.spawned.setdefault(agent.lower(), call_id)

    def _model_part(self, item: dict[str, Any], group: _Group) -> Part | None:
        kind = item.get("type")
        if kind == "message":
            texts = [p.text for p in _content_parts(item.get("content")) if isinstance(p, TextPart)]
            return TextPart(text="".join(texts))
        if kind == "reasoning":
            summary = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
            content = [c.get("text", "") for c in item.get("content") or [] if isinstance(c, dict)]
            encrypted = item.get("encrypted_content")
            return ThinkingPart(
                text="\n".join(t for t in (content or summary) if isinstance(t, str)),
                redacted=encrypted if isinstance(encrypted, str) else None,
                provider="openai",
            )
        if kind == "function_call" and isinstance(item.get("name"), str):
            call_id = item.get("call_id") or item.get("id")
            if not isinstance(call_id, str):
                return None
            raw = item.get("arguments")
            self.called[call_id] = item["name"]
            call = ToolCallPart.from_raw(call_id, item["name"], raw if isinstance(raw, str) else "")
            return self._mapped(call, group, item)
        if kind == "custom_tool_call" and isinstance(item.get("name"), str) and isinstance(item.get("call_id"), str):
            self.names[item["call_id"]] = item["name"]
            group.calls[item["call_id"]] = {"custom": True}
            return ToolCallPart(id=item["call_id"], name=item["name"], arguments={"input": item.get("input", "")})
        if kind == "local_shell_call":
            action = item.get("action")
            call_id = item.get("call_id") or item.get("id")
            if isinstance(action, dict) and isinstance(call_id, str):
                call = ToolCallPart(id=call_id, name="local_shell", arguments=dict(action))
                return self._mapped(call, group, item)
        return None

    def _mapped(self, call: ToolCallPart, group: _Group, item: dict[str, Any]) -> ToolCallPart:
        """A Codex shell call as tether's `bash` (the command as one string); the call as it came is kept."""
        args = call.arguments
        if call.name in _SHELLS and isinstance(args, dict):
            command = args.get("command", args.get("cmd"))
            if isinstance(command, list) and all(isinstance(c, str) for c in command):
                if len(command) == 3 and command[0] in ("bash", "sh", "zsh") and command[1] in ("-lc", "-c"):
                    command = command[2]
                else:
                    command = shlex.join(command)
            if isinstance(command, str):
                rest = {k: v for k, v in args.items() if k not in ("command", "cmd", "type")}
                timeout = rest.pop("timeout_ms", None)
                if timeout is None and "timeout" in rest:  # the first (TypeScript) CLI's shell: ms as well
                    timeout = rest.pop("timeout")
                if isinstance(timeout, int | float) and not isinstance(timeout, bool):
                    seconds = timeout / 1000  # tether's bash takes seconds
                    rest["timeout"] = int(seconds) if seconds.is_integer() else seconds
                elif timeout is not None:
                    rest["timeout_ms"] = timeout
                group.calls[call.id] = {"name": call.name, "arguments": item.get("arguments", item.get("action"))}
                self.names[call.id] = "bash"
                return ToolCallPart(id=call.id, name="bash", arguments={"command": command, **rest})
        self.names[call.id] = call.name
        return call

    def _count(self, payload: dict[str, Any]) -> Usage | None:
        """What a ``token_count`` adds: the difference between its cumulative total and the one before
        (all of it after a total that went down: a new process counting from zero), less what the
        responses in between were given by their ``token_usage_record``. Without a total, its last
        response's usage. None when it has neither."""
        info = payload.get("info")
        if not isinstance(info, dict):
            return None
        total = _counts(info.get("total_token_usage"))
        if total is None:
            return self._usage(payload)
        previous, self.total = self.total, total
        if previous is not None and all(total[k] >= previous[k] for k in total):
            diff = {k: total[k] - previous[k] for k in total}
        else:
            diff = total
        given, self.since_total = self.since_total, Usage()
        given_counts = {
            "input_tokens": given.input_tokens,
            "output_tokens": given.output_tokens,
            "reasoning_output_tokens": given.reasoning_tokens,
            "cached_input_tokens": given.cache_read_tokens,
        }
        return self._priced({k: max(diff[k] - given_counts[k], 0) for k in diff})

    def _usage(self, payload: dict[str, Any]) -> Usage | None:
        info = payload.get("info")
        last = _counts(info.get("last_token_usage") if isinstance(info, dict) else None)
        return None if last is None else self._priced(last)

    def _priced(self, counts: dict[str, int]) -> Usage:
        usage = Usage(
            input_tokens=counts["input_tokens"],
            output_tokens=counts["output_tokens"],
            reasoning_tokens=counts["reasoning_output_tokens"],
            cache_read_tokens=counts["cached_input_tokens"],
        )
        if self.model:
            if self.catalog is None:
                from ..providers.catalog import Catalog

                self.catalog = Catalog()
            model = self.catalog.get("openai", self.model)
            cost = model.cost(usage) if model is not None else None
            if cost is not None:
                usage = msgspec.structs.replace(usage, cost=cost)
        return usage


_COUNTS = ("input_tokens", "output_tokens", "reasoning_output_tokens", "cached_input_tokens")


def _counts(value: Any) -> dict[str, int] | None:
    """The token counts of a ``TokenUsage`` object (negative or missing ones as 0), or None for no object."""
    if not isinstance(value, dict):
        return None
    counts: dict[str, int] = {}
    for name in _COUNTS:
        n = value.get(name)
        counts[name] = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0
    return counts


def _content_parts(content: Any) -> list[Part]:
    parts: list[Part] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in ("input_text", "output_text", "text") and isinstance(item.get("text"), str):
            parts.append(TextPart(text=item["text"]))
        elif kind == "input_image" and isinstance(item.get("image_url"), str):
            decoded = decode_data_uri(item["image_url"])
            if decoded is not None:
                parts.append(ImagePart(media_type=decoded[0], data=decoded[1]))
            else:
                parts.append(ImagePart(media_type="image/*", uri=item["image_url"]))
    return parts


def _output(output: Any) -> tuple[str, bool, dict[str, Any], list[Part]]:
    """(text, is_error, metadata, images) of a function call's output: a string, a list of content items, or
    (older rollouts) an object with ``content`` and ``success``. The images of a list are image parts of their
    own (to follow the result: ``metadata["images"]`` says how many), and ``metadata["content"]`` keeps the
    list's shape, each image item replaced by ``{"type": "input_image", "part": <its index>}``."""
    if isinstance(output, str):
        return output, False, {}, []
    if isinstance(output, list):
        texts = [i.get("text", "") for i in output if isinstance(i, dict) and isinstance(i.get("text"), str)]
        images: list[Part] = []
        shape: list[Any] = []
        for item in output:
            url = item.get("image_url") if isinstance(item, dict) and item.get("type") == "input_image" else None
            if not isinstance(url, str):
                shape.append(item)
                continue
            decoded = decode_data_uri(url)
            rest = {k: v for k, v in item.items() if k not in ("type", "image_url")}
            shape.append({"type": "input_image", "part": len(images), **rest})
            if decoded is not None:
                images.append(ImagePart(media_type=decoded[0], data=decoded[1]))
            else:
                images.append(ImagePart(media_type="image/*", uri=url))
        metadata: dict[str, Any] = {"content": shape}
        if images:
            metadata["images"] = len(images)
        return "\n".join(texts), False, metadata, images
    if isinstance(output, dict):
        content = output.get("content")
        text = content if isinstance(content, str) else ""
        return text, output.get("success") is False, {k: v for k, v in output.items() if k != "content"}, []
    return "", False, {"output": output}, []


async def import_codex(store: Journal, path: str | os.PathLike[str], *, dry_run: bool = False) -> FileResult:
    """Import one Codex rollout file, or append what it gained since it was last imported. Bad lines are
    skipped and reported in the result; nothing raises for them."""
    return await _RolloutImport(store, os.fspath(path), dry_run=dry_run).run()
