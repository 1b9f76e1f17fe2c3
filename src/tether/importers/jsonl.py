"""What the transcript importers (Claude Code, Codex) share: reading a JSON Lines file line by line in
bounded memory (a bad line reported by file and line, a line still being written left for the next import,
a file that shrinks or is replaced while it is read noticed), the session ids an import derives from its
source (so that importing again finds what it made), the batched writer that keeps the source's times, and
the report of one file's import."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

import msgspec

from ..errors import SessionNotFound
from ..ids import check_id
from ..messages import EntryBody, Marker, encode_body
from ..store.protocols import Journal
from ..store.records import IMPORTED, SessionInfo

__all__ = [
    "BATCH_BYTES",
    "BATCH_ENTRIES",
    "CannotAppend",
    "FileOutcome",
    "FileResult",
    "JsonLines",
    "Line",
    "Problem",
    "SessionWriter",
    "SourceChanged",
    "head_digest",
    "parse_time",
    "raw_marker",
    "read_lines",
    "since_import",
    "source_session_id",
]

BATCH_ENTRIES = 500
"""Entries per append: one transaction each, so an import's memory is bounded by a batch, not a session."""
BATCH_BYTES = 8 << 20
"""...or fewer, when their source lines pass this many bytes (images and long tool outputs)."""
HEAD_BYTES = 4096
"""How much of a file's beginning an import fingerprints, to tell a file that grew from one rewritten."""


class Line(NamedTuple):
    """One line of a JSON Lines file: its number (from 1), where it starts and ends (after its newline),
    its bytes without the newline, and whether the newline was there (the last line may lack it)."""

    no: int
    start: int
    end: int
    data: bytes
    complete: bool


class SourceChanged(Exception):
    """The file shrank or was replaced while it was read: what was read may not be one version of it."""


def read_lines(path: str, *, start: int = 0, first_no: int = 1) -> Iterator[Line]:
    """The lines of `path` from byte `start` (line number `first_no`) up to the size the file had when it was
    opened: lines appended meanwhile are left for the next import. One line is in memory at a time. Raises
    `OSError` when the file cannot be read and `SourceChanged` when it shrinks under the reader."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if start > size:
            raise SourceChanged(f"{path} is shorter ({size} bytes) than where the last import stopped ({start})")
        f.seek(start)
        pos, no = start, first_no
        while pos < size:
            data = f.readline()
            if not data:
                raise SourceChanged(f"{path} shrank from {size} to {pos} bytes while it was read")
            end = pos + len(data)
            complete = data.endswith(b"\n")
            body = data[:-1] if complete else data
            if body.endswith(b"\r"):
                body = body[:-1]
            yield Line(no, pos, end, body, complete)
            pos, no = end, no + 1


class JsonLines:
    """The JSON values of a JSONL transcript, line by line (`read_lines`): blank lines pass, a line that is
    not JSON is reported to `problems` and skipped, and a cut last line (no newline: still being written, or
    truncated) is reported and left for the next import. `lines` is the last line read whole, `consumed` the
    byte offset after the last line dealt with (where a later import may go on)."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        self.lines = 0
        self.consumed = 0

    def __iter__(self) -> Iterator[tuple[Line, Any]]:
        for line in read_lines(self.path):
            self.lines = line.no
            if not line.data.strip():
                self.consumed = line.end
                continue
            try:
                value = decode_json(line.data)
            except msgspec.DecodeError as e:
                if not line.complete:
                    reason = (
                        "the last line is cut short (still being written, or truncated); it is left for the next import"
                    )
                    self.problems.append(Problem(self.path, line.no, reason))
                    self.lines = line.no - 1
                    return
                self.problems.append(Problem(self.path, line.no, f"not JSON ({e}); skipped"))
                self.consumed = line.end
                continue
            self.consumed = line.end
            yield line, value


class CannotAppend(Exception):
    """The file cannot be appended to the session an earlier import made of it (the message says why)."""


def since_import(
    path: str, size: int, session_id: str, info: SessionInfo, mark: dict[str, Any]
) -> Literal["unchanged", "grown"]:
    """What became of a file since its import (`mark`, the session's import record): ``"unchanged"`` or
    ``"grown"``. `CannotAppend` when it was rewritten, or the session was continued in tether since;
    `OSError` when its head cannot be read."""
    offset = int(mark.get("offset", 0))
    same_head = mark.get("head") == head_digest(path, offset)
    if "head" in mark and (size < offset or not same_head):  # no head: an import cut short
        raise CannotAppend(
            "it was rewritten since it was imported (not only appended to), so it cannot be appended; "
            f"delete session {session_id} to import it anew"
        )
    if size == mark.get("size"):
        return "unchanged"
    if mark.get("confirmed") and info.entry_count != mark.get("entries", info.entry_count):
        raise CannotAppend(
            f"session {session_id} was continued in tether after its import, so the lines added to "
            "the file since are not appended to it; fork it (`tether sessions fork`) to keep both"
        )
    return "grown"


