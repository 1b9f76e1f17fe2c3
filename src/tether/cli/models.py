"""`tether models`: the model catalog (context window, output limit, prices, which models their providers
are retiring), which providers have a key, and which model a run would use by default."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import click
from rich.console import Console
from rich.markup import escape

from ..messages import encode_json
from .common import Column, fitted_table, wants_json
from .sanitize import escape_controls, escape_json_controls


def _price(value: Decimal | None) -> str:
    return "—" if value is None else f"${value:g}"


def _shown(name: str) -> str:
    """A name from config.toml ready for rich markup: neither the terminal nor rich obeys what it holds."""
    return escape(escape_controls(name))


def _status(lifecycle: str | None) -> str:
    if lifecycle is None:
        return ""
    shown = _shown(lifecycle)
    return f"[red]{shown}[/red]" if lifecycle.startswith("retired") else f"[yellow]{shown}[/yellow]"


@click.command("models")
@click.option("--provider", "-p", "only", metavar="NAME", help="Only this provider's models.")
@click.option("--json", "json_flag", is_flag=True, help="The catalog and provider status as JSON.")
def models(only: str | None, json_flag: bool) -> None:
    """List known models and the providers that are configured.

    Prices are US dollars per million tokens as the catalog knows them (— where unknown); override them
    (and add models) in config.toml under [models."provider/model"]. A price marked * holds for prompts up
    to a size; longer ones cost more (--json shows the long_context prices). The status column shows the
    models their providers retire: "retires DAY", "retired DAY", or "deprecated" when no day is known.
    The default model is the first provider with a key, in the order anthropic, openai, openrouter,
    deepseek, groq, moonshot, zai; with none, the embedded local model. Set TETHER_MODEL or pass --model
    to choose another.
    """
    from ..runtime.configuration import load_config
    from ..runtime.operations import models_overview

    today = date.today()
    overview = models_overview(load_config(), provider=only, today=today)
    default, default_status, rows = overview.default, overview.default_status, overview.models
    names = [p.name for p in overview.providers]
    status = {p.name: p.configured for p in overview.providers}
    key_envs = {p.name: p.key_env for p in overview.providers if p.key_env}
    if wants_json(json_flag):
        click.echo(escape_json_controls(encode_json(overview)).decode())
        return
    console = Console(highlight=False)
    # At 80 columns the cache prices, then the output limit, make way: every figure shown is whole.
    columns = [
        Column("model", fold=True),
        Column("context", justify="right", keep=90),
        Column("max out", justify="right", keep=40),
        Column("in $/M", justify="right", keep=80),
        Column("out $/M", justify="right", keep=80),
        Column("cache read", justify="right", keep=30),
        Column("cache write", justify="right", keep=20),
        Column("status", keep=85),
    ]
    cells: list[list[str]] = []
    styles: list[str] = []
    for m in rows:
        name = f"{m.provider}/{m.model}"
        styles.append("bold" if name == default else ("" if status.get(m.provider) else "dim"))
        tiered = "*" if m.long_context is not None else ""
        cells.append(
            [
                _shown(name),
                f"{m.context_window:,}",
                f"{m.max_output_tokens:,}",
                _price(m.input_price) + tiered,
                _price(m.output_price) + tiered,
                _price(m.cache_read_price),
                _price(m.cache_write_price),
                _status(m.status(today)),
            ]
        )
    table, dropped = fitted_table(console.width, columns, cells, styles, title="Models", title_justify="left")
    console.print(table)
    if dropped:
        console.print(
            f"[dim]not shown at this width: {', '.join(dropped)} (a wider terminal or --json shows them)[/dim]"
        )
    configured = [n for n in names if status[n]]
    missing = [f"{n} ({key_envs[n]})" for n in names if not status[n] and n in key_envs]
    if any(m.long_context is not None for m in rows):
        console.print("[dim]* up to a prompt size; longer prompts cost more (see --json: long_context)[/dim]")
    console.print(f"[bold]default:[/bold] {_shown(default)}")
    if default_status is not None:
        console.print(
            f"[yellow]the default model is deprecated ({_shown(default_status)}): choose another with --model[/yellow]"
        )
    console.print(f"[green]configured:[/green] {_shown(', '.join(configured))}")
    if missing:
        console.print(f"[dim]not configured (set the key to use): {_shown(', '.join(missing))}[/dim]")
