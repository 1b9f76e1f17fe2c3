"""The file tools: `read` (numbered line ranges of a file or of a stored artifact), `write` (whole files,
atomically) and `edit` (one exact, unique replacement, keeping the file's line endings)."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import mimetypes
import os
import secrets
import stat
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from ...errors import InvalidInput, NotFound, ToolError
from ..base import ToolContext, ToolOutput
from ..beneath import moved, open_beneath
from ..output import MARKER_RESERVE, ArtifactView, open_artifact
from .text import SNIFF_BYTES, LinePager, feed_artifact, feed_file, looks_binary

ARTIFACT_SCHEME = "artifact://"
COUNT_ALL_BYTES = 64 * 1024 * 1024
"""`read` counts a file's lines to say "of N" only up to this size; past it, it just says the file goes on."""
DIFF_CHARS = 20_000


def _describe_missing(ctx: ToolContext, path: Path) -> str:
    """'file not found', with the nearest names in the same directory when there are some."""
    msg = f"file not found: {ctx.display(path)}"
    parent = path.parent
    if parent.is_dir():
        try:
            names = [p.name for p in parent.iterdir()]
        except OSError:
            names = []
        close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
        if close:
            msg += "; did you mean " + " or ".join(repr(ctx.display(parent / c)) for c in close) + "?"
    elif not parent.exists():
        msg += f" (the directory {ctx.display(parent)} does not exist either)"
    return msg


async def open_stored(ctx: ToolContext, artifact_id: str) -> ArtifactView:
    """The stored output an artifact:// path names, or a ToolError the model can act on."""
    try:
        return await open_artifact(ctx.store, artifact_id.strip())
    except InvalidInput:
        raise ToolError(
            f"{artifact_id!r} is not an artifact id (they look like art_ followed by 64 hex digits)"
        ) from None
    except NotFound:
        raise ToolError(f"no stored output {artifact_id}") from None


def _format_lines(pager: LinePager) -> str:
    out = []
    for line in pager.lines:
        cut = f" ... [line cut: {line.length:,} characters]" if line.cut else ""
        out.append(f"{line.number:>6}\t{line.text}{cut}")
    return "\n".join(out)


