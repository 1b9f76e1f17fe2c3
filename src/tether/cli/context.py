"""`tether context ID`: what the model would see at the session's next step (the derived messages and their
tokens), the budget they are fitted to, and what was summarized, pruned, dropped or truncated; also
`--pin SEQ` / `--unpin SEQ`, which mark a message for compactions to keep verbatim."""

from __future__ import annotations

from typing import Any

import click

from ..context import pin
from ..messages import Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart, to_builtins
from ..runtime.configuration import load_config
from ..runtime.operations import ContextView, context_view
from ..store import Store
from .common import Column, console, echo_json, find_session, fitted_table, human_count, wants_json, with_store
from .sanitize import escape_controls


def preview(message: Message, width: int = 100) -> str:
    """One line that says what a message holds, its control characters escaped for the terminal."""
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ThinkingPart):
            pieces.append("(thinking)")
        elif isinstance(part, ToolCallPart):
            pieces.append(f"-> {part.name} {part.arguments_json()}")
        elif isinstance(part, ToolResultPart):
            pieces.append(f"<- {part.name or 'result'}{' (error)' if part.is_error else ''}: {part.content}")
        else:
            pieces.append(f"({part.media_type})")
    line = " ".join(escape_controls(" ".join(pieces)).split())
    return line if len(line) <= width else line[: width - 3] + "..."


def _as_json(view: ContextView) -> dict[str, Any]:
    d = view.derived
    return {
        "session_id": view.info.id,
        "model": view.model,
        "budget": {
            "context_window": view.budget.context_window,
            "reserved_output": view.budget.reserved_output,
            "safety_margin": view.budget.safety_margin,
            "usable": view.budget.usable,
            "compact_threshold": view.budget.threshold(view.settings.compact_threshold or 0.9),
        },
        "auto_compact": view.settings.auto_compact is not False,
        "mode": d.mode,
        "estimate": to_builtins(d.estimate),
        "needed_tokens": d.needed_tokens,
        "fixed_tokens": d.fixed_tokens,
        "tool_tokens": view.tool_tokens,
        "project": view.project,
        "mcp_tools": view.mcp_tools,
        "fits": d.fits,
        "compaction_seq": d.compaction_seq,
        "first_kept_seq": d.first_kept_seq,
        "omissions": to_builtins(d.omissions),
        "messages": [
            {"seq": seq, "role": m.role, "tokens": n, "message": to_builtins(m)}
            for seq, m, n in zip(d.seqs, d.messages, view.tokens, strict=True)
        ],
    }


