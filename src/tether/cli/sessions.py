"""`tether sessions`: list the sessions of a directory (or all), and show, fork, delete, export and import
one. Sessions are named by full id or by a unique piece of one (the last six characters will do);
`tether sessions ID` is short for `tether sessions show ID`, and subcommand names always win."""

from __future__ import annotations

import contextlib
import filecmp
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, AnyStr, Generic, cast

import click

from .. import markers
from ..importers.claude_code_export import export_claude_code
from ..importers.codex_export import export_codex
from ..importers.foreign_export import EXPORT_FORMATS, ExportReport
from ..importers.tether_json import export_json, import_file, import_json, parse_export, session_record
from ..messages import (
    USAGE_ESTIMATED,
    Checkpoint,
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    cut_reason,
)
from ..paths import canonical_directory
from ..runtime import audit
from ..runtime.archive import archived, refuse_archived
from ..runtime.lease import held_for_edit
from ..store import UNSET, Store
from ..store.protocols import Journal
from ..store.records import Lease, LeaseRequest, RevertSpan, SessionInfo
from ..store.reverts import effective_reverts, hidden_spans
from ..transcript import (
    attachment_label,
    call_signature,
    cut_calls,
    error_text,
    export_markdown,
    result_outcome,
    revert_note,
    shown_as_hidden,
)
from .common import (
    MIN_REF,
    Column,
    ago,
    console,
    echo_json,
    find_session,
    fitted_table,
    human_count,
    wants_json,
    with_store,
)
from .sanitize import escape_controls, escape_json_controls
from .state import OptionError


class SessionsGroup(click.Group):
    """Treats `tether sessions <id>` as `tether sessions show <id>`, after every subcommand name was tried."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        looks_like_ref = len(name) >= MIN_REF and name.replace("_", "").isalnum()
        if self.get_command(ctx, name) is None and looks_like_ref:
            return "show", self.commands["show"], args
        return super().resolve_command(ctx, args)


def _list_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--all", "-a", "all_dirs", is_flag=True, help="Sessions of every directory."),
        click.option("--dir", "-d", "directory", metavar="PATH", help="Sessions of this directory."),
        click.option("--limit", "-n", type=click.IntRange(1, 10_000), default=30, show_default=True),
        click.option("--children", is_flag=True, help="Include child (sub-agent) sessions."),
        click.option("--json", "json_flag", is_flag=True, help="Print one JSON array of session objects."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@click.group(cls=SessionsGroup, invoke_without_command=True)
@_list_options
@click.pass_context
def sessions(
    ctx: click.Context, all_dirs: bool, directory: str | None, limit: int, children: bool, json_flag: bool
) -> None:
    """List sessions, most recently updated first: those of the current directory unless --all or --dir.

    With --json, prints one JSON array of objects with every session field (cost as a decimal string)."""
    if ctx.invoked_subcommand is None:
        _list(all_dirs, directory, limit, children, json_flag)


@sessions.command("list")
@_list_options
def list_command(all_dirs: bool, directory: str | None, limit: int, children: bool, json_flag: bool) -> None:
    """List sessions (the same as `tether sessions`)."""
    _list(all_dirs, directory, limit, children, json_flag)


def _list(all_dirs: bool, directory: str | None, limit: int, children: bool, json_flag: bool) -> None:
    if all_dirs and directory:
        raise click.UsageError("give --all or --dir, not both")
    where = None if all_dirs else canonical_directory(directory)

    async def run(store: Journal) -> tuple[list[SessionInfo], bool]:
        page = await store.list_sessions(directory=where, parent_id=UNSET if children else None, limit=limit)
        return page.items, page.next_cursor is not None

    items, more = with_store(run, reads=True)
    if wants_json(json_flag):
        echo_json([session_record(s) for s in items])
        return
    out = console()
    if not items:
        scope = "in any directory" if where is None else f"in {escape_controls(where)}"
        hint = "" if where is None else " (`tether sessions --all` lists every directory)"
        out.print(f"No sessions {scope}{hint}.")
        return
    from rich import box

    columns = [
        Column("id", style="cyan"),
        Column("title", ellipsis=True, max_width=60),
        Column("updated", keep=60),
        Column("messages", justify="right", keep=40),
        Column("tokens", justify="right", keep=70),
    ]
    if where is None:
        columns.append(Column("directory", fold=True, keep=50))
    rows = []
    for s in items:
        estimated = "~" if s.metadata.get(USAGE_ESTIMATED) is True else ""
        row = [
            s.id,
            ("↳ " if s.parent_id else "") + escape_controls(s.title or ""),
            ago(s.updated_at),
            # an archived session's messages are in its bucket: said where the count would be, never cut
            "[archived]" if archived(s) else str(s.message_count),
            estimated + human_count(s.input_tokens + s.output_tokens),
        ]
        if where is None:
            row.append(_home(s.directory))
        rows.append(row)
    table, _ = fitted_table(out.width, columns, rows, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    out.print(table)
    if more:
        out.print(f"Showing the {len(items)} most recent; --limit N shows more.", style="dim")


def _home(path: str | None) -> str:
    """A session's directory for people: under the home directory as ~/..., controls escaped."""
    if not path:
        return ""
    home = os.path.expanduser("~")
    return escape_controls("~" + path[len(home) :] if path == home or path.startswith(home + os.sep) else path)


