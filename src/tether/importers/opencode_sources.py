"""Reading opencode's stores, whatever their version: the SQLite database of v1.2 and later
(`SqliteStore`), the JSON folder before it and each project's older folder (`JsonStorage`), and a session that
``opencode export`` wrote (`ExportFile`), each giving the same records: sessions, and a session's messages with
their parts, after a given message. The import that makes tether sessions of them is `opencode`."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from .jsonl import Problem, decode_json

__all__ = [
    "KNOWN_STORAGE_MIGRATION",
    "ExportFile",
    "JsonStorage",
    "MessageRecord",
    "OpencodeSource",
    "SessionRecord",
    "SourceError",
    "SqliteStore",
    "bare_part",
    "default_root",
    "json_object",
    "looks_like_export",
    "looks_like_opencode",
    "open_source",
    "seconds",
]

KNOWN_STORAGE_MIGRATION = 2
"""The last migration of the JSON folder (its ``migration`` file) whose layout this module knows."""


def default_root() -> Path:
    """opencode's data folder: ``$XDG_DATA_HOME/opencode`` (default ``~/.local/share/opencode``), which holds
    ``opencode.db`` (v1.2 and later) and ``storage/`` (before)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "opencode"


def file_head(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def looks_like_export(path: Path) -> bool:
    """Whether `path` is what ``opencode export`` writes: ``{"info": {"id": "ses_...", ...}, "messages": [...]}``."""
    head = file_head(path, 512).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"{") and b'"info"' in head and b'"ses_' in head


def looks_like_opencode(path: Path) -> bool:
    """Whether `path` is opencode's: its data folder, its database, its JSON storage folder, a project's
    older storage folder (or the ``project`` folder of them, or one project's), or a session exported with
    ``opencode export``."""
    if path.is_file():
        return (path.suffix == ".db" and file_head(path, 16) == b"SQLite format 3\x00") or looks_like_export(path)
    return bool(_stores_in(path))


def _is_json_storage(path: Path) -> bool:
    return (path / "session").is_dir() and ((path / "message").is_dir() or (path / "session" / "info").is_dir())


def _stores_in(path: Path) -> list[tuple[str, Path]]:
    """The stores in folder `path` at the depths opencode puts them: ``("db", opencode.db)`` and
    ``("json", <storage folder>)`` of the data folder (``~/.local/share/opencode``), its JSON storage
    folder, and the older per-project folders (``project/<name>/storage``: the data folder's, or `path`'s
    own when it is ``project`` or one project's folder, or that ``storage`` itself). In that order: a
    session found twice is taken from the first."""
    found: list[tuple[str, Path]] = []
    seen: set[Path] = set()

    def add(kind: str, where: Path) -> None:
        key = where.resolve()
        if key not in seen:
            seen.add(key)
            found.append((kind, where))

    def storage(folder: Path) -> None:
        if (folder / "storage" / "session").is_dir() and _is_json_storage(folder / "storage"):
            add("json", folder / "storage")
        elif _is_json_storage(folder):
            add("json", folder)

    def projects(folder: Path) -> None:
        try:
            children = sorted(c for c in folder.iterdir() if c.is_dir())
        except OSError:
            return
        for child in children:
            storage(child)

    if (path / "opencode.db").is_file():
        add("db", path / "opencode.db")
    storage(path)
    if (path / "project").is_dir():
        projects(path / "project")
    if path.name == "project":
        projects(path)
    return found


# --- reading either store -------------------------------------------------------------------------------


@dataclass
class SessionRecord:
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
class MessageRecord:
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

    def sessions(self) -> list[SessionRecord]:
        raise NotImplementedError

    def last_message(self, session_id: str) -> str | None:
        raise NotImplementedError

    def messages(self, session_id: str, after: str | None) -> Iterator[MessageRecord]:
        raise NotImplementedError

    def has_message(self, session_id: str, message_id: str) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        return None


def json_object(value: object) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (records are read as they come)."""
    return value if isinstance(value, dict) else {}


def bare_part(part: dict[str, Any]) -> dict[str, Any]:
    """A part without the session and message ids it repeats (opencode's database keeps them in columns)."""
    part.pop("sessionID", None)
    part.pop("messageID", None)
    return part


def seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) / 1000.0


