"""A tether session as a Claude Code transcript (the JSONL that `claude --resume` reads, and that
`claude_code.py` imports back): one line per message, chained by ``parentUuid``; tool names and arguments
mapped back to Claude Code's; thinking that carries an Anthropic signature as thinking; a compaction as
Claude Code writes one (a ``compact_boundary`` line, then its summary as a user line); title changes as
``summary`` lines naming the line before them. Line times only grow (Claude Code resumes from its newest
line, the first of equals): an entry no newer than the line before gets that one's time and a millisecond. What the format cannot carry is counted in the `ExportReport`:

- left out: reverted entries, checkpoints and markers (tether's own), thinking without an Anthropic
  signature (Claude's API refuses to continue from it), the system prompt, child sessions, attachments
  with neither data nor address;
- flattened: a system message becomes a user line marked ``isMeta`` (its role kept under ``tether``, which
  the importer reads back), a tool call whose arguments never parsed gets ``{}``.

A session that came from Claude Code gets back the fields of its lines that tether kept (version, git branch,
``toolUseResult``, the API message id, content blocks tether had no part for)."""

from __future__ import annotations

import base64
from typing import IO, Any

import msgspec

from ..messages import (
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..store.protocols import Journal
from ..store.records import SessionInfo
from .claude_code import TOOL_NAMES
from .foreign_export import (
    NO_RESULT,
    TETHER_KEY,
    ExportReport,
    attachments_after,
    child_count,
    continuation_order,
    export_mark,
    iso_time,
    last_title,
    line_uuid,
    note_unwritten,
    result_blocks,
    session_uuid,
    written_lines,
)

__all__ = ["CLAUDE_TOOL_NAMES", "export_claude_code"]

CLAUDE_TOOL_NAMES: dict[str, str] = {}
"""tether's tool → the Claude Code tool it was mapped from (the first one, where two map to one)."""
for _claude, (_tether, _renames) in TOOL_NAMES.items():
    CLAUDE_TOOL_NAMES.setdefault(_tether, _claude)

# Fields of an imported line that describe that line's place in its old file, not the message: never copied.
_PLACE_FIELDS = frozenset(
    {"uuid", "parentUuid", "logicalParentUuid", "sessionId", "cwd", "isSidechain", "agentId", "type", "timestamp",
     "message", "blocks", "tool_names", "isCompactSummary", "leafUuid", TETHER_KEY}
)  # fmt: skip
_MESSAGE_FIELDS = frozenset({"role", "content", "model", "usage", "stop_reason"})
_encoder = msgspec.json.Encoder(decimal_format="number")


class _Writer:
    def __init__(self, out: IO[bytes], report: ExportReport, directory: str | None, mark: dict[str, Any]) -> None:
        self.out = out
        self.mark = mark
        self.report = report
        self.sid = report.target_id
        self.directory = directory
        self.parent: str | None = None
        self.latest = -1  # ms of the line before: Claude Code resumes from the newest line, so times only grow
        self.source = -1  # the newest time an entry had (an older one after it is out of order)

    def line(self, obj: dict[str, Any]) -> None:
        self.out.write(_encoder.encode(obj) + b"\n")
        self.report.lines += 1

    def base(
        self, key: str, kind: str, at: float, *, parent: str | bool | None = True, own: float | None = None
    ) -> dict[str, Any]:
        """The fields every conversation line has; chained to the line before unless `parent` says. `own` is
        the entry's time when `at` was moved (a compaction's lines): only an entry older than one before it
        is out of order."""
        uid = line_uuid(self.sid, key)
        ms = round(at * 1000)
        source = round((at if own is None else own) * 1000)
        if source < self.source:
            self.report.flatten("times raised to the line before (Claude Code resumes from the newest line)")
        self.source = max(self.source, source)
        ms = max(ms, self.latest + 1)  # a tie too: Claude Code's newest line must be the last one
        self.latest = ms
        at = ms / 1000
        obj: dict[str, Any] = {
            "parentUuid": self.parent if parent is True else (parent or None),
            "isSidechain": False,
            "userType": "external",
        }
        if self.directory is not None:
            obj["cwd"] = self.directory
        obj.update({"sessionId": self.sid, "type": kind, "uuid": uid, "timestamp": iso_time(at)})
        if self.parent is None and self.report.lines == 0:
            obj[TETHER_KEY] = dict(self.mark)  # for an import to tell (`export_mark`); Claude Code ignores it
        self.parent = uid
        return obj


def _kept(message: Message) -> dict[str, Any]:
    meta = message.metadata.get("claude_code")
    return meta if isinstance(meta, dict) else {}


def _tool_input(call: ToolCallPart, kept_names: dict[str, Any], report: ExportReport) -> tuple[str, Any]:
    """Claude Code's name and input for a tether call: the name it was imported under, else the Claude Code
    tool tether's maps from, else its own; argument renames undone, Bash's timeout back in milliseconds."""
    original = kept_names.get(call.id)
    name = original if isinstance(original, str) else CLAUDE_TOOL_NAMES.get(call.name, call.name)
    arguments = call.arguments
    if not call.arguments_ok:
        report.flatten("tool calls with unparsed arguments (written as {})")
        return name, {}
    if not isinstance(arguments, dict):
        return name, arguments if arguments is not None else {}
    mapped = TOOL_NAMES.get(name)
    if mapped is None or mapped[0] != call.name:
        return name, arguments
    back = {tether: claude for claude, tether in mapped[1].items()}
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        name_here: str = str(key)
        if name == "Bash" and name_here == "timeout" and _number(value):
            out["timeout"] = _ms(value)
        elif name == "Bash" and name_here == "timeout_ms":
            out["timeout"] = value  # an import from before timeouts were converted kept Claude Code's ms
        else:
            out[back.get(name_here, name_here)] = value
    return name, out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ms(seconds: float) -> int | float:
    ms = seconds * 1000
    return int(ms) if float(ms).is_integer() else ms


def _source(part: ImagePart | FilePart) -> dict[str, Any] | None:
    if part.data is not None:
        data = base64.b64encode(part.data).decode()
        return {"type": "base64", "media_type": part.media_type, "data": data}
    if part.uri is not None:
        return {"type": "url", "url": part.uri}
    return None


def _blocks(message: Message, report: ExportReport) -> list[dict[str, Any]]:
    kept = _kept(message)
    names = kept.get("tool_names") if isinstance(kept.get("tool_names"), dict) else {}
    blocks: list[dict[str, Any]] = []
    parts = list(message.parts)
    while parts:
        part = parts.pop(0)
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ThinkingPart):
            anthropic = part.provider in (None, "anthropic")
            if anthropic and part.signature:
                blocks.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
            elif anthropic and part.redacted:
                blocks.append({"type": "redacted_thinking", "data": part.redacted})
            else:
                report.leave_out("thinking blocks without an Anthropic signature")
        elif isinstance(part, ToolCallPart):
            name, arguments = _tool_input(part, names or {}, report)
            blocks.append({"type": "tool_use", "id": part.id, "name": name, "input": arguments})
        elif isinstance(part, ToolResultPart):
            taken = attachments_after(part)
            attachments, parts = parts[:taken], parts[taken:]
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": part.call_id,
                "content": result_blocks(part, attachments, "text", "image", lambda a: _attachment_block(a, report)),
            }
            if part.is_error:
                block["is_error"] = True
            blocks.append(block)
        else:
            attachment = _attachment_block(part, report)
            if attachment is not None:
                blocks.append(attachment)
    extra = kept.get("blocks")
    for item in extra if isinstance(extra, list) else []:
        if isinstance(item, dict) and isinstance(item.get("index"), int) and isinstance(item.get("block"), dict):
            blocks.insert(min(item["index"], len(blocks)), item["block"])  # a block tether had no part for
    return blocks


