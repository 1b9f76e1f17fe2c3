"""`tether migrate --from URL --to URL`: every session of one store copied into another (SQLite and
PostgreSQL, either way), resumable after a kill, verified session by session, with progress on stderr
(`tether.store.transfer`)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from typing import Any

import click

from ..errors import InvalidInput
from ..store import open_store
from ..store.transfer import MigrationReport, Progress, migrate
from .common import cli_state, echo_json, wants_json

PROGRESS_EVERY = 0.5
"""Seconds between two progress lines on stderr (a terminal gets one line rewritten in place)."""


def _redacted(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        creds, _, host = rest.partition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else url
    return url


class _Reporter:
    """Progress lines on stderr, at most one each `PROGRESS_EVERY` seconds (and each change of phase)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.phase = ""
        self.held: Progress | None = None

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        if self.quiet:
            return
        if p.phase == self.phase and now - self.last < PROGRESS_EVERY:
            self.held = dataclasses.replace(p)  # (the migration changes `p` in place)
            return
        if p.phase != self.phase and self.held is not None:
            self._show(self.held)  # where the phase ended (its last line was dropped: "0/11" before "done")
        self.held = None
        self.last, self.phase = now, p.phase
        self._show(p)

    def _show(self, p: Progress) -> None:
        if p.phase == "artifacts":
            line = f"artifacts: {p.artifacts:,} copied"
        elif p.phase == "sessions":
            line = (
                f"sessions: {p.sessions_done:,}/{p.sessions_total:,} ({p.copied:,} copied, {p.skipped:,} already there"
                + (f", {p.replaced:,} replaced" if p.replaced else "")
                + f"), {p.entries:,} entries"
            )
        elif p.phase == "search":
            line = f"search index: {p.indexed:,} entries indexed"
        elif p.phase == "verify":
            line = f"verifying: {p.verified:,}/{p.sessions_total:,} sessions"
        else:
            line = "done"
        line = f"migrate {p.elapsed:7.1f}s  {line}"
        if self.tty:
            click.echo("\r\x1b[2K" + line, err=True, nl=p.phase == "done")
        else:
            click.echo(line, err=True)


@click.command("migrate")
@click.option(
    "--from",
    "source_url",
    metavar="URL",
    help="The store to copy from (default: --store, TETHER_STORE or the default database).",
)
@click.option(
    "--to",
    "target_url",
    metavar="URL",
    required=True,
    help="The store to copy into: sqlite:///path/to.db or postgresql://user@host/db.",
)
@click.option(
    "--no-verify", is_flag=True, help="Skip the check, session by session, of counts and checksums at the end."
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace a session the target holds that differs from the source's even when the target's copy has entries the source lacks.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
@click.option("--json", "json_flag", is_flag=True, help="What was copied and verified, as JSON.")
def migrate_command(
    source_url: str | None, target_url: str, no_verify: bool, overwrite: bool, quiet: bool, json_flag: bool
) -> None:  # fmt: skip
    """Copy every session from one store into another: SQLite to PostgreSQL, PostgreSQL to SQLite, or
    between two files.

    \b
    Copied: each session's row (title, directory, parent and fork links, metadata,
    times, counters), its journal entry for entry with its seqs and times, its
    share links (they keep opening), the answer a run was streaming, and every
    artifact (large tool outputs). The target builds its own search index.
    Not copied: leases (stop the runs first; a session copied mid-run is
    brought up to date by running migrate again) and the audit trail, which
    stays with the source (`tether audit verify` there); the target records
    each session it imports in its own.

    \b
    Safe to stop and run again: each session is copied in one transaction, so a
    kill leaves it whole or absent; a rerun skips sessions already copied whole
    and copies again those the source changed since. A session the target has
    written to since an earlier copy stops the migration (see --overwrite).
    Sessions only the target has are left alone.

    \b
    At the end every session is verified: its counts and a sha256 of its row and
    entries, read back from both stores. Exit status 1 when anything differs.

    \b
    Examples:
      tether migrate --to postgresql://tether@db.internal/tether
      tether migrate --from postgresql://tether@db/tether --to sqlite:///tmp/copy.db
    """
    source_url = source_url or cli_state().store_url
    if source_url is not None and source_url == target_url:
        raise InvalidInput("--from and --to name the same store")
    report = _Reporter(quiet)

    async def run() -> MigrationReport:
        source = open_store(source_url)
        try:
            target = open_store(target_url)
            try:
                if getattr(source, "path", None) is not None and getattr(source, "path", None) == getattr(
                    target, "path", 0
                ):
                    raise InvalidInput("--from and --to name the same database file")
                return await migrate(source, target, check=not no_verify, overwrite=overwrite, progress=report)
            finally:
                await target.close()
        finally:
            await source.close()

    result = asyncio.run(run())
    if wants_json(json_flag):
        payload: dict[str, Any] = {
            **{k: getattr(result, k) for k in result.__struct_fields__},
            "to": _redacted(target_url),
        }
        echo_json(payload)
        return
    click.echo(
        f"migrated {result.sessions:,} session(s) to {_redacted(target_url)}: {result.copied:,} copied "
        f"({result.entries:,} entries), {result.skipped:,} already there"
        + (f", {result.replaced:,} replaced" if result.replaced else "")
        + f"; {result.artifacts:,} artifact(s), {result.shares:,} share(s); "
        + (f"{result.verified:,} verified equal" if not no_verify else "not verified")
        + (f"; {result.only_in_target:,} session(s) only in the target, left alone" if result.only_in_target else "")
        + f" ({result.seconds:.1f} s)"
    )