# --- show ----------------------------------------------------------------------------------------------------


@sessions.command()
@click.argument("session_ref", metavar="ID")
@click.option("--raw", is_flag=True, help="Include reverted entries (marked as such).")
@click.option(
    "--children", "nested", is_flag=True, help="Print each sub-agent's transcript under the task call that ran it."
)
@click.option("--json", "json_flag", is_flag=True, help='Print {"session": {...}, "entries": [...]} as JSON.')
def show(session_ref: str, raw: bool, nested: bool, json_flag: bool) -> None:
    """Show a session's transcript: messages, tool calls with their outcome, thinking collapsed, reverts.
    A `task` call names the sub-agent session it ran and how that ended; --children prints its transcript
    there, indented (with --json: a "children" list)."""

    async def run(store: Store) -> _View:
        info = await find_session(store, session_ref)
        refuse_archived(info)  # an archived session's stub: where it is, and how to bring it back
        return await _view(store, info, raw=raw, nested=nested)

    view = with_store(run, reads=True)
    if wants_json(json_flag):
        echo_json(_view_json(view, raw, nested))
        return
    _print_transcript(view)


@dataclass
class _View:
    """What `show` prints of one session: its entries (each with whether it is reverted), its reverts, its
    child sessions by the call that ran them, and (--children) their own views."""

    info: SessionInfo
    shown: list[tuple[Entry, bool]]
    spans: list[RevertSpan]
    children: dict[str, SessionInfo] = field(default_factory=dict)
    nested: dict[str, _View] = field(default_factory=dict)


async def _view(store: Journal, info: SessionInfo, *, raw: bool, nested: bool) -> _View:
    entries = [e async for e in store.iter_entries(info.id) if e.seq <= info.entry_count]
    spans = hidden_spans((e.seq, e.body.to_seq) for e in entries if isinstance(e.body, Revert))
    effective = effective_reverts(spans)
    shown = [(e, shown_as_hidden(e.seq, spans, effective)) for e in entries]
    if not raw:
        shown = [(e, hidden) for e, hidden in shown if not hidden]
    view = _View(info, shown, spans)
    cursor: str | None = None
    while True:
        page = await store.list_sessions(parent_id=info.id, limit=1000, cursor=cursor)
        for child in page.items:
            task = child.metadata.get("task")
            call_id = task.get("call_id") if isinstance(task, dict) else None
            view.children[call_id if isinstance(call_id, str) and call_id else child.id] = child
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    if nested:
        for child in view.children.values():
            view.nested[child.id] = await _view(store, child, raw=raw, nested=True)
    return view


