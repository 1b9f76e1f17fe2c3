"""What every `tether` subcommand shares: the global options, running a coroutine against the store the
user chose, finding a session from a full id or a unique piece of one, and output for people and machines."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ..errors import InvalidId, InvalidInput, SessionNotFound
from ..ids import is_valid_id
from ..messages import encode_json
from ..store import Store, open_store
from ..store.base import SessionInfo

T = TypeVar("T")

MIN_REF = 6
"""The fewest characters of an id that `resolve_session` accepts as a prefix or suffix."""

MAX_REF = 35
"""The longest id there is: an 8-letter kind, "_" and 26 characters."""

_REF_RE = re.compile(r"^[A-Za-z0-9_]+\Z")


@dataclass
class CliState:
    """The group-level options, stored on the click context for subcommands to read."""

    store_url: str | None = None
    json: bool = False


def cli_state() -> CliState:
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(CliState) if ctx is not None else None
    return state or CliState()


def wants_json(flag: bool) -> bool:
    """A command's own `--json` or the global one."""
    return flag or cli_state().json


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


async def resolve_session(store: Store, ref: str) -> SessionInfo:
    """The session that `ref` names: a full id, or a unique prefix or suffix of one (at least `MIN_REF`
    characters, any case), such as the last six characters that `tether sessions` shows.

    A full id is one lookup; a piece of one scans the session rows (not their entries) once."""
    ref = ref.strip()
    if is_valid_id(ref):
        return await store.get_session(ref)
    if not _REF_RE.match(ref) or not MIN_REF <= len(ref) <= MAX_REF:
        raise InvalidId(
            f"invalid session id {ref[:80]!r}: give a full id like 'ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB' "
            f"or at least its last {MIN_REF} characters"
        )
    needle = ref.lower()
    matches: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(limit=1000, cursor=cursor)
        matches += [s for s in page.items if s.id.lower().startswith(needle) or s.id.lower().endswith(needle)]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    if not matches:
        raise SessionNotFound(ref)
    if len(matches) > 1:
        shown = ", ".join(s.id for s in matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise InvalidInput(f"{ref!r} matches {len(matches)} sessions ({shown}); give more characters")
    return matches[0]


def echo_json(value: Any) -> None:
    click.echo(encode_json(value).decode())


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
