"""`tether backup PATH`: a consistent copy of the database, made through SQLite's online backup API while
tether may be running (`SqliteStore.backup`), with progress for large files; it says how to restore."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ..errors import InvalidInput
from ..store import Store
from ..store.faults import human_bytes
from .common import cli_state, echo_json, wants_json, with_store

PROGRESS_ABOVE = 64 << 20
"""Databases larger than this show a progress bar on a terminal."""


@click.command("backup")
@click.argument("target", metavar="PATH", type=click.Path(dir_okay=False, path_type=str))
@click.option("--force", is_flag=True, help="Replace PATH if it is a regular file (never a link, a device or a FIFO).")
@click.option("--json", "json_flag", is_flag=True, help="Where the backup went, its size and sessions, as JSON.")
def backup(target: str, force: bool, json_flag: bool) -> None:
    """Copy the database to PATH, consistent as of one moment, while tether may be running.

    The database is checked first, as `tether doctor` checks it: a damaged one is not copied (a damaged
    search index: `tether doctor --repair` rebuilds it from the journal, then back up again).

    The copy is a normal tether database: use it with `tether --store sqlite:///PATH` (or TETHER_STORE),
    or restore it by copying it over the database with no tether running (deleting the database's -wal and
    -shm files if they are there)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from ..store.backup import BackupResult
    from ..store.sqlite import SqliteStore

    async def run(store: Store) -> tuple[BackupResult, str]:
        if not isinstance(store, SqliteStore):
            raise InvalidInput(f"{cli_state().store_url} is not a SQLite store: only a database file is backed up")
        if not (sys.stderr.isatty() and os.path.getsize(store.path) > PROGRESS_ABOVE):
            return await store.backup(target, force=force), store.path
        with Progress(TextColumn("backing up"), BarColumn(), DownloadColumn(), transient=True) as bar:
            task = bar.add_task("backup", total=None)

            def report(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return await store.backup(target, force=force, progress=report), store.path

    result, live = with_store(run, reads=True)
    if wants_json(json_flag):
        payload: dict[str, Any] = {"path": result.path, "size": result.size, "sessions": result.sessions, "of": live}
        echo_json(payload)
        return
    click.echo(f"backed up {live} to {result.path}: {result.sessions} session(s), {human_bytes(result.size)}")
    click.echo(
        f"use it with `tether --store sqlite:///{result.path.lstrip('/')}`; to restore it, with no tether running, "
        f"copy it over {live} and delete {live}-wal and {live}-shm if they are there",
        err=True,
    )
