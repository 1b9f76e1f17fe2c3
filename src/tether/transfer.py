"""Moving sessions in and out of a store: tether's own JSON export (streamed entry by entry), its import
(validated in full before one all-or-nothing write), and a readable Markdown transcript. The compact
renderings of tool calls, results and reverted spans are shared with the CLI's `sessions show`."""

from __future__ import annotations

import codecs
import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec

from .errors import CorruptEntry, ImportFormatError, InvalidId, InvalidInput, SessionNotFound
from .ids import check_id, new_session_id
from .messages import (
    Checkpoint,
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    decode_body,
    encode_json,
)
from .store.base import SessionInfo, Store, validate_bodies

FORMAT = "tether.session"
VERSION = 1

__all__ = [
    "FORMAT",
    "VERSION",
    "SessionExport",
    "attachment_label",
    "call_signature",
    "export_json",
    "export_markdown",
    "hidden_spans",
    "import_file",
    "import_json",
    "is_hidden",
    "parse_export",
    "result_outcome",
    "session_record",
    "span_label",
]


class SessionExport(msgspec.Struct, frozen=True):
    """A parsed and fully validated tether export: the session's row and its whole journal."""

    session: SessionInfo
    entries: list[Entry]


# --- export ------------------------------------------------------------------------------------------------


def session_record(info: SessionInfo) -> dict[str, Any]:
    """Every field of a session row, defaults included, as JSON-ready values. Cost is normalized so that
    backends that keep different trailing zeros export the same text."""
    record = {name: getattr(info, name) for name in info.__struct_fields__}
    record["cost"] = str(info.cost.normalize()) if info.cost else "0"
    record["metadata"] = dict(info.metadata)
    return record


async def export_json(store: Store, session_id: str, out: IO[bytes]) -> SessionInfo:
    """Write the session as a tether JSON document to `out`, one entry per line, reading the journal in
    batches so that a long session is never held in memory whole. Entries appended while this runs are left
    out: the export is the session as it was when it started. Returns that session row."""
    info = await store.get_session(session_id)
    head = {"format": FORMAT, "version": VERSION, "session": session_record(info)}
    # The document is written by hand around the entry stream: the header object without its closing brace,
    # then the entries array one line at a time. Output stays valid JSON and diffs line by line.
    out.write(encode_json(head)[:-1] + b',\n"entries":[')
    expected = 1
    async for entry in store.iter_entries(session_id):
        if entry.seq > info.entry_count:
            break
        if entry.seq != expected:
            # The store skipped an unreadable entry. An export with a hole could never be imported.
            raise CorruptEntry(session_id, expected, "unreadable, so the export would be incomplete")
        out.write((b"\n" if expected == 1 else b",\n") + encode_json(entry))
        expected += 1
    if expected != info.entry_count + 1:
        raise CorruptEntry(session_id, expected, "unreadable, so the export would be incomplete")
    out.write(b"\n]}\n")
    return info


# --- import ------------------------------------------------------------------------------------------------


class _RawEntry(msgspec.Struct):
    seq: int
    created_at: float
    body: msgspec.Raw


_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_session_decoder = msgspec.json.Decoder(SessionInfo)
_entries_decoder = msgspec.json.Decoder(list[_RawEntry])


def _fail(source: str, problem: str) -> ImportFormatError:
    return ImportFormatError(f"cannot import {source}: {problem}")


def _at(error: Exception, prefix: str) -> str:
    """msgspec says where a value was wrong as `$...`; say it from the top of the document instead."""
    return str(error).replace("`$", f"`{prefix}")


def _decode_document(data: bytes, source: str) -> dict[str, msgspec.Raw]:
    if not data.strip():
        raise _fail(source, "the file is empty")
    if data.startswith(b"\x1f\x8b"):
        raise _fail(source, "the file is gzip-compressed; decompress it first")
    if b"\x00" in data[:65536]:
        raise _fail(source, "the file is binary, not a JSON session export")
    bad = _utf8_error_at(data)
    if bad is not None:
        raise _fail(source, f"the file is binary or not UTF-8 text (byte {bad}), not a JSON session export")
    try:
        return _top_decoder.decode(data)
    except msgspec.ValidationError as e:
        shape = data.lstrip()[:1]
        what = {b"[": "a JSON array", b'"': "a JSON string"}.get(shape, "not a JSON object")
        raise _fail(source, f"the top level is {what}; a tether export is one object ({e})") from None
    except msgspec.DecodeError as e:
        reason = str(e)
        if "truncated" in reason:
            raise _fail(source, "the file is truncated: the JSON ends before the document does") from None
        if "trailing characters" in reason:
            first = data.lstrip().split(b"\n", 1)[0]
            try:
                msgspec.json.decode(first)
            except msgspec.DecodeError:
                pass
            else:
                raise _fail(
                    source,
                    "the file is JSON Lines (one JSON value per line, like a Claude Code or Codex transcript), "
                    "not a tether session export",
                ) from None
        raise _fail(source, f"the file is not valid JSON ({reason})") from None