def head_digest(path: str, upto: int) -> str:
    """A fingerprint of the file's first `min(upto, HEAD_BYTES)` bytes (what an earlier import read)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(min(upto, HEAD_BYTES))).hexdigest()[:32]


def source_session_id(tool: str, key: str) -> str:
    """The tether id of the session imported from `tool`'s session `key` (a source id, or a source id and
    the branch or sub-agent within it): the same every time, so that importing again finds the session it
    made instead of making another. Derived from the key, not from a clock."""
    digest = int.from_bytes(hashlib.sha256(f"{tool}\x00{key}".encode()).digest()[:16], "big")
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    chars = []
    for _ in range(26):
        chars.append(alphabet[digest & 31])
        digest >>= 5
    chars[-1] = alphabet[0]  # a ULID's first character is at most 7; keep it in range (reversed below)
    return check_id("ses_" + "".join(reversed(chars)), "session id")


def parse_time(value: object) -> float | None:
    """Seconds since the epoch from an ISO 8601 timestamp (``2025-06-14T11:00:00.123Z``), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def raw_marker(name: str, line: int, raw: Any, **extra: Any) -> Marker:
    """A source line tether has no entry for, kept whole: ``Marker(name, {"line": N, "raw": <its JSON>})``."""
    return Marker(name=name, data={"line": line, "raw": raw, **extra})


def decode_data_uri(uri: str) -> tuple[str, bytes] | None:
    """(media type, bytes) of a ``data:...;base64,...`` URI, or None when it is not one."""
    if not uri.startswith("data:"):
        return None
    head, sep, payload = uri.partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    try:
        return head[5:-7] or "application/octet-stream", base64.b64decode(payload, validate=True)
    except ValueError:
        return None


@dataclass(frozen=True)
class Problem:
    """A line (or a whole file: `line` None) that could not be imported, and why."""

    path: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}" if self.line is not None else f"{self.path}: {self.reason}"


FileOutcome = Literal["imported", "grown", "unchanged", "would import", "would append", "failed"]


@dataclass
class FileResult:
    """What importing one source file did: the sessions it created or appended to, the entries it wrote,
    the lines it read, and the problems it skipped (or, `failed`, the one that stopped it); `note`, what a
    reader should know besides (a file tether exported coming back: where its lines went)."""

    path: str
    format: str
    outcome: FileOutcome
    session_id: str | None = None
    title: str | None = None
    entries: int = 0
    lines: int = 0
    sessions: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    note: str | None = None

    def fail(self, problems: list[Problem], reason: str) -> FileResult:
        """The file could not be imported: `reason`, after the `problems` met before it."""
        self.outcome = "failed"
        self.problems = [*problems, Problem(self.path, None, reason)]
        return self


class SessionWriter:
    """Appends to one session in batches, each entry with its source time. An import replays its file from
    the first line: `count` is the seq of the last entry placed so far (from `start`: a fork begins with the
    entries it copied), and `known` how many entries the store had when the import began: an entry at or
    below it is not built again, because an earlier (perhaps interrupted) import wrote it already."""

    def __init__(
        self,
        store: Journal,
        session_id: str,
        *,
        start: int = 0,
        known: int = 0,
        dry_run: bool = False,
        create: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.create = create
        self.session_id = session_id
        self.count = start
        self.known = known
        self.written = 0
        self.dry_run = dry_run
        self._bodies: list[EntryBody] = []
        self._times: list[float] = []
        self._bytes = 0

    def take(self) -> int:
        """Count one more entry for the session (the caller decides whether to build it); its seq."""
        self.count += 1
        return self.count

    def needs(self, seq: int) -> bool:
        """Whether entry `seq` is new to the store."""
        return seq > self.known

    async def add(self, body: EntryBody, at: float, size: int = 0) -> None:
        encode_body(body)  # text that cannot be stored fails here, with its line, not in a batch of 500
        self._bodies.append(body)
        self._times.append(at)
        self._bytes += size
        if len(self._bodies) >= BATCH_ENTRIES or self._bytes >= BATCH_BYTES:
            await self.flush()

    async def ensure(self) -> None:
        """Create the session (when it is new) before anything is written to it or forked from it."""
        if self.create is not None:
            create, self.create = self.create, None
            await create()

    @property
    def pending(self) -> int:
        return len(self._bodies)

    async def flush(self) -> None:
        if self._bodies:
            await self.ensure()
            if not self.dry_run:
                await self.store.append(self.session_id, self._bodies, created_at=self._times)
        self.written += len(self._bodies)
        self._bodies, self._times, self._bytes = [], [], 0


async def existing(store: Journal, session_id: str) -> SessionInfo | None:
    try:
        return await store.get_session(session_id)
    except SessionNotFound:
        return None


def import_mark(info: SessionInfo | None) -> dict[str, Any]:
    mark = info.metadata.get(IMPORTED) if info is not None else None
    return dict(mark) if isinstance(mark, dict) else {}


_raw_decoder = msgspec.json.Decoder()


def decode_json(data: bytes) -> Any:
    return _raw_decoder.decode(data)
