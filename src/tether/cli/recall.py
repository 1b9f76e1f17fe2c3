"""`tether recall "query"`: find what was said in earlier sessions of a directory (the current one unless
--dir or --all), best first, each hit with where it comes from and its neighbours. `--backfill` indexes
a store written before the search index existed; `--rebuild` makes the search index and the turn keys again
from the journal; `--semantic` adds the embeddings side (extra); `--facts`
has the configured model write fact lines for the stored turns (bounded, resumable), which later recalls
use as extra keys."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import Any

import click

from ..errors import InvalidInput
from ..paths import canonical_directory
from ..recall import RecallResult, recall
from ..recall.backfill import backfill
from ..recall.engine import default_keys
from ..recall.facts import FactIndex, FactProgress, Facts, default_fact_path
from ..recall.pgfacts import PgFactIndex
from ..recall.pgkeys import is_postgres
from ..recall.rebuild import Rebuilt, rebuild_indexes
from ..recall.render import when
from ..store import Store
from ..store.records import SEARCH_ROLES, BackfillProgress
from .common import console, echo_json, find_session, wants_json, with_store
from .sanitize import escape_controls


def _timestamp(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise InvalidInput(
            f"{option} takes a date or time like 2026-05-01 or 2026-05-01T14:30, not {value!r}"
        ) from None


def _live(text: str) -> None:
    """A progress line redrawn in place, on a terminal only: a pipe or a log gets no progress (and no \\r),
    only the summary that follows."""
    if sys.stderr.isatty():
        click.echo(f"\r{text}   ", err=True, nl=False)


def _end_live() -> None:
    if sys.stderr.isatty():
        click.echo("", err=True)


def _progress(step: BackfillProgress, elapsed: float) -> None:
    rate = step.entries_indexed / elapsed if elapsed > 0 else 0.0
    _live(
        f"indexed {step.entries_indexed:,} entries, {step.sessions_done:,} sessions done, "
        f"{step.backlog:,} entries to go ({rate:,.0f}/s)"
    )


@click.command()
@click.argument("query", required=False)
@click.option("--dir", "-d", "directory", metavar="PATH", help="Sessions of this directory (default: the current one).")
@click.option("--all", "-a", "all_dirs", is_flag=True, help="Sessions of every directory.")
@click.option("--session", "-s", "session_ref", metavar="ID", help="Only this session (an id or its last characters).")
@click.option("--role", type=click.Choice(SEARCH_ROLES), help="Only turns of this role.")
@click.option("--since", metavar="DATE", help="Only entries from this date or time on (ISO: 2026-05-01).")
@click.option("--until", metavar="DATE", help="Only entries before this date or time.")
@click.option("--limit", "-n", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--context", "-C", type=click.IntRange(0, 20), default=1, show_default=True, help="Neighbours shown.")
@click.option("--reverted", is_flag=True, help="Include entries that a revert hid.")
@click.option("--semantic", is_flag=True, help="Add the embeddings side (needs the `embeddings` extra).")
@click.option("--backfill", "do_backfill", is_flag=True, help="Index entries stored before the index existed.")
@click.option(
    "--rebuild",
    "do_rebuild",
    is_flag=True,
    help="Make the search index and the turn keys again from the journal (when `tether doctor` finds them "
    "damaged; the journal is only read).",
)
@click.option(
    "--facts",
    "build_facts",
    is_flag=True,
    help="Have the model write fact lines for stored turns (at most --facts-calls calls; run again to go on).",
)
@click.option(
    "--facts-calls", type=click.IntRange(1), default=200, show_default=True, help="Model calls per --facts run."
)
@click.option(
    "--model", "-m", "model_spec", metavar="MODEL", help="The model that writes the facts (default: configured)."
)
@click.option("--json", "json_flag", is_flag=True, help="Print one JSON object: the query, its hits, timings.")
def recall_command(
    query: str | None,
    directory: str | None,
    all_dirs: bool,
    session_ref: str | None,
    role: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    context: int,
    reverted: bool,
    semantic: bool,
    do_backfill: bool,
    do_rebuild: bool,
    build_facts: bool,
    facts_calls: int,
    model_spec: str | None,
    json_flag: bool,
) -> None:
    """Find what was said in earlier sessions: paths, decisions, instructions, errors.

    Words match by stem (run finds running), names, paths and identifiers work, and a date in the query
    (`in March`, `2026-05-01`, `yesterday`) favours what was said then."""
    if all_dirs and directory:
        raise click.UsageError("give --all or --dir, not both")
    if not do_backfill and not do_rebuild and not build_facts and not (query or "").strip():
        raise click.UsageError('give a query: tether recall "what to look for"')
    where = None if all_dirs or session_ref else canonical_directory(directory)
    start, end = _timestamp(since, "--since"), _timestamp(until, "--until")

    async def run(store: Store) -> RecallResult | BackfillProgress | FactProgress | Rebuilt:
        if do_rebuild:
            rebuilt = await rebuild_indexes(store, progress=_progress, keys_progress=_keys_progress)
            if rebuilt.entries_indexed or rebuilt.keys_read:
                click.echo("", err=True)
            if not query:
                return rebuilt
        if do_backfill:
            done = await backfill(store, progress=_progress)
            if done.entries_indexed:
                _end_live()
            keyed = await _build_keys(store)
            if not json_flag and keyed:
                click.echo(f"turn keys: {keyed:,} entries read", err=True)
            if not query and not build_facts:
                return done
        session_id = (await find_session(store, session_ref)).id if session_ref else None
        if build_facts:
            written = await _build_facts(store, where, session_id, model_spec, facts_calls)
            if not query:
                return written
        facts: Facts | None = None
        path = default_fact_path(store)
        if is_postgres(store):
            facts = PgFactIndex(store)  # its tables: an empty one finds nothing
        elif path != ":memory:" and os.path.exists(path):
            facts = FactIndex(store, path=path)
        index = None
        if semantic:
            from ..recall.embeddings import load_embedder
            from ..recall.pgvectors import semantic_index

            index = semantic_index(store, load_embedder())
            await index.sync(directory=where, session_id=session_id)
        try:
            return await recall(
                store, query or "", directory=where, session_id=session_id, role=role, since=start, until=end,
                limit=limit, context=context, include_reverted=reverted, semantic=index, facts=facts,
            )  # fmt: skip
        finally:
            if index is not None:
                index.close()
            if facts is not None:
                facts.close()

    result = with_store(run, reads=True)
    if isinstance(result, FactProgress):
        if wants_json(json_flag):
            echo_json(result)
        else:
            more = "; run it again to go on" if result.left else ""
            click.echo(
                f"facts: {result.lines:,} lines for {result.turns:,} turns in {result.calls:,} model calls{more}"
            )
        return
    if isinstance(result, Rebuilt):
        if wants_json(json_flag):
            echo_json(result)
        else:
            click.echo(
                f"rebuilt from the journal: the search index ({result.entries_indexed:,} entries) and the turn "
                f"keys ({result.keys_read:,} entries read)"
            )
        return
    if isinstance(result, BackfillProgress):
        _say_backfilled(result, json_flag)
        return
    if wants_json(json_flag):
        echo_json(result)
        return
    _show(result, where)


def _keys_progress(done: int) -> None:
    click.echo(f"\rturn keys: {done:,} entries read   ", err=True, nl=False)


async def _build_keys(store: Store) -> int:
    """Recall's turn keys brought up to date for every session (a recall would otherwise catch up a few
    thousand entries at a time), with progress on stderr; returns the entries read."""
    read = 0

    def show(done: int) -> None:
        nonlocal read
        read = done
        _live(f"turn keys: {done:,} entries read")

    await default_keys(store).sync(store, limit=1 << 62, progress=show)
    if read:
        _end_live()
    return read


async def _build_facts(
    store: Store, directory: str | None, session_id: str | None, model_spec: str | None, calls: int
) -> FactProgress:
    """Fact lines for the scope's turns, written by the configured model (or `model_spec`), with progress on
    stderr."""
    from ..messages import Message
    from ..providers import ModelRequest, complete
    from ..providers.registry import resolve_provider
    from ..runtime.configuration import load_config

    resolved = resolve_provider(model_spec, config=load_config())
    if resolved.provider.name == "local":
        click.echo(
            "note: the embedded local model is too small to write useful facts; configure an API key or an "
            "OpenAI-compatible server (--model)",
            err=True,
        )

    async def write(prompt: str) -> str:
        request = ModelRequest(model=resolved.model, messages=[Message.user(prompt)], max_output_tokens=1500)
        return (await complete(resolved.provider, request)).message.text

    def show(step: FactProgress) -> None:
        _live(f"facts: {step.turns:,} turns read, {step.lines:,} lines, {step.calls:,} calls")

    facts: Facts = PgFactIndex(store) if is_postgres(store) else FactIndex(store)
    try:
        done = await facts.build(write, directory=directory, session_id=session_id, max_calls=calls, progress=show)
    finally:
        facts.close()
    if done.calls:
        _end_live()
    return done


def _say_backfilled(done: BackfillProgress, json_flag: bool) -> None:
    if wants_json(json_flag):
        echo_json(done)
    elif done.entries_indexed:
        click.echo(f"indexed {done.entries_indexed:,} entries of {done.sessions_done:,} sessions")
    else:
        click.echo("nothing to backfill: the search index is complete")


def _show(result: RecallResult, where: str | None) -> None:
    out = console()
    if not result.hits:
        scope = f"in {where}" if where else "in any session"
        hint = " (try --all)" if where else ""
        out.print(escape_controls(f"Nothing {scope} matches {result.query!r}{hint}."))
    for n, hit in enumerate(result.hits, 1):
        author: Any = hit.metadata.get("name")
        who = f"{hit.role} ({author})" if isinstance(author, str) and author else hit.role
        title = f"  {hit.title}" if hit.title else ""
        flag = "  [reverted]" if hit.reverted else ""
        # everything but the numbers was stored: titles, names, directories and the excerpts themselves
        out.print(escape_controls(f"{n:>2}. {hit.session_id} #{hit.seq}  {when(hit.created_at)}  {who}{title}{flag}"))
        if where is None and hit.directory:
            out.print(escape_controls(f"    in {hit.directory}"))
        for line in (c for c in hit.context if c.seq < hit.seq):
            out.print(escape_controls(f"      #{line.seq} {line.role}: {_clip(line.text)}"))
        out.print(escape_controls(f"    > {hit.excerpt}"))
        for line in (c for c in hit.context if c.seq > hit.seq):
            out.print(escape_controls(f"      #{line.seq} {line.role}: {_clip(line.text)}"))
    if result.backlog:
        click.echo(
            f"note: {result.backlog:,} older entries are not indexed yet: run `tether recall --backfill`", err=True
        )
    if sys.stderr.isatty():
        click.echo(f"{len(result.hits)} hits in {result.took_ms:.1f} ms", err=True)


def _clip(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
