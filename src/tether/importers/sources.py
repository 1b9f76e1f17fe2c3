"""Where transcripts are and what they are: each tool's default location (Claude Code's projects folder,
Codex's sessions folder, opencode's data folder), the files of a folder, the format of a file (detected from
its first lines; opencode's stores from their shape), and the import of a list of files one after another
with the outcome of each."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from ..errors import ImportFormatError, InvalidInput
from ..store.protocols import Journal
from . import claude_code, codex, opencode
from .jsonl import FileResult, Problem, decode_json, existing, read_lines

FORMATS = ("claude-code", "codex", "opencode", "tether")
DISCOVERABLE = ("claude-code", "codex", "opencode")

__all__ = [
    "DISCOVERABLE",
    "FORMATS",
    "default_root",
    "detect_format",
    "discover",
    "files_under",
    "import_file",
    "import_path",
    "is_opencode_store",
]


def default_root(tool: str) -> Path:
    """Where `tool` keeps its transcripts: ``$CLAUDE_CONFIG_DIR/projects`` (default ``~/.claude/projects``)
    for Claude Code, ``$CODEX_HOME/sessions`` (default ``~/.codex/sessions``) for Codex,
    ``$XDG_DATA_HOME/opencode`` (default ``~/.local/share/opencode``: its database and storage folder) for
    opencode."""
    if tool == "claude-code":
        base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
        return Path(base) / "projects"
    if tool == "codex":
        base = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
        return Path(base) / "sessions"
    if tool == "opencode":
        return opencode.default_root()
    raise InvalidInput(f"tether finds no default location for {tool!r}: give a path")


def detect_format(path: str) -> str:
    """'claude-code', 'codex' or 'tether', from the file's first lines; `ImportFormatError` saying what it
    saw otherwise."""
    try:
        with open(path, "rb") as f:
            start = f.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError as e:
        raise ImportFormatError(f"cannot import {path}: {e.strerror or e}") from None
    if start.startswith(b'{"format":"tether.session"') or start.startswith(b'{"format": "tether.session"'):
        return "tether"
    if start.startswith(b"SQLite format 3\x00"):
        return "opencode"  # the only database an import reads; one of another kind says what tables it has
    if not start:
        raise ImportFormatError(f"cannot import {path}: the file is empty")
    if opencode.looks_like_export(Path(path)):
        return "opencode"  # `opencode export`: one JSON document over many lines
    if codex.is_json_rollout(path):
        return "codex"  # the first Codex CLI's rollout: one JSON document
    seen = "no JSON object"
    for line in read_lines(path):
        if line.no > 20:
            break
        if not line.data.strip():
            continue
        try:
            obj = decode_json(line.data)
        except msgspec.DecodeError:
            seen = f"line {line.no} is not JSON"
            continue
        if not isinstance(obj, dict):
            seen = f"line {line.no} is a JSON {type(obj).__name__}"
            continue
        if codex.looks_like_codex(obj):
            return "codex"
        if claude_code.looks_like_claude_code(obj):
            return "claude-code"
        if "format" in obj:
            version = f" version {obj.get('version')}" if "version" in obj else ""
            raise ImportFormatError(f"cannot import {path}: its format is {str(obj['format'])[:60]!r}{version}")
        keys = ", ".join(sorted(obj)[:8])
        seen = f"line {line.no} is a JSON object with keys {keys or 'none'}"
        break
    raise ImportFormatError(
        f"cannot import {path}: not a Claude Code transcript, a Codex rollout or a tether export ({seen}); "
        "name the format with --from if it is one of them"
    )


def files_under(folder: Path) -> Iterator[Path]:
    """The ``.jsonl`` and ``.json`` files under `folder`, sessions before sub-agents (a sub-agent's file
    is imported as a child of its session, which must be there first), each group in path order."""
    found = sorted(p for p in folder.rglob("*") if p.suffix in (".jsonl", ".json") and p.is_file())
    found = [p for p in found if not p.name.endswith(".meta.json")]
    yield from (p for p in found if not p.stem.startswith("agent-"))
    yield from (p for p in found if p.stem.startswith("agent-"))


def _changed_since(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False


def _project_name(directory: str) -> str:
    """Claude Code's folder name for a workspace: the path with every character but letters and digits
    made a dash (``/home/me/my.app`` → ``-home-me-my-app``)."""
    return re.sub(r"[^A-Za-z0-9]", "-", directory)


def _rollout_cwd(path: Path) -> str | None:
    for line in read_lines(str(path)):
        try:
            obj = decode_json(line.data)
        except msgspec.DecodeError:
            return None
        if isinstance(obj, dict):
            meta = obj.get("payload") if obj.get("type") == "session_meta" else obj
            cwd = meta.get("cwd") if isinstance(meta, dict) else None
            return os.path.normpath(cwd) if isinstance(cwd, str) else None
        return None
    return None


def discover(
    tool: str, root: Path | None = None, *, directory: str | None = None, since: float | None = None
) -> list[Path]:
    """The transcript files of `tool` under `root` (default: its own location), only those of workspace
    `directory` and those changed since `since` (seconds since the epoch) when given."""
    root = root or default_root(tool)
    if tool == "opencode":  # one store holds every session: `import_path` applies `directory` and `since`
        if opencode.looks_like_opencode(root):
            return [root]
        if not root.is_dir():
            return []
        found = [p for p in files_under(root) if p.suffix == ".json" and opencode.looks_like_export(p)]
        return [p for p in found if since is None or _changed_since(p, since)]  # `opencode export` files
    if not root.is_dir():
        return []
    files: list[Path] = []
    for path in files_under(root):
        json_rollout = tool == "codex" and path.suffix == ".json" and codex.is_json_rollout(path)
        if path.suffix != ".jsonl" and not json_rollout:
            continue
        if since is not None:
            try:
                if path.stat().st_mtime < since:
                    continue
            except OSError:
                continue
        if directory is not None:
            if tool == "claude-code":
                project = path.relative_to(root).parts[0] if path.parent != root else None
                if project != _project_name(directory):
                    continue
            elif _rollout_cwd(path) != os.path.normpath(directory):
                continue
        files.append(path)
    return files


async def import_file(store: Journal, path: str, fmt: str | None = None, *, dry_run: bool = False) -> FileResult:
    """Import one file (its format detected when `fmt` is None), or append what it gained since it was last
    imported. Never raises for bad content: a file that cannot be imported at all is a `failed` result."""
    try:
        fmt = fmt or detect_format(path)
    except ImportFormatError as e:
        return FileResult(path, "unknown", "failed", problems=[Problem(path, None, _reason(str(e), path))])
    if fmt == "claude-code":
        return await claude_code.import_claude_code(store, path, dry_run=dry_run)
    if fmt == "codex":
        return await codex.import_codex(store, path, dry_run=dry_run)
    if fmt == "tether":
        return await _import_tether(store, path, dry_run=dry_run)
    if fmt == "opencode":
        results = await opencode.import_opencode(store, path, dry_run=dry_run)
        if len(results) == 1:
            return results[0]
        merged = FileResult(path, "opencode", "imported" if any(r.entries for r in results) else "unchanged")
        merged.entries = sum(r.entries for r in results)
        merged.sessions = [sid for r in results for sid in r.sessions]
        merged.problems = [p for r in results for p in r.problems]
        if any(r.outcome == "failed" for r in results):
            merged.outcome = "failed"
        return merged
    raise InvalidInput(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


def is_opencode_store(path: Path) -> bool:
    """Whether `path` is one of opencode's stores (imported whole, not file by file)."""
    return opencode.looks_like_opencode(path)