def _view_json(view: _View, raw: bool, nested: bool) -> dict[str, Any]:
    records: list[dict[str, Any]] = [
        {"seq": e.seq, "created_at": e.created_at, "body": e.body, **({"reverted": hidden} if raw else {})}
        for e, hidden in view.shown
    ]
    out: dict[str, Any] = {"session": session_record(view.info), "entries": records}
    if nested:
        out["children"] = [_view_json(child, raw, nested) for child in view.nested.values()]
    return out


def _print_transcript(view: _View, indent: str = "") -> None:
    from rich.text import Text

    out = console()
    info = view.info

    def emit(line: Text) -> None:
        out.print(Text(indent, style="dim") + line if indent else line)

    emit(Text.assemble((info.id, "cyan"), "  ", (escape_controls(info.title or "(untitled)"), "bold")))
    facts = [
        _home(info.directory) or "no directory",
        f"{info.message_count} messages",
        f"{'~' if info.metadata.get(USAGE_ESTIMATED) is True else ''}"
        f"{human_count(info.input_tokens + info.output_tokens)} tokens"
        f"{' (estimated)' if info.metadata.get(USAGE_ESTIMATED) is True else ''}",
    ]
    if info.agent:
        facts.insert(0, f"agent {info.agent}")
    if info.cost:
        facts.append(f"${info.cost.normalize():f}")
    facts.append(f"updated {ago(info.updated_at)}")
    emit(Text(escape_controls(" · ".join(facts)), style="dim"))
    if info.forked_from:
        emit(Text(escape_controls(f"forked from {info.forked_from} at entry {info.forked_at}"), style="dim"))
    if info.parent_id:
        emit(Text(escape_controls(f"child of {info.parent_id}"), style="dim"))

    results: dict[str, ToolResultPart] = {}
    calls: set[str] = set()
    asked: set[str] = set()
    for entry, _ in view.shown:
        if isinstance(entry.body, Message):
            results.update((r.call_id, r) for r in entry.body.tool_results)
            calls.update(c.id for c in entry.body.tool_calls)
        elif isinstance(approval := markers.parse(entry.body), markers.ApprovalRequest):
            asked.add(approval.call_id)
        elif isinstance(approval, markers.ApprovalDecision):
            asked.discard(approval.call_id)
    waiting = {call_id for call_id in asked if call_id not in results}
    for entry, hidden in view.shown:
        lines = _entry_lines(entry, results, calls, view.spans, view.children, waiting)
        if not lines:
            continue
        out.print(Text(indent.rstrip(), style="dim") if indent else "")
        for i, line in enumerate(lines):
            if hidden:
                line.stylize("dim")
                if i == 0:
                    line.append("  [reverted]", style="red")
            emit(line)
        if isinstance(entry.body, Message):
            for call in entry.body.tool_calls:
                child = view.children.get(call.id)
                if child is not None and child.id in view.nested:
                    _print_transcript(view.nested[child.id], indent + "    │ ")


def _child_line(child: SessionInfo, result: ToolResultPart | None) -> Any:
    """Under a `task` call: the sub-agent's session, its agent, and how it ended."""
    from rich.text import Text

    meta = result.metadata if result is not None else {}
    outcome = meta.get("outcome")
    if result is None:
        how = "no result (the run stopped while it worked)"
    elif isinstance(outcome, str):
        steps = meta.get("steps")
        how = outcome + (f", {steps} step{'s' * (steps != 1)}" if isinstance(steps, int) else "")
    else:
        how = "failed" if result.is_error else "done"
    agent = f" ({child.agent})" if child.agent else ""
    return Text.assemble(
        "    ↳ sub-agent ", (escape_controls(child.id), "cyan"), escape_controls(f"{agent} · {how}"), style="dim"
    )


