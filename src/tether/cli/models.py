"""`tether models`: the model catalog (context window, output limit, prices), which providers have a key,
and which model a run would use by default."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..messages import encode_json
from .common import wants_json


def _price(value: Decimal | None) -> str:
    return "—" if value is None else f"${value:g}"


@click.command("models")
@click.option("--provider", "-p", "only", metavar="NAME", help="Only this provider's models.")
@click.option("--json", "json_flag", is_flag=True, help="The catalog and provider status as JSON.")
def models(only: str | None, json_flag: bool) -> None:
    """List known models and the providers that are configured.

    Prices are US dollars per million tokens as the catalog knows them; override them (and add models) in
    config.toml under [models."provider/model"]. The default model is the first provider with a key, in
    the order anthropic, openai, openrouter, deepseek, groq, moonshot, zai; with none, the embedded local
    model. Set TETHER_MODEL or pass --model to choose another.
    """
    from ..config import load_config
    from ..providers.catalog import Catalog
    from ..providers.registry import KEY_ENVS, choose_model, has_key, provider_names

    config = load_config()
    catalog = Catalog.from_config(config)
    default = "/".join(choose_model(None, config=config, catalog=catalog))
    names = provider_names(config)
    status = {name: (name == "local" or has_key(name, config)) for name in names}
    rows = [m for m in catalog if only is None or m.provider == only]
    if wants_json(json_flag):
        payload: dict[str, Any] = {
            "default": default,
            "providers": [{"name": n, "configured": status[n], "key_env": KEY_ENVS.get(n)} for n in names],
            "models": rows,
        }
        click.echo(encode_json(payload).decode())
        return
    console = Console(highlight=False)
    table = Table(title="Models", title_justify="left")
    for header, justify in [
        ("model", "left"),
        ("context", "right"),
        ("max out", "right"),
        ("in $/M", "right"),
        ("out $/M", "right"),
        ("cache read", "right"),
        ("cache write", "right"),
    ]:
        table.add_column(header, justify=justify, no_wrap=header == "model")  # type: ignore[arg-type]
    for m in rows:
        name = f"{m.provider}/{m.model}"
        style = "bold" if name == default else ("" if status.get(m.provider) else "dim")
        table.add_row(
            name,
            f"{m.context_window:,}",
            f"{m.max_output_tokens:,}",
            _price(m.input_price),
            _price(m.output_price),
            _price(m.cache_read_price),
            _price(m.cache_write_price),
            style=style,
        )
    console.print(table)
    configured = [n for n in names if status[n]]
    missing = [f"{n} ({KEY_ENVS[n]})" for n in names if not status[n] and n in KEY_ENVS]
    console.print(f"[bold]default:[/bold] {default}")
    console.print(f"[green]configured:[/green] {', '.join(configured)}")
    if missing:
        console.print(f"[dim]not configured (set the key to use): {', '.join(missing)}[/dim]")
