"""`tether compact ID`: compact a session now (a model writes the summary, or `--mechanical` extracts it),
or `--undo` the latest compaction. Manual compaction runs whatever `auto_compact` says."""

from __future__ import annotations

from typing import Any

import click

from ..context import CompactionEvent, CompactionResult, CompactionStarted
from ..context.compaction import undo_compaction
from ..messages import Entry, Revert, to_builtins
from ..runtime.configuration import load_config
from ..runtime.lease import held_for_edit
from ..runtime.operations import compact_now
from ..store import Store
from .common import console, echo_json, find_session, wants_json, with_store
from .sanitize import escape_controls


@click.command("compact")
@click.argument("session_ref", metavar="ID")
@click.option(
    "--model",
    "-m",
    "model_spec",
    metavar="PROVIDER/MODEL",
    help="The summarizer (default: the context setting compaction_model, else the session's model).",
)
@click.option("--mechanical", is_flag=True, help="No model: extract goal, constraints, files, commands, errors.")
@click.option(
    "--keep", "keep_tokens", type=click.IntRange(min=1), metavar="TOKENS", help="Newest tokens to keep verbatim."
)
@click.option("--undo", is_flag=True, help="Undo the latest compaction (a revert to just before it).")
@click.option("--json", "json_flag", is_flag=True, help="The result as JSON.")
def compact(
    session_ref: str,
    model_spec: str | None,
    mechanical: bool,
    keep_tokens: int | None,
    undo: bool,
    json_flag: bool,
) -> None:
    """Compact session ID: a summary entry stands, in what the model sees, for its older part.

    Nothing is deleted: the full history stays in the journal, `tether context ID` shows what changed, and
    `tether compact ID --undo` takes the compaction back. If the model fails or its summary saves less than
    5%, the summary is written mechanically instead; if even that saves less than 5%, nothing is appended.
    """
    as_json = wants_json(json_flag)
    out = None if as_json else console()

    def show(event: CompactionEvent) -> None:
        if out is not None and isinstance(event, CompactionStarted):
            how = f"with {event.summarizer}" if event.summarizer else "mechanically"
            out.print(escape_controls(f"compacting {event.session_id} ({event.tokens_before:,} tokens) {how}..."))

    async def run_undo(store: Store) -> Entry:
        info = await find_session(store, session_ref)
        async with held_for_edit(store, info.id, what="compact"):  # never under a run: SessionBusy names it
            return await undo_compaction(store, info.id)

    async def run_compact(store: Store) -> CompactionResult:
        info = await find_session(store, session_ref)
        async with held_for_edit(store, info.id, what="compact"):
            return await compact_now(
                store,
                info.id,
                config=load_config(),
                model=model_spec,
                mechanical=mechanical,
                keep_tokens=keep_tokens,
                emit=show,
            )

    if undo:
        entry = with_store(run_undo)
        to_seq = entry.body.to_seq if isinstance(entry.body, Revert) else None
        if as_json:
            echo_json({"undone": True, "seq": entry.seq, "to_seq": to_seq})
        else:
            click.echo(f"compaction undone: entry {entry.seq} reverts the session to entry {to_seq}")
        return
    result = with_store(run_compact)
    if as_json:
        payload: dict[str, Any] = to_builtins(result)
        payload["ok"] = result.ok
        echo_json(payload)
    else:
        assert out is not None
        if result.entry is None:
            # a provider's error, quoted
            out.print(f"not compacted: {escape_controls(str(result.error))}")
        else:
            saved = 1 - result.tokens_after / max(result.tokens_before, 1)
            out.print(
                f"compacted ({result.strategy}): {result.tokens_before:,} -> {result.tokens_after:,} tokens "
                f"({saved:.0%} less); entry {result.entry.seq} summarizes entries before "
                f"{getattr(result.entry.body, 'first_kept_seq', '?')}"
            )
            if result.fallback:
                out.print(f"the summary was written mechanically: {escape_controls(result.fallback)}")
            out.print(f"undo with: tether compact {result.session_id} --undo")
    if result.entry is None:
        raise SystemExit(1)
