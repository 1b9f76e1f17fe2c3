"""`tether share`: make a read-only link to a session's transcript, list the links, revoke one. Each is a change
to the store, so it needs no server running; a running `tether serve` reads the store on every request, so a
revoke stops the link at once."""

from __future__ import annotations

import re
import time
from typing import Any

import click

from .common import echo_json, find_session, wants_json, with_store
from .state import OptionError, cli_state

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float | None:
    """Seconds in ``90s``, ``30m``, ``24h``, ``7d``, ``2w`` or ``1d12h``; None for ``never``."""
    spec = text.strip().lower().replace(" ", "")
    if spec in ("never", "none", "0"):
        return None
    if not spec or _DURATION_RE.sub("", spec):
        raise OptionError(f"--expires takes a duration such as 30m, 24h, 7d or 1d12h (or never), not {text!r}")
    return float(sum(float(n) * _UNITS[unit] for n, unit in _DURATION_RE.findall(spec)))


def _when(ts: float | None) -> str:
    return "never" if ts is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


@click.command("share")
@click.argument("session_ref", metavar="[ID]", required=False)
@click.option(
    "--expires",
    metavar="DURATION",
    help="Stop the link after this long: 30m, 24h, 7d, 2w, 1d12h. Default: it serves until revoked.",
)
@click.option(
    "--server",
    metavar="URL",
    envvar="TETHER_SERVER",
    help="The address people reach the server at (http://devbox.lan:7477, or a proxy's https://...), to print "
    "a whole link. Default: the `tether serve` running here. [env: TETHER_SERVER]",
)
@click.option("--list", "list_flag", is_flag=True, help="List the share links (of session ID, or all of them).")
@click.option(
    "--revoke",
    metavar="SHARE",
    help="Revoke a link, named by its share id (shr_...), its token, or the link itself. It stops at once.",
)
@click.option("--json", "json_flag", is_flag=True, help="Print JSON.")
def share(
    session_ref: str | None,
    expires: str | None,
    server: str | None,
    list_flag: bool,
    revoke: str | None,
    json_flag: bool,
) -> None:
    """Share a session as a read-only web page: a link with an unguessable token that `tether serve` opens
    without its bearer token. The page shows the transcript and nothing else (no controls, no other
    session). The link is printed once: the store keeps only a hash of its token. Anyone with the link can
    read the session until it expires or you revoke it; deleting the session revokes it too.

    \b
    Examples:
      tether share 4M0R1YB                     a link that serves until revoked
      tether share 4M0R1YB --expires 7d        a link that stops in a week
      tether share --list                      every link, live or not
      tether share --revoke shr_01JD8X...      stop a link (its id, token or URL)

    A server that people reach by another name than its address needs `tether serve --allow-host NAME`.
    To send a file instead, see `tether sessions export ID --format html`."""
    if list_flag and revoke:
        raise OptionError("use --list or --revoke, not both")
    if (list_flag or revoke) and (expires or server):
        raise OptionError("--expires and --server go with sharing a session, not with --list or --revoke")
    if revoke:
        if session_ref:
            raise OptionError("--revoke names the share itself; leave out the session ID")
        _revoke(revoke, json_flag)
    elif list_flag:
        _list(session_ref, json_flag)
    elif session_ref:
        _share(session_ref, parse_duration(expires) if expires else None, server, json_flag)
    else:
        raise OptionError("give the session to share (ID), or --list, or --revoke SHARE")


def _share(session_ref: str, expires_in: float | None, server: str | None, json_flag: bool) -> None:
    from ..runtime.sharing import SHARE_PATH, NewShare, create_share, share_url
    from ..store import Store
    from ..store.records import SessionInfo
    from .sanitize import escape_controls
    from .serve import known_server

    async def run(store: Store) -> tuple[SessionInfo, NewShare]:
        info = await find_session(store, session_ref)
        return info, await create_share(store, info.id, expires_in=expires_in)

    info, made = with_store(run)
    base = server or known_server(cli_state().store_url)
    url = share_url(base, made.token) if base else None
    if wants_json(json_flag):
        record: dict[str, Any] = {
            "id": made.share.id,
            "session_id": info.id,
            "token": made.token,
            "url": url,
            "path": SHARE_PATH + made.token,
            "created_at": made.share.created_at,
            "expires_at": made.share.expires_at,
        }
        echo_json(record)
        return
    title = escape_controls(info.title or "untitled")
    click.echo(f"Shared {info.id} “{title}” read-only; expires: {_when(made.share.expires_at)}.", err=True)
    if url is not None:
        click.echo(url)
    else:
        click.echo(SHARE_PATH + made.token)
        click.echo(
            "No `tether serve` is running here: start one and the link is that server's address followed by the "
            "path above (http://127.0.0.1:7477 by default; give --server URL to print it whole).",
            err=True,
        )
    click.echo(f"The link is shown this once. Revoke it with: tether share --revoke {made.share.id}", err=True)


def _list(session_ref: str | None, json_flag: bool) -> None:
    from ..store import Share, Store

    async def run(store: Store) -> list[Share]:
        sid = (await find_session(store, session_ref)).id if session_ref else None
        return await store.list_shares(sid)

    shares = with_store(run)
    now = time.time()
    if wants_json(json_flag):
        echo_json({"shares": shares})
        return
    if not shares:
        click.echo("No share links" + (" for this session." if session_ref else "."), err=True)
        return
    from rich import box
    from rich.table import Table

    from .common import console

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for column in ("share", "session", "created", "expires", "state"):
        table.add_column(column)
    for s in shares:
        state = (
            f"revoked {_when(s.revoked_at)}" if s.revoked_at is not None else "expired" if not s.live(now) else "live"
        )
        style = "green" if state == "live" else "dim"
        table.add_row(s.id, s.session_id, _when(s.created_at), _when(s.expires_at), state, style=style)
    console().print(table)


def _revoke(ref: str, json_flag: bool) -> None:
    from ..runtime.sharing import revoke_share
    from ..store import Share, Store

    async def run(store: Store) -> Share:
        return await revoke_share(store, ref)

    revoked = with_store(run)
    if wants_json(json_flag):
        echo_json(revoked)
        return
    click.echo(f"Revoked {revoked.id} (session {revoked.session_id}): its link no longer opens.")


__all__ = ["share"]