def _entry_lines(
    entry: Entry,
    results: dict[str, ToolResultPart],
    calls: set[str],
    spans: list[RevertSpan],
    children: dict[str, SessionInfo] | None = None,
    waiting: set[str] | None = None,
) -> list[Any]:
    """The lines of one entry. A call is marked with its approval: approved or denied by a person, or
    still waiting for one (`waiting`: requests without a decision or a result)."""
    from rich.text import Text

    body = entry.body
    if isinstance(body, Message):
        # A tool message whose results all sit next to their calls says nothing new: skip it.
        orphans = [r for r in body.tool_results if r.call_id not in calls]
        if body.role == "tool" and not orphans and not body.text:
            return []
        label = escape_controls(body.role + (f" · {body.model}" if body.model else ""))
        lines = [Text.assemble((f"#{entry.seq} ", "dim"), (label, _ROLE_STYLE.get(body.role, "bold")))]
        for part in body.parts:
            if isinstance(part, TextPart):
                # split on \n alone: str.splitlines would also break at \r, \f, \x1c..., hiding them
                text = escape_controls(part.text).rstrip("\n")
                lines += [Text("  " + line) for line in text.split("\n")] if text else []
            elif isinstance(part, ThinkingPart):
                size = f"{len(part.text):,} chars" if part.text else "redacted"
                lines.append(Text(f"  [thinking · {size}]", style="dim italic"))
            elif isinstance(part, ToolCallPart):
                outcome = escape_controls(_call_outcome(results.get(part.id), part.id in (waiting or ())))
                lines.append(
                    Text.assemble(
                        "  → ",
                        (escape_controls(call_signature(part)), "yellow"),
                        "  ",
                        (outcome, "red" if outcome.startswith("✗") else "green" if outcome[0] == "✓" else "dim"),
                    )
                )
                child = (children or {}).get(part.id)
                if child is not None:
                    lines.append(_child_line(child, results.get(part.id)))
            elif isinstance(part, ToolResultPart):
                if part in orphans:
                    line = escape_controls(f"  ← {part.name or 'tool'} {result_outcome(part)}")
                    lines.append(Text(line, style="dim"))
            elif isinstance(part, ImagePart | FilePart):
                lines.append(Text("  " + escape_controls(attachment_label(part)), style="dim"))
        cut = cut_reason(body)
        if cut is not None:
            cut += "".join(f"; a call to {name} was cut mid-arguments" for name in cut_calls(body))
            lines.append(Text("  " + escape_controls(f"[{cut}]"), style="yellow"))
        return lines
    head = Text(f"#{entry.seq} ", style="dim")
    if isinstance(body, Revert):
        hidden = revert_note(entry.seq, spans)
        reason = f": {body.reason}" if body.reason else ""
        return [head.append(escape_controls(f"↶ reverted to #{body.to_seq}{hidden}{reason}"), style="magenta")]
    if isinstance(body, TitleChange):
        return [head.append(escape_controls(f"title → {body.title}"), style="dim")]
    if isinstance(body, Checkpoint):
        text = f"⏸ checkpoint ({body.reason}, {body.steps} steps)"
        if body.next_action:
            text += f": next {body.next_action}"
        return [head.append(escape_controls(text), style="magenta")]
    if isinstance(body, Compaction):
        size = f"{len(body.summary):,} chars"
        return [
            head.append(f"⧉ compaction: entries before #{body.first_kept_seq} summarized ({size})", style="magenta")
        ]
    known = markers.parse(body)
    if isinstance(known, markers.Interrupted):
        return [head.append(f"⚡ turn interrupted: entry {known.seq} got no answer", style="yellow")]
    if isinstance(known, markers.ErrorRecord) and isinstance(body, Marker):
        return [head.append(escape_controls(f"✗ error: {error_text(body)}"), style="red")]
    if isinstance(known, markers.ApprovalRequest):
        text = f"? approval asked for {known.tool or 'a call'}: {known.reason}"
        return [head.append(escape_controls(text), style="yellow")]
    if isinstance(known, markers.ApprovalDecision):
        return [head.append(escape_controls(_decision_text(known)), style="dim")]
    if isinstance(body, Marker):
        return [head.append(escape_controls(f"• {body.name}"), style="dim")]
    return []


