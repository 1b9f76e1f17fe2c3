"""What the Claude Code and Codex writers share: the session's active history in the order another tool can
continue it (reverted spans left out, a compaction placed where its summary starts to stand in), the report of
what a format could not carry, stable ids for the lines written, and where each tool looks for its files."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..messages import Checkpoint, Compaction, Entry, Marker, Message, Revert, TitleChange
from ..store.protocols import Journal
from ..store.records import SessionInfo
from ..store.reverts import hidden_spans, is_hidden

NO_RESULT = "The call got no result: the run stopped before it finished (added by tether's export)."
"""The error result an export gives a call that never got one, so the other tool can continue the session."""

__all__ = [
    "EXPORT_FORMATS",
    "NO_RESULT",
    "TETHER_KEY",
    "ExportReport",
    "continuation_order",
    "encode_claude_project",
    "export_mark",
    "iso_time",
    "line_uuid",
    "session_uuid",
    "written_lines",
]

EXPORT_FORMATS = ("claude-code", "codex")

TETHER_KEY = "tether"
"""The key, on a line or an item, of what the format has no field for but tether's importer reads back
(a system message's role in Claude Code, a failed call's error flag in Codex). The tools ignore it."""

_NAMESPACE = uuid.UUID("6f1b7a52-3d1e-4c9a-9f55-1d2e7c4b8a01")


def session_uuid(session_id: str) -> str:
    """The id the exported session has in the other tool: a UUID (both tools need one) derived from the
    tether id, so exporting the same session again writes the same file instead of another copy."""
    return str(uuid.uuid5(_NAMESPACE, f"tether-session:{session_id}"))


def line_uuid(session: str, key: str) -> str:
    """A stable UUID for one line of an exported session (`key`: the entry's seq, and a suffix for the
    extra lines one entry may need)."""
    return str(uuid.uuid5(uuid.UUID(session), key))


def export_mark(info: SessionInfo, lines: int) -> dict[str, Any]:
    """What an exported file says of where it came from (under `TETHER_KEY`, on its first line): the tether
    session, how many entries it had (the point another tool continues from) and how many lines the export
    wrote (so an import tells them from the lines the tool appended after them)."""
    return {"exported_from": info.id, "entries": info.entry_count, "lines": lines}


async def written_lines(write: Callable[[IO[bytes]], Awaitable[ExportReport]]) -> int:
    """How many lines `write` writes, found by writing them to nowhere: the export's first line says how many
    lines the export has, and an export streams (bounded memory), so it is written twice."""
    with open(os.devnull, "wb") as sink:
        return (await write(sink)).lines


def iso_time(at: float) -> str:
    """``2025-06-14T10:00:00.123Z``: the millisecond ISO form both tools write."""
    ms = round(at * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def encode_claude_project(directory: str) -> str:
    """The folder name Claude Code gives a working directory under ``projects/``: every character that is
    not a letter or a digit becomes ``-`` (``/home/me/my.app`` → ``-home-me-my-app``)."""
    return re.sub(r"[^A-Za-z0-9]", "-", directory)


@dataclass
class ExportReport:
    """What one export wrote, and what the format could not carry: `left_out` (not written at all) and
    `flattened` (written in a form the format has, losing some of its meaning), each a count per kind."""

    format: str
    session_id: str
    target_id: str
    entries: int = 0
    lines: int = 0
    left_out: Counter[str] = field(default_factory=Counter)
    flattened: Counter[str] = field(default_factory=Counter)
    path: str | None = None

    def leave_out(self, what: str, n: int = 1) -> None:
        self.left_out[what] += n

    def flatten(self, what: str, n: int = 1) -> None:
        self.flattened[what] += n

    def summary(self) -> str:
        """One line: ``left out: checkpoints (tether's): 1, reverted entries: 2; flattened: ...``."""

        def items(counts: Counter[str]) -> str:
            return ", ".join(f"{what}: {n}" for what, n in sorted(counts.items()))

        pieces = []
        if self.left_out:
            pieces.append("left out: " + items(self.left_out))
        if self.flattened:
            pieces.append("flattened: " + items(self.flattened))
        return "; ".join(pieces) if pieces else "nothing left out"

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "session_id": self.session_id,
            "target_id": self.target_id,
            "entries": self.entries,
            "lines": self.lines,
            "left_out": dict(self.left_out),
            "flattened": dict(self.flattened),
            "path": self.path,
        }