class ReadTool:
    name = "read"
    description = (
        "Read a text file, or a stored tool output (path='artifact://art_...'), with line numbers like `cat -n`. "
        "offset is the first line to show (1-based), limit how many lines. Long files are shown a page at a "
        "time: the result says how to read the next page. Lines longer than 2,000 characters are cut. "
        "Binary files are refused."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path (relative to the workspace) or artifact://<id>"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line to show, 1-based (default 1)"},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to show (default 2000)"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    read_only = True
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path_arg: str = args["path"]
        offset: int = args.get("offset") or 1
        limit: int = args.get("limit") or ctx.limits.read_lines
        # a page never needs cutting by the runner (the file is still there to read the next one), so it
        # stops short of the output limits, leaving room for the footer
        pager = LinePager(
            offset,
            min(limit, max(ctx.limits.output_lines - 4, 1)),
            line_chars=ctx.limits.line_chars,
            max_chars=max(ctx.limits.output_chars - MARKER_RESERVE, 1000),
        )
        if path_arg.startswith(ARTIFACT_SCHEME):
            return await self._read_artifact(path_arg[len(ARTIFACT_SCHEME) :], pager, offset, ctx)
        path = ctx.resolve(path_arg)
        shown = ctx.display(path)
        with _open_file(ctx, path, shown) as f:
            size = os.fstat(f.fileno()).st_size
            sample = f.read(SNIFF_BYTES)
            if looks_binary(sample):
                kind = mimetypes.guess_type(path.name)[0] or "unknown type"
                raise ToolError(f"{shown} is a binary file ({kind}, {size:,} bytes); read shows text files only")
            if size == 0:
                return ToolOutput(f"[{shown} is empty]", metadata={"path": shown, "total_lines": 0})
            count_all = size <= COUNT_ALL_BYTES
            f.seek(0)
            await asyncio.to_thread(feed_file, f, pager, keep_counting=count_all)
        total = pager.total_lines if count_all else None
        return self._page(pager, offset, total, shown, what="the file")

    async def _read_artifact(self, artifact_id: str, pager: LinePager, offset: int, ctx: ToolContext) -> ToolOutput:
        view = await open_stored(ctx, artifact_id)
        shown = ARTIFACT_SCHEME + artifact_id
        if view.size == 0:
            return ToolOutput(f"[{shown} is empty]", metadata={"path": shown, "total_lines": 0})
        await feed_artifact(view, pager, from_line=offset)
        return self._page(pager, offset, view.lines, shown, what="the output")

    @staticmethod
    def _page(pager: LinePager, offset: int, total: int | None, shown: str, *, what: str) -> ToolOutput:
        if not pager.lines:
            of = f" ({total:,} lines)" if total is not None else ""
            raise ToolError(f"offset {offset:,} is past the end of {shown}{of}")
        first, last = pager.lines[0].number, pager.lines[-1].number
        text = _format_lines(pager)
        more = total is None or last < total
        if more:
            of = f" of {total:,}" if total is not None else f"; {what} continues"
            text += f"\n\n[lines {first:,}-{last:,}{of}. Read more with offset={last + 1}]"
        metadata: dict[str, Any] = {"path": shown, "lines": [first, last]}
        if total is not None:
            metadata["total_lines"] = total
        return ToolOutput(text, metadata=metadata)


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        # a lone surrogate from a JSON "\\ud800" escape: writing it would make the file invalid UTF-8
        raise ToolError(
            f"{what} holds {e.object[e.start : e.end]!r} at character {e.start}, which is not valid text"
        ) from None


def _open_file(ctx: ToolContext, path: Path, shown: str) -> BinaryIO:
    """`path` opened for reading beneath the workspace (`beneath`): a missing file, a directory, or a path
    a symlink was swapped into since the check, as the tool error that says so."""
    try:
        fd = open_beneath(ctx.workspace, path, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        raise ToolError(_describe_missing(ctx, path)) from None
    except OSError as e:
        raise moved(e, shown) or ToolError(f"cannot read {shown}: {e.strerror}") from None
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        if stat.S_ISDIR(kind):
            raise ToolError(f"{shown} is a directory; use list to see what it holds")
        raise ToolError(f"{shown} is not a regular file (a device, a pipe or a socket)")
    return os.fdopen(fd, "rb")


def _parent_beneath(root: Path, path: Path, shown: str) -> int:
    """A directory descriptor for `path`'s parent, made (with its missing parents) beneath `root` one
    component at a time, never through a symlink."""
    parent = path.parent
    top = root if parent.is_relative_to(root) else Path("/")
    flags = os.O_PATH | os.O_DIRECTORY
    fd = open_beneath(top, top, flags)
    try:
        here = top
        for part in parent.relative_to(top).parts:
            here = here / part
            try:
                nxt = open_beneath(top, here, flags)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                nxt = open_beneath(top, here, flags)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _atomic_write(root: Path, path: Path, data: bytes) -> None:
    """Replace `path` with `data` all at once (a crash leaves the old file or the new one, never half of
    one), keeping an existing file's permission bits. The file is made in its directory as opened beneath
    `root` and renamed there, so a symlink swapped onto the path cannot send the write elsewhere."""
    dir_fd = _parent_beneath(root, path, path.name)
    try:
        mode: int | None = None
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        tmp = f".{path.name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(f.fileno(), mode if mode is not None else 0o666 & ~_umask())
            os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class WriteTool:
    name = "write"
    description = (
        "Write a file with the given content, replacing it whole if it exists; missing parent directories "
        "are created. To change part of a file, prefer edit."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace"},
            "content": {"type": "string", "description": "The complete new content of the file"},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    read_only = False
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path = ctx.resolve(args["path"])
        shown = ctx.display(path)
        if path.is_dir():
            raise ToolError(f"{shown} is a directory")
        data = _encode(args["content"], "content")
        existed = path.exists()
        old_size = path.stat().st_size if existed else 0
        try:
            await asyncio.to_thread(_atomic_write, ctx.workspace, path, data)
        except (FileExistsError, NotADirectoryError):
            raise ToolError(f"cannot create the directory {ctx.display(path.parent)}: a file is in the way") from None
        except OSError as e:
            raise moved(e, shown) or ToolError(f"cannot write {shown}: {e.strerror}") from None
        lines = data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)
        what = f"replaced its previous {old_size:,} bytes" if existed else "new file"
        return ToolOutput(
            f"wrote {len(data):,} bytes ({lines:,} lines) to {shown} ({what})",
            metadata={"path": shown, "bytes": len(data), "lines": lines, "created": not existed},
        )


class EditTool:
    name = "edit"
    description = (
        "Replace text in a file: old_string must match the file exactly (whitespace and indentation included) "
        "and occur exactly once, unless replace_all is true. Include enough surrounding lines to make it "
        "unique. Line endings are kept as the file has them. Read the file first."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace"},
            "old_string": {"type": "string", "description": "The exact text to replace"},
            "new_string": {"type": "string", "description": "The text to put in its place"},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    read_only = False
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path = ctx.resolve(args["path"])
        shown = ctx.display(path)
        old: str = args["old_string"]
        new: str = args["new_string"]
        replace_all = bool(args.get("replace_all", False))
        if not old:
            raise ToolError("old_string is empty; to create or overwrite a whole file use write")
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        with _open_file(ctx, path, shown) as f:
            raw = f.read()
        if looks_binary(raw[:SNIFF_BYTES]):
            raise ToolError(f"{shown} is a binary file; edit changes text files only")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ToolError(
                f"{shown} is not UTF-8 text ({e.reason} at byte {e.start}); rewrite it with write"
            ) from None

        # A model writes "\n"; a CRLF file must match and stay CRLF.
        crlf = text.count("\r\n") * 2 > text.count("\n") > 0
        if crlf:
            old = old.replace("\r\n", "\n").replace("\n", "\r\n")
            new = new.replace("\r\n", "\n").replace("\n", "\r\n")

        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_string was not found in {shown}{_near_miss(text, old)}")
        starts = _occurrences(text, old)
        lines = [text.count("\n", 0, s) + 1 for s in starts]
        if count > 1 and not replace_all:
            where = ", ".join(str(n) for n in lines[:10]) + (", ..." if count > 10 else "")
            raise ToolError(
                f"old_string occurs {count} times in {shown} (at lines {where}); include more surrounding "
                "text to make it unique, or pass replace_all=true to replace every occurrence"
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        try:
            await asyncio.to_thread(_atomic_write, ctx.workspace, path, _encode(updated, "new_string"))
        except OSError as e:
            raise moved(e, shown) or ToolError(f"cannot write {shown}: {e.strerror}") from None

        n = count if replace_all else 1
        noun = "occurrence" if n == 1 else "occurrences"
        at = ", ".join(str(x) for x in lines[:10]) + (", ..." if n > 10 else "")
        snippet = _snippet(updated, starts[0], len(new))
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True), updated.splitlines(keepends=True), f"a/{shown}", f"b/{shown}"
            )
        )
        return ToolOutput(
            f"edited {shown}: replaced {n} {noun} (line {at}). The changed part now reads:\n{snippet}",
            metadata={
                "path": shown,
                "replacements": n,
                "lines": lines[:n],
                "diff": diff if len(diff) <= DIFF_CHARS else diff[:DIFF_CHARS] + "\n[diff cut]\n",
            },
        )


def _occurrences(text: str, old: str) -> list[int]:
    out = []
    pos = text.find(old)
    while pos >= 0:
        out.append(pos)
        pos = text.find(old, pos + len(old))
    return out


def _near_miss(text: str, old: str) -> str:
    """A hint for a failed match: the usual causes are whitespace and a stale view of the file."""
    stripped = old.strip()
    if stripped and stripped in text:
        return " exactly, but it does when leading/trailing whitespace is ignored: check indentation and line breaks"
    first = next((ln.strip() for ln in old.splitlines() if ln.strip()), "")
    if first:
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip() == first:
                return (
                    f"; its first line matches line {number}, but what follows differs: "
                    "read the file again and copy the text exactly"
                )
    return "; read the file again and copy the text exactly"


def _snippet(text: str, start: int, length: int, context: int = 3, max_lines: int = 20) -> str:
    first = text.count("\n", 0, start) + 1
    last = first + text.count("\n", start, start + length)
    lines = text.splitlines()
    lo = max(first - context, 1)
    hi = min(last + context, len(lines), lo + max_lines - 1)
    return "\n".join(f"{n:>6}\t{lines[n - 1].rstrip(chr(13))}" for n in range(lo, hi + 1))