def _print(view: ContextView, limit: int | None) -> None:
    out = console()
    d = view.derived
    b = view.budget
    threshold = b.threshold(view.settings.compact_threshold or 0.9)
    state = f"compacted at entry {d.compaction_seq}" if d.compaction_seq is not None else "not compacted"
    policy = f"  mode {d.mode}" if d.mode != "compacted" else ""  # the default policy goes without saying
    out.print(escape_controls(f"session {view.info.id}  model {view.model}  {state}{policy}"))
    out.print(
        f"budget: {b.context_window:,} window - {b.reserved_output:,} reserved for output - "
        f"{b.safety_margin:,} margin = {b.usable:,} usable; compaction at {threshold:,} "
        f"({'automatic' if view.settings.auto_compact is not False else 'automatic compaction OFF'})"
    )
    source = d.estimate.source
    if d.estimate.provider_tokens is not None:
        source += f", anchored on {d.estimate.provider_tokens:,} reported for entry {d.estimate.anchor_seq}"
    out.print(
        f"next step: {d.estimate.tokens:,} tokens ({source}; {d.fixed_tokens:,} of them system prompt and tools), "
        f"{d.estimate.tokens / b.usable:.0%} of usable" + ("" if d.fits else "  [DOES NOT FIT]")
    )
    project = view.project
    if project.get("tokens"):
        out.print(
            f"project: {project['tokens']:,} tokens of instructions, skills and memory notes in the system prompt"
        )
    for f in project.get("instructions", []):
        cut = f" (cut by {f['cut']:,} characters)" if f.get("cut") else ""
        out.print(escape_controls(f"  {f['scope']:<10} {f['path']}  {f['tokens']:,} tokens{cut}"))
    if project.get("skills"):
        out.print(escape_controls("  skills: " + ", ".join(s["name"] for s in project["skills"])))
    memory = project.get("memory") or {}
    if memory.get("notes"):
        out.print(f"  memory notes: {memory['shown']} of {memory['notes']} shown")
    for w in project.get("warnings", []):
        out.print(escape_controls(f"  warning: {w}"))
    out.print(f"tools: {view.tool_tokens:,} tokens of built-in tool definitions")
    servers = {k: v for k, v in view.mcp_tools.items() if k != "tool_search"}
    for name, cost in servers.items():
        tokens = cost.get("tokens")
        cost_text = f"{tokens:,} tokens" if isinstance(tokens, int) else "tokens not recorded"
        out.print(escape_controls(f"  MCP server {name}: {cost['tools']} tools, {cost_text} (at the last run)"))
    search = view.mcp_tools.get("tool_search")
    if isinstance(search, dict):
        out.print(
            f"  tool_search: {search.get('deferred', 0)} MCP tools offered on demand, "
            f"{search.get('tokens_offered', 0):,} of {search.get('tokens_all', 0):,} definition tokens sent "
            f"({search.get('tokens_saved', 0):,} saved)"
        )
    if d.compaction_seq is not None:
        out.print(f"compaction: entry {d.compaction_seq} summarizes entries before {d.first_kept_seq}")
    columns = [
        Column("#", justify="right"),
        Column("entry", justify="right"),
        Column("role"),
        Column("tokens", justify="right"),
        Column("content", ellipsis=True),
    ]
    rows = list(zip(d.seqs, d.messages, view.tokens, strict=True))
    shown = rows if limit is None or len(rows) <= limit else rows[-limit:]
    first = len(rows) - len(shown)
    if first:
        out.print(f"({first} earlier messages not shown; --all shows them)")
    cells = [
        [
            str(i),
            "summary" if seq is None and i == 1 and d.compaction_seq else ("-" if seq is None else str(seq)),
            message.role,
            human_count(n),
            preview(message),
        ]
        for i, (seq, message, n) in enumerate(shown, start=first + 1)
    ]
    table, _ = fitted_table(out.width, columns, cells, show_edge=False, pad_edge=False)
    out.print(table)
    if d.omissions:
        out.print("left out or changed:")
        for o in d.omissions:
            span = f"{o.first_seq}" if o.first_seq == o.last_seq else f"{o.first_seq}-{o.last_seq}"
            out.print(
                f"  {o.action:<10} entries {span:<12} x{o.count:<5} {human_count(o.tokens):>6} tokens  "
                + escape_controls(o.reason)
            )


@click.command("context")
@click.argument("session_ref", metavar="ID")
@click.option(
    "--model", "-m", "model_spec", metavar="PROVIDER/MODEL", help="Budget for this model (default: the session's)."
)
@click.option("--all", "show_all", is_flag=True, help="Show every message (default: the last 40).")
@click.option("--pin", "pin_seq", type=int, metavar="SEQ", help="Pin message SEQ: compactions keep it verbatim.")
@click.option("--unpin", "unpin_seq", type=int, metavar="SEQ", help="Unpin message SEQ.")
@click.option("--json", "json_flag", is_flag=True, help="Everything as JSON, messages in full.")
def context(
    session_ref: str,
    model_spec: str | None,
    show_all: bool,
    pin_seq: int | None,
    unpin_seq: int | None,
    json_flag: bool,
) -> None:
    """Show what the model would see at the next step of session ID.

    The messages are derived from the journal as a run would derive them: the latest compaction's summary
    and the entries it kept, old tool outputs pruned to pointers, and, if the budget is still short, the
    oldest turns dropped or oversized parts cut. Nothing is changed by looking.
    """

    async def main(store: Store) -> ContextView:
        info = await find_session(store, session_ref)
        if pin_seq is not None:
            await pin(store, info.id, pin_seq)
        if unpin_seq is not None:
            await pin(store, info.id, unpin_seq, pinned=False)
        return await context_view(store, info.id, config=load_config(), model=model_spec)

    view = with_store(main, reads=True)
    if wants_json(json_flag):
        echo_json(_as_json(view))
        return
    _print(view, None if show_all else 40)
