"""The search tools: `glob` (files by name pattern, newest first), `grep` (files or lines matching a regex,
with ripgrep when it is on PATH and a pure-Python walk otherwise; it also searches stored outputs) and
`list` (a directory tree, junk directories named but not entered)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

from ...errors import ToolError
from ..base import ToolContext, ToolOutput
from .files import ARTIFACT_SCHEME, open_stored
from .text import SNIFF_BYTES, Line, LineSearcher, feed_artifact, feed_file, looks_binary
from .walk import JUNK_DIRS, GlobPattern, glob_regex, is_junk, walk_files

RG_READ_LIMIT = 1024 * 1024


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _search_root(ctx: ToolContext, value: str | None) -> Path:
    root = ctx.resolve(value or ".")
    if not root.exists():
        raise ToolError(f"no such file or directory: {ctx.display(root)}")
    return root


class GlobTool:
    name = "glob"
    description = (
        "Find files by name pattern, newest first. `*` and `?` match within one path component, `**` across "
        "them, `{a,b}` either; a pattern without '/' matches file names at any depth (`*.py` finds every "
        "Python file). Skips .git, node_modules, virtualenvs and caches unless you search inside them."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob pattern, e.g. 'src/**/*.ts' or '*.md'"},
            "path": {"type": "string", "description": "Directory to search (default: the workspace)"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only = True
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        pattern: str = args["pattern"]
        if not pattern.strip():
            raise ToolError("pattern is empty")
        glob = GlobPattern.parse(pattern)
        root = _search_root(ctx, args.get("path"))
        if glob.base:
            root = ctx.resolve(str(root / glob.base))
        if not root.is_dir():
            return ToolOutput(f"no files match {pattern!r} ({ctx.display(root)} is not a directory)")
        found = await asyncio.to_thread(self._find, root, glob, ctx)
        cap = ctx.limits.glob_results
        found.sort(key=lambda p: (-_mtime(p), str(p)))
        if not found:
            return ToolOutput(f"no files match {pattern!r} in {ctx.display(root)}", metadata={"count": 0})
        shown = [ctx.display(p) for p in found[:cap]]
        text = "\n".join(shown)
        if len(found) > cap:
            text += f"\n\n[{len(found) - cap:,} more files not shown; use a narrower pattern or path]"
        return ToolOutput(text, metadata={"count": len(found), "truncated": len(found) > cap})

    @staticmethod
    def _find(root: Path, glob: GlobPattern, ctx: ToolContext) -> list[Path]:
        confine = ctx.workspace if ctx.confine_to_workspace else None
        out = []
        for path in walk_files(root, confine_to=confine, stop=ctx.abort.is_set):
            if glob.matches(path.relative_to(root).as_posix()):
                out.append(path)
        return out


class GrepTool:
    name = "grep"
    description = (
        "Search file contents with a regular expression. output_mode 'files' (default) lists the files that "
        "match, newest first; 'lines' shows each matching line with its line number. path is a file or "
        "directory (default: the workspace), or artifact://<id> to search a stored tool output; glob filters "
        "file names (e.g. '*.py'). Skips binary files, .git, node_modules, virtualenvs and caches."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regular expression"},
            "path": {"type": "string", "description": "File or directory to search, or artifact://<id>"},
            "glob": {"type": "string", "description": "Only files whose names match this glob, e.g. '*.py'"},
            "output_mode": {"type": "string", "enum": ["files", "lines"], "description": "files (default) or lines"},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false)"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only = True
    bulk = False

    def __init__(self, *, use_ripgrep: bool | None = None) -> None:
        """`use_ripgrep` None: use `rg` when it is on PATH (decided per call, not at import)."""
        self.use_ripgrep = use_ripgrep

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        pattern: str = args["pattern"]
        mode: str = args.get("output_mode") or "files"
        icase = bool(args.get("case_insensitive", False))
        try:
            rx = re.compile(pattern, re.MULTILINE | (re.IGNORECASE if icase else 0))
        except re.error as e:
            raise ToolError(f"invalid regular expression {pattern!r}: {e}") from None
        path_arg: str = args.get("path") or "."
        if path_arg.startswith(ARTIFACT_SCHEME):
            return await self._search_artifact(path_arg[len(ARTIFACT_SCHEME) :], rx, ctx)
        root = _search_root(ctx, path_arg)
        name_glob = args.get("glob")
        rg = shutil.which("rg") if self.use_ripgrep is not False else None
        if self.use_ripgrep and rg is None:
            raise ToolError("ripgrep (rg) is not on PATH")
        result = await _ripgrep(rg, pattern, root, name_glob, mode, icase, ctx) if rg is not None else None
        if result is None:  # no rg, or a regex only Python's engine knows (look-around, backreferences)
            result = await asyncio.to_thread(_pygrep, rx, root, name_glob, mode, ctx)
        hits, more = result
        return _grep_output(hits, more, mode, pattern, root, ctx)

    async def _search_artifact(self, artifact_id: str, rx: re.Pattern[str], ctx: ToolContext) -> ToolOutput:
        view = await open_stored(ctx, artifact_id)
        searcher = LineSearcher(rx, max_matches=ctx.limits.grep_results, line_chars=ctx.limits.line_chars)
        await feed_artifact(view, searcher, stop=ctx.abort.is_set)
        shown = ARTIFACT_SCHEME + artifact_id
        if not searcher.matches:
            return ToolOutput(f"no lines match /{rx.pattern}/ in {shown}", metadata={"count": 0})
        text = shown + ":\n" + "\n".join(_line(m) for m in searcher.matches)
        if searcher.more:
            text += f"\n\n[more than {ctx.limits.grep_results} matching lines; use a narrower pattern]"
        return ToolOutput(text, metadata={"count": len(searcher.matches), "truncated": searcher.more})


def _line(m: Line) -> str:
    cut = f" ... [line cut: {m.length:,} characters]" if m.cut else ""
    return f"  {m.number}: {m.text}{cut}"


# (file, matching lines); files mode leaves the lines empty
Hits = list[tuple[Path, list[Line]]]


def _grep_output(hits: Hits, more: bool, mode: str, pattern: str, root: Path, ctx: ToolContext) -> ToolOutput:
    if not hits:
        return ToolOutput(f"no matches for /{pattern}/ in {ctx.display(root)}", metadata={"count": 0})
    if mode == "files":
        hits.sort(key=lambda h: (-_mtime(h[0]), str(h[0])))
        text = "\n".join(ctx.display(p) for p, _ in hits)
        count = len(hits)
        noun = "files"
    else:
        blocks = [ctx.display(p) + ":\n" + "\n".join(_line(m) for m in lines) for p, lines in hits]
        text = "\n\n".join(blocks)
        count = sum(len(lines) for _, lines in hits)
        noun = "matching lines"
    if more:
        text += f"\n\n[more than {ctx.limits.grep_results} {noun}; use a narrower pattern, path or glob]"
    return ToolOutput(text, metadata={"count": count, "truncated": more})


def _name_filter(name_glob: str | None) -> GlobPattern | None:
    return GlobPattern.parse(name_glob) if name_glob else None


def _pygrep(rx: re.Pattern[str], root: Path, name_glob: str | None, mode: str, ctx: ToolContext) -> tuple[Hits, bool]:
    limit = ctx.limits.grep_results
    filt = _name_filter(name_glob)
    confine = ctx.workspace if ctx.confine_to_workspace else None
    files = [root] if root.is_file() else walk_files(root, confine_to=confine, stop=ctx.abort.is_set)
    hits: Hits = []
    found = 0
    for path in files:
        if ctx.abort.is_set():
            raise ToolError("aborted")
        if filt is not None and path != root and not filt.matches(path.relative_to(root).as_posix()):
            continue
        if mode == "files":
            searcher = LineSearcher(rx, max_matches=1, line_chars=ctx.limits.line_chars, first_only=True)
        else:
            # once the budget is spent a searcher with none left still says whether more matches exist
            searcher = LineSearcher(rx, max_matches=limit - found, line_chars=ctx.limits.line_chars)
        try:
            with path.open("rb") as f:
                if looks_binary(f.read(SNIFF_BYTES)):
                    continue
            feed_file(path, searcher, stop=ctx.abort.is_set)
        except OSError:
            continue  # unreadable, or gone since the walk: skipped, as ripgrep does
        if mode == "files":
            if searcher.matches:
                if len(hits) >= limit:
                    return hits, True
                hits.append((path, []))
            continue
        if searcher.matches:
            hits.append((path, searcher.matches))
            found += len(searcher.matches)
        if searcher.more:
            return hits, True
    return hits, False


async def _ripgrep(
    rg: str, pattern: str, root: Path, name_glob: str | None, mode: str, icase: bool, ctx: ToolContext
) -> tuple[Hits, bool] | None:
    """ripgrep's hits and whether there were more, or None when it could not parse a regex that Python's `re` accepted."""
    limit = ctx.limits.grep_results
    # --null ends each path with NUL, so any file name parses; --sort=path makes the order stable
    cmd = [rg, "--no-config", "--color=never", "--hidden", "--no-messages", "--null", "--sort=path"]
    for junk in sorted(JUNK_DIRS):
        cmd += ["--glob", f"!{junk}"]
    cmd += ["--glob", "!*.egg-info"]
    if name_glob:
        cmd += ["--glob", name_glob]
    if icase:
        cmd.append("--ignore-case")
    if mode == "files":
        cmd.append("--files-with-matches")
    else:
        # very long lines (minified files) come back as a preview, not megabytes
        cmd += ["--line-number", "--with-filename", "--no-heading", "--max-columns-preview"]
        cmd.append(f"--max-columns={4 * ctx.limits.line_chars}")
    cmd += ["--regexp", pattern, "--", str(root)]
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        cwd=ctx.workspace,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=RG_READ_LIMIT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout
    hits: Hits = []
    index: dict[Path, list[Line]] = {}
    count = 0
    more = False
    stderr = b""
    try:
        while True:
            if ctx.abort.is_set():
                raise ToolError("aborted")
            # files mode: "path\0" records; lines mode: "path\0number:text\n"
            name = await _record(stdout, b"\0")
            if name is None:
                break
            if count >= limit:
                more = True
                break
            path = Path(os.fsdecode(name))
            count += 1
            if mode == "files":
                hits.append((path, []))
                continue
            rest = await _record(stdout, b"\n") or b""
            number, _, text_bytes = rest.partition(b":")
            text = text_bytes.decode("utf-8", "replace").rstrip("\r")
            if path not in index:
                index[path] = []
                hits.append((path, index[path]))
            index[path].append(Line(int(number), text[: ctx.limits.line_chars], len(text)))
        if not more:
            stderr = await proc.stderr.read()
    finally:
        if proc.returncode is None:
            # os.kill, not proc.kill(): Popen.send_signal polls first, and a poll that reaps the exited rg
            # leaves asyncio's child watcher to report exit code 255 instead of ripgrep's own
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    if proc.returncode == 2 and not hits:
        message = stderr.decode("utf-8", "replace").strip() or "ripgrep failed"
        if "regex parse error" in message:
            return None
        raise ToolError(message if len(message) <= 1000 else message[-1000:])
    return hits, more


async def _record(stream: asyncio.StreamReader, sep: bytes) -> bytes | None:
    """The next `sep`-terminated record without its separator (a longer-than-buffer one cut), None at EOF."""
    try:
        return (await stream.readuntil(sep))[:-1]
    except asyncio.IncompleteReadError as e:
        return e.partial or None
    except asyncio.LimitOverrunError:
        # --max-columns keeps lines far below the limit; only a pathological file name gets here
        raise ToolError("ripgrep printed a record longer than 1 MiB") from None


class ListTool:
    name = "list"
    description = (
        "Show a directory as a tree (directories first, then files). .git, node_modules, virtualenvs and "
        "caches are shown but not entered. ignore takes extra glob patterns of names to leave out."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Directory to list (default: the workspace)"},
            "ignore": {"type": "array", "items": {"type": "string"}, "description": "Name patterns to leave out"},
        },
        "additionalProperties": False,
    }
    read_only = True
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        root = _search_root(ctx, args.get("path"))
        if not root.is_dir():
            raise ToolError(f"{ctx.display(root)} is not a directory; use read to see a file")
        ignore = [glob_regex(p) for p in args.get("ignore") or []]
        return await asyncio.to_thread(self._tree, root, ignore, ctx)

    @staticmethod
    def _tree(root: Path, ignore: list[re.Pattern[str]], ctx: ToolContext) -> ToolOutput:
        cap = ctx.limits.list_entries
        children: dict[Path, list[tuple[str, bool]]] = {}  # dir -> [(name, is_dir)]
        skipped: set[Path] = set()
        entries = 0
        complete = True
        queue: deque[Path] = deque([root])
        # breadth first, so that a cap cuts the depths rather than half the top level
        while queue:
            if ctx.abort.is_set():
                raise ToolError("aborted")
            directory = queue.popleft()
            try:
                scanned = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                children[directory] = []
                continue
            kids: list[tuple[str, bool]] = []
            for entry in scanned:
                if any(rx.fullmatch(entry.name) for rx in ignore):
                    continue
                if entries >= cap:
                    complete = False
                    break
                is_dir = entry.is_dir(follow_symlinks=False)
                kids.append((entry.name, is_dir))
                entries += 1
                path = directory / entry.name
                if is_dir:
                    if is_junk(entry.name):
                        skipped.add(path)
                    else:
                        queue.append(path)
            children[directory] = kids
            if not complete:
                break
        lines = [ctx.display(root).rstrip("/") + "/"]

        def render(directory: Path, depth: int) -> None:
            kids = children.get(directory, [])
            for name, is_dir in sorted(kids, key=lambda k: (not k[1], k[0])):
                path = directory / name
                if is_dir:
                    note = " [not listed]" if path in skipped else ""
                    lines.append(f"{'  ' * depth}{name}/{note}")
                    render(path, depth + 1)
                else:
                    lines.append(f"{'  ' * depth}{name}")

        render(root, 1)
        if not complete:
            lines.append(f"\n[stopped at {cap} entries; list a subdirectory to see more]")
        return ToolOutput("\n".join(lines), metadata={"entries": entries, "truncated": not complete})
