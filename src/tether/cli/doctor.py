"""`tether doctor`: prints what `tether.runtime.doctor` finds (the home, the database, the configuration, the
providers, the extras), each ok, warn or fail with what to do; `--json` for machines. Exit 1 when a check
failed. `--repair` rebuilds what is derived from the journal (the search index, recall's turn keys) when that
is what failed, then checks again."""

from __future__ import annotations

import asyncio
import sys

import click

from ..runtime.doctor import Finding, diagnose, failed, repair, repairable
from .common import cli_state, console, echo_json, wants_json
from .render import shown

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@click.command("doctor")
@click.option("--full/--quick", default=None, help="Check every page and search index row (default: below 256 MB).")
@click.option(
    "--repair",
    "repair_flag",
    is_flag=True,
    help="Rebuild the search index and recall's turn keys from the journal when they are what is damaged "
    "(the full check first; a damaged journal is never written to).",
)
@click.option("--json", "json_flag", is_flag=True, help="The findings as JSON.")
def doctor(full: bool | None, repair_flag: bool, json_flag: bool) -> None:
    """Check the tether home, the database, the configuration, the providers and the optional extras.

    Nothing is changed without --repair, and a damaged journal never is: it is reported with what to do
    (restore a backup made by `tether backup`). What is derived from the journal (the search index,
    recall's turn keys) is rebuilt from it by --repair. Exits 1 when a check failed."""
    as_json = wants_json(json_flag)
    url = cli_state().store_url
    findings = diagnose(url, full=True if repair_flag else full)
    repaired = None
    if repair_flag and repairable(findings):
        repaired = asyncio.run(repair(url))
        findings = diagnose(url, full=True)
    if as_json:
        payload: dict[str, object] = {"ok": not failed(findings), "findings": findings}
        if repair_flag:
            payload["repaired"] = repaired
        echo_json(payload)
    else:
        _print(findings)
        if repaired is not None:
            click.echo(
                f"repaired: the search index was rebuilt from the journal ({repaired.entries_indexed:,} entries "
                f"indexed) and recall's turn keys too ({repaired.keys_read:,} entries read)",
                err=True,
            )
        elif repair_flag:
            click.echo(
                "nothing repaired: "
                + ("what failed is not derived from the journal (see the fixes above)" if failed(findings) else
                   "nothing derived from the journal is damaged"),
                err=True,
            )  # fmt: skip
    if failed(findings):
        sys.exit(1)


def _print(findings: list[Finding]) -> None:
    out = console()
    width = max(len(f.check) for f in findings)
    for f in findings:
        out.print(
            f"[{_STYLE[f.status]}]{f.status:<4}[/] {shown(f.check):<{width}}  {shown(f.detail)}",
            markup=True,
            soft_wrap=True,
        )
        if f.fix and f.status != "ok":
            out.print(f"     {'':<{width}}  [dim]fix: {shown(f.fix)}[/dim]", markup=True, soft_wrap=True)
