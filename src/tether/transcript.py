"""Sessions rendered for people: the Markdown transcript (`export_markdown`) and the one-line forms of a
tool call, its outcome and a reverted span that `tether sessions show` shares with it. Reverts are read
through `tether.store.reverts`, like everywhere else."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import IO

from . import markers
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
    cut_reason,
)
from .store.protocols import Journal
from .store.records import RevertSpan, SessionInfo
from .store.reverts import effective_reverts, hidden_spans, is_hidden


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
    images = result.metadata.get("images")
    if isinstance(images, int) and not isinstance(images, bool) and images > 0:
        shown = f"{images} image" + ("s" if images > 1 else "")
        return "✓ " + (
            shown
            if not texts
            else f"{shown} and " + (_clip(texts[0], width) if len(lines) == 1 else f"{len(lines):,} lines")
        )
    if not texts:
        return "✓ (empty)"
    return "✓ " + (_clip(texts[0], width) if len(lines) == 1 else f"{len(lines):,} lines")


def error_text(marker: Marker) -> str:
    """The text of an error marker (`markers.ErrorRecord`), on one line."""
    record = markers.read(marker, markers.ErrorRecord)
    message = record.message if record is not None else ""
    return " ".join(message.split()) if message.strip() else "an error (no text)"


def span_label(lo: int, hi: int) -> str:
    """'entry 6' or 'entries 5–7'."""
    return f"entry {lo}" if lo == hi else f"entries {lo}–{hi}"


def shown_as_hidden(seq: int, spans: Sequence[RevertSpan], effective: set[int]) -> bool:
    """Whether a transcript marks entry `seq` as reverted: it is outside the active history and is not the
    marker of a revert that took effect (those are shown, saying what they hid)."""
    return seq not in effective and is_hidden(seq, spans)


def revert_note(seq: int, spans: Sequence[RevertSpan]) -> str:
    """' (entries 5–7 hidden)' for the revert at `seq` when it took effect and hid something, else ''."""
    for span in spans:
        if span.revert == seq and span.entries:
            return f" ({span_label(span.entries[0], span.entries[-1])} hidden)"
    return ""


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
    cut = cut_reason(message)
    if cut is not None:
        out += [f"*[{cut}]*" + "".join(f" *(a call to `{c}` was cut mid-arguments)*" for c in cut_calls(message)), ""]
    if message.usage is not None and message.usage.total_tokens:
        out += [f"*{message.usage.input_tokens:,} in / {message.usage.output_tokens:,} out tokens*", ""]
    return out


def cut_calls(message: Message) -> list[str]:
    """The tools whose calls were still being written when an interrupted answer stopped."""
    cut = message.metadata.get("cut_calls")
    return [str(c.get("name") or "tool") for c in cut if isinstance(c, dict)] if isinstance(cut, list) else []


def _md_marker(entry: Entry, spans: Sequence[RevertSpan]) -> list[str]:
    body = entry.body
    if isinstance(body, Revert):
        span = revert_note(entry.seq, spans)
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
    known = markers.parse(body)
    if isinstance(known, markers.Interrupted):
        return [f"> ⚡ Turn interrupted: entry {known.seq} got no answer", ""]
    if isinstance(known, markers.ErrorRecord) and isinstance(body, Marker):
        return [f"> ✗ **Error**: {error_text(body)}", ""]
    if isinstance(body, Marker):
        data = f" `{_clip(json.dumps(body.data, ensure_ascii=False, default=str), 200)}`" if body.data else ""
        return [f"> • {body.name}{data}", ""]
    return []


async def export_markdown(store: Journal, session_id: str, out: IO[str], *, raw: bool = False) -> SessionInfo:
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
    spans = hidden_spans(reverts)
    effective = effective_reverts(spans)
    out.write("\n".join(_md_header(info)) + "\n")
    call_names: dict[str, str] = {}
    async for entry in store.iter_entries(session_id):
        if entry.seq > info.entry_count:
            break
        hidden = shown_as_hidden(entry.seq, spans, effective)
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
