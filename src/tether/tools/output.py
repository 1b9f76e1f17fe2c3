"""Oversized tool output: the transcript keeps a head, a marker and a tail; the whole output goes to the
store as an artifact that `read(path="artifact://...")` pages through. `OutputSpool` collects a stream
(a command's stdout) in bounded memory, saving at most `max_bytes` of it; `fit_output` does the same for a
string already in hand. Both take a `Redactor`: what they save bypasses the run's journal, which redacts the rest.

Outputs up to `CHUNK_BYTES` are one plain artifact. Larger ones are stored as chunks plus a small manifest
artifact (its id is the one shown to the model), because `Store.put_artifact` takes the payload whole and a
100 MB output must not need 100 MB of memory; `open_artifact` hides the difference from readers."""

from __future__ import annotations

import codecs
import hashlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import msgspec

from ..errors import InvalidInput
from ..redaction import Redactor
from ..store.protocols import Artifacts

DEFAULT_LIMIT = 30_000
"""Characters a tool result may have before it is cut."""
DEFAULT_MAX_LINES = 2_000
"""Lines a tool result may have before it is cut."""
CHUNK_BYTES = 4 * 1024 * 1024
"""Artifacts larger than this are stored in chunks of this size."""
SPILL_BYTES = 1024 * 1024
"""A spool keeps this much in memory before it moves the output to a temporary file."""
MARKER_RESERVE = 600
"""Characters kept free for the marker line, so head + marker + tail stays within the limit."""
MIN_LIMIT = 2 * MARKER_RESERVE
MIN_LINES = 10
CHUNKED_MEDIA_TYPE = "application/vnd.tether.chunked-artifact+json"
_MANIFEST_PREFIX = b'{"tether":"chunked-artifact"'
# every byte value that is NOT a UTF-8 continuation byte: deleting them leaves the continuation bytes, and
# the rest is one per character, counted at C speed
_LEADING = bytes(b for b in range(256) if not 0x80 <= b <= 0xBF)


class ChunkRef(msgspec.Struct, kw_only=True):
    id: str
    bytes: int
    first_line: int
    """The number of the line in progress where this chunk starts (it may start mid-line)."""
    newlines: int


class ChunkedArtifact(msgspec.Struct, kw_only=True):
    """The manifest of an artifact stored in chunks. `tether` comes first so the encoded manifest starts
    with a fixed prefix that tells it from a plain artifact."""

    tether: str = "chunked-artifact"
    version: int = 1
    bytes: int
    lines: int
    sha256: str
    chunks: list[ChunkRef]


_manifest_encoder = msgspec.json.Encoder()
_manifest_decoder = msgspec.json.Decoder(ChunkedArtifact)


@dataclass
class FittedOutput:
    """A tool result's content as the model will see it. `metadata` is empty when nothing was cut; else
    it holds truncated (True), artifact (the id, absent if the store failed, with artifact_error saying
    why), session_id, original_chars, original_lines, original_bytes and cut_lines ([first, last]), and
    saved_bytes when only the first part of the output could be kept (see `OutputSpool`)."""

    content: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return bool(self.metadata.get("truncated"))


def count_chars(data: bytes) -> int:
    """Characters in UTF-8 `data` (invalid bytes count one each, as a replacing decoder would show them)."""
    return len(data) - len(data.translate(None, _LEADING))


def count_lines(data: bytes | str) -> int:
    """Lines as an editor numbers them: a trailing newline does not start a new line."""
    if not data:
        return 0
    if isinstance(data, bytes):
        return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return data.count("\n") + (0 if data.endswith("\n") else 1)