async def continuation_order(
    store: Journal, info: SessionInfo, report: ExportReport, unanswered: set[str] | None = None
) -> AsyncIterator[Entry]:
    """The entries another tool gets, in order: the active history only (what the session's next step
    builds on; reverted entries and revert markers are counted in `report` as left out), with each
    compaction moved to just before the first entry it keeps (its `first_kept_seq`), with that entry's time
    when its own is later: a tool that cuts its context at a compaction then sees the summary and the kept
    tail, as tether's derived context does.
    Checkpoints and markers are yielded too (each writer says what it does with them). Reads the journal
    twice, keeping only reverts, compactions and call ids from the first pass. `unanswered` (when given) is
    filled, before the first entry comes, with the ids of the active history's tool calls that never got a
    result (a run that stopped in between): both tools refuse a history with such a call."""
    reverts: list[tuple[int, int]] = []
    compactions: list[Entry] = []
    calls: list[tuple[int, str]] = []
    answered: list[tuple[int, str]] = []
    async for entry in store.iter_entries(info.id):
        if entry.seq > info.entry_count:
            break
        body = entry.body
        if isinstance(body, Revert):
            reverts.append((entry.seq, body.to_seq))
        elif isinstance(body, Compaction):
            compactions.append(entry)
        elif isinstance(body, Message) and unanswered is not None:
            calls += [(entry.seq, c.id) for c in body.tool_calls]
            answered += [(entry.seq, r.call_id) for r in body.tool_results]
    spans = hidden_spans(reverts)
    if unanswered is not None:
        got = {call_id for seq, call_id in answered if not is_hidden(seq, spans)}
        unanswered.update(call_id for seq, call_id in calls if not is_hidden(seq, spans) and call_id not in got)
    pending = sorted(
        (e for e in compactions if not is_hidden(e.seq, spans)),
        key=lambda e: (_kept_from(e), e.seq),
    )
    placed: set[int] = set()
    hidden = 0
    async for entry in store.iter_entries(info.id):
        if entry.seq > info.entry_count:
            break
        if is_hidden(entry.seq, spans) or isinstance(entry.body, Revert):
            hidden += not isinstance(entry.body, Revert)
            continue
        if isinstance(entry.body, Compaction):
            if entry.seq not in placed:
                placed.add(entry.seq)
                yield entry
            continue
        while pending and (_kept_from(pending[0]) <= entry.seq or pending[0].seq in placed):
            first = pending.pop(0)
            if first.seq not in placed:
                placed.add(first.seq)
                # moved before what it keeps, it takes that entry's time if its own is later: a tool that
                # orders a session by time (Claude Code resumes from its newest line) keeps the order
                yield Entry(first.seq, min(first.created_at, entry.created_at), first.body)
        yield entry
    if hidden:
        report.leave_out("reverted entries", hidden)


def _kept_from(entry: Entry) -> int:
    body = entry.body
    assert isinstance(body, Compaction)
    return min(body.first_kept_seq, entry.seq)


def attachments_after(result: Any) -> int:
    """How many of the parts after tool result `result` are its own attachments (an image an importer
    took out of the result's content: ``metadata["images"]``)."""
    count = result.metadata.get("images")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def result_blocks(
    result: Any,
    attachments: list[Any],
    text_type: str,
    image_type: str,
    block_of: Callable[[Any], dict[str, Any] | None],
) -> Any:
    """A tool result's content as the format holds it: its text, or the list of blocks it came as (its
    ``metadata["content"]``, each attachment a ``{"type", "part": i}`` stand-in) with its attachments (the
    parts after it) back in their places, each as `block_of` makes it (None: left out). A result with
    attachments but no list gets its text, then its attachments."""
    shape = result.metadata.get("content")
    if not isinstance(shape, list):
        if not attachments:
            return result.content
        shape = [{"type": text_type, "text": result.content}] if result.content else []
        shape += [{"type": image_type, "part": i} for i in range(len(attachments))]
    blocks: list[Any] = []
    for item in shape:
        index = item.get("part") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool):
            blocks.append(item)
            continue
        block = block_of(attachments[index]) if 0 <= index < len(attachments) else None
        if block is not None:
            blocks.append({**block, **{k: v for k, v in item.items() if k not in ("type", "part")}})
    return blocks


def note_unwritten(body: Any, report: ExportReport) -> bool:
    """Count a tether-only entry (a checkpoint, a marker) as left out; True when `body` is one."""
    if isinstance(body, Checkpoint):
        report.leave_out("checkpoints (tether's)")
        return True
    if isinstance(body, Marker):
        report.leave_out(f"markers ({body.name.split('.')[0]})")
        return True
    return False


def last_title(title: str | None, exported: list[str]) -> str | None:
    """The session title to write after the entries: its title when the title changes written so far do
    not end with it (a title set without a journal entry), else None."""
    if not title or (exported and exported[-1] == title):
        return None
    return title


async def child_count(store: Journal, session_id: str) -> int:
    page = await store.list_sessions(parent_id=session_id, limit=1000)
    return len(page.items)


def claude_projects_root() -> Path:
    base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    return Path(base) / "projects"


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex"))


def is_title(body: Any) -> bool:
    return isinstance(body, TitleChange)


def install_path(fmt: str, info: SessionInfo, target_id: str) -> Path:
    """Where `fmt`'s tool looks for the exported session: Claude Code's
    ``$CLAUDE_CONFIG_DIR/projects/<encoded directory>/<id>.jsonl`` (default ``~/.claude``), Codex's
    ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<local time>-<id>.jsonl`` (default ``~/.codex``), dated
    when the session began. Claude Code files a session under its directory: one without is refused."""
    if fmt == "claude-code":
        if not info.directory:
            from ..errors import InvalidInput

            raise InvalidInput(
                f"session {info.id} has no directory, and Claude Code files sessions by directory: "
                "write it with -o instead"
            )
        return claude_projects_root() / encode_claude_project(info.directory) / f"{target_id}.jsonl"
    local = time.localtime(info.created_at)
    day = time.strftime("%Y/%m/%d", local)
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", local)
    return codex_home() / "sessions" / day / f"rollout-{stamp}-{target_id}.jsonl"


def name_codex_thread(target_id: str, title: str) -> None:
    """Add the exported session's name to Codex's thread-name index (``$CODEX_HOME/session_index.jsonl``,
    one JSON line per naming, the last one wins), as Codex does when a thread is named."""
    import json

    path = codex_home() / "session_index.jsonl"
    line = {"id": target_id, "thread_name": title, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")


def resume_hint(fmt: str, directory: str | None, target_id: str) -> str:
    """The command that continues the exported session in its tool."""
    import shlex

    where = f"cd {shlex.quote(directory)} && " if directory else ""
    return where + (f"claude --resume {target_id}" if fmt == "claude-code" else f"codex resume {target_id}")
