"""`tether doctor`: prints what `tether.runtime.doctor` finds (the home, the database, the configuration, the
providers, the extras), each ok, warn or fail with what to do; `--json` for machines. Exit 1 when a check
failed."""

from __future__ import annotations

import sys

import click

from ..runtime.doctor import diagnose, failed
from .common import cli_state, console, echo_json, wants_json
from .render import shown

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@click.command("doctor")
@click.option("--full/--quick", default=None, help="Check every page and search index row (default: below 256 MB).")
@click.option("--json", "json_flag", is_flag=True, help="The findings as JSON.")
def doctor(full: bool | None, json_flag: bool) -> None:
    """Check the tether home, the database, the configuration, the providers and the optional extras.

    Nothing is changed: a damaged database is reported with what to do (restore a backup made by
    `tether backup`), never repaired in place. Exits 1 when a check failed."""
    findings = diagnose(cli_state().store_url, full=full)
    if wants_json(json_flag):
        echo_json({"ok": not failed(findings), "findings": findings})
    else:
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
    if failed(findings):
        sys.exit(1)
