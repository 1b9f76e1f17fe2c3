"""opencode's sessions into tether sessions, from either of its two stores: the SQLite database it keeps
since v1.2 (``~/.local/share/opencode/opencode.db``: tables ``session``, ``message``, ``part``, each row's
record in a JSON ``data`` column) and the JSON folder before it (``storage/``: ``session/<project>/<id>.json``,
``message/<session>/<id>.json``, ``part/<message>/<id>.json``; and, older still, each project's own
``storage/session/{info,message,part}``), or a session that ``opencode export`` wrote. One opencode session
becomes one tether session:

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, ClassVar

import msgspec

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
from ..store.protocols import Store
from ..store.records import IMPORTED, SessionInfo
from .jsonl import (
    BATCH_BYTES,
    BATCH_ENTRIES,
    FileResult,
    Problem,
    decode_data_uri,
    decode_json,
    existing,
    import_mark,
    source_session_id,
)

FORMAT = "opencode"

__all__ = [
    "FORMAT",
    "IDLE_AFTER",
    "TOOL_NAMES",
    "OpencodeSource",
    "default_root",
    "import_opencode",
    "looks_like_export",
    "looks_like_opencode",
    "open_source",
]

IDLE_AFTER = 600.0
"""Seconds without a change after which a session's unfinished assistant message counts as interrupted."""

KNOWN_STORAGE_MIGRATION = 2
"""The last migration of the JSON folder (its ``migration`` file) whose layout this module knows."""

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


def default_root() -> Path:
    """opencode's data folder: ``$XDG_DATA_HOME/opencode`` (default ``~/.local/share/opencode``), which holds
    ``opencode.db`` (v1.2 and later) and ``storage/`` (before)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "opencode"


def _head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def looks_like_export(path: Path) -> bool:
    """Whether `path` is what ``opencode export`` writes: ``{"info": {"id": "ses_...", ...}, "messages": [...]}``."""
    head = _head(path, 512).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"{") and b'"info"' in head and b'"ses_' in head


def looks_like_opencode(path: Path) -> bool:
    """Whether `path` is opencode's: its data folder, its database, its JSON storage folder, a project's
    older storage folder, or a session exported with ``opencode export``."""
    if path.is_file():
        return (path.suffix == ".db" and _head(path, 16) == b"SQLite format 3\x00") or looks_like_export(path)
    if (path / "opencode.db").is_file() or (path / "storage" / "session").is_dir():
        return True
    return (path / "session").is_dir() and ((path / "message").is_dir() or (path / "session" / "info").is_dir())


# --- reading either store -------------------------------------------------------------------------------


@dataclass
class _Session:
    """One opencode session's record, from either store."""

    id: str
    where: str  # what a report names: its JSON file, or the database and the session's id
    parent: str | None
    directory: str | None
    title: str | None
    created: float | None
    updated: float
    revert: dict[str, Any] | None
    kept: dict[str, Any]


@dataclass
class _Message:
    id: str
    where: str
    info: dict[str, Any]
    parts: list[dict[str, Any]]
    cut: bool = False  # its record or a part could not be read whole (perhaps still being written)
    size: int = 0  # bytes of its records, as read


class OpencodeSource:
    """What an import reads: opencode's sessions and, per session, its messages after a given one."""

    path: str
    problems: list[Problem]

    def sessions(self) -> list[_Session]:
        raise NotImplementedError

    def last_message(self, session_id: str) -> str | None:
        raise NotImplementedError

    def messages(self, session_id: str, after: str | None) -> Iterator[_Message]:
        raise NotImplementedError

    def has_message(self, session_id: str, message_id: str) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        return None


