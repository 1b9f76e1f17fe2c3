"""Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``, sub-agents in
``<session>/subagents/agent-<id>.jsonl`` or, in older versions, ``agent-<id>.jsonl`` beside them) into
tether sessions. One source line becomes one entry, in file order:

- ``user`` / ``assistant`` lines: messages (text, thinking with its signature, tool calls and results with
  errors as errors, images and documents); a line of tool results is a ``tool`` message. Model, usage (once
  per API message: Claude Code repeats it on each line of a streamed message) and cost (``costUSD`` when the
  line has it, else tether's price list). A user line that tether's export marked as a system message
  (``"tether": {"role": "system"}``) is one again. What tether has no field for stays in the message's metadata
  under ``claude_code`` (the line's ids, ``toolUseResult``, unknown content blocks).
- the user line that carries a compaction's summary (``isCompactSummary``): a `Compaction` entry.
- ``summary`` (of a line in this file), ``custom-title``, ``ai-title``: a `TitleChange`.
- anything else (``system``, ``progress``, ``file-history-snapshot``, a type tether does not know, a JSON
  value that is not an object): a `Marker` named ``claude-code.<type>`` holding the line's JSON.

Branching (``parentUuid``): lines go to the session whose last line is their parent. A line whose parent is
earlier in a session starts a fork of that session at the parent (a "redo from here"), so the first line
written is the main one and each later branch a fork of it (a fork made after an import is appended as a
fork when the file is imported again). A line without a known parent continues the line before it.
Sidechain lines (sub-agents of older versions) and sub-agent files are child sessions of the session that
ran them, linked to its ``Task`` call when the transcript says which.

Importing again appends only what was added since (found by the session id derived from the source id)."""

from __future__ import annotations

import base64
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec

from .. import markers
from ..messages import (
    Compaction,
    EntryBody,
    FilePart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..store.protocols import Journal
from ..store.records import IMPORTED, SessionInfo
from .continuation import (
    Plan,
    continuation_of,
    continuation_writer,
    copy_note,
    export_mark_of,
    first_object,
    plan_continuation,
    record_continuation,
)
from .foreign_export import TETHER_KEY, line_uuid
from .jsonl import (
    CannotAppend,
    FileResult,
    JsonLines,
    Problem,
    SessionWriter,
    SourceChanged,
    decode_json,
    existing,
    head_digest,
    import_mark,
    parse_time,
    raw_marker,
    read_lines,
    since_import,
    source_session_id,
)

FORMAT = "claude-code"

__all__ = ["FORMAT", "TOOL_NAMES", "import_claude_code", "looks_like_claude_code", "session_key"]

TOOL_NAMES: dict[str, tuple[str, dict[str, str]]] = {
    # Claude Code's tool: (tether's tool of the same meaning, argument renames). Other arguments are kept
    # as they are. Bash's timeout is in milliseconds, tether's in seconds: it is converted (`_part`).
    "Bash": ("bash", {}),
    "Read": ("read", {"file_path": "path"}),
    "Write": ("write", {"file_path": "path"}),
    "Edit": ("edit", {"file_path": "path"}),
    "Glob": ("glob", {}),
    "Grep": ("grep", {"-i": "case_insensitive"}),
    "LS": ("list", {}),
    "Task": ("task", {"subagent_type": "agent"}),
    "Agent": ("task", {"subagent_type": "agent"}),
}
"""The tool's own name is kept in the message's metadata (``claude_code.tool_names``: call id → name)."""

_MESSAGE_FIELDS = ("role", "content", "model", "usage", "stop_reason")
_LINE_FIELDS_KEPT_ELSEWHERE = ("type", "message", "timestamp")
_AGENT_FILE = re.compile(r"^agent-(.+)$")


def looks_like_claude_code(first: dict[str, Any]) -> bool:
    """Whether a JSON line is one of Claude Code's (its entries carry ``sessionId`` and ``uuid``, or are
    ``summary`` / ``file-history-snapshot`` lines that open a file)."""
    kind = first.get("type")
    if kind in ("summary", "file-history-snapshot", "custom-title", "ai-title", "queue-operation"):
        return True
    return isinstance(first.get("sessionId"), str) and ("uuid" in first or "parentUuid" in first)


def session_key(path: str) -> tuple[str, str | None, str | None]:
    """(source key, parent session id, agent id) of a transcript file: a session's own file is keyed by its
    name (the session id); a sub-agent's by its parent session and its agent id."""
    p = Path(path)
    match = _AGENT_FILE.match(p.stem)
    if match is None:
        return p.stem, None, None
    agent = match.group(1)
    parent = p.parent.parent.name if p.parent.name == "subagents" else _first_session_id(path)
    return f"{parent or '?'}/agent-{agent}", parent, agent


def _first_session_id(path: str) -> str | None:
    try:
        for line in read_lines(path):
            try:
                obj = decode_json(line.data)
            except msgspec.DecodeError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("sessionId"), str):
                return str(obj["sessionId"])
            if line.no > 50:
                break
    except (OSError, SourceChanged):
        return None
    return None


# --- the import of one file ----------------------------------------------------------------------------


@dataclass
class _Target:
    """One session this file's lines go to: the main line, a fork, or a sub-agent."""

    writer: SessionWriter
    tip: str | None = None
    title: str | None = None

    @property
    def new(self) -> bool:
        return self.writer.create is not None