def _call_outcome(result: ToolResultPart | None, waiting: bool) -> str:
    """How a call ended, with its approval: ``✓ approved · ...``, ``✗ denied · ...`` (a person's no),
    ``⏳ waiting for approval`` (a request that no one answered yet)."""
    if result is None and waiting:
        return "⏳ waiting for approval"
    outcome = result_outcome(result)
    approval = result.metadata.get("approval") if result is not None else None
    if approval in ("approved", "denied"):
        return f"{outcome[:1]} {approval} · {outcome[2:]}"
    return outcome


def _decision_text(decision: markers.ApprovalDecision) -> str:
    by = decision.by or "someone"
    if not decision.approved:
        said = f": {decision.message}" if decision.message else ""
        return f"✗ denied by {by}{said}"
    rules = ", ".join(decision.rules)
    reach = {"session": f" for this session ({rules})", "project": f" for the project ({rules})"}.get(
        decision.scope, ""
    )
    return f"✓ approved by {by}{reach}"


_ROLE_STYLE = {"user": "bold green", "assistant": "bold blue", "system": "bold magenta", "tool": "bold yellow"}


# --- rm, fork ------------------------------------------------------------------------------------------------


@sessions.command()
@click.argument("session_ref", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "json_flag", is_flag=True, help='Print {"deleted": [ids]} as JSON.')
def rm(session_ref: str, yes: bool, json_flag: bool) -> None:
    """Delete a session and its child (sub-agent) sessions. Forks of it are kept: they are copies."""

    async def run(store: Store) -> list[str]:
        info = await find_session(store, session_ref)
        if not yes:
            children = await _count_descendants(store, info.id)
            with_children = f" and its {children} child session{'s' * (children != 1)}" if children else ""
            click.confirm(
                escape_controls(
                    f"Delete {info.id} “{info.title or 'untitled'}” ({info.message_count} messages){with_children}?"
                ),
                abort=True,
                err=True,
            )
        async with held_for_edit(store, info.id, what="delete"):  # never under a run: SessionBusy names it
            return await store.delete_session(info.id)

    deleted = with_store(run)
    if wants_json(json_flag):
        echo_json({"deleted": deleted})
        return
    extra = len(deleted) - 1
    click.echo(f"Deleted {deleted[0]}" + (f" and {extra} child session{'s' * (extra != 1)}" if extra else "") + ".")