def _attachment_block(part: Any, report: ExportReport) -> dict[str, Any] | None:
    source = _source(part) if isinstance(part, ImagePart | FilePart) else None
    if source is None:
        report.leave_out("attachments without data or address")
        return None
    block: dict[str, Any] = {"type": "image" if isinstance(part, ImagePart) else "document", "source": source}
    if isinstance(part, FilePart) and part.name:
        block["title"] = part.name
    return block


def _usage(usage: Usage) -> dict[str, Any]:
    reads, writes = usage.cache_read_tokens, usage.cache_write_tokens
    return {
        "input_tokens": max(usage.input_tokens - reads - writes, 0),
        "cache_creation_input_tokens": writes,
        "cache_read_input_tokens": reads,
        "output_tokens": usage.output_tokens,
    }


def _restore(obj: dict[str, Any], kept: dict[str, Any]) -> None:
    """Put back the fields an imported line had that were not about its place in its old file."""
    for key, value in kept.items():
        if key not in _PLACE_FIELDS and key not in obj:
            obj[key] = value


def _message_line(w: _Writer, entry: Entry, message: Message) -> None:
    kept = _kept(message)
    key = str(entry.seq)
    if message.role == "assistant":
        blocks = _blocks(message, w.report)
        if not blocks:  # Claude's API refuses an assistant message with no content
            w.report.leave_out("assistant messages with nothing Claude Code can carry")
            return
        obj = w.base(key, "assistant", entry.created_at)
        body: dict[str, Any] = {"id": f"msg_tether_{line_uuid(w.sid, key + '/message').replace('-', '')[:24]}"}
        leftover = kept.get("message")
        if isinstance(leftover, dict):
            body.update({k: v for k, v in leftover.items() if k not in _MESSAGE_FIELDS})
        body.update({"type": body.get("type", "message"), "role": "assistant"})
        if message.model is not None:
            body["model"] = message.model
        body["content"] = blocks
        body["stop_reason"] = message.finish_reason
        body.setdefault("stop_sequence", None)
        if message.usage is not None:
            body["usage"] = _usage(message.usage)
            if message.usage.reasoning_tokens:
                w.report.leave_out("reasoning-token counts (Claude Code's usage has no field)")
        obj["message"] = body
        if message.usage is not None and message.usage.cost is not None:
            obj["costUSD"] = message.usage.cost
    else:
        obj = w.base(key, "user", entry.created_at)
        blocks = _blocks(message, w.report)
        plain = len(message.parts) == 1 and isinstance(message.parts[0], TextPart) and not kept.get("blocks")
        obj["message"] = {"role": "user", "content": message.parts[0].text if plain else blocks}  # type: ignore[union-attr]
        if message.role == "system":
            obj["isMeta"] = True
            obj.setdefault(TETHER_KEY, {})["role"] = "system"
            w.report.flatten("system messages (as user lines marked isMeta)")
    _restore(obj, kept)
    w.line(obj)