def _utf8_error_at(data: bytes, chunk: int = 1 << 20) -> int | None:
    """The offset of the first byte that is not valid UTF-8, or None. msgspec leaves the text inside
    deferred (`Raw`) values unchecked, so it is checked here once, a chunk at a time, without a copy."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for start in range(0, len(data), chunk):
        try:
            decoder.decode(view[start : start + chunk], final=start + chunk >= len(data))
        except UnicodeDecodeError as e:
            return start + e.start
    return None


def parse_export(data: bytes | str, *, source: str = "input") -> SessionExport:
    """Read and check a whole tether export before anything is written: the format marker and version, the
    session row and its ids, dense seqs 1..n, every entry body, and reverts that point back. Raises
    `ImportFormatError` saying what is wrong; `source` names the file in that message."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a byte-order mark some editors add
    doc = _decode_document(raw, source)

    marker = msgspec.json.decode(doc["format"]) if "format" in doc else None
    if marker != FORMAT:
        if marker is None:
            keys = ", ".join(sorted(doc)[:8]) or "none"
            found = f"no 'format' field (top-level keys: {keys})"
        else:
            found = f"its format is {str(marker)[:60]!r}"
        raise _fail(source, f"not a tether session export: {found}; expected 'format': {FORMAT!r}")
    version = msgspec.json.decode(doc["version"]) if "version" in doc else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(source, f"'version' must be a positive integer, not {version!r}")
    if version > VERSION:
        raise _fail(source, f"it was written by a newer tether (format version {version}; this one reads {VERSION})")
    for key in ("session", "entries"):
        if key not in doc:
            raise _fail(source, f"the {key!r} field is missing")

    try:
        info = _session_decoder.decode(doc["session"])
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise _fail(source, f"bad session record: {_at(e, '$.session')}") from None
    try:
        check_id(info.id, "session id")
        for name, value in (("parent_id", info.parent_id), ("forked_from", info.forked_from)):
            if value is not None:
                check_id(value, name)
    except InvalidId as e:
        raise _fail(source, str(e)) from None

    try:
        raw_entries = _entries_decoder.decode(doc["entries"])
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise _fail(source, f"bad entry list: {_at(e, '$.entries')}") from None
    entries: list[Entry] = []
    for i, item in enumerate(raw_entries, 1):
        if item.seq != i:
            raise _fail(source, f"entry {i} has seq {item.seq}: seqs must run 1, 2, 3, ... with no gaps or repeats")
        try:
            body = decode_body(item.body)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise _fail(source, f"entry {i}: the body does not decode: {_at(e, f'$.entries[{i - 1}].body')}") from None
        entries.append(Entry(item.seq, item.created_at, body))
    if info.entry_count != len(entries):
        raise _fail(
            source,
            f"the session record says {info.entry_count} entries but the file holds {len(entries)} "
            "(cut short or edited?)",
        )
    if entries:
        try:
            validate_bodies([e.body for e in entries], 1)
        except InvalidInput as e:
            raise _fail(source, str(e)) from None
    return SessionExport(info, entries)


async def import_json(
    store: Store, data: bytes | str | SessionExport, *, new_id: bool = False, source: str = "input"
) -> SessionInfo:
    """Import a tether export, keeping its id, timestamps and entries exactly, so that exporting it again
    gives the same document. With `new_id` the session gets a fresh id and `metadata["imported_from"]` names
    the original. A parent session that is not in this store is dropped (kept as `imported_parent_id`).
    The file is validated in full first and written in one transaction: a bad file writes nothing."""
    export = data if isinstance(data, SessionExport) else parse_export(data, source=source)
    info = export.session
    if new_id:
        info = msgspec.structs.replace(info, id=new_session_id(), metadata={**info.metadata, "imported_from": info.id})
    elif await _exists(store, info.id):
        raise InvalidInput(
            f"session {info.id} already exists in this store; import it under a new id (`--new-id`) "
            "or delete the existing one first"
        )
    if info.parent_id is not None and not await _exists(store, info.parent_id):
        info = msgspec.structs.replace(
            info, parent_id=None, metadata={**info.metadata, "imported_parent_id": info.parent_id}
        )
    return await store.import_session(info, export.entries)


