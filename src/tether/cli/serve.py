"""`tether serve`: the HTTP server (REST, Server-Sent Events, OpenAPI at /openapi.json) over the store, on
127.0.0.1 unless told otherwise. Off loopback it never runs without a token: `TETHER_SERVER_TOKEN`, or one
generated and printed here. Needs the `server` extra, imported only when the command runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import click

from .state import OptionError, cli_state


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind (0.0.0.0: every interface).")
@click.option("--port", "-p", default=7477, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token-required",
    is_flag=True,
    help="Require a token on loopback too (TETHER_SERVER_TOKEN, or one generated and printed).",
)
@click.option(
    "--allow-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer to this Host name (a proxy's or a DNS name); repeatable. '*': any (needs a token).",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="ORIGIN",
    help="Let web pages of this origin (https://app.example) call the API; repeatable. Default: none.",
)
@click.option(
    "--grace",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0, 3600),
    help="Seconds the runs in progress get to finish when the server stops, before they are cancelled.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 1024),
    default=None,
    metavar="N",
    help="Processes that serve and run sessions over the one store (default: one per core). A run lives in "
    "one of them; every client sees every run, whichever worker it reached.",
)
def serve(
    host: str,
    port: int,
    token_required: bool,
    allowed_hosts: tuple[str, ...],
    cors_origins: tuple[str, ...],
    grace: float,
    workers: int | None,
) -> None:
    """Serve the sessions over HTTP: a web page at /, REST, live events (SSE), an OpenAPI spec at /openapi.json.

    Binds 127.0.0.1 by default. Any other address needs a token: TETHER_SERVER_TOKEN, or one is generated
    and printed here. Clients send it as `Authorization: Bearer TOKEN`; the web page asks for it, or takes it
    from the link printed here (http://HOST:PORT/#token=TOKEN) and keeps it as a cookie. Requests whose Host or Origin is not
    this server's are refused, so a web page elsewhere cannot drive the agent. Ctrl-C stops the server
    gracefully: runs get --grace seconds, then are cancelled (each keeps what it did).

    \b
    Several processes share the work (--workers, one per core by default), and several `tether serve` on
    different machines can share one PostgreSQL store (--store postgresql://...): they behave as one
    service, each client seeing every run, and a run whose process died is resumed by another.

    \b
    Examples:
      tether serve
      tether serve --workers 4
      tether --store postgresql://tether@db/tether serve --host 0.0.0.0
      TETHER_SERVER_TOKEN=$(cat token) tether serve --host 0.0.0.0 --allow-host devbox.lan
      tether run --server http://127.0.0.1:7477 "fix the failing test"
    """
    from ..errors import ConfigError
    from ..server.settings import TOKEN_ENV, ServerSettings, is_loopback, new_token

    settings_fields: dict[str, object] = {
        "host": host,
        "port": port,
        "allowed_hosts": allowed_hosts,
        "cors_origins": cors_origins,
        "shutdown_grace": grace,
    }
    try:
        settings = ServerSettings.from_environment(**settings_fields)
    except ConfigError as exc:
        if "no token" not in str(exc):
            raise OptionError(str(exc)) from exc
        settings = None
    if settings is None or (token_required and settings.token is None):
        token = new_token()
        try:
            settings = ServerSettings(token=token, **settings_fields)  # type: ignore[arg-type]
        except ConfigError as exc:
            raise OptionError(str(exc)) from exc
        why = "off loopback a token is required" if not is_loopback(host) else "--token-required"
        click.echo(f"{why}; the server's token (set {TOKEN_ENV} to choose one):\n  {token}", err=True)
    else:
        token = None
    from ..server import serve as run_server
    from ..server.settings import is_wildcard
    from ..server.workers import default_workers

    store_url = cli_state().store_url
    if workers is None:
        workers = default_workers()
    if (store_url or "").startswith("memory:"):
        if workers > 1 and ctx_workers_given():
            raise OptionError("a memory:// store lives in one process: use --workers 1")
        workers = 1

    shown_host = "127.0.0.1" if is_wildcard(host) else f"[{host}]" if ":" in host else host
    address = f"http://{shown_host}:{port}"

    def listening() -> None:  # said once it listens: a client that reads this line and connects is served
        click.echo(
            f"tether serving on {address} (the web page at /, OpenAPI at /openapi.json"
            f"{'; token required' if settings.token else ''}{f'; {workers} workers' if workers > 1 else ''}); "
            "Ctrl-C stops it",
            err=True,
        )
        if token is not None:  # in the fragment: a browser never sends it; the page trades it for a cookie
            click.echo(f"open the web page signed in: {address}/#token={token}", err=True)

    record = _record_address(host, port)
    before = _forget_on_sigterm(record) if record is not None else None
    try:
        status = run_server(
            settings,
            store_url=store_url,
            workers=workers,
            ready=listening,
            log_level="info" if cli_state().debug else "warning",
        )
        if status:
            raise SystemExit(status)
    finally:
        _forget_address(record)
        if before is not None:
            signal.signal(signal.SIGTERM, before)


ADDRESS_FILE = "server.json"
"""In the tether home: where a running `tether serve` says where it is (its URL, its process, its store), so
that `tether share` can print a whole link."""


def _record_address(host: str, port: int) -> Path | None:
    from ..paths import tether_home
    from ..store import store_path

    if port == 0:
        return None  # the port is the system's choice, known only once bound
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    path = tether_home() / ADDRESS_FILE
    record = {"url": f"http://{shown}:{port}", "pid": os.getpid(), "store": store_path(cli_state().store_url)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    except OSError:
        return None  # a convenience for `tether share`: serving does not depend on it
    return path


def _forget_on_sigterm(path: Path) -> Any:
    """uvicorn stops gracefully on SIGTERM and then raises it again with the handler it found: this one, which
    forgets the address before the signal ends the process as it would have (no `finally` runs after).
    Returns the handler it replaced (None off the main thread, where none can be set)."""

    def forget_and_die(signum: int, frame: object) -> None:
        _forget_address(path)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    try:
        return signal.signal(signal.SIGTERM, forget_and_die)
    except ValueError:
        return None


def _forget_address(path: Path | None) -> None:
    if path is None:
        return
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def known_server(store_url: str | None) -> str | None:
    """The URL of the `tether serve` running on this machine over the same store, if one said where it is."""
    from ..paths import tether_home
    from ..store import store_path

    try:
        record = json.loads((tether_home() / ADDRESS_FILE).read_text())
        url, pid = str(record["url"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # it died without cleaning up
    except PermissionError:
        pass  # alive, another user's
    if record.get("store") != store_path(store_url):
        return None
    return url


def ctx_workers_given() -> bool:
    """Whether --workers was given on the command line (not the default)."""
    ctx = click.get_current_context()
    return ctx.get_parameter_source("workers") == click.core.ParameterSource.COMMANDLINE
