"""`tether import`: bring in sessions from Claude Code, Codex or a tether export, from a path or from each
tool's own folder, again and again: what was imported before is found and only what is new is appended."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from ..importers.jsonl import FileResult
from ..importers.sources import (
    DISCOVERABLE,
    FORMATS,
    default_root,
    discover,
    files_under,
    import_path,
    is_opencode_store,
)
from ..store.protocols import Journal
from .common import console, echo_json, wants_json, with_store
from .sanitize import escape_controls

_SHOWN_PROBLEMS = 20


def parse_since(value: str, now: float | None = None) -> float:
    """A time given as a date (``2025-06-01``), a date and time (ISO 8601) or an age (``90m``, ``36h``,
    ``7d``, ``2w``): seconds since the epoch."""
    now = time.time() if now is None else now
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", value)
    if match:
        return now - float(match.group(1)) * {"m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a date (2025-06-01) nor an age (36h, 7d, 2w)") from None
    return when.timestamp()


@click.command("import")
@click.argument("paths", nargs=-1, type=click.Path(exists=True), metavar="[PATH]...")
@click.option("--from", "fmt", type=click.Choice(FORMATS), help="The files' format (default: detected from each file).")
@click.option(
    "--all", "all_tools", is_flag=True, help="Import from every tool's own folder (Claude Code, Codex, opencode)."
)
@click.option("--dir", "-d", "directory", metavar="PATH", help="Only sessions whose workspace is PATH.")
@click.option("--since", metavar="WHEN", help="Only files changed since WHEN: a date (2025-06-01) or an age (7d).")
@click.option("--dry-run", "-n", is_flag=True, help="Say what would be imported; write nothing.")
@click.option(
    "--json",
    "json_flag",
    is_flag=True,
    help="Print one JSON object: every file's outcome and the totals (--watch: one line per round that changed something).",
)
@click.option(
    "--watch", "-w", is_flag=True, help="Keep importing as the tools write (every --interval seconds); Ctrl-C stops."
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="With --watch: how often to look for what changed.",
)
def import_command(
    paths: tuple[str, ...],
    fmt: str | None,
    all_tools: bool,
    directory: str | None,
    since: str | None,
    dry_run: bool,
    json_flag: bool,
    watch: bool,
    interval: float,
) -> None:
    """Import sessions from Claude Code, Codex, opencode, or tether's own JSON export.

    \b
    Where from:
      tether import --from claude-code     Claude Code's folder (~/.claude/projects)
      tether import --from codex           Codex's folder (~/.codex/sessions; the first
                                           CLI's rollout-*.json too)
      tether import --from opencode        opencode's data folder (~/.local/share/opencode:
                                           its opencode.db, storage/ of before v1.2, and
                                           each project's older project/*/storage)
      tether import --all                  all three
      tether import PATH...                files or folders; the format of each file is
                                           detected unless --from names it (an opencode
                                           database or storage folder is one path; a
                                           folder of `opencode export` files is several)

    Importing again is safe: a session imported before is found (its id is derived from the source's), and
    only what its file gained since is appended. A Claude Code conversation stays one session (progress
    lines, parallel calls, bash-mode and command lines share parents in it); only a message edited and
    sent again branches, as a fork of the session. A sub-agent's transcript (Claude Code), spawned thread
    (Codex) or task session (opencode) becomes a child session; an opencode revert a revert (nothing is
    deleted). Usage adds up to the source's; images in tool results are image parts; API errors and
    aborted messages are error entries with their text.

    A session tether exported there (`tether sessions export --format claude-code|codex --install`) is not
    copied back: what the tool added to it (the session continued there) is appended to the original, or,
    when the original was continued in tether too since the export, to a fork of it at the export point.
    An export from another machine's tether is imported as a copy.

    A line that is not JSON, or cut short, is skipped and reported with its file and line number; the rest
    of the file is imported. A line of a kind tether does not know is kept as a marker with its JSON.
    Imported sessions ask before they run here for the first time.

    With --watch, the import is repeated every few seconds (only files that changed are read again), so
    what the tools write is brought in before they delete it; a line or message still being written waits
    for the next round. Ctrl-C stops after the file being imported.

    Exit status: 0 when every file was imported (reported lines included), 1 when a file could not be
    imported at all, 2 for options that cannot be used."""
    if paths and all_tools:
        raise click.UsageError("give paths or --all, not both")
    if not paths and not all_tools and fmt is None:
        raise click.UsageError(
            "say what to import: paths, --from claude-code, --from codex or --from opencode (their own folders), "
            "or --all"
        )
    if not paths and fmt == "tether":
        raise click.UsageError("tether exports have no folder of their own: give their paths")
    when = parse_since(since) if since else None
    where = os.path.abspath(os.path.expanduser(directory)) if directory else None
    if watch:
        if dry_run:
            raise click.UsageError("--watch imports; it cannot be combined with --dry-run")
        _watch(lambda: _files(paths, fmt, all_tools, where, when), where, when, interval, wants_json(json_flag))
        return
    files = _files(paths, fmt, all_tools, where, when)

    async def run(store: Journal) -> list[FileResult]:
        return await _import_all(store, files, fmt if paths else None, dry_run, where, when)

    results = with_store(run)
    if wants_json(json_flag):
        echo_json(_json(results, dry_run))
    else:
        _print(results, dry_run, [str(p) for p in paths] or _searched(fmt, all_tools))
    if any(r.outcome == "failed" for r in results):
        raise SystemExit(1)


def _watch(
    sources: Callable[[], list[tuple[Path, str | None]]],
    directory: str | None,
    since: float | None,
    interval: float,
    as_json: bool,
) -> None:
    """Import, then again every `interval` seconds what changed, until SIGINT or SIGTERM (each stops after
    the file in progress; the store is closed as after any import)."""
    from ..importers.watch import Watcher

    async def run(store: Journal) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = [s for s in (signal.SIGINT, signal.SIGTERM) if hasattr(signal, s.name)]
        for sig in signals:
            loop.add_signal_handler(sig, stop.set)
        watcher = Watcher(sources, directory=directory, since=since)
        total, rounds = 0, 0
        try:
            while not stop.is_set():
                results = await watcher.round(store, stop.is_set)
                changed = [r for r in results if r.entries or r.problems or r.outcome == "failed"]
                total += sum(r.entries for r in results)
                if changed and as_json:
                    echo_json({**_json(changed, False), "round": rounds, "at": time.time()})
                elif changed:
                    _print(changed, False, [], summary=False)
                if rounds == 0 and not as_json:
                    count = watcher.listed
                    click.echo(
                        f"watching {count} source{'s' * (count != 1)} every {interval:g}s; Ctrl-C stops", err=True
                    )
                rounds += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
        return total

    total = with_store(run)
    if not as_json:
        click.echo(f"stopped; {total} entr{'y' if total == 1 else 'ies'} imported while watching", err=True)


def _searched(fmt: str | None, all_tools: bool) -> list[str]:
    tools = DISCOVERABLE if all_tools else (fmt,) if fmt in DISCOVERABLE else ()
    return [str(default_root(t)) for t in tools]


def _files(
    paths: tuple[str, ...], fmt: str | None, all_tools: bool, where: str | None, when: float | None
) -> list[tuple[Path, str | None]]:
    """The files to import, each with its format when it is known from where it was found."""
    if not paths:
        tools = DISCOVERABLE if all_tools else (fmt,)
        return [(p, tool) for tool in tools if tool for p in discover(tool, directory=where, since=when)]
    out: list[tuple[Path, str | None]] = []
    for raw in paths:
        path = Path(raw)
        if fmt in (None, "opencode") and is_opencode_store(path):
            out.append((path, "opencode"))  # one store of many sessions: --dir and --since apply inside
            continue
        if path.is_dir():
            if fmt in DISCOVERABLE:
                out += [(p, fmt) for p in discover(fmt, path, directory=where, since=when)]
                continue
            candidates = list(files_under(path))
        else:
            candidates = [path]
        for p in candidates:
            try:
                if when is not None and p.stat().st_mtime < when:
                    continue
            except OSError:
                pass
            out.append((p, fmt))
    return out


async def _import_all(
    store: Journal,
    files: list[tuple[Path, str | None]],
    fmt: str | None,
    dry_run: bool,
    directory: str | None = None,
    since: float | None = None,
) -> list[FileResult]:
    results: list[FileResult] = []
    show = sys.stderr.isatty() and (len(files) > 1 or any(known == "opencode" for _, known in files))
    if not show:
        for path, known in files:
            results += await import_path(
                store, str(path), known or fmt, dry_run=dry_run, directory=directory, since=since
            )
        return results
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("importing", total=len(files))
        for path, known in files:
            progress.update(task, description=escape_controls(f"importing {path.name[:40]}"))
            sessions = None

            def count(done: int, total: int) -> None:  # an opencode store: its sessions, on a bar of their own
                nonlocal sessions
                if sessions is None:
                    sessions = progress.add_task("  sessions", total=total)
                progress.update(sessions, completed=done, total=total)

            results += await import_path(
                store, str(path), known or fmt, dry_run=dry_run, directory=directory, since=since, progress=count
            )
            if sessions is not None:
                progress.remove_task(sessions)
            progress.advance(task)
    return results


def _json(results: list[FileResult], dry_run: bool) -> dict[str, Any]:
    files = [
        {
            "path": r.path,
            "format": r.format,
            "outcome": r.outcome,
            "session_id": r.session_id,
            "title": r.title,
            "entries": r.entries,
            "lines": r.lines,
            "sessions": r.sessions,
            "problems": [{"path": p.path, "line": p.line, "reason": p.reason} for p in r.problems],
            "note": r.note,
        }
        for r in results
    ]
    totals: dict[str, int] = {}
    for r in results:
        totals[r.outcome] = totals.get(r.outcome, 0) + 1
    return {
        "dry_run": dry_run,
        "files": files,
        "outcomes": totals,
        "entries": sum(r.entries for r in results),
        "problems": sum(len(r.problems) for r in results),
    }


_VERBS = {
    "imported": "imported",
    "grown": "appended to",
    "unchanged": "unchanged",
    "would import": "would import",
    "would append": "would append to",
    "failed": "failed",
}


def _print(results: list[FileResult], dry_run: bool, searched: list[str], *, summary: bool = True) -> None:
    out = console()
    if not results:
        where = ", ".join(searched) or "the paths given"
        out.print(escape_controls(f"Nothing to import: no transcripts found in {where}."))
        return
    for r in results:
        if not summary and not r.entries and r.outcome != "failed":
            continue  # (while watching, a file with only a problem to report is not a change)
        if r.outcome == "unchanged" and not r.note:
            continue  # (one of tether's own exports is said, so that nobody looks for its copy)
        entries = f"{r.entries} entr{'y' if r.entries == 1 else 'ies'}"
        extra = len(r.sessions) - 1
        more = f", {extra} more session{'s' * (extra != 1)} (forks, sub-agents)" if extra > 0 else ""
        title = f" “{r.title[:60]}”" if r.title else ""
        counted = f": {entries}{more}" if r.outcome != "unchanged" else ""
        line = f"{_VERBS[r.outcome]:>15}  {r.format:<11} {r.session_id or '-'}{title}{counted}"
        out.print(escape_controls(line) if r.outcome != "failed" else escape_controls(f"{'failed':>15}  {r.path}"))
        if r.note:
            out.print(escape_controls(f"{'':>15}  {r.note}"))
    problems = [p for r in results for p in r.problems]
    if problems:
        for problem in problems[:_SHOWN_PROBLEMS]:
            click.echo(escape_controls(f"warning: {problem}"), err=True)
        if len(problems) > _SHOWN_PROBLEMS:
            click.echo(f"... and {len(problems) - _SHOWN_PROBLEMS} more (--json lists them all)", err=True)
    if not summary:
        return
    counts: dict[str, int] = {}
    for r in results:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1
    outcomes = ", ".join(f"{n} {_VERBS[k]}" for k, n in counts.items())
    total = sum(r.entries for r in results)
    verb = "would write" if dry_run else "wrote"
    kinds = {r.format == "opencode" for r in results}
    noun = "session" if kinds == {True} else "file" if kinds == {False} else "source"  # opencode: one per session
    out.print(escape_controls(f"{len(results)} {noun}{'s' * (len(results) != 1)}: {outcomes}; {verb} {total} entries."))


__all__ = ["import_command", "parse_since"]