class _FileImport:
    def __init__(self, store: Journal, path: str, *, dry_run: bool) -> None:
        self.store = store
        self.path = path
        self.dry_run = dry_run
        self.key, self.parent_key, self.agent_id = session_key(path)
        self.problems: list[Problem] = []
        self.nodes: dict[str, tuple[_Target, int]] = {}
        self.side_nodes: dict[str, _Target] = {}
        self.side_groups: dict[str, _Target] = {}
        self.targets: list[_Target] = []
        self.last_node: str | None = None
        self.names: dict[str, str] = {}  # call id -> the tool's name as Claude Code called it
        self.task_prompts: dict[str, str] = {}  # a Task call's prompt -> its call id
        self.agents: dict[str, str] = {}  # agent id -> the Task call that ran it
        self.line_no = 0  # the line being read
        self.last_usage: dict[tuple[str, str], int] = {}  # an API message -> the last line that has its usage
        # an API message an earlier import counted from a line before its last (the file ended there then)
        self.counted: dict[tuple[str, str], dict[str, Any]] = {}
        self.usage_key: tuple[str, str] | None = None
        self.seen_usage: set[tuple[str, str]] = set()
        self.fresh_usage = False
        self.first_prompt: str | None = None  # the first message a person typed, for a branch's title
        self.typed_children: dict[str, str] = {}  # a line -> the first message a person typed after it
        self.call_targets: dict[str, _Target] = {}  # a call's id -> the session it was placed in
        self.directory: str | None = None
        self.session_id: str | None = None  # the source's session id, as its lines name it
        self.first_time: float | None = None
        self.model: str | None = None
        self.pre_tokens: int | None = None
        self.catalog: Any = None
        self.exported_from: str | None = None  # a tether export whose session is not in this store
        self.exported_nodes: list[str] = []  # the lines of a tether export coming back
        self.exported_blocks: list[tuple[str, str, str]] = []  # their messages' blocks, one after another
        self.block_end: dict[str, int] = {}  # an exported line (or one written again) -> where its blocks end
        self.line_ending: dict[int, str] = {}  # where an exported line's blocks end -> that line

    # --- sessions ---

    async def main_target(self, info: SessionInfo | None) -> _Target:
        sid = source_session_id(FORMAT, self.key)
        mark = import_mark(info)

        async def create() -> None:
            parent_id, extra = await self._parent_link()
            if not self.dry_run:
                await self.store.create_session(
                    id=sid,
                    directory=self.directory,
                    parent_id=parent_id,
                    metadata={IMPORTED: {**mark, **self._mark()}, **extra},
                    created_at=self.first_time,
                )

        known = info.entry_count if info else 0
        writer = SessionWriter(self.store, sid, known=known, dry_run=self.dry_run, create=None if info else create)
        target = _Target(writer)
        self.targets.append(target)
        return target

    async def _parent_link(self) -> tuple[str | None, dict[str, Any]]:
        """A sub-agent file's parent session (when it was imported) and the `task` link to its call."""
        if self.parent_key is None:
            return None, {}
        parent_id = source_session_id(FORMAT, self.parent_key)
        parent = await existing(self.store, parent_id)
        if parent is None:  # a session tether exported, continued in Claude Code: its sub-agent is the continuation's
            continued = await continuation_of(self.store, self._parent_file(), FORMAT, self.parent_key)
            parent = await existing(self.store, continued) if continued else None
            parent_id = continued or parent_id
        call_id = _meta_call_id(self.path)
        if parent is None:
            return None, {"imported_parent_id": parent_id}
        if call_id is None and self.agent_id is not None:
            call_id = import_mark(parent).get("agents", {}).get(self.agent_id)
        task: dict[str, Any] = {"agent_id": self.agent_id}
        if call_id:
            task["call_id"] = call_id
        return parent_id, {"task": task}

    def _parent_file(self) -> str:
        """The transcript of a sub-agent's session: ``<session>.jsonl`` beside the ``<session>/subagents``
        folder, or beside the sub-agent's file (older versions)."""
        p = Path(self.path)
        folder = p.parent.parent.parent if p.parent.name == "subagents" else p.parent
        return str(folder / f"{self.parent_key}.jsonl")

    def _mark(self, **extra: Any) -> dict[str, Any]:
        return {
            "source": self.path,
            "format": FORMAT,
            "at": time.time(),
            "tool": FORMAT,
            "path": self.path,
            "source_id": self.session_id or self.key,
            **({"exported_from": self.exported_from} if self.exported_from else {}),
            **extra,
        }

    async def fork(self, base: _Target, at: int, first_uuid: str) -> _Target:
        fid = source_session_id(FORMAT, f"{self.key}/fork-{first_uuid}")
        info = await existing(self.store, fid)
        known = info.entry_count if info else at
        target = _Target(SessionWriter(self.store, fid, start=at, known=known, dry_run=self.dry_run))
        if info is None:
            await base.writer.flush()
            await base.writer.ensure()
            if not self.dry_run:
                title = f"{base.title or self.first_prompt or 'untitled'} (branch)"
                await self.store.fork(base.writer.session_id, at, id=fid, title=title)
                forked = await self.store.get_session(fid)
                await self.store.update_session(
                    fid, metadata={**forked.metadata, IMPORTED: self._mark(branch=first_uuid)}
                )
        self.targets.append(target)
        return target

    async def side_target(self, main: _Target, group: str, agent_id: str | None, call_id: str | None) -> _Target:
        cid = source_session_id(FORMAT, f"{self.key}/side-{group}")
        info = await existing(self.store, cid)

        async def create() -> None:
            await main.writer.ensure()
            task: dict[str, Any] = {"agent_id": agent_id} if agent_id else {}
            if call_id:
                task["call_id"] = call_id
            if not self.dry_run:
                await self.store.create_session(
                    id=cid,
                    directory=self.directory,
                    parent_id=main.writer.session_id,
                    metadata={IMPORTED: self._mark(sidechain=group), "task": task},
                    created_at=self.first_time,
                )

        known = info.entry_count if info else 0
        target = _Target(
            SessionWriter(self.store, cid, known=known, dry_run=self.dry_run, create=None if info else create)
        )
        self.targets.append(target)
        return target

    # --- lines ---

    async def run(self) -> FileResult:
        result = FileResult(self.path, FORMAT, "imported")
        try:
            st = os.stat(self.path)
        except OSError as e:
            return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
        if self.agent_id is None:
            first = first_object(self.path)
            exported = export_mark_of(first.get(TETHER_KEY)) if isinstance(first, dict) else None
            if exported is not None:
                plan = await plan_continuation(self.store, self.path, FORMAT, self.key, exported, st.st_size)
                if isinstance(plan, Problem):
                    return result.fail(self.problems, plan.reason)
                if plan is not None:
                    return await self._continue(plan, result, st.st_size)
                self.exported_from = exported.origin
                result.note = copy_note(exported.origin)
        main_id = source_session_id(FORMAT, self.key)
        info = await existing(self.store, main_id)
        mark = import_mark(info)
        result.session_id = main_id
        if info is not None and mark:
            try:
                result.outcome = since_import(self.path, st.st_size, main_id, info, mark)
            except OSError as e:
                return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
            except CannotAppend as e:
                return result.fail(self.problems, str(e))
            if result.outcome == "unchanged":
                result.title = info.title
                return result
        if self.dry_run:
            result.outcome = "would append" if info is not None else "would import"
        main = await self.main_target(info)
        current = main
        offset = mark.get("offset") if info is not None else None
        before = offset if isinstance(offset, int) and not isinstance(offset, bool) else 0
        self.last_usage, self.counted = _last_usage_lines(self.path, before)
        reading = JsonLines(self.path, self.problems)
        try:
            for line, obj in reading:
                self.line_no = line.no
                current = await self.place(obj, line.no, len(line.data), main, current)
        except SourceChanged as e:
            return result.fail(self.problems, f"{e}; import it again")
        except OSError as e:
            return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
        finally:
            result.lines = reading.lines
        await self._written(result)
        await self._finish(main, info, reading.consumed, st.st_size)
        result.title = main.title or (info.title if info else None)
        return result

    async def _written(self, result: FileResult) -> None:
        """Flush what every target holds, and say on `result` what was written, where, and what was wrong."""
        for target in self.targets:
            await target.writer.flush()
        result.entries = sum(t.writer.written for t in self.targets)
        result.sessions = [t.writer.session_id for t in self.targets if t.writer.written]
        result.problems = self.problems

    async def _continue(self, plan: Plan, result: FileResult, size: int) -> FileResult:
        """A file tether exported, coming back: its own lines are only read (for what later lines refer to),
        the lines Claude Code appended go to the session the plan says."""
        result.session_id, result.title = plan.into, plan.origin.title
        if plan.outcome == "unchanged":
            result.outcome, result.note = "unchanged", plan.note(0, self.dry_run)
            return result

        writer = continuation_writer(self.store, plan, dry_run=self.dry_run)
        main = _Target(writer, title=plan.origin.title)
        self.targets.append(main)
        current = main
        exported: dict[str, int] | None = None
        self.last_usage, self.counted = _last_usage_lines(self.path, 0)
        reading = JsonLines(self.path, self.problems)
        try:
            for line, obj in reading:
                self.line_no = line.no
                if line.no <= plan.skip:
                    self._see(obj, main, plan.start)
                    continue
                if exported is None:  # a branch from an exported line forks the session at that line's entry
                    exported = _exported_seqs(self.session_id or self.key, plan.start)
                    self.nodes.update({u: (main, exported.get(u, plan.start)) for u in self.exported_nodes})
                if self._recorded_again(obj, main):
                    continue
                current = await self.place(obj, line.no, len(line.data), main, current)
        except SourceChanged as e:
            return result.fail(self.problems, f"{e}; import it again")
        except OSError as e:
            return result.fail(self.problems, f"cannot read it: {e.strerror or e}")
        finally:
            result.lines = reading.lines
        await self._written(result)
        result.note = plan.note(result.entries, self.dry_run)
        result.outcome = plan.file_outcome(result.entries, self.dry_run)
        if not self.dry_run and (result.entries or plan.record):
            await record_continuation(self.store, plan, offset=reading.consumed, size=size, lines=reading.lines)
        return result

    def _see(self, obj: Any, main: _Target, start: int) -> None:
        """An exported line: what later lines need of it, nothing written (its entry is the session's own)."""
        if not isinstance(obj, dict):
            return
        if self.directory is None and isinstance(obj.get("cwd"), str) and obj["cwd"]:
            self.directory = os.path.normpath(obj["cwd"])
        if self.session_id is None and isinstance(obj.get("sessionId"), str):
            self.session_id = obj["sessionId"]
        self._note(obj)
        uuid = obj.get("uuid")
        if isinstance(uuid, str) and obj.get("isSidechain") is not True:
            self._typed_child(obj, uuid)
            self.exported_nodes.append(uuid)
            self.nodes[uuid] = (main, start)
            main.tip = self.last_node = uuid
            self.exported_blocks += _block_keys(obj)
            self.block_end[uuid] = len(self.exported_blocks)
            self.line_ending[len(self.exported_blocks)] = uuid

    def _recorded_again(self, obj: Any, main: _Target) -> bool:
        """Whether a line Claude Code appended is one of the export's messages written again: on resume it
        splits a message of several blocks into one line per block, under new ids, and writes every message
        after it again too, chained from the last one it kept. Such a line (its parent an exported line or
        one written again, its blocks the export's next ones) is the session's own: it is not imported,
        and a line after it continues where it stands in the export."""
        if not isinstance(obj, dict) or obj.get("type") not in ("user", "assistant"):
            return False
        uuid, parent = obj.get("uuid"), obj.get("parentUuid")
        if not isinstance(uuid, str) or not isinstance(parent, str) or parent not in self.block_end:
            return False
        keys = _block_keys(obj)
        at = self.block_end[parent]
        if not keys or self.exported_blocks[at : at + len(keys)] != keys:
            return False
        self._note(obj)
        self._typed_child(obj, uuid)
        end = at + len(keys)
        self.block_end[uuid] = end
        stands = self.line_ending.get(end)
        if stands is None:  # within an exported message: a line after this one branches at that message
            stands = next(u for pos, u in sorted(self.line_ending.items()) if pos > end)
        self.nodes[uuid] = self.nodes[stands]
        if main.tip == stands:
            main.tip = uuid
        if self.last_node == stands:
            self.last_node = uuid
        return True

    async def _finish(self, main: _Target, info: SessionInfo | None, consumed: int, size: int) -> None:
        if self.dry_run or (main.new and not main.writer.written):
            return  # nothing was written (an empty file): no session
        await main.writer.ensure()
        current = await self.store.get_session(main.writer.session_id)
        mark = {
            **import_mark(current),
            **self._mark(),
            "offset": consumed,
            "size": size if consumed == size else consumed,
            "head": head_digest(self.path, consumed),
            "entries": current.entry_count,
        }
        known_agents = {**mark.get("agents", {}), **self.agents}
        if known_agents:
            mark["agents"] = known_agents
        fields: dict[str, Any] = {"metadata": {**current.metadata, IMPORTED: mark}}
        if self.model and current.model != self.model:
            fields["model"] = self.model
        await self.store.update_session(current.id, **fields)
        for target in self.targets[1:]:
            if not target.writer.written:
                continue
            child = await self.store.get_session(target.writer.session_id)
            child_mark = {**import_mark(child), "entries": child.entry_count, "at": time.time()}
            meta = {**child.metadata, IMPORTED: child_mark}
            task = meta.get("task")
            agent = task.get("agent_id") if isinstance(task, dict) else None
            if isinstance(task, dict) and "call_id" not in task and agent in self.agents:
                meta["task"] = {**task, "call_id": self.agents[agent]}
            await self.store.update_session(child.id, metadata=meta)

    async def place(self, obj: Any, no: int, size: int, main: _Target, current: _Target) -> _Target:
        """Put one decoded line into the session it belongs to; returns where the next unparented line goes."""
        if not isinstance(obj, dict):
            kind = type(obj).__name__
            self.problems.append(Problem(self.path, no, f"not a transcript entry (a JSON {kind}); kept as a marker"))
            await self.emit(current, lambda: raw_marker("claude-code.unknown", no, obj), obj, size)
            return current
        if self.directory is None and isinstance(obj.get("cwd"), str) and obj["cwd"]:
            self.directory = os.path.normpath(obj["cwd"])
        if self.session_id is None and isinstance(obj.get("sessionId"), str):
            self.session_id = obj["sessionId"]
        if self.first_time is None:
            self.first_time = parse_time(obj.get("timestamp"))
        uuid = obj.get("uuid") if isinstance(obj.get("uuid"), str) else None
        if obj.get("isSidechain") is True and self.agent_id is None:
            return await self._place_side(obj, no, size, uuid, main, current)
        if uuid is None:
            # a title names the conversation: its main session, whichever branch was written last
            where = main if obj.get("type") in ("custom-title", "ai-title") else current
            leaf = obj.get("leafUuid")
            if obj.get("type") == "summary" and isinstance(leaf, str) and leaf in self.nodes:
                where = self.nodes[leaf][0]
            await self.emit(where, lambda: self.convert(obj, no, where), obj, size)
            return current
        target, seq_parent = self._parent_of(obj)
        if target is None:
            target = current  # the first line of the tree
        earlier = self._typed_child(obj, uuid)
        if earlier is not None and earlier != uuid and target.tip != seq_parent[1]:
            # a message the person typed, edited and sent again (the same parent as an earlier one): the
            # only thing that branches a Claude Code conversation
            target = await self.fork(target, seq_parent[0], uuid)
        seq = await self.emit(target, lambda: self.convert(obj, no, target), obj, size)
        self.nodes[uuid] = (target, seq)
        target.tip = uuid
        self.last_node = uuid
        return target

    def _typed_child(self, obj: dict[str, Any], uuid: str) -> str | None:
        """For a message a person typed: the first typed message with the same parent (this one when it is
        the first). None for any other line: tool results, progress, bash-mode and command lines, meta
        lines share parents in ordinary conversations and never branch."""
        parent = obj.get("parentUuid")
        typed = _typed(obj)
        if typed and self.first_prompt is None:
            self.first_prompt = " ".join(_user_text(obj).split())[:80] or None
        if not isinstance(parent, str) or not typed:
            return None
        return self.typed_children.setdefault(parent, uuid)

    def _parent_of(self, obj: dict[str, Any]) -> tuple[_Target | None, tuple[int, str | None]]:
        """The session holding this line's parent, and (the parent's seq there, its uuid); for a line of
        tool results whose parent is not known, the session holding the calls."""
        for key in ("parentUuid", "logicalParentUuid"):
            parent = obj.get(key)
            if isinstance(parent, str) and parent in self.nodes:
                target, seq = self.nodes[parent]
                return target, (seq, parent)
        for call_id in _result_ids(obj):
            if call_id in self.call_targets:
                target = self.call_targets[call_id]
                return target, (target.writer.count, target.tip)
        if self.last_node is not None:
            target, seq = self.nodes[self.last_node]
            return target, (seq, self.last_node)
        return None, (0, None)

    async def _place_side(
        self, obj: dict[str, Any], no: int, size: int, uuid: str | None, main: _Target, current: _Target
    ) -> _Target:
        agent = obj.get("agentId") if isinstance(obj.get("agentId"), str) else None
        parent = obj.get("parentUuid")
        target = self.side_nodes.get(parent) if isinstance(parent, str) else None
        if target is None:
            group = agent or uuid or f"line-{no}"
            target = self.side_groups.get(group)
            if target is None:
                call_id = self.agents.get(agent) if agent else None
                if call_id is None:
                    call_id = self.task_prompts.pop(_user_text(obj), None)
                target = await self.side_target(main, group, agent, call_id)
                self.side_groups[group] = target
        await self.emit(target, lambda: self.convert(obj, no, target), obj, size)
        if uuid is not None:
            self.side_nodes[uuid] = target
        return current

    async def emit(self, target: _Target, build: Callable[[], EntryBody], obj: Any, size: int) -> int:
        """Count the line's entry in `target` and, when the store does not have it yet, build and add it."""
        seq = target.writer.take()
        if isinstance(obj, dict):
            self._note(obj)
            for call_id in _call_ids(obj):
                self.call_targets[call_id] = target
        if target.writer.needs(seq):
            body = build()
            if isinstance(body, TitleChange):
                target.title = body.title
            at = parse_time(obj.get("timestamp")) if isinstance(obj, dict) else None
            await target.writer.add(body, at or self.first_time or time.time(), size)
        return seq

    def _note(self, obj: dict[str, Any]) -> None:
        """What later lines need to know of this one, read whether or not it is written now."""
        message = obj.get("message")
        if not isinstance(message, dict):
            return
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    name = str(block.get("name", ""))
                    self.names[block["id"]] = name
                    args = block.get("input")
                    if name in ("Task", "Agent") and isinstance(args, dict) and isinstance(args.get("prompt"), str):
                        self.task_prompts[args["prompt"]] = block["id"]
                elif block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                    result = obj.get("toolUseResult")
                    agent = result.get("agentId") if isinstance(result, dict) else block.get("agentId")
                    if isinstance(agent, str):
                        self.agents[agent] = block["tool_use_id"]
        self.fresh_usage = False
        if obj.get("type") == "assistant" and isinstance(message.get("usage"), dict):
            # a streamed API message is written as several lines, each with the usage known so far: the
            # last line's counts are the message's (the first's output count is partial)
            key = self.usage_key = _usage_key(obj)
            last = self.last_usage.get(key) if key is not None else None
            if key is None:
                self.fresh_usage = True
            elif last is not None:
                self.fresh_usage = self.line_no == last
            else:  # a line the file did not have when it was scanned: the first of its message counts
                self.fresh_usage = key not in self.seen_usage
            if key is not None:
                self.seen_usage.add(key)
        model = message.get("model")
        if obj.get("type") == "assistant" and isinstance(model, str) and model != "<synthetic>":
            self.model = model

    # --- conversion ---

    def convert(self, obj: dict[str, Any], no: int, target: _Target) -> EntryBody:
        kind = obj.get("type")
        if kind in ("user", "assistant"):
            message = obj.get("message")
            if not isinstance(message, dict) or not isinstance(message.get("content"), str | list):
                self.problems.append(
                    Problem(self.path, no, f"a {kind} line without a readable message; kept as a marker")
                )
                return raw_marker(f"claude-code.{kind}", no, obj, unreadable=True)
            if kind == "user" and obj.get("isCompactSummary") is True:
                return self._compaction(obj, message, target)
            if kind == "assistant" and obj.get("isApiErrorMessage") is True:
                # Claude Code's reply when the API failed for good: an error, not the model's answer
                text = _user_text(obj) or str(obj.get("error") or "")
                return markers.to_marker(markers.ErrorRecord(message=text, source="claude-code", line=no, raw=obj))
            return self._message(obj, message, kind)
        if kind == "system" and (obj.get("subtype") == "api_error" or obj.get("level") == "error"):
            error = markers.ErrorRecord(message=_system_error_text(obj), source="claude-code", line=no, raw=obj)
            return markers.to_marker(error)
        if kind == "system" and obj.get("subtype") == "compact_boundary":
            meta = obj.get("compactMetadata")
            if isinstance(meta, dict) and isinstance(meta.get("preTokens"), int):
                self.pre_tokens = meta["preTokens"]
        if kind == "summary" and isinstance(obj.get("summary"), str) and obj.get("leafUuid") in self.nodes:
            return TitleChange(title=obj["summary"])
        for key, field_name in (("custom-title", "customTitle"), ("ai-title", "aiTitle")):
            if kind == key and isinstance(obj.get(field_name), str) and obj[field_name]:
                return TitleChange(title=obj[field_name])
        name = kind if isinstance(kind, str) and kind else "unknown"
        return raw_marker(f"claude-code.{name}", no, obj)

    def _compaction(self, obj: dict[str, Any], message: dict[str, Any], target: _Target) -> EntryBody:
        content = message["content"]
        text = content if isinstance(content, str) else "\n".join(_texts(content))
        seq = target.writer.count
        tokens, self.pre_tokens = self.pre_tokens, None
        return Compaction(
            summary=text,
            first_kept_seq=seq,
            strategy="claude-code",
            tokens_before=tokens,
            metadata={"claude_code": self._extra(obj)},
        )

    def _extra(self, obj: dict[str, Any]) -> dict[str, Any]:
        extra = {k: v for k, v in obj.items() if k not in _LINE_FIELDS_KEPT_ELSEWHERE}
        if extra.get("sessionId") == self.session_id:
            extra.pop("sessionId")
        if isinstance(extra.get("cwd"), str) and os.path.normpath(extra["cwd"]) == self.directory:
            extra.pop("cwd")
        return extra

    def _message(self, obj: dict[str, Any], message: dict[str, Any], kind: str) -> Message:
        extra = self._extra(obj)
        leftover = {k: v for k, v in message.items() if k not in _MESSAGE_FIELDS}
        if leftover:
            extra["message"] = leftover
        content = message["content"]
        parts: list[Part] = []
        unknown: list[dict[str, Any]] = []
        renamed: dict[str, str] = {}
        if isinstance(content, str):
            parts.append(TextPart(text=content))
        else:
            for index, block in enumerate(content):
                if (
                    isinstance(block, dict)
                    and block.get("type") == "tool_result"
                    and isinstance(block.get("content"), list)
                ):
                    parts += _result_parts(block, self.names)  # with its images as image parts
                    continue
                part = _part(block, self.names, renamed)
                if part is None:
                    unknown.append({"index": index, "block": block})
                else:
                    parts.append(part)
        if unknown:
            extra["blocks"] = unknown
        if renamed:
            extra["tool_names"] = renamed
        has_results = any(isinstance(p, ToolResultPart) for p in parts)
        if kind == "assistant":
            model = message.get("model") if isinstance(message.get("model"), str) else None
            return Message(
                role="assistant",
                parts=parts,
                model=model,
                provider="anthropic",
                usage=self._usage(obj, message, model),
                finish_reason=message.get("stop_reason") if isinstance(message.get("stop_reason"), str) else None,
                metadata={"claude_code": extra},
            )
        tether = obj.get("tether")
        if isinstance(tether, dict) and tether.get("role") == "system" and not has_results:
            return Message(role="system", parts=parts, metadata={"claude_code": extra})  # tether's export says so
        return Message(role="tool" if has_results else "user", parts=parts, metadata={"claude_code": extra})

    def _usage(self, obj: dict[str, Any], message: dict[str, Any], model: str | None) -> Usage | None:
        raw = message.get("usage")
        if not isinstance(raw, dict):
            return None
        if not self.fresh_usage:
            return None  # the same API message, streamed over several lines: counted once

        def n(name: str) -> int:
            value = raw.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

        reads, writes = n("cache_read_input_tokens"), n("cache_creation_input_tokens")
        usage = Usage(
            input_tokens=n("input_tokens") + reads + writes,
            output_tokens=n("output_tokens"),
            cache_read_tokens=reads,
            cache_write_tokens=writes,
        )
        cost = _decimal(obj.get("costUSD"))
        earlier = self.counted.get(self.usage_key) if self.usage_key is not None else None
        if earlier is not None:  # an earlier import counted the message as far as it was then: add the rest
            key, self.usage_key = self.usage_key, None
            before = self._usage(earlier["line"], earlier["line"]["message"], model)
            self.usage_key = key
            if before is not None:
                usage = Usage(
                    input_tokens=max(usage.input_tokens - before.input_tokens, 0),
                    output_tokens=max(usage.output_tokens - before.output_tokens, 0),
                    cache_read_tokens=max(usage.cache_read_tokens - before.cache_read_tokens, 0),
                    cache_write_tokens=max(usage.cache_write_tokens - before.cache_write_tokens, 0),
                )
                cost = cost - before.cost if cost is not None and before.cost is not None else None
        if cost is None and model:
            cost = self._price(model, usage)
        return msgspec.structs.replace(usage, cost=cost) if cost is not None else usage

    def _price(self, model: str, usage: Usage) -> Decimal | None:
        if self.catalog is None:
            from ..providers.catalog import Catalog

            self.catalog = Catalog()
        info = self.catalog.get("anthropic", model) or self.catalog.get("anthropic", re.sub(r"-\d{8}$", "", model))
        return info.cost(usage) if info is not None else None


