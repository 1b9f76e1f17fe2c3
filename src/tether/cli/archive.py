"""`tether archive`: move sessions to an S3-compatible bucket (by id, age or directory), or bring one back
(`--restore ID`). See `tether.runtime.archive` for what is written and why a crash loses nothing."""

from __future__ import annotations

import asyncio
import time

import click

from ..errors import SessionBusy, TetherError
from ..paths import canonical_directory
from ..runtime.archive import Archived, archive_session, restore_session, select
from ..runtime.configuration import load_config
from ..store import Store
from ..store.objects import Bucket, BucketConfig
from .common import echo_json, find_session, wants_json, with_store
from .share import parse_duration
from .state import OptionError


@click.command("archive")
@click.argument("session_refs", metavar="[ID]...", nargs=-1)
@click.option("--older-than", "older", metavar="DURATION", help="Every session not updated for this long: 90d, 26w.")
@click.option("--dir", "directory", metavar="PATH", help="Every session of this directory (with --older-than: both).")
@click.option("--restore", "restore_ref", metavar="ID", help="Bring an archived session back, exactly as it was.")
@click.option(
    "--bucket",
    envvar="TETHER_ARCHIVE_BUCKET",
    help="The bucket [default: [archive] bucket; env: TETHER_ARCHIVE_BUCKET].",
)
@click.option("--prefix", help="The key prefix in the bucket [default: [archive] prefix, or tether/].")
@click.option(
    "--endpoint",
    envvar="AWS_ENDPOINT_URL",
    help="A service other than AWS: http://127.0.0.1:7480, https://ACCOUNT.r2.cloudflarestorage.com "
    "[default: [archive] endpoint_url; env: AWS_ENDPOINT_URL].",
)
@click.option("--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Sessions archived at once.")
@click.option("--json", "json_flag", is_flag=True, help="One JSON object a line per session.")
def archive(
    session_refs: tuple[str, ...],
    older: str | None,
    directory: str | None,
    restore_ref: str | None,
    bucket: str | None,
    prefix: str | None,
    endpoint: str | None,
    jobs: int,
    json_flag: bool,
) -> None:
    """Move sessions out of the database into an S3-compatible bucket (AWS S3, R2, MinIO, Ceph): each one,
    with its sub-agent sessions, as gzip-compressed JSON Lines plus a manifest with checksums. Nothing
    leaves the database until the object was written and read back verified; the session stays listed,
    archived, and opening it says how to bring it back. Credentials: the usual AWS_* variables. Needs the
    s3 extra (pip install 'tether[s3]').

    \b
    Examples:
      tether archive 4M0R1YB                      one session
      tether archive --older-than 180d            everything untouched for half a year
      tether archive --dir ~/old-project          every session of a directory
      tether archive --restore 4M0R1YB            bring it back"""
    config = load_config().archive
    where = BucketConfig(
        bucket or config.bucket or "",
        prefix if prefix is not None else config.prefix,
        endpoint or config.endpoint_url,
        config.region,
    )
    if restore_ref:
        if session_refs or older or directory:
            raise OptionError("--restore takes one session; leave out the others, --older-than and --dir")
        _restore(restore_ref, where, json_flag)
        return
    if not (session_refs or older or directory):
        raise OptionError("name the sessions to archive (ID...), or --older-than DURATION and/or --dir PATH")
    if session_refs and (older or directory):
        raise OptionError("give session ids, or --older-than/--dir, not both")
    if not where.bucket:
        raise OptionError("no bucket: pass --bucket, set TETHER_ARCHIVE_BUCKET, or [archive] bucket in config.toml")
    age = parse_duration(older) if older else None
    folder = canonical_directory(directory) if directory else None

    async def run(store: Store) -> list[Archived | str]:
        ids = [(await find_session(store, ref)).id for ref in session_refs]
        chosen = await select(store, ids=ids, older_than=age, directory=folder)
        target = Bucket(where)
        gate = asyncio.Semaphore(jobs)

        async def one(session_id: str) -> Archived | str:
            async with gate:
                try:
                    return await archive_session(store, target, session_id)
                except (SessionBusy, TetherError) as exc:
                    if len(chosen) == 1:
                        raise
                    return f"{session_id}: not archived: {exc}"

        return list(await asyncio.gather(*(one(s.id) for s in chosen)))

    started = time.monotonic()
    results = with_store(run)
    done = [r for r in results if isinstance(r, Archived)]
    for result in results:
        if isinstance(result, str):
            click.echo(result, err=True)
        elif wants_json(json_flag):
            echo_json(result.__dict__)
        else:
            click.echo(
                f"Archived {result.session_id} ({result.entries} entries, {result.bytes} bytes) to {result.where}"
            )
    if not results:
        click.echo("No session to archive.", err=True)
    elif len(results) > 1:
        took = time.monotonic() - started
        click.echo(f"{len(done)} of {len(results)} sessions archived in {took:.1f}s.", err=True)
    if len(done) < len(results):
        raise SystemExit(1)


def _restore(ref: str, where: BucketConfig, json_flag: bool) -> None:
    from ..store.records import SessionInfo

    async def run(store: Store) -> list[SessionInfo]:
        info = await find_session(store, ref)
        return await restore_session(store, info.id, config=where)

    restored = with_store(run)
    if wants_json(json_flag):
        echo_json({"restored": [s.id for s in restored], "entries": sum(s.entry_count for s in restored)})
        return
    top = restored[0]
    click.echo(
        f"Restored {top.id} ({top.entry_count} entries"
        + (f", {len(restored) - 1} sub-agent sessions)" if len(restored) > 1 else ")")
    )
