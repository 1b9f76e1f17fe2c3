"""What the `tether` subcommands share: running a coroutine against the store the user chose, finding a
session from a full id or a unique piece of one (`tether.runtime.lookup`), and output for people and
machines. The global options live in `state`."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from ..messages import encode_json
from ..runtime.lookup import MIN_REF, find_session
from ..store import Store, open_store
from .sanitize import escape_json_controls
from .state import CliState, cli_state, wants_json

__all__ = [
    "MIN_REF",
    "CliState",
    "ago",
    "cli_state",
    "console",
    "echo_json",
    "find_session",
    "human_count",
    "wants_json",
    "with_store",
]

T = TypeVar("T")


def with_store(fn: Callable[[Store], Awaitable[T]]) -> T:
    """Open the chosen store, run `fn` with it on a fresh event loop, and close the store whatever happens."""
    url = cli_state().store_url

    async def main() -> T:
        store = open_store(url)
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(main())


def echo_json(value: Any) -> None:
    """`value` as one line of JSON, every control character in it written as an escape."""
    click.echo(escape_json_controls(encode_json(value)).decode())


def console() -> Any:
    """A rich console on the current stdout (so test runners that swap it see the output). Output that is
    not a terminal gets a wide line instead of 80 columns: it is read by tools, not squeezed into a window."""
    from rich.console import Console

    return Console(
        file=sys.stdout,
        highlight=False,
        markup=False,
        emoji=False,
        width=None if sys.stdout.isatty() else 200,
    )


def ago(ts: float, now: float | None = None) -> str:
    """A short relative time: 'just now', '45s ago', '3m ago', '2h ago', '5d ago', then the date."""
    delta = (time.time() if now is None else now) - ts
    if delta < 5:
        return "just now"
    if delta < 60:
        return f"{int(delta)}s ago"
    if delta < 3600:
        return f"{int(delta // 60)}m ago"
    if delta < 86400:
        return f"{int(delta // 3600)}h ago"
    if delta < 30 * 86400:
        return f"{int(delta // 86400)}d ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))


def human_count(n: int) -> str:
    """1234 -> '1.2k', 1200000 -> '1.2M'; small numbers as they are."""
    if n < 1000:
        return str(n)
    value, unit = n / 1000, "k"
    if round(value, 1) >= 1000:  # 999,999 is "1M", not "1000k"
        value, unit = n / 1_000_000, "M"
    return f"{value:.1f}".removesuffix(".0") + unit