async def _count_descendants(store: Journal, session_id: str) -> int:
    count, frontier = 0, [session_id]
    while frontier:
        parent = frontier.pop()
        cursor: str | None = None
        while True:
            page = await store.list_sessions(parent_id=parent, limit=1000, cursor=cursor)
            count += len(page.items)
            frontier += [s.id for s in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    return count


@sessions.command()
@click.argument("session_ref", metavar="ID")
@click.option("--at", "at_seq", type=int, metavar="SEQ", help="Copy entries 1..SEQ (default: all of them).")
@click.option("--title", help="Title of the new session (default: the original's).")
@click.option("--json", "json_flag", is_flag=True, help="Print the new session as a JSON object.")
def fork(session_ref: str, at_seq: int | None, title: str | None, json_flag: bool) -> None:
    """Copy a session's journal, up to an entry, into a new independent session."""

    async def run(store: Store) -> SessionInfo:
        info = await find_session(store, session_ref)
        return await store.fork(info.id, at_seq, title=title)

    new = with_store(run)
    if wants_json(json_flag):
        echo_json(session_record(new))
        return
    click.echo(f"Forked {new.forked_from} at entry {new.forked_at}: {new.id}")


@sessions.command()
@click.argument("session_ref", metavar="ID")
@click.argument("to_seq", metavar="SEQ", type=click.IntRange(min=0))
@click.option("--reason", help="Why, kept with the revert (shown by `show`).")
@click.option("--json", "json_flag", is_flag=True, help="Print the revert entry as a JSON object.")
def revert(session_ref: str, to_seq: int, reason: str | None, json_flag: bool) -> None:
    """Take session ID back to entry SEQ (the numbers `show` prints): what came after it leaves the active
    history, what the model sees at the next run and what `show` prints, and stays stored (`show --raw`).
    The revert is an entry of its own; a revert to the entry just before it brings everything back.
    Refused while a run holds the session."""

    async def run(store: Store) -> tuple[str, Entry]:
        from ..runtime.operations import revert_session

        info = await find_session(store, session_ref)
        async with held_for_edit(store, info.id, what="revert"):
            return info.id, await revert_session(store, info, to_seq, reason=reason)

    sid, entry = with_store(run)
    if wants_json(json_flag):
        echo_json({"session_id": sid, "seq": entry.seq, "to_seq": to_seq, "reason": reason})
        return
    click.echo(
        f"{sid}: entry {entry.seq} reverts to entry {to_seq}; undo with: tether sessions revert {sid} {entry.seq - 1}"
    )


@sessions.command()
@click.argument("session_ref", metavar="ID")
@click.option(
    "--model",
    "-m",
    "model_spec",
    metavar="PROVIDER/MODEL",
    help="Who writes it (default: title_model, else the session's).",
)
@click.option("--json", "json_flag", is_flag=True, help="Print the new title as a JSON object.")
def retitle(session_ref: str, model_spec: str | None, json_flag: bool) -> None:
    """Have a model title a session again, from its first prompt and answer (a new session gets its title
    this way after its first exchange; see [runtime] title_model)."""
    from ..providers.base import aclose_quietly
    from ..providers.registry import ResolvedModel, resolve_provider
    from ..runtime.configuration import load_config
    from ..runtime.titles import retitle as write

    made: list[ResolvedModel] = []

    def resolve(*args: Any, **kwargs: Any) -> ResolvedModel:
        made.append(resolve_provider(*args, **kwargs))
        return made[-1]

    async def run(store: Store) -> tuple[str, str]:
        info = await find_session(store, session_ref)
        try:
            return info.id, await write(store, info.id, config=load_config(), model=model_spec, resolve=resolve)
        finally:  # the model's HTTP client, on this loop
            for resolved in made:
                await aclose_quietly(resolved.provider)

    sid, title = with_store(run)
    if wants_json(json_flag):
        echo_json({"session_id": sid, "title": title})
        return
    click.echo(f"{sid}: {escape_controls(title)}")


@sessions.command()
@click.argument("session_ref", metavar="ID")
def cancel(session_ref: str) -> None:
    """Stop the run that is working in a session, in this or another process: it stops within a second,
    keeps what it has done, and marks the tool calls it had not finished as aborted. Continue it later with
    `tether run --continue --session ID`."""
    _ask(session_ref, "cancel")


@sessions.command()
@click.argument("session_ref", metavar="ID")
def pause(session_ref: str) -> None:
    """Pause the run that is working in a session, at its next step: it saves a checkpoint and the session
    is marked paused. `tether run --continue --session ID` resumes it."""
    _ask(session_ref, "pause")


def _ask(session_ref: str, request: LeaseRequest) -> None:
    from ..runtime.operations import ask_run

    async def run(store: Store) -> tuple[SessionInfo, Lease | None]:
        info = await find_session(store, session_ref)
        return info, await ask_run(store, info.id, request)

    info, lease = with_store(run)
    if lease is None:
        click.echo(f"error: no run is working in session {escape_controls(info.id)}: nothing to {request}", err=True)
        raise SystemExit(1)
    verb = "cancel" if request == "cancel" else "pause at its next step"
    if lease.request != request:  # a cancel stands: a later pause does not soften it
        click.echo(f"run {escape_controls(lease.describe())} was already asked to {lease.request}")
        return
    click.echo(f"asked run {escape_controls(lease.describe())} to {verb}")


# --- export, import ------------------------------------------------------------------------------------------


@sessions.command()
@click.argument("session_ref", metavar="ID")
@click.option(
    "--format", "-f", "fmt", type=click.Choice(["json", "markdown", "html", *EXPORT_FORMATS]), default="json",
    show_default=True,
)  # fmt: skip
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to FILE (default: stdout).")
@click.option("--raw", is_flag=True, help="Markdown and HTML: include reverted entries (marked as such).")
@click.option(
    "--children", is_flag=True, help="HTML: nest each sub-agent's transcript, folded, under the call that ran it."
)
@click.option("--install", is_flag=True, help="claude-code, codex: put the file where that tool looks for sessions.")
@click.option("--force", is_flag=True, help="With --install: replace a different file already there.")
def export(
    session_ref: str, fmt: str, output: str | None, raw: bool, children: bool, install: bool, force: bool
) -> None:
    """Export a session: tether JSON (what `import` reads back, exactly), a Markdown transcript, one
    self-contained HTML page to send to someone (inline style, no script, nothing fetched; tool calls fold
    open to their arguments and output), or a Claude Code transcript / Codex rollout to continue the session
    in that tool (`--install` puts it where the tool looks and prints the command that resumes it; what the
    format cannot carry is said).

    A file given with -o appears whole or not at all: it is written aside and renamed into place. Printed to
    a terminal, control characters are escaped (JSON keeps its value); to a file or a pipe it is exact.

    \b
    Examples:
      tether sessions export 4M0R1YB -f html --children -o session.html
      tether sessions export 4M0R1YB > session.json
      tether sessions export 4M0R1YB -f claude-code --install"""

    if children and fmt != "html":
        raise OptionError("--children goes with --format html")
    if fmt in EXPORT_FORMATS:
        _export_foreign(session_ref, fmt, output, install=install, force=force)
        return
    if install or force:
        raise OptionError("--install and --force go with --format claude-code or codex")

    async def run(store: Store) -> SessionInfo:
        info = await find_session(store, session_ref)
        await audit.record(store, "session.exported", session_id=info.id, detail={"format": fmt, "to": output or "-"})
        with _destination(output, binary=fmt == "json") as out:
            if fmt == "json":
                if output in (None, "-") and sys.stdout.isatty():
                    out = cast(IO[bytes], _EscapingWriter(out, escape_json_controls))
                return await export_json(store, info.id, out)
            if output in (None, "-") and sys.stdout.isatty():
                out = cast(IO[str], _EscapingWriter(out, escape_controls))
            if fmt == "html":
                from ..transcript_html import export_html

                return await export_html(store, info.id, out, raw=raw, children=children)
            return await export_markdown(store, info.id, out, raw=raw)

    info = with_store(run, reads=True)
    if output:
        click.echo(f"Exported {info.id} ({info.entry_count} entries) to {output}", err=True)


def _export_foreign(session_ref: str, fmt: str, output: str | None, *, install: bool, force: bool) -> None:
    """Claude Code or Codex: to -o FILE, stdout, or (--install) the tool's own folder; then what was left
    out and how to resume it there, on stderr."""
    from ..importers.foreign_export import install_path, name_codex_thread, resume_hint, session_uuid

    if install and output:
        raise click.UsageError("give either --install or -o FILE, not both")
    if force and not install:
        raise click.UsageError("--force goes with --install")
    writer = export_claude_code if fmt == "claude-code" else export_codex
    tool = "Claude Code" if fmt == "claude-code" else "Codex"

    async def run(store: Store) -> tuple[SessionInfo, ExportReport, str]:
        info = await find_session(store, session_ref)
        await audit.record(store, "session.exported", session_id=info.id, detail={"format": fmt, "to": output or "-"})
        if not install:
            with _destination(output, binary=True) as out:
                if output in (None, "-") and sys.stdout.isatty():
                    out = cast(IO[bytes], _EscapingWriter(out, escape_json_controls))
                return info, await writer(store, info.id, out), "written"
        target = install_path(fmt, info, session_uuid(info.id))
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with open(fd, "wb") as f:
                report = await writer(store, info.id, f)
                f.flush()
                os.fsync(f.fileno())
            report.path = str(target)
            if target.exists() and filecmp.cmp(tmp, target, shallow=False):
                return info, report, "unchanged"
            if target.exists() and not force:
                raise click.ClickException(
                    f"{target} exists and differs (exported before, and continued in {tool} since?): import it "
                    f"first (`tether import {target}`) to keep what was added there, or replace it with --force"
                )
            os.replace(tmp, target)
            if fmt == "codex" and info.title:
                name_codex_thread(report.target_id, info.title)
            return info, report, "installed"
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    info, report, outcome = with_store(run, reads=True)
    where = f" to {report.path or output}" if (report.path or output) else ""
    said = {"written": "Exported", "installed": "Exported", "unchanged": "Already exported, unchanged:"}[outcome]
    click.echo(escape_controls(f"{said} {info.id} ({report.entries} entries) as a {tool} session{where}"), err=True)
    click.echo(escape_controls(f"{tool} cannot carry everything: {report.summary()}" if report.left_out or
                               report.flattened else "Nothing left out."), err=True)  # fmt: skip
    hint = resume_hint(fmt, info.directory, report.target_id)
    if install:
        click.echo(escape_controls(f"Continue it there: {hint}"), err=True)
    else:
        click.echo(escape_controls(f"To continue it there, export with --install, then: {hint}"), err=True)


class _EscapingWriter(Generic[AnyStr]):
    """A stream that escapes control characters on their way to the terminal underneath (each write is
    whole: a line of Markdown, an encoded JSON entry)."""

    def __init__(self, stream: IO[AnyStr], escape: Callable[[AnyStr], AnyStr]) -> None:
        self.stream: IO[AnyStr] = stream
        self.escape: Callable[[AnyStr], AnyStr] = escape

    def write(self, data: AnyStr) -> int:
        return self.stream.write(self.escape(data))

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def _destination(output: str | None, *, binary: bool) -> Iterator[IO[Any]]:
    if output is None or output == "-":
        # sys.stdout is looked up now, not at import, so that test runners that swap it see the output.
        stream: IO[Any] = sys.stdout.buffer if binary else sys.stdout
        yield stream
        stream.flush()
        return
    target = Path(output)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise click.FileError(output, e.strerror) from None
    try:
        with open(fd, "wb") if binary else open(fd, "w", encoding="utf-8", newline="\n") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.replace(tmp, target)
        except OSError as e:
            raise click.FileError(output, e.strerror) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@sessions.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--new-id", is_flag=True, help="Give the session a new id (the original is kept in its metadata).")
@click.option("--json", "json_flag", is_flag=True, help="Print the imported session as a JSON object.")
def import_command(file: str, new_id: bool, json_flag: bool) -> None:
    """Import a session from a tether JSON export (FILE, or - for stdin). A bad file writes nothing."""

    async def run(store: Journal) -> SessionInfo:
        if file == "-":
            data = sys.stdin.buffer.read()
            return await import_json(store, parse_export(data, source="<stdin>"), new_id=new_id)
        return await import_file(store, file, new_id=new_id)

    info = with_store(run)
    if wants_json(json_flag):
        echo_json(session_record(info))
        return
    click.echo(escape_controls(f"Imported {info.id} “{info.title or 'untitled'}” ({info.entry_count} entries)."))


__all__ = ["sessions"]