def _compaction_lines(w: _Writer, entry: Entry, body: Compaction) -> None:
    """Claude Code's compaction: a boundary (which cuts the chain: the model's context starts after it)
    and the summary as a user line that Claude Code marks as one."""
    before = w.parent
    # the summary gets the entry's time (or the first free one) and the boundary the millisecond before
    at = max(round(entry.created_at * 1000), w.latest + 2) / 1000
    boundary = w.base(f"{entry.seq}/boundary", "system", at - 0.001, parent=False, own=entry.created_at)
    boundary.update(
        {
            "logicalParentUuid": before,
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "isMeta": False,
            "level": "info",
            "compactMetadata": {"trigger": "manual", "preTokens": body.tokens_before or 0},
        }
    )
    w.line(boundary)
    summary = w.base(str(entry.seq), "user", at, own=entry.created_at)
    summary.update({"message": {"role": "user", "content": body.summary}, "isCompactSummary": True,
                    "isVisibleInTranscriptOnly": True})  # fmt: skip
    w.line(summary)
    w.report.flatten("compactions (as a boundary and a summary message)")


def _no_results(w: _Writer, entry: Entry, call_ids: list[str]) -> None:
    """Error results for calls that never got one: Claude's API refuses a tool use without its result."""
    line = w.base(f"{entry.seq}/no-result", "user", entry.created_at)
    blocks = [{"type": "tool_result", "tool_use_id": c, "content": NO_RESULT, "is_error": True} for c in call_ids]
    line["message"] = {"role": "user", "content": blocks}
    w.line(line)
    w.report.flatten("calls that never got a result (given an error result)", len(call_ids))


def _title_line(w: _Writer, title: str) -> None:
    """A title as Claude Code keeps one: a ``summary`` line naming the line it was written after (Claude
    Code shows the summary of a session's last line)."""
    if w.parent is None:
        w.report.leave_out("titles before any message")
        return
    w.line({"type": "summary", "summary": title, "leafUuid": w.parent})


async def export_claude_code(
    store: Journal, session_id: str, out: IO[bytes], *, target_id: str | None = None
) -> ExportReport:
    """Write session `session_id` to `out` as a Claude Code transcript and say what it left out. The
    transcript's session id is `target_id` (default: a UUID derived from the tether id). Its first line
    says where it came from (`export_mark`), so that importing it back adds only what Claude Code added."""
    info = await store.get_session(session_id)
    target = target_id or session_uuid(info.id)
    lines = await written_lines(lambda sink: _export(store, info, sink, target, export_mark(info, 0)))
    return await _export(store, info, out, target, export_mark(info, lines))


async def _export(store: Journal, info: SessionInfo, out: IO[bytes], target: str, mark: dict[str, Any]) -> ExportReport:
    report = ExportReport("claude-code", info.id, target)
    w = _Writer(out, report, info.directory, mark)
    titles: list[str] = []
    unanswered: set[str] = set()
    async for entry in continuation_order(store, info, report, unanswered):
        body = entry.body
        report.entries += 1
        if isinstance(body, Message):
            _message_line(w, entry, body)
            missing = [c.id for c in body.tool_calls if c.id in unanswered]
            if missing:
                _no_results(w, entry, missing)
        elif isinstance(body, Compaction):
            _compaction_lines(w, entry, body)
        elif isinstance(body, TitleChange):
            if body.title:
                titles.append(body.title)
                _title_line(w, body.title)
            else:
                report.leave_out("title clearings")
        elif note_unwritten(body, report):
            report.entries -= 1
    final = last_title(info.title, titles)
    if final is not None:
        _title_line(w, final)
    if info.system_prompt:
        report.leave_out("system prompt (Claude Code keeps none per session)")
    children = await child_count(store, info.id)
    if children:
        report.leave_out("child sessions (export each by its id)", children)
    return report