async def import_file(store: Store, path: str | os.PathLike[str], *, new_id: bool = False) -> SessionInfo:
    """`import_json` on a file's contents; an unreadable file is an `ImportFormatError` too."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ImportFormatError(f"cannot import {os.fspath(path)}: {e.strerror or e}") from None
    return await import_json(store, data, new_id=new_id, source=os.fspath(path))


async def _exists(store: Store, session_id: str) -> bool:
    try:
        await store.get_session(session_id)
    except SessionNotFound:
        return False
    return True


# --- compact renderings shared by the transcript views -----------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def call_signature(call: ToolCallPart, width: int = 100) -> str:
    """A tool call on one line, like ``read(path="src/a.py")``; long values are clipped."""
    if not call.arguments_ok:
        inner = "unparsed: " + _clip(" ".join((call.raw_arguments or "").split()), 60)
    elif isinstance(call.arguments, dict):
        inner = ", ".join(
            f"{key}={_clip(json.dumps(value, ensure_ascii=False), 60)}" for key, value in call.arguments.items()
        )
    elif call.arguments is None:
        inner = ""
    else:
        inner = _clip(json.dumps(call.arguments, ensure_ascii=False), 60)
    return _clip(f"{call.name}({inner})", width)


def result_outcome(result: ToolResultPart | None, width: int = 80) -> str:
    """How a tool call ended, on one line: ``✓`` and the output (its line count when it has several),
    ``✗`` and the last line of the error (where tracebacks and test runners put the point), or
    ``… no result`` when the call never got one (a run that stopped in between)."""
    if result is None:
        return "… no result"
    lines = result.content.splitlines()
    # rules like "=====" around a test runner's summary carry no meaning on one line
    texts = [" ".join(t.split()) for t in (line.strip().strip("=-_*# ") for line in lines) if t]
    if result.is_error:
        return "✗ " + (_clip(texts[-1], width) if texts else "error")
    if not texts:
        return "✓ (empty)"
    return "✓ " + (_clip(texts[0], width) if len(lines) == 1 else f"{len(lines):,} lines")


def span_label(lo: int, hi: int) -> str:
    """'entry 6' or 'entries 5–7'."""
    return f"entry {lo}" if lo == hi else f"entries {lo}–{hi}"


def hidden_spans(reverts: Iterable[tuple[int, int]], entry_count: int) -> list[tuple[int, int]]:
    """The spans (first, last seq, inclusive) that reverts hide, given every revert as (its seq, to_seq).
    The same walk as `active_tail`: from the end back, a visible revert hides what lies between its target
    and itself, and a revert inside a hidden span has no effect."""
    spans: list[tuple[int, int]] = []
    hi = entry_count
    for seq, to_seq in sorted(reverts, reverse=True):
        if seq > hi:
            continue
        if to_seq + 1 <= seq - 1:
            spans.append((to_seq + 1, seq - 1))
        hi = to_seq
    spans.reverse()
    return spans


def is_hidden(seq: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(lo <= seq <= hi for lo, hi in spans)


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MB"


def attachment_label(part: ImagePart | FilePart) -> str:
    kind = "image" if isinstance(part, ImagePart) else "file"
    name = getattr(part, "name", None)
    where = name or part.uri or (_size(len(part.data)) if part.data is not None else "")
    return f"[{kind} {part.media_type}{' ' + where if where else ''}]"


# --- markdown ----------------------------------------------------------------------------------------------

RESULT_LINES = 20
RESULT_CHARS = 2000


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks inside `text`, so the block cannot be closed early."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _truncated(text: str) -> tuple[str, str | None]:
    """The head of a tool output (`RESULT_LINES` lines, at most `RESULT_CHARS` characters) and a note saying
    how much was left out, or None when it fits."""
    text = text.rstrip("\n")
    lines = text.splitlines()
    kept = "\n".join(lines[:RESULT_LINES])[:RESULT_CHARS]
    if kept == text:
        return text, None
    rest_lines = len(lines) - len(kept.splitlines())
    note = f"… {len(text) - len(kept):,} more characters"
    if rest_lines > 0:
        note += f" ({rest_lines:,} more lines)"
    return kept, note


def _md_header(info: SessionInfo) -> list[str]:
    lines = [f"# {info.title or 'Untitled session'}", ""]
    lines.append(f"- **Session:** `{info.id}`")
    if info.directory:
        lines.append(f"- **Directory:** `{info.directory}`")
    lines.append(f"- **Created:** {_utc(info.created_at)} · **Updated:** {_utc(info.updated_at)}")
    if info.model or info.agent:
        lines.append("- " + " · ".join(f"**{k}:** {v}" for k, v in (("Model", info.model), ("Agent", info.agent)) if v))
    usage = f"- **Messages:** {info.message_count} · **Tokens:** {info.input_tokens:,} in / {info.output_tokens:,} out"
    if info.cost:
        usage += f" · **Cost:** ${info.cost.normalize():f}"
    lines.append(usage)
    if info.forked_from:
        lines.append(f"- Forked from `{info.forked_from}` at entry {info.forked_at}")
    if info.parent_id:
        lines.append(f"- Child of `{info.parent_id}`")
    lines += ["", "---", ""]
    return lines


def _md_message(message: Message, call_names: dict[str, str], *, reverted: bool = False) -> list[str]:
    heading = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}[message.role]
    if message.role == "assistant" and message.model:
        heading += f" · {message.model}"
    if reverted:
        heading += " *(reverted)*"
    out = [f"## {heading}", ""]
    for part in message.parts:
        if isinstance(part, TextPart):
            out += [part.text.rstrip("\n"), ""]
        elif isinstance(part, ThinkingPart):
            label = "Thinking" if part.text else "Thinking (redacted)"
            out += [f"<details><summary>{label}</summary>", "", part.text.rstrip("\n"), "", "</details>", ""]
        elif isinstance(part, ToolCallPart):
            call_names[part.id] = part.name
            out += [f"→ `{call_signature(part)}`", ""]
        elif isinstance(part, ToolResultPart):
            name = part.name or call_names.get(part.call_id, "tool")
            text, note = _truncated(part.content)
            fence = _fence(text)
            out += [f"**{name}** {'✗ error' if part.is_error else '✓'}", "", fence, text, fence, ""]
            if note:
                out += [f"*{note}*", ""]
        else:
            out += [attachment_label(part), ""]
    if message.usage is not None and message.usage.total_tokens:
        out += [f"*{message.usage.input_tokens:,} in / {message.usage.output_tokens:,} out tokens*", ""]
    return out


def _md_marker(entry: Entry, reverted: Sequence[tuple[int, int]]) -> list[str]:
    body = entry.body
    if isinstance(body, Revert):
        span = next((f" ({span_label(lo, hi)} hidden)" for lo, hi in reverted if hi == entry.seq - 1), "")
        reason = f": {body.reason}" if body.reason else ""
        return [f"> ↶ Reverted to entry {body.to_seq}{span}{reason}", ""]
    if isinstance(body, TitleChange):
        return [f"> Title changed to “{body.title}”", ""]
    if isinstance(body, Checkpoint):
        lines = [f"> ⏸ Checkpoint ({body.reason}, {body.steps} steps): {body.objective}"]
        if body.next_action:
            lines.append(f"> Next: {body.next_action}")
        return [*lines, ""]
    if isinstance(body, Compaction):
        return [
            f"<details><summary>Compaction: entries before {body.first_kept_seq} summarized</summary>",
            "",
            body.summary.rstrip("\n"),
            "",
            "</details>",
            "",
        ]
    if isinstance(body, Marker):
        data = f" `{_clip(json.dumps(body.data, ensure_ascii=False, default=str), 200)}`" if body.data else ""
        return [f"> • {body.name}{data}", ""]
    return []


async def export_markdown(store: Store, session_id: str, out: IO[str], *, raw: bool = False) -> SessionInfo:
    """Write a readable transcript: roles as headings, tool calls on one line, tool results truncated,
    thinking collapsed. Reverted entries are left out (a note marks each revert) unless `raw`. Streams the
    journal twice, keeping only the reverts from the first pass, so memory does not grow with the session."""
    info = await store.get_session(session_id)
    reverts: list[tuple[int, int]] = []
    async for entry in store.iter_entries(session_id):
        if entry.seq > info.entry_count:
            break
        if isinstance(entry.body, Revert):
            reverts.append((entry.seq, entry.body.to_seq))
    spans = hidden_spans(reverts, info.entry_count)
    out.write("\n".join(_md_header(info)) + "\n")
    call_names: dict[str, str] = {}
    async for entry in store.iter_entries(session_id):
        if entry.seq > info.entry_count:
            break
        hidden = is_hidden(entry.seq, spans)
        if hidden and not raw:
            continue
        if isinstance(entry.body, Message):
            lines = _md_message(entry.body, call_names, reverted=hidden)
        else:
            lines = _md_marker(entry, spans)
            if hidden and lines:
                lines = ["> *(reverted)*", *lines]
        out.write("\n".join(lines) + "\n")
    return info
