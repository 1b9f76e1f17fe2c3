"""What the `tether` subcommands share: running a coroutine against the store the user chose, finding a
session from a full id or a unique piece of one (`tether.runtime.lookup`), and output for people and
machines. The global options live in `state`."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from ..errors import StoreUnavailable
from ..messages import encode_json
from ..runtime.lookup import MIN_REF, find_session
from ..store import Store, open_store, store_path
from .sanitize import escape_json_controls
from .state import CliState, cli_state, wants_json

__all__ = [
    "MIN_REF",
    "CliState",
    "Column",
    "ago",
    "cli_state",
    "console",
    "echo_json",
    "find_session",
    "fitted_table",
    "human_count",
    "wants_json",
    "with_store",
]

T = TypeVar("T")


def with_store(fn: Callable[[Store], Awaitable[T]], *, reads: bool = False) -> T:
    """Open the chosen store, run `fn` with it on a fresh event loop, and close the store whatever happens.
    `reads`: the command only reads, so a database file the user named (``--store``, ``TETHER_STORE``) that
    is not there is an error, rather than a new empty one (and its folders) made where a typo pointed."""
    url = cli_state().store_url
    if reads:
        refuse_missing(url)

    async def main() -> T:
        store = open_store(url)
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(main())


def refuse_missing(url: str | None) -> None:
    """`StoreUnavailable` when the database file named by `url` (else ``TETHER_STORE``) does not exist. The
    default database is not refused: a new home has none yet, and lists nothing."""
    named = url or os.environ.get("TETHER_STORE")
    path = store_path(named) if named else None
    if path is not None and path != ":memory:" and not os.path.exists(path):
        raise StoreUnavailable(
            f"there is no tether database at {path}",
            "check the path given (--store, TETHER_STORE); `tether run` makes one there",
            path=path,
        )


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


class Column:
    """A column of a table laid out for the terminal's width (`fitted_table`). `keep`: the higher, the later
    it is dropped when the table does not fit (100 and more: never); `fold`: its text may wrap onto more
    lines (a name); `ellipsis`: its text stays on one line, cut with … where it is too long (a title: a list
    reads better a line a row); every other column is kept whole on one line (a number is never cut)."""

    def __init__(
        self,
        header: str,
        *,
        justify: str = "left",
        keep: int = 100,
        fold: bool = False,
        ellipsis: bool = False,
        style: str | None = None,
        max_width: int | None = None,
    ) -> None:
        self.header = header
        self.justify = justify
        self.keep = keep
        self.fold = fold or ellipsis
        self.ellipsis = ellipsis
        self.style = style
        self.max_width = max_width


FOLD_MIN = 16
"""The narrowest a folding column is made while other columns are kept."""


def fitted_table(
    width: int, columns: list[Column], rows: list[list[str]], styles: list[str] | None = None, **table: Any
) -> tuple[Any, list[str]]:
    """A rich table of `rows` that fits `width` columns: the lowest-`keep` columns are dropped until the
    whole ones fit beside the folding ones at `FOLD_MIN`; what stays is never cut (whole columns keep their
    widest cell, folding ones wrap). Returns the table and the headers of the dropped columns."""
    from rich.errors import MarkupError
    from rich.table import Table
    from rich.text import Text

    def shown(cell: str) -> int:
        try:
            return Text.from_markup(cell).cell_len
        except MarkupError:
            return len(cell)

    def need(i: int) -> int:
        # a whole column does not wrap its header either ("out $/M" took 7, not its longest word's 3, and the
        # table came out a column wider than the terminal, its right edge cropped)
        cells = [shown(row[i]) for row in rows]
        return max([*cells, len(columns[i].header), 1]) if not columns[i].fold else FOLD_MIN

    kept = list(range(len(columns)))
    while True:
        total = sum(need(i) for i in kept) + 3 * len(kept) + 1  # "│ " and " " around each cell, and the last "│"
        droppable = [i for i in kept if columns[i].keep < 100]
        if total <= width or not droppable:
            break
        kept.remove(min(droppable, key=lambda i: (columns[i].keep, -i)))
    # what is left beside the whole columns goes to the folding ones, each up to its longest cell
    folding = [i for i in kept if columns[i].fold]
    left = width - sum(need(i) for i in kept if not columns[i].fold) - 3 * len(kept) - 1
    share = max(FOLD_MIN, left // max(len(folding), 1))

    def fold_width(i: int) -> int:
        longest = max([shown(row[i]) for row in rows] + [len(columns[i].header), 1])
        return min(share, longest, columns[i].max_width or longest)

    out = Table(**table)
    for i in kept:
        column = columns[i]
        if column.fold:
            out.add_column(
                column.header,
                justify=column.justify,  # type: ignore[arg-type]
                overflow="ellipsis" if column.ellipsis else "fold",
                no_wrap=column.ellipsis,
                style=column.style,
                width=fold_width(i),
            )
        else:
            out.add_column(
                column.header,
                justify=column.justify,  # type: ignore[arg-type]
                no_wrap=True,
                min_width=need(i),
                style=column.style,
            )
    for n, row in enumerate(rows):
        out.add_row(*(row[i] for i in kept), style=styles[n] if styles else None)
    return out, [columns[i].header for i in range(len(columns)) if i not in kept]
