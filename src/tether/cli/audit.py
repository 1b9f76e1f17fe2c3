"""`tether audit`: the audit trail (who did what, across every session: tool calls and who allowed them,
approvals, sessions made, deleted, forked, imported, exported, reverted, share links, the server's refusals,
configuration accepted), `tether audit verify` (its hash chain, record by record) and `tether audit prune`."""

from __future__ import annotations

import datetime
import time
from typing import Any

import click

from ..errors import NotFound
from ..runtime.audit import KINDS, walk_trail
from ..store import Store
from ..store.audit import AuditRecord, AuditReport, verify
from ..store.protocols import Audit
from .common import echo_json, find_session, wants_json, with_store
from .sanitize import escape_controls
from .share import parse_duration
from .state import CliError, OptionError

PAGE = 1000


def parse_since(text: str) -> float:
    """A time: a duration back from now (``30m``, ``24h``, ``7d``) or a date (``2026-11-01``, ISO 8601,
    UTC unless it says otherwise)."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        try:
            back = parse_duration(text)
        except OptionError:
            back = None
        if back is None:
            raise OptionError(f"--since takes a duration (30m, 24h, 7d) or a date (2026-11-01), not {text!r}") from None
        return time.time() - back
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _kinds_help() -> str:
    return "\n".join(f"  {kind:<20} {what}" for kind, what in KINDS.items())


@click.group("audit", invoke_without_command=True, epilog="\b\nKinds of record:\n" + _kinds_help())
@click.option("--since", metavar="WHEN", help="Records from then on: a duration back (24h, 7d) or a date (2026-11-01).")
@click.option(
    "--session", "session_ref", metavar="ID", help="Only this session's records (a deleted one's too: its full id)."
)
@click.option("--kind", metavar="KIND", help="A kind (tool.call) or a family of them (tool, session, share, server).")
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=None, help="At most this many, the latest.")
@click.option("--json", "json_flag", is_flag=True, help="One JSON object a line, each record with its chain.")
@click.pass_context
def audit(
    ctx: click.Context,
    since: str | None,
    session_ref: str | None,
    kind: str | None,
    limit: int | None,
    json_flag: bool,
) -> None:
    """The audit trail: who did what across every session, oldest first. Each record says when, what
    (its kind), the session, who (the actor: `cli USER@HOST`, a server's `token` or `share` with the client's
    address; and for a tool call, who decided: a rule, the mode, a person), the outcome and the details,
    secrets redacted. Deleting a session keeps its records. Each record carries the hash of the one before:
    `tether audit verify` finds one that was changed or removed. `[audit] keep_days` in config.toml prunes
    old records.

    \b
    Examples:
      tether audit --since 7d --kind tool          the tool calls of the last week, and who allowed them
      tether audit --session 4M0R1YB               what happened to one session
      tether audit --kind server.unauthorized      failed sign-ins on the server
      tether audit verify                          check the chain"""
    if ctx.invoked_subcommand is not None:
        if since or session_ref or kind or limit or json_flag:
            raise OptionError("--since, --session, --kind, --limit and --json go with `tether audit` itself")
        return
    start = parse_since(since) if since else None

    async def run(store: Store) -> list[AuditRecord]:
        sid = None
        if session_ref:
            try:
                sid = (await find_session(store, session_ref)).id
            except NotFound:  # a deleted session: its records stay, found by its full id
                sid = session_ref
        out: list[AuditRecord] = []
        after = 0
        while True:
            page = await store.list_audit(after=after, since=start, session_id=sid, kind=kind, limit=PAGE)
            out.extend(page)
            if limit is not None and len(out) > limit:
                del out[: len(out) - limit]
            if len(page) < PAGE:
                return out
            after = page[-1].seq

    records = with_store(run)
    if wants_json(json_flag):
        for record in records:
            echo_json(record)
        return
    if not records:
        click.echo("No audit records" + (" match." if since or session_ref or kind else " yet."), err=True)
        return
    for record in records:
        click.echo(escape_controls(_line(record)))


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def _line(record: AuditRecord) -> str:
    detail = dict(record.detail)
    head = f"{record.seq:>6} {_when(record.at)} {record.kind:<19} {record.session_id or '-':<30} {record.actor or '-'}"
    if record.outcome:
        head += f" [{record.outcome}]"
    summary = _summary(record.kind, detail)
    return f"{head}  {summary}" if summary else head


def _summary(kind: str, detail: dict[str, Any]) -> str:
    if kind == "tool.call":
        arguments = detail.get("arguments")
        shown = arguments.get("command") or arguments.get("path") if isinstance(arguments, dict) else None
        text = f"{detail.get('tool')}" + (f" {shown!s:.80}" if shown else "")
        return f"{text} ({detail.get('decision')} by {detail.get('decided_by')}, {detail.get('duration_ms')} ms)"
    if kind.startswith("approval."):
        return f"{detail.get('tool', '')} {detail.get('by', '')}".strip()
    parts = [f"{k}={v}" for k, v in detail.items() if v not in (None, "", [], {})]
    return " ".join(parts)[:200]


@audit.command("verify")
@click.option("--json", "json_flag", is_flag=True, help="Print the report as JSON.")
def verify_command(json_flag: bool) -> None:
    """Check the audit trail's hash chain: every record's hash against its content, each against the one
    before, no seq missing, and the end against the head the store keeps. A record changed or removed in the
    database is named by its position (seq). Exits 1 when anything is wrong."""

    async def run(store: Audit) -> AuditReport:
        return await verify(walk_trail(store), await store.audit_head())

    report = with_store(run)
    if wants_json(json_flag):
        echo_json(report)
    elif report.ok:
        if report.records:
            click.echo(f"The audit trail is intact: {report.records} records, {report.first} to {report.last}.")
        else:
            click.echo("The audit trail is empty.")
    else:
        for problem in report.problems:
            click.echo(f"record {problem.seq}: {problem.problem}")
    if not report.ok:
        raise CliError(
            f"the audit trail does not verify: {len(report.problems)} problem(s), first at record "
            f"{report.problems[0].seq}"
        )


@audit.command("prune")
@click.option("--older-than", "older", metavar="DURATION", required=True, help="Remove records older than this: 90d.")
def prune_command(older: str) -> None:
    """Remove old records now (as `[audit] keep_days` does by itself). A record of the prune takes their
    place, naming the hash the trail continues from, so that what remains still verifies."""
    seconds = parse_duration(older)
    if seconds is None:
        raise OptionError("--older-than takes a duration such as 90d")

    async def run(store: Audit) -> int:
        return await store.prune_audit(time.time() - seconds)

    removed = with_store(run)
    click.echo(f"Removed {removed} audit records." if removed else "Nothing that old.")