def _block_keys(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A line's message as (role, block type, what identifies the block) per block: what Claude Code keeps
    when it writes a message again (a string is a text block)."""
    message = obj.get("message")
    if not isinstance(message, dict):
        return []
    role = str(message.get("role") or obj.get("type"))
    content = message.get("content")
    if isinstance(content, str):
        return [(role, "text", content)]
    keys: list[tuple[str, str, str]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = str(block.get("type"))
        for name in ("text", "thinking", "id", "tool_use_id", "data"):
            if isinstance(block.get(name), str):
                keys.append((role, kind, block[name]))
                break
        else:
            keys.append((role, kind, ""))
    return keys


_NOT_TYPED = (
    "<bash-input>", "<bash-stdout>", "<bash-stderr>", "<command-name>", "<command-message>", "<command-args>",
    "<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>", "[Request interrupted",
    "<task-notification>",
)  # fmt: skip
"""How the user lines that Claude Code writes itself begin: bash mode (``!``), slash commands, interruptions,
a background task's notice."""


def _typed(obj: dict[str, Any]) -> bool:
    """Whether a line is a message a person typed (not tool results, meta lines, summaries, bash-mode or
    command lines, which Claude Code writes itself)."""
    if obj.get("type") != "user" or obj.get("isSidechain") is True:
        return False
    if any(obj.get(flag) is True for flag in ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly")):
        return False
    if obj.get("toolUseResult") is not None:
        return False
    origin = obj.get("origin")  # later versions say where a user line came from: "human", "peer", ...
    if isinstance(origin, dict) and isinstance(origin.get("kind"), str) and origin["kind"] != "human":
        return False
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return False
        text = "\n".join(_texts(content))
    elif isinstance(content, str):
        text = content
    else:
        return False
    return not text.lstrip().startswith(_NOT_TYPED)


def _blocks_of(obj: dict[str, Any], kind: str, key: str) -> list[str]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b[key] for b in content if isinstance(b, dict) and b.get("type") == kind and isinstance(b.get(key), str)]


def _call_ids(obj: dict[str, Any]) -> list[str]:
    return _blocks_of(obj, "tool_use", "id")


def _result_ids(obj: dict[str, Any]) -> list[str]:
    return _blocks_of(obj, "tool_result", "tool_use_id")


def _usage_key(obj: dict[str, Any]) -> tuple[str, str] | None:
    """What identifies the API message an assistant line is part of (None: the line is one alone)."""
    message = obj.get("message")
    mid = message.get("id") if isinstance(message, dict) else None
    return (mid, str(obj.get("requestId"))) if isinstance(mid, str) else None


def _last_usage_lines(
    path: str, before: int
) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], dict[str, Any]]]:
    """The last line of each API message that carries its usage (the message's final counts); and, for a
    message whose last line comes after byte `before` (where an earlier import stopped) while an earlier
    line of it came before, that earlier line (``{"line": ...}``): the import then counted its usage."""
    last: dict[tuple[str, str], int] = {}
    counted: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        for line in read_lines(path):
            if b'"usage"' not in line.data:
                continue
            try:
                obj = decode_json(line.data)
            except msgspec.DecodeError:
                continue
            if not isinstance(obj, dict) or obj.get("type") != "assistant":
                continue
            message = obj.get("message")
            key = _usage_key(obj)
            if key is not None and isinstance(message, dict) and isinstance(message.get("usage"), dict):
                last[key] = line.no
                if line.end <= before:
                    counted[key] = {"line": obj}
                elif key in counted:
                    counted[key]["after"] = True
    except (OSError, SourceChanged):
        pass  # the import that reads it next says what is wrong
    return last, {key: value for key, value in counted.items() if value.get("after")}