class OutputSpool:
    """Collects output bytes in bounded memory and disk, whatever their size.

    The first `max_bytes` are kept for the artifact: in memory up to `spill_bytes`, then in an anonymous
    temporary file. Past `max_bytes` the bytes are only counted. A head and a rolling tail are always kept in
    memory for the cut view, and byte, character and line counts as the bytes arrive, so `finish` never has
    to read the whole output back at once. `redactor` is applied to the artifact as it is saved.
    """

    def __init__(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        max_lines: int = DEFAULT_MAX_LINES,
        spill_bytes: int = SPILL_BYTES,
        max_bytes: int | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        _check_limits(limit, max_lines)
        self.limit = limit
        self.max_lines = max_lines
        self._spill_bytes = spill_bytes
        # head and tail need at most `limit` characters each; a character is at most 4 bytes
        self._keep = 4 * limit
        # never less than an output that fits needs, so that one is always whole
        self.max_bytes = max(max_bytes, self._keep) if max_bytes is not None else None
        self._redactor = redactor
        self._mem = bytearray()
        self._file: IO[bytes] | None = None
        self._head = bytearray()
        self._tail = bytearray()
        self.size = 0
        self.saved = 0
        """Bytes kept for the artifact (all of them, unless past `max_bytes`)."""
        self.chars = 0
        self.newlines = 0
        self._saved_newlines = 0
        self._saved_last = b""
        self._last = b""

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.size += len(data)
        self.chars += count_chars(data)
        self.newlines += data.count(b"\n")
        self._last = data[-1:]
        if len(self._head) < self._keep:
            self._head += data[: self._keep - len(self._head)]
        self._tail += data
        if len(self._tail) > 2 * self._keep:
            del self._tail[: len(self._tail) - self._keep]
        if self.max_bytes is not None and self.saved + len(data) > self.max_bytes:
            data = data[: self.max_bytes - self.saved]
            if not data:
                return
        self.saved += len(data)
        self._saved_newlines += data.count(b"\n")
        self._saved_last = data[-1:]
        if self._file is None:
            self._mem += data
            if len(self._mem) > self._spill_bytes:
                # closed by close(), which finish() always calls
                self._file = tempfile.TemporaryFile(prefix="tether-output-")  # noqa: SIM115
                self._file.write(self._mem)
                self._mem = bytearray()
        else:
            self._file.write(data)

    @property
    def lines(self) -> int:
        if self.size == 0:
            return 0
        return self.newlines if self._last == b"\n" else self.newlines + 1

    @property
    def fits(self) -> bool:
        return self.chars <= self.limit and self.lines <= self.max_lines

    def text(self) -> str:
        """The whole output as text; only for outputs that fit (else use `finish`)."""
        if not self.fits:
            raise InvalidInput(f"the output has {self.chars:,} characters, over the limit; use finish()")
        if self._file is None:
            return self._mem.decode("utf-8", "replace")
        self._file.seek(0)
        return self._file.read().decode("utf-8", "replace")

    @property
    def saved_lines(self) -> int:
        """Lines of the output that the artifact holds, the last maybe in part."""
        if self.saved == self.size:
            return self.lines
        return self._saved_newlines + (0 if self._saved_last == b"\n" else 1)

    async def finish(self, store: Artifacts, session_id: str) -> FittedOutput:
        """The output as the model should see it: whole if it fits, else head + marker + tail with the full
        output saved to `store`. Closes the spool."""
        try:
            if self.fits:
                return FittedOutput(self.text())
            aid: str | None = None
            failure: str | None = None
            try:
                aid = await self._save(store)
            except Exception as e:  # a cut result without the rest beats no result: the command did run
                failure = f"{type(e).__name__}: {e}"
            return _cut_view(
                bytes(self._head),
                bytes(self._tail),
                tail_is_whole=len(self._tail) == self.size,
                total_bytes=self.size,
                total_chars=self.chars,
                total_lines=self.lines,
                limit=self.limit,
                max_lines=self.max_lines,
                artifact=aid,
                session_id=session_id if aid else None,
                unsaved_reason=failure,
                saved=(self.saved, self.saved_lines) if self.saved < self.size else None,
            )
        finally:
            self.close()

    async def _save(self, store: Artifacts) -> str:
        if self._file is None:
            return await put_output_artifact(store, bytes(self._mem), redactor=self._redactor)
        self._file.flush()
        self._file.seek(0)
        if self.saved <= CHUNK_BYTES:
            return await put_output_artifact(store, self._file.read(), redactor=self._redactor)
        file = self._file
        blocks: Iterator[bytes] = iter(lambda: file.read(CHUNK_BYTES), b"")
        if self._redactor:
            blocks = self._redactor.stream(blocks)
        return await _put_chunked(store, blocks)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._mem = bytearray()


async def put_output_artifact(store: Artifacts, data: bytes, *, redactor: Redactor | None = None) -> str:
    """Save a tool output in `store` (known secrets redacted), in chunks when it is large; returns the id to
    show the model."""
    if redactor:
        data = redactor.data(data)
    if len(data) <= CHUNK_BYTES:
        return await store.put_artifact(data, "text/plain")
    view = memoryview(data)
    blocks = (bytes(view[i : i + CHUNK_BYTES]) for i in range(0, len(data), CHUNK_BYTES))
    return await _put_chunked(store, blocks)


async def _put_chunked(store: Artifacts, blocks: Iterator[bytes]) -> str:
    """Store `blocks` one artifact each (one in memory at a time), then their manifest; returns its id."""
    chunks: list[ChunkRef] = []
    line = 1
    size = 0
    last = b""
    sha = hashlib.sha256()
    for block in blocks:
        newlines = block.count(b"\n")
        aid = await store.put_artifact(block, "text/plain")
        chunks.append(ChunkRef(id=aid, bytes=len(block), first_line=line, newlines=newlines))
        line += newlines
        size += len(block)
        sha.update(block)
        last = block[-1:] or last
    lines = 0 if size == 0 else line - 1 if last == b"\n" else line
    manifest = ChunkedArtifact(bytes=size, lines=lines, sha256=sha.hexdigest(), chunks=chunks)
    return await store.put_artifact(_manifest_encoder.encode(manifest), CHUNKED_MEDIA_TYPE)


async def fit_output(
    text: str,
    *,
    store: Artifacts,
    session_id: str,
    limit: int = DEFAULT_LIMIT,
    max_lines: int = DEFAULT_MAX_LINES,
    redactor: Redactor | None = None,
) -> FittedOutput:
    """`text` unchanged if it has at most `limit` characters and `max_lines` lines. Otherwise the full text
    is saved as an artifact and the content becomes head + a marker naming the artifact and the cut line
    range + tail, within both limits. `session_id` is carried in the metadata so that a later garbage
    collection of artifacts can tell which session refers to which. `redactor` takes known secrets out of
    the artifact (the content returned is redacted by whoever journals it).

    If the store fails, the result is still cut, and the marker says the rest could not be saved: a tool
    that ran must not lose its result to a storage hiccup."""
    _check_limits(limit, max_lines)
    if len(text) <= limit and count_lines(text) <= max_lines:
        return FittedOutput(text)
    data = text.encode("utf-8", "surrogatepass")
    aid: str | None = None
    failure: str | None = None
    try:
        aid = await put_output_artifact(store, data, redactor=redactor)
    except Exception as e:
        failure = f"{type(e).__name__}: {e}"
    keep = 4 * limit
    return _cut_view(
        data[:keep],
        data[-keep:],
        tail_is_whole=len(data) <= keep,
        total_bytes=len(data),
        total_chars=len(text),
        total_lines=count_lines(text),
        limit=limit,
        max_lines=max_lines,
        artifact=aid,
        session_id=session_id if aid else None,
        unsaved_reason=failure,
    )


def _check_limits(limit: int, max_lines: int) -> None:
    if limit < MIN_LIMIT:
        raise InvalidInput(f"output limit must be at least {MIN_LIMIT} characters, not {limit}")
    if max_lines < MIN_LINES:
        raise InvalidInput(f"output line limit must be at least {MIN_LINES}, not {max_lines}")


def _cut_view(
    head_bytes: bytes,
    tail_bytes: bytes,
    *,
    tail_is_whole: bool,
    total_bytes: int,
    total_chars: int,
    total_lines: int,
    limit: int,
    max_lines: int,
    artifact: str | None,
    session_id: str | None,
    unsaved_reason: str | None = None,
    saved: tuple[int, int] | None = None,
) -> FittedOutput:
    """Head + marker + tail of an output known to exceed a limit. Head and tail each get half of what the
    marker leaves, in characters and in lines, and end (start) at a line boundary when one is near.
    `saved`: (bytes, lines) when the artifact holds only the start of the output."""
    half_chars = (limit - MARKER_RESERVE) // 2
    line_budget = max_lines - 4  # the marker and the blank lines around it
    head_lines = line_budget // 2
    tail_lines = line_budget - head_lines

    head = codecs.getincrementaldecoder("utf-8")("replace").decode(head_bytes, final=False)[:half_chars]
    head = _first_lines(head, head_lines)
    cut = head.rfind("\n")
    if 0 <= cut < len(head) - 1 and cut >= len(head) // 2:
        head = head[: cut + 1]

    start = 0
    while start < len(tail_bytes) and 0x80 <= tail_bytes[start] <= 0xBF and start < 4:
        start += 1  # not in the middle of a character
    decoded = tail_bytes[start:].decode("utf-8", "replace")
    tail = _last_lines(decoded[-half_chars:], tail_lines)
    starts_at_line = tail_is_whole and start == 0 and len(tail) == len(decoded)
    first_nl = tail.find("\n")
    if not starts_at_line and 0 <= first_nl < len(tail) // 2:
        tail = tail[first_nl + 1 :]
        starts_at_line = True

    # line numbers: the first line not wholly shown in the head, the last not wholly shown in the tail
    first_cut = head.count("\n") + 1
    tail_has = tail.count("\n") + (0 if tail.endswith("\n") or not tail else 1)
    tail_first = total_lines - tail_has + 1
    last_cut = tail_first - 1 if starts_at_line else tail_first
    last_cut = max(last_cut, first_cut)
    cut_chars = max(total_chars - len(head) - len(tail), 0)

    if artifact is not None and saved is not None:
        how = (
            f"the first {saved[0]:,} bytes of the {total_bytes:,} (lines 1-{saved[1]:,}) saved as artifact "
            f'{artifact}, the rest not kept. Read it with read(path="artifact://{artifact}", '
            f'offset={first_cut}, limit=...) or search it with grep(pattern=..., path="artifact://{artifact}")'
        )
    elif artifact is not None:
        how = (
            f'full output saved as artifact {artifact}. Read the cut part with read(path="artifact://{artifact}", '
            f'offset={first_cut}, limit=...) or search it with grep(pattern=..., path="artifact://{artifact}")'
        )
    else:
        how = f"the full output could not be saved ({unsaved_reason or 'no store'})"
    marker = f"[... {cut_chars:,} characters (lines {first_cut:,}-{last_cut:,} of {total_lines:,}) cut; {how}.]"
    sep_head = "" if head.endswith("\n") or not head else "\n"
    sep_tail = "\n" if tail else ""
    content = f"{head}{sep_head}\n{marker}\n{sep_tail}{tail}"
    metadata: dict[str, Any] = {
        "truncated": True,
        "original_chars": total_chars,
        "original_lines": total_lines,
        "original_bytes": total_bytes,
        "cut_lines": [first_cut, last_cut],
    }
    if artifact is not None:
        metadata["artifact"] = artifact
        if saved is not None:
            metadata["saved_bytes"] = saved[0]
    if session_id is not None:
        metadata["session_id"] = session_id
    if unsaved_reason is not None:
        metadata["artifact_error"] = unsaved_reason
    return FittedOutput(content, metadata)


def _first_lines(text: str, n: int) -> str:
    pos = -1
    for _ in range(n):
        pos = text.find("\n", pos + 1)
        if pos < 0:
            return text
    return text[: pos + 1]


def _last_lines(text: str, n: int) -> str:
    end = len(text) - 1 if text.endswith("\n") else len(text)
    pos = end
    for _ in range(n):
        pos = text.rfind("\n", 0, pos)
        if pos < 0:
            return text
    return text[pos + 1 :]


# --- reading artifacts back --------------------------------------------------------------------------------


class ArtifactView:
    """A stored output, plain or chunked, read in blocks so a large one never has to be in memory whole."""

    def __init__(
        self, store: Artifacts, artifact_id: str, *, data: bytes | None = None, manifest: ChunkedArtifact | None = None
    ) -> None:
        self.id = artifact_id
        self._store = store
        self._data = data
        self._manifest = manifest
        if manifest is not None:
            self.size, self.lines = manifest.bytes, manifest.lines
        else:
            self.size, self.lines = len(data or b""), count_lines(data or b"")

    async def blocks(self, from_line: int = 1) -> AsyncIterator[tuple[int, bytes]]:
        """(the number of the line in progress at the block's start, the block), from the block where line
        `from_line` starts. Blocks may split lines and characters."""
        if self._manifest is None:
            yield 1, self._data or b""
            return
        chunks = self._manifest.chunks
        i = 0
        if from_line > 1:
            # line n starts just after the (n-1)th newline: in the first chunk whose newlines reach it
            while i < len(chunks) - 1 and chunks[i].first_line + chunks[i].newlines < from_line:
                i += 1
        for ref in chunks[i:]:
            yield ref.first_line, await self._store.get_artifact(ref.id)


async def open_artifact(store: Artifacts, artifact_id: str) -> ArtifactView:
    """Open a stored output by the id that a cut result names. Raises `NotFound` / `InvalidInput`."""
    data = await store.get_artifact(artifact_id)
    if data.startswith(_MANIFEST_PREFIX):
        try:
            manifest = _manifest_decoder.decode(data)
        except msgspec.DecodeError:
            manifest = None  # an output that merely starts like a manifest
        if manifest is not None:
            return ArtifactView(store, artifact_id, manifest=manifest)
    return ArtifactView(store, artifact_id, data=data)


async def read_artifact_bytes(store: Artifacts, artifact_id: str) -> bytes:
    """A stored output whole (chunks joined); for exports and small outputs, not for paging."""
    view = await open_artifact(store, artifact_id)
    parts = [block async for _, block in view.blocks()]
    return b"".join(parts)