def _obj(value: object) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (records are read as they come)."""
    return value if isinstance(value, dict) else {}


def _bare(part: dict[str, Any]) -> dict[str, Any]:
    """A part without the session and message ids it repeats (opencode's database keeps them in columns)."""
    part.pop("sessionID", None)
    part.pop("messageID", None)
    return part


def _ms(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) / 1000.0


def _session_from_info(info: dict[str, Any], where: str) -> _Session | None:
    sid = info.get("id")
    if not isinstance(sid, str):
        return None
    times = _obj(info.get("time"))
    created = _ms(times.get("created"))
    updated = _ms(times.get("updated")) or created or 0.0
    revert = info.get("revert") if isinstance(info.get("revert"), dict) else None
    kept = {k: v for k, v in info.items() if k not in ("id", "parentID", "directory", "title", "time", "revert")}
    return _Session(
        id=sid, where=where, parent=info["parentID"] if isinstance(info.get("parentID"), str) else None,
        directory=info["directory"] if isinstance(info.get("directory"), str) else None,
        title=info["title"] if isinstance(info.get("title"), str) else None,
        created=created, updated=updated, revert=revert, kept=kept,
    )  # fmt: skip


class JsonStorage(OpencodeSource):
    """opencode's JSON folder (``storage/``, migration 1 and later), or a project's older
    ``storage/`` holding ``session/info``, ``session/message`` and ``session/part``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = str(root)
        self.problems = []
        self.old = (root / "session" / "info").is_dir() and not (root / "message").is_dir()
        self.bytes_read = 0
        self.migration: int | None = None
        try:
            self.migration = int((root / "migration").read_text().strip())
        except (OSError, ValueError):
            pass
        if self.migration is not None and self.migration > KNOWN_STORAGE_MIGRATION:
            self.problems.append(
                Problem(
                    str(root / "migration"), None,
                    f"storage migration {self.migration} is newer than the last tether knows "
                    f"({KNOWN_STORAGE_MIGRATION}); records are imported as far as they are recognized",
                )
            )  # fmt: skip

    def _read(self, path: Path, what: str) -> dict[str, Any] | None:
        try:
            data = path.read_bytes()
            self.bytes_read += len(data)
        except FileNotFoundError:
            return None  # removed since it was listed (a revert cleaned up, a session deleted)
        except OSError as e:
            self.problems.append(Problem(str(path), None, f"cannot read this {what}: {e.strerror or e}; skipped"))
            return None
        try:
            value = decode_json(data)
        except msgspec.DecodeError as e:
            self.problems.append(Problem(str(path), None, f"this {what} is not JSON ({e}); skipped"))
            return None
        if not isinstance(value, dict):
            self.problems.append(Problem(str(path), None, f"this {what} is a JSON {type(value).__name__}; skipped"))
            return None
        return value

    def _session_files(self) -> Iterator[Path]:
        folder = self.root / "session"
        if self.old:
            yield from sorted(p for p in (folder / "info").glob("*.json") if not p.name.startswith("."))
            return
        for project in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
            yield from sorted(p for p in project.glob("*.json") if not p.name.startswith("."))

    def sessions(self) -> list[_Session]:
        found = []
        for path in self._session_files():
            info = self._read(path, "session")
            if info is None:
                continue
            session = _session_from_info(info, str(path))
            if session is None:
                self.problems.append(Problem(str(path), None, "a session record without an id; skipped"))
                continue
            found.append(session)
        return found

    def _message_folder(self, session_id: str) -> Path:
        return self.root / "session" / "message" / session_id if self.old else self.root / "message" / session_id

    def _part_folder(self, session_id: str, message_id: str) -> Path:
        if self.old:
            return self.root / "session" / "part" / session_id / message_id
        return self.root / "part" / message_id

    def _ids(self, folder: Path) -> list[str]:
        try:
            names = os.listdir(folder)
        except OSError:
            return []
        return sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith("."))

    def last_message(self, session_id: str) -> str | None:
        ids = self._ids(self._message_folder(session_id))
        return ids[-1] if ids else None

    def has_message(self, session_id: str, message_id: str) -> bool:
        return (self._message_folder(session_id) / f"{message_id}.json").is_file()

    def messages(self, session_id: str, after: str | None) -> Iterator[_Message]:
        folder = self._message_folder(session_id)
        for mid in self._ids(folder):
            if after is not None and mid <= after:
                continue
            path = folder / f"{mid}.json"
            before, start = len(self.problems), self.bytes_read
            info = self._read(path, "message")
            if info is None:
                if len(self.problems) > before:
                    yield _Message(mid, str(path), {}, [], cut=True)
                continue
            parts: list[dict[str, Any]] = []
            cut = False
            part_folder = self._part_folder(session_id, mid)
            for pid in self._ids(part_folder):
                before = len(self.problems)
                part = self._read(part_folder / f"{pid}.json", "part")
                if part is not None:
                    part.setdefault("id", pid)
                    parts.append(_bare(part))
                elif len(self.problems) > before:
                    cut = True
            yield _Message(mid, str(path), info, parts, cut=cut, size=self.bytes_read - start)


class SqliteStore(OpencodeSource):
    """opencode's SQLite database (v1.2 and later), opened read-only; each session read in one transaction
    so that it is one version of the session while opencode writes on."""

    REQUIRED: ClassVar[dict[str, set[str]]] = {
        "session": {"id", "directory", "title"},
        "message": {"id", "session_id", "data"},
        "part": {"id", "message_id", "data"},
    }

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.problems = []
        try:
            self.db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
            self.db.execute("PRAGMA busy_timeout = 5000")
            tables = {
                row[0]: {c[1] for c in self.db.execute(f"PRAGMA table_info('{row[0]}')")}
                for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.Error as e:
            raise SourceError(f"cannot open {path} as a SQLite database: {e}") from None
        missing = [name for name in self.REQUIRED if name not in tables]
        if missing:
            seen = ", ".join(sorted(tables)[:12]) or "none"
            self.db.close()
            raise SourceError(
                f"{path} is not opencode's database: it has no table {', '.join(missing)} (tables: {seen})"
            )
        for name, columns in self.REQUIRED.items():
            lacking = columns - tables[name]
            if lacking:
                self.db.close()
                raise SourceError(
                    f"{path}: opencode's {name} table has no column {', '.join(sorted(lacking))} "
                    f"(columns: {', '.join(sorted(tables[name]))}): a version tether does not know"
                )
        self.columns = tables["session"]
        self.migration: str | None = None
        if "migration" in tables:
            row = self.db.execute("SELECT max(id) FROM migration").fetchone()
            self.migration = row[0] if row else None

    def close(self) -> None:
        self.db.close()

    def sessions(self) -> list[_Session]:
        self.db.execute("BEGIN")
        try:
            rows = self.db.execute("SELECT * FROM session ORDER BY time_created, id").fetchall()
            names = [d[0] for d in self.db.execute("SELECT * FROM session LIMIT 0").description]
            self._last = dict(self.db.execute("SELECT session_id, max(id) FROM message GROUP BY session_id").fetchall())
        finally:
            self.db.execute("COMMIT")
        found = []
        for row in rows:
            record = dict(zip(names, row, strict=True))
            sid = record.pop("id")
            kept: dict[str, Any] = {}
            for key, value in record.items():
                if value is None or key in (
                    "parent_id",
                    "directory",
                    "title",
                    "time_created",
                    "time_updated",
                    "revert",
                ):
                    continue
                if isinstance(value, str) and key in ("model", "permission", "summary_diffs", "metadata", "goal"):
                    try:
                        value = decode_json(value.encode())
                    except msgspec.DecodeError:
                        pass
                kept[key] = value
            revert: Any = None
            if isinstance(record.get("revert"), str):
                try:
                    revert = decode_json(record["revert"].encode())
                except msgspec.DecodeError:
                    self.problems.append(
                        Problem(f"{self.path}#{sid}", None, "the session's revert is not JSON; ignored")
                    )
            found.append(
                _Session(
                    id=sid, where=f"{self.path}#{sid}", parent=record.get("parent_id"),
                    directory=record.get("directory"), title=record.get("title"),
                    created=_ms(record.get("time_created")),
                    updated=_ms(record.get("time_updated")) or _ms(record.get("time_created")) or 0.0,
                    revert=revert if isinstance(revert, dict) else None, kept=kept,
                )
            )  # fmt: skip
        return found

    def last_message(self, session_id: str) -> str | None:
        last = getattr(self, "_last", {}).get(session_id)
        return last if isinstance(last, str) else None

    def has_message(self, session_id: str, message_id: str) -> bool:
        row = self.db.execute("SELECT 1 FROM message WHERE id = ? AND session_id = ?", (message_id, session_id))
        return row.fetchone() is not None

    def messages(self, session_id: str, after: str | None, *, chunk: int = 200) -> Iterator[_Message]:
        self.db.execute("BEGIN")  # one snapshot of the session, however long the caller takes
        try:
            cursor = after or ""
            while True:
                rows = self.db.execute(
                    "SELECT id, data FROM message WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
                    (session_id, cursor, chunk),
                ).fetchall()
                if not rows:
                    return
                ids = [r[0] for r in rows]
                marks = ",".join("?" * len(ids))
                parts: dict[str, list[tuple[str, str]]] = {}
                for pid, mid, data in self.db.execute(
                    f"SELECT id, message_id, data FROM part WHERE message_id IN ({marks}) ORDER BY message_id, id", ids
                ):
                    parts.setdefault(mid, []).append((pid, data))
                for mid, data in rows:
                    where = f"{self.path}#{session_id}/{mid}"
                    info = self._decode(data, where, "message")
                    if info is None:
                        yield _Message(mid, where, {}, [], cut=True)
                        continue
                    decoded, cut, size = [], False, len(data)
                    for pid, pdata in parts.get(mid, []):
                        size += len(pdata)
                        part = self._decode(pdata, f"{where}/{pid}", "part")
                        if part is None:
                            cut = True
                            continue
                        part.setdefault("id", pid)
                        decoded.append(part)
                    yield _Message(mid, where, info, decoded, cut=cut, size=size)
                cursor = ids[-1]
        finally:
            self.db.execute("COMMIT")

    def _decode(self, data: object, where: str, what: str) -> dict[str, Any] | None:
        try:
            value = _decoder.decode(data) if isinstance(data, str | bytes) else None
        except msgspec.DecodeError as e:
            self.problems.append(Problem(where, None, f"this {what}'s data is not JSON ({e}); skipped"))
            return None
        if not isinstance(value, dict):
            self.problems.append(Problem(where, None, f"this {what}'s data is not a JSON object; skipped"))
            return None
        return value


class ExportFile(OpencodeSource):
    """One session as ``opencode export`` writes it: its record and its messages with their parts."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.problems = []
        try:
            value = decode_json(path.read_bytes())
        except OSError as e:
            raise SourceError(f"cannot read {path}: {e.strerror or e}") from None
        except msgspec.DecodeError as e:
            raise SourceError(f"{path} is not JSON ({e})") from None
        info = value.get("info") if isinstance(value, dict) else None
        messages = value.get("messages") if isinstance(value, dict) else None
        if not isinstance(info, dict) or not isinstance(messages, list):
            keys = ", ".join(sorted(value)[:8]) if isinstance(value, dict) else type(value).__name__
            raise SourceError(f"{path} is not an opencode export (info and messages); it has: {keys}")
        self.info = info
        self.records: list[_Message] = []
        for i, item in enumerate(messages):
            record = _obj(_obj(item).get("info"))
            mid = record.get("id")
            if not isinstance(mid, str):
                self.problems.append(Problem(self.path, None, f"message {i} has no id; skipped"))
                continue
            parts = [_bare(p) for p in _obj(item).get("parts") or [] if isinstance(p, dict)]
            self.records.append(_Message(mid, f"{self.path}#{mid}", record, parts))
        self.records.sort(key=lambda m: m.id)

    def sessions(self) -> list[_Session]:
        session = _session_from_info(self.info, self.path)
        if session is None:
            self.problems.append(Problem(self.path, None, "the exported session has no id; nothing imported"))
            return []
        return [session]

    def last_message(self, session_id: str) -> str | None:
        return self.records[-1].id if self.records else None

    def has_message(self, session_id: str, message_id: str) -> bool:
        return any(m.id == message_id for m in self.records)

    def messages(self, session_id: str, after: str | None) -> Iterator[_Message]:
        yield from (m for m in self.records if after is None or m.id > after)


_decoder = msgspec.json.Decoder()  # takes the database's text as it is (no copy to bytes)


class SourceError(Exception):
    """The path is not an opencode store tether can read (the message says what it saw)."""


def open_source(path: Path) -> list[OpencodeSource]:
    """The stores at `path`: a database, a JSON folder, a project's older folder, or opencode's data folder
    (its database, then its JSON folder for the sessions the database lacks). `SourceError` otherwise."""
    if path.is_file():
        return [SqliteStore(path) if _head(path, 16) == b"SQLite format 3\x00" else ExportFile(path)]
    sources: list[OpencodeSource] = []
    if (path / "opencode.db").is_file():
        sources.append(SqliteStore(path / "opencode.db"))
    if (path / "storage" / "session").is_dir():
        sources.append(JsonStorage(path / "storage"))
    elif (path / "session").is_dir():
        sources.append(JsonStorage(path))
    if not sources:
        raise SourceError(f"{path} holds neither opencode.db nor opencode's storage folder")
    return sources


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
    cache = _obj(tokens.get("cache"))
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
    meta = _obj(part.get("metadata"))
    anthropic = _obj(meta.get("anthropic"))
    openai = _obj(meta.get("openai"))
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


@dataclass
class _Outcome:
    entries: int = 0
    messages: int = 0
    title: str | None = None


class _SessionImport:
    """One opencode session into its tether session: created, or appended to with the messages after the
    last one an earlier import took."""

    def __init__(self, store: Store, source: OpencodeSource, session: _Session, *, dry_run: bool) -> None:
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
        self.pending_compaction: tuple[_Message, dict[str, Any]] | None = None
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

    async def _message(self, message: _Message) -> None:
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
                _ms((info.get("time") or {}).get("created")) if isinstance(info.get("time"), dict) else None,
            )

    async def _user(self, message: _Message) -> None:
        await self._close_compaction()
        info = message.info
        at = _ms(info["time"].get("created")) if isinstance(info.get("time"), dict) else None
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
        model = _obj(info.get("model"))
        seq = self._add(
            Message(role="user", parts=parts, model=model.get("modelID"), provider=model.get("providerID"), metadata={"opencode": meta}),
            at,
        )  # fmt: skip
        self.first_seq.setdefault(message.id, seq)
        self._emit_markers(message)

    def _unknown(self, message: _Message, part: dict[str, Any], at: float | None) -> None:
        self._pending_markers.append((Marker(name="opencode.part", data={"message": message.id, "raw": part}), at))

    async def _assistant(self, message: _Message) -> None:
        info = message.info
        times = _obj(info.get("time"))
        at, done = _ms(times.get("created")), _ms(times.get("completed"))
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
                state = _obj(part.get("state"))
                span = _obj(state.get("time"))
                step.done = _ms(span.get("end")) or step.done
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
            seq = self._add(
                Marker(name="opencode.error", data={"message": message.id, "error": error, "info": meta}), done or at
            )
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
        self._emit_markers(message)

    def _emit_markers(self, message: _Message) -> None:
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
        state = _obj(part.get("state"))
        arguments = _obj(state.get("input"))
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
        metadata = _obj(state.get("metadata"))
        meta_session = metadata.get("sessionId")
        if tool == "task" and isinstance(meta_session, str):
            self.children[meta_session] = call_id
        if tool == "task" and isinstance(state.get("output"), str):
            child = _task_session(state["output"])
            if child is not None:
                self.children.setdefault(child, call_id)
        return call, result

    async def _compaction(self, message: _Message, at: float | None) -> None:
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
        times = _obj(request.info.get("time"))
        seq = self._add(
            Marker(name="opencode.compaction", data={"message": request.id, "info": request.info, "part": part}),
            _ms(times.get("created")),
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


def _depth(session: _Session, by_id: dict[str, _Session]) -> int:
    depth, seen, current = 0, set(), session
    while current.parent is not None and current.parent in by_id and current.id not in seen:
        seen.add(current.id)
        current = by_id[current.parent]
        depth += 1
    return depth


async def import_opencode(
    store: Store,
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
