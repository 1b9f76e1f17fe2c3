"""Text by lines, in bounded memory: `LinePager` picks a numbered line range out of a stream of text blocks,
`LineSearcher` finds the lines a regex matches, `looks_binary` tells text from binary, and the drivers
feed them from a file or a stored artifact. `read` and `grep` are built on these."""

from __future__ import annotations

import codecs
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..output import ArtifactView

BLOCK_BYTES = 256 * 1024
SNIFF_BYTES = 8192
GIANT_LINE = 1024 * 1024
"""A searcher holding a partial line longer than this searches it as it is rather than hold more."""
_TEXT_CONTROL = frozenset(b"\t\n\r\f\b\x1b\x07\x0b")


def looks_binary(sample: bytes) -> bool:
    """True for data that is not text: a NUL byte, or many control characters (text in any ASCII-based
    encoding, UTF-8 or Latin-1 alike, passes)."""
    if not sample:
        return False
    if b"\0" in sample:
        return True
    control = sum(1 for b in sample if b < 0x20 and b not in _TEXT_CONTROL)
    return control > len(sample) // 10


@dataclass
class Line:
    number: int
    text: str
    """The line without its newline (and without a trailing '\\r'), cut to the pager's `line_chars`."""
    length: int
    """The line's full length in characters."""

    @property
    def cut(self) -> bool:
        return self.length > len(self.text)


class LinePager:
    """Collects lines `offset` .. `offset + limit - 1` (1-based) from text fed in arbitrary blocks, each
    cut to `line_chars`, stopping early once the lines shown reach `max_chars`. It keeps counting newlines
    after it is `done`, so a driver that feeds on learns the total."""

    def __init__(self, offset: int, limit: int, *, line_chars: int, max_chars: int, first_line: int = 1) -> None:
        self.offset = offset
        self.limit = limit
        self.line_chars = line_chars
        self.max_chars = max_chars
        self.lines: list[Line] = []
        self.done = False
        self._no = first_line  # the number of the line being assembled
        self._parts: list[str] = []
        self._cr = False
        self._kept = 0
        self._length = 0
        self._chars = 0
        self._newlines = first_line - 1
        self._open = False  # a line has begun and not yet ended

    def start_at(self, line: int) -> None:
        """Number the text fed next from `line` (a driver that skipped whole chunks says where it is)."""
        self._no = line
        self._newlines = line - 1

    def feed(self, text: str) -> None:
        if not text:
            return
        self._newlines += text.count("\n")
        self._open = not text.endswith("\n")
        if self.done:
            return
        pos = 0
        if self._no < self.offset:
            ends = text.count("\n")
            if self._no + ends < self.offset:
                self._no += ends
                return
            while self._no < self.offset:
                pos = text.index("\n", pos) + 1
                self._no += 1
            self._reset()
        while True:
            nl = text.find("\n", pos)
            if nl < 0:
                self._add(text[pos:])
                return
            self._add(text[pos:nl])
            self._emit()
            pos = nl + 1
            if self.done:
                return

    def finish(self) -> None:
        if not self.done and self._no >= self.offset and (self._parts or self._length):
            self._emit()

    @property
    def total_lines(self) -> int:
        """Lines seen so far (all of them once the whole text was fed)."""
        return self._newlines + (1 if self._open else 0)

    def _add(self, piece: str) -> None:
        if piece:
            self._cr = piece.endswith("\r")
        self._length += len(piece)
        room = self.line_chars - self._kept
        if room > 0 and piece:
            kept = piece[:room]
            self._parts.append(kept)
            self._kept += len(kept)

    def _emit(self) -> None:
        text = "".join(self._parts)
        length = self._length
        if self._cr:  # a CRLF line ending is not part of the line
            length -= 1
            if len(text) > length:
                text = text[:length]
        line = Line(self._no, text, length)
        self._no += 1
        self._reset()
        if self.lines and self._chars + len(text) + 8 > self.max_chars:
            self.done = True  # the page is full; this line is the first of the next page
            return
        self.lines.append(line)
        self._chars += len(text) + 8
        if len(self.lines) >= self.limit:
            self.done = True

    def _reset(self) -> None:
        self._cr = False
        self._parts = []
        self._kept = 0
        self._length = 0


class LineSearcher:
    """Finds the lines a regex matches (one hit per line) in text fed in arbitrary blocks. It searches whole
    lines a block at a time rather than line by line, so a 100 MB output is searched at regex speed."""

    def __init__(self, rx: re.Pattern[str], *, max_matches: int, line_chars: int, first_only: bool = False) -> None:
        self.rx = rx
        self.max_matches = max_matches
        self.line_chars = line_chars
        self.first_only = first_only
        self.matches: list[Line] = []
        self.more = False  # there were matches beyond max_matches
        self._line = 1
        self._carry = ""

    def start_at(self, line: int) -> None:
        self._line = line

    @property
    def done(self) -> bool:
        return self.more or (self.first_only and bool(self.matches))

    def feed(self, text: str) -> None:
        if self.done:
            return
        buf = self._carry + text if self._carry else text
        end = buf.rfind("\n")
        if end < 0:
            if len(buf) > GIANT_LINE:
                self._search(buf)
                self._carry = ""
            else:
                self._carry = buf
            return
        self._carry = buf[end + 1 :]
        self._search(buf[: end + 1])

    def finish(self) -> None:
        if self._carry and not self.done:
            self._search(self._carry)
        self._carry = ""

    def _search(self, region: str) -> None:
        pos = 0
        counted = 0
        line = self._line
        size = len(region)
        while pos < size:
            m = self.rx.search(region, pos)
            if m is None:
                break
            start = region.rfind("\n", 0, m.start()) + 1
            end = region.find("\n", start)
            if end < 0:
                end = size
            line += region.count("\n", counted, start)
            counted = start
            if len(self.matches) >= self.max_matches:
                self.more = True
                return
            text = region[start:end].rstrip("\r")
            self.matches.append(Line(line, text[: self.line_chars], len(text)))
            if self.done:
                return
            pos = end + 1
        self._line += region.count("\n")


def feed_file(
    path: Path | BinaryIO,
    consumer: LinePager | LineSearcher,
    *,
    keep_counting: bool = False,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Feed a file to a pager or searcher in blocks, decoding UTF-8 (bad bytes replaced) across block
    boundaries. Stops when the consumer is done (a pager with `keep_counting` reads on to count the lines)
    or when `stop()` says so."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    with path.open("rb") if isinstance(path, Path) else contextlib.nullcontext(path) as f:
        while True:
            if consumer.done and not (keep_counting and isinstance(consumer, LinePager)):
                return
            if stop is not None and stop():
                return
            block = f.read(BLOCK_BYTES)
            if not block:
                break
            consumer.feed(decoder.decode(block))
    consumer.feed(decoder.decode(b"", final=True))
    consumer.finish()


async def feed_artifact(
    view: ArtifactView,
    consumer: LinePager | LineSearcher,
    *,
    from_line: int = 1,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Feed a stored output to a pager or searcher, from the chunk where `from_line` starts."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    started = False
    async for first, chunk in view.blocks(from_line):
        if not started:
            consumer.start_at(first)
            started = True
        data = memoryview(chunk)
        for start in range(0, len(data), BLOCK_BYTES):
            if consumer.done or (stop is not None and stop()):
                return
            consumer.feed(decoder.decode(data[start : start + BLOCK_BYTES]))
    consumer.feed(decoder.decode(b"", final=True))
    consumer.finish()