def _exported_seqs(target_id: str, entries: int) -> dict[str, int]:
    """The entry each line of tether's export of a session (as `target_id`, `entries` entries) was written
    for: its line ids are derived from the entries' seqs (`line_uuid`)."""
    try:
        UUID(target_id)
    except ValueError:
        return {}
    seqs: dict[str, int] = {}
    for seq in range(1, entries + 1):
        for key in (str(seq), f"{seq}/no-result", f"{seq}/boundary"):
            seqs[line_uuid(target_id, key)] = seq
    return seqs


def _meta_call_id(path: str) -> str | None:
    """The call that ran a sub-agent, from its ``agent-<id>.meta.json`` when Claude Code wrote one."""
    meta = Path(path).with_suffix(".meta.json")
    try:
        data = decode_json(meta.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if isinstance(data, dict):
        for key in ("toolUseId", "toolUseID", "tool_use_id"):
            if isinstance(data.get(key), str):
                return str(data[key])
    return None


def _texts(blocks: list[Any]) -> list[str]:
    return [
        b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]


def _user_text(obj: dict[str, Any]) -> str:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    return "\n".join(_texts(content)) if isinstance(content, list) else ""


def _first_string(value: Any, key: str, depth: int = 0) -> str | None:
    """The first string under `key` in nested objects, other than ``"error"`` (an API error wraps its type
    and message in one or two objects whose own type is ``"error"``)."""
    if not isinstance(value, dict) or depth > 4:
        return None
    if isinstance(value.get(key), str) and value[key] and value[key] != "error":
        return str(value[key])
    for inner in value.values():
        found = _first_string(inner, key, depth + 1)
        if found is not None:
            return found
    return None


def _system_error_text(obj: dict[str, Any]) -> str:
    """What a ``system`` error line says: its content, else its API error (status, type, message) and the
    retry Claude Code scheduled."""
    content = obj.get("content")
    if isinstance(content, str) and content.strip():
        text = content.strip()
    else:
        error = obj.get("error")
        status = error.get("status") if isinstance(error, dict) else None
        kind = _first_string(error, "type") if isinstance(error, dict) else None
        message = _first_string(error, "message") if isinstance(error, dict) else None
        code = _first_string(error, "code") if isinstance(error, dict) else None
        pieces = [f"API error {status}" if isinstance(status, int) else "API error"]
        pieces += [p for p in (kind, message or code) if p]
        if isinstance(error, str) and error:
            pieces.append(error)
        text = ": ".join(pieces)
    attempt, most, wait = obj.get("retryAttempt"), obj.get("maxRetries"), obj.get("retryInMs")
    if isinstance(attempt, int) and isinstance(most, int):
        seconds = f" in {wait / 1000:.1f} s" if isinstance(wait, int | float) and not isinstance(wait, bool) else ""
        text += f" (retry {attempt} of {most}{seconds})"
    return text


def _decimal(value: object) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        result = Decimal(str(value))
    except InvalidOperation:
        return None
    return result if result.is_finite() and result >= 0 else None


def _tether_name(name: str | None) -> str | None:
    return TOOL_NAMES[name][0] if name in TOOL_NAMES else name


def _result_parts(block: dict[str, Any], names: dict[str, str]) -> list[Part]:
    """A tool result whose content is a list of blocks: its text, then each image (or document) in it as a
    part of its own after the result (``ToolResultPart.metadata["images"]`` says how many follow it). When
    the list holds more than text, ``metadata["content"]`` keeps its shape for an export, each attachment
    block replaced by ``{"type": ..., "part": <its index among the attachments>}``."""
    content = block["content"]
    attachments: list[Part] = []
    shape: list[Any] = []
    plain = True
    for item in content:
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            shape.append(item)
            continue
        plain = False
        part = _part(item, names, {}) if isinstance(item, dict) and item.get("type") in ("image", "document") else None
        if part is None:
            shape.append(item)  # a block tether has no part for, kept as it came
            continue
        rest = {k: v for k, v in item.items() if k not in ("type", "source", "title")}
        shape.append({"type": item["type"], "part": len(attachments), **rest})
        attachments.append(part)
    metadata: dict[str, Any] = {}
    if not plain:
        metadata["content"] = shape
    if attachments:
        metadata["images"] = len(attachments)
    result = ToolResultPart(
        call_id=block["tool_use_id"], content="\n".join(_texts(content)), is_error=block.get("is_error") is True,
        name=_tether_name(names.get(block["tool_use_id"])), metadata=metadata,
    )  # fmt: skip
    return [result, *attachments]


def _part(block: Any, names: dict[str, str], renamed: dict[str, str]) -> Part | None:
    """tether's part for one content block, or None for a block it has no part for (kept in metadata)."""
    if not isinstance(block, dict):
        return None
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return TextPart(text=block["text"])
    if kind == "thinking" and isinstance(block.get("thinking"), str):
        signature = block.get("signature") if isinstance(block.get("signature"), str) else None
        return ThinkingPart(text=block["thinking"], signature=signature, provider="anthropic")
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):
        return ThinkingPart(redacted=block["data"], provider="anthropic")
    if kind == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
        name, arguments = block["name"], block.get("input")
        mapped = TOOL_NAMES.get(name)
        if mapped is not None and isinstance(arguments, dict):
            tether_name, renames = mapped
            arguments = {renames.get(k, k): v for k, v in arguments.items()}
            timeout = arguments.get("timeout")
            if name == "Bash" and isinstance(timeout, int | float) and not isinstance(timeout, bool):
                seconds = timeout / 1000
                arguments["timeout"] = int(seconds) if seconds.is_integer() else seconds
            renamed[block["id"]] = name
            name = tether_name
        return ToolCallPart(id=block["id"], name=name, arguments=arguments if arguments is not None else {})
    if kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
        content = block.get("content")
        text = content if isinstance(content, str) else "" if content is None else str(content)
        return ToolResultPart(
            call_id=block["tool_use_id"], content=text, is_error=block.get("is_error") is True,
            name=_tether_name(names.get(block["tool_use_id"])),
        )  # fmt: skip
    if kind in ("image", "document"):
        source = block.get("source")
        if not isinstance(source, dict):
            return None
        media = str(source.get("media_type") or ("image/*" if kind == "image" else "application/octet-stream"))
        data: bytes | None = None
        uri: str | None = None
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            try:
                data = base64.b64decode(source["data"], validate=True)
            except ValueError:
                return None
        elif source.get("type") == "url" and isinstance(source.get("url"), str):
            uri = source["url"]
        else:
            return None
        if kind == "image":
            return ImagePart(media_type=media, data=data, uri=uri)
        title = block.get("title") if isinstance(block.get("title"), str) else None
        return FilePart(media_type=media, data=data, uri=uri, name=title)
    return None


async def import_claude_code(store: Journal, path: str | os.PathLike[str], *, dry_run: bool = False) -> FileResult:
    """Import one Claude Code transcript file (a session's or a sub-agent's), or append what it gained since
    it was last imported. Bad lines are skipped and reported in the result; nothing raises for them."""
    return await _FileImport(store, os.fspath(path), dry_run=dry_run).run()