async def import_path(
    store: Journal,
    path: str,
    fmt: str | None = None,
    *,
    dry_run: bool = False,
    directory: str | None = None,
    since: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[FileResult]:
    """Import one file, or one of opencode's stores (one result per session it holds; `progress` is told
    how many of its sessions are done)."""
    if fmt == "opencode" or (fmt is None and is_opencode_store(Path(path))):
        return await opencode.import_opencode(
            store, path, dry_run=dry_run, directory=directory, since=since, progress=progress
        )
    return [await import_file(store, path, fmt, dry_run=dry_run)]


async def _import_tether(store: Journal, path: str, *, dry_run: bool) -> FileResult:
    from .tether_json import import_json, parse_export

    result = FileResult(path, "tether", "imported")
    try:
        export = parse_export(Path(path).read_bytes(), source=path)
    except OSError as e:
        result.outcome, result.problems = "failed", [Problem(path, None, f"cannot read it: {e.strerror or e}")]
        return result
    except ImportFormatError as e:
        result.outcome, result.problems = "failed", [Problem(path, None, _reason(str(e), path))]
        return result
    result.session_id, result.title = export.session.id, export.session.title
    result.lines = len(export.entries)
    if await existing(store, export.session.id) is not None:
        result.outcome = "unchanged"  # an export is a whole session: the same id is the same session
        return result
    if dry_run:
        result.outcome, result.entries = "would import", len(export.entries)
        return result
    info = await import_json(store, export, source=path)
    result.entries, result.sessions = info.entry_count, [info.id]
    return result


def _reason(message: str, path: str) -> str:
    prefix = f"cannot import {path}: "
    return message[len(prefix) :] if message.startswith(prefix) else message