def _session_from_info(info: dict[str, Any], where: str) -> SessionRecord | None:
    sid = info.get("id")
    if not isinstance(sid, str):
        return None
    times = json_object(info.get("time"))
    created = seconds(times.get("created"))
    updated = seconds(times.get("updated")) or created or 0.0
    revert = info.get("revert") if isinstance(info.get("revert"), dict) else None
    kept = {k: v for k, v in info.items() if k not in ("id", "parentID", "directory", "title", "time", "revert")}
    return SessionRecord(
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

    def sessions(self) -> list[SessionRecord]:
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

    def messages(self, session_id: str, after: str | None) -> Iterator[MessageRecord]:
        folder = self._message_folder(session_id)
        for mid in self._ids(folder):
            if after is not None and mid <= after:
                continue
            path = folder / f"{mid}.json"
            before, start = len(self.problems), self.bytes_read
            info = self._read(path, "message")
            if info is None:
                if len(self.problems) > before:
                    yield MessageRecord(mid, str(path), {}, [], cut=True)
                continue
            parts: list[dict[str, Any]] = []
            cut = False
            part_folder = self._part_folder(session_id, mid)
            for pid in self._ids(part_folder):
                before = len(self.problems)
                part = self._read(part_folder / f"{pid}.json", "part")
                if part is not None:
                    part.setdefault("id", pid)
                    parts.append(bare_part(part))
                elif len(self.problems) > before:
                    cut = True
            yield MessageRecord(mid, str(path), info, parts, cut=cut, size=self.bytes_read - start)


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

    def sessions(self) -> list[SessionRecord]:
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
                SessionRecord(
                    id=sid, where=f"{self.path}#{sid}", parent=record.get("parent_id"),
                    directory=record.get("directory"), title=record.get("title"),
                    created=seconds(record.get("time_created")),
                    updated=seconds(record.get("time_updated")) or seconds(record.get("time_created")) or 0.0,
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

    def messages(self, session_id: str, after: str | None, *, chunk: int = 200) -> Iterator[MessageRecord]:
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
                        yield MessageRecord(mid, where, {}, [], cut=True)
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
                    yield MessageRecord(mid, where, info, decoded, cut=cut, size=size)
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
        self.records: list[MessageRecord] = []
        for i, item in enumerate(messages):
            record = json_object(json_object(item).get("info"))
            mid = record.get("id")
            if not isinstance(mid, str):
                self.problems.append(Problem(self.path, None, f"message {i} has no id; skipped"))
                continue
            parts = [bare_part(p) for p in json_object(item).get("parts") or [] if isinstance(p, dict)]
            self.records.append(MessageRecord(mid, f"{self.path}#{mid}", record, parts))
        self.records.sort(key=lambda m: m.id)

    def sessions(self) -> list[SessionRecord]:
        session = _session_from_info(self.info, self.path)
        if session is None:
            self.problems.append(Problem(self.path, None, "the exported session has no id; nothing imported"))
            return []
        return [session]

    def last_message(self, session_id: str) -> str | None:
        return self.records[-1].id if self.records else None

    def has_message(self, session_id: str, message_id: str) -> bool:
        return any(m.id == message_id for m in self.records)

    def messages(self, session_id: str, after: str | None) -> Iterator[MessageRecord]:
        yield from (m for m in self.records if after is None or m.id > after)


_decoder = msgspec.json.Decoder()  # takes the database's text as it is (no copy to bytes)


class SourceError(Exception):
    """The path is not an opencode store tether can read (the message says what it saw)."""


def open_source(path: Path) -> list[OpencodeSource]:
    """The stores at `path`: a database, a JSON folder, a project's older folder, or opencode's data folder
    (its database, then its JSON folder for the sessions the database lacks). `SourceError` otherwise."""
    if path.is_file():
        return [SqliteStore(path) if file_head(path, 16) == b"SQLite format 3\x00" else ExportFile(path)]
    sources: list[OpencodeSource] = [
        SqliteStore(where) if kind == "db" else JsonStorage(where) for kind, where in _stores_in(path)
    ]
    if not sources:
        raise SourceError(f"{path} holds neither opencode.db nor opencode's storage folder")
    return sources
