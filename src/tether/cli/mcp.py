"""`tether mcp`: the MCP servers whose tools runs get. `list` shows them (the user's config, the workspace's
`.mcp.json` and `.tether/config.toml`), `add` and `remove` edit the config, `test` starts one and lists its
tools and what their definitions cost in tokens. `serve` is tether itself as an MCP server (`mcp_serve`)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import click

from ..config import McpServerConfig
from ..errors import ConfigError
from ..paths import config_path
from .common import console, echo_json, wants_json
from .sanitize import escape_controls as shown
from .state import OptionError


@click.group("mcp")
def mcp() -> None:
    """MCP servers: their tools are offered to the model as mcp__SERVER__TOOL.

    Servers come from [mcp.NAME] in your config.toml, and from a workspace's .mcp.json (Claude Code's file)
    and .tether/config.toml; a workspace's server starts only once your own config enables it
    ([mcp.NAME] enabled = true, which `tether mcp add NAME` writes). Calls to MCP tools ask first unless a
    rule allows them: --allow 'mcp__github__*'."""


def _workspace(directory: str | None) -> str:
    return os.path.realpath(directory or os.getcwd())


@mcp.command("list")
@click.option("--dir", "directory", metavar="DIR", help="The workspace (default: the current directory).")
@click.option("--json", "json_flag", is_flag=True, help="Print JSON.")
def list_command(directory: str | None, json_flag: bool) -> None:
    """List the configured MCP servers: where each comes from, how it is reached, whether it runs."""
    from ..runtime.configuration import load_config
    from ..runtime.mcp import configured_servers

    servers = configured_servers(load_config(), _workspace(directory))
    if wants_json(json_flag):
        echo_json(
            [
                {
                    "name": c.spec.name,
                    "transport": c.spec.transport,
                    "target": c.spec.describe(),
                    "source": c.spec.source,
                    "enabled": c.enabled,
                    "why": c.why or None,
                }
                for c in servers
            ]
        )
        return
    out = console()
    if not servers:
        out.print(
            f"No MCP servers. Add one with `tether mcp add NAME -- COMMAND [ARGS...]` (written to {config_path()})."
        )
        return
    for c in servers:
        state = "enabled" if c.enabled else f"off ({shown(c.why)})"
        out.print(
            f"{shown(c.spec.name)}  {c.spec.transport}  {shown(c.spec.describe())}  {state}\n"
            f"  from {shown(c.spec.source)}",
            highlight=False,
        )


def _pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise OptionError(f"{what} takes KEY=VALUE, not {value!r}")
        out[key] = rest
    return out


@mcp.command("add", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--url", help="A streamable HTTP server's URL (instead of a command).")
@click.option(
    "--env", "env", multiple=True, metavar="KEY=VALUE", help="A variable for a stdio server; VALUE may be {env:VAR}."
)
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE", help="An HTTP header; VALUE may be {env:VAR}.")
@click.option("--cwd", help="The directory a stdio server runs in.")
@click.option("--startup-timeout", type=float, help="Seconds it has to start (default 30).")
@click.option("--call-timeout", type=float, help="Seconds one call may take (default 120).")
@click.option("--replace", is_flag=True, help="Replace a server of the same name.")
def add(
    name: str,
    command: tuple[str, ...],
    url: str | None,
    env: tuple[str, ...],
    headers: tuple[str, ...],
    cwd: str | None,
    startup_timeout: float | None,
    call_timeout: float | None,
    replace: bool,
) -> None:
    """Add an MCP server to your config.toml: `tether mcp add time -- uvx mcp-server-time`, or
    `tether mcp add docs --url https://host/mcp --header 'Authorization=Bearer {env:DOCS_TOKEN}'`.

    With no command and no URL, enable the workspace's server NAME (from its .mcp.json): it runs from then on."""
    from ..mcp.servers import spec_from_config
    from ..runtime.mcp import save_server

    if command and command[0] == "--":
        command = command[1:]
    if command and url:
        raise OptionError("give a command or --url, not both")
    fields: dict[str, Any] = {
        "env": _pairs(env, "--env"),
        "headers": _pairs(headers, "--header"),
        "cwd": cwd,
        "startup_timeout": startup_timeout,
        "call_timeout": call_timeout,
    }
    if command:
        fields.update(command=command[0], args=list(command[1:]))
    elif url:
        fields.update(url=url)
    else:
        if any(fields.values()):
            raise OptionError("to enable a workspace's server give nothing but its name")
        fields = {"enabled": True}
    try:
        table = McpServerConfig(**{k: v for k, v in fields.items() if v not in (None, {}, [])})
        if table.command or table.url:
            spec_from_config(name, table, "the command line")  # checks the name, the URL
    except (TypeError, ValueError) as exc:
        raise OptionError(str(exc)) from None
    path = save_server(config_path(), name, table, replace=replace)
    what = "enabled the workspace's server" if table.enabled else "added"
    click.echo(f"{what} {name} in {path}; try it: tether mcp test {name}")


@mcp.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove [mcp.NAME] from your config.toml."""
    from ..runtime.mcp import delete_server

    if not delete_server(config_path(), name):
        raise OptionError(f"{config_path()} has no [mcp.{name}]")
    click.echo(f"removed {name} from {config_path()}")


@mcp.command("test")
@click.argument("name")
@click.option("--dir", "directory", metavar="DIR", help="The workspace (default: the current directory).")
@click.option("--json", "json_flag", is_flag=True, help="Print JSON.")
def test(name: str, directory: str | None, json_flag: bool) -> None:
    """Start server NAME (even one not enabled yet), list its tools and what their definitions cost in
    tokens, and stop it."""
    from ..context.tokens import count_tools, get_counter
    from ..runtime.configuration import load_config
    from ..runtime.mcp import configured_servers, new_manager

    found = {c.spec.name: c for c in configured_servers(load_config(), _workspace(directory))}
    if name not in found:
        known = ", ".join(found) or "none"
        raise OptionError(f"no MCP server named {name!r} (configured: {known})")
    spec = found[name].spec

    async def go() -> dict[str, Any]:
        manager = new_manager([spec], config=load_config(), workspace=_workspace(directory))
        started = time.perf_counter()
        try:
            tools = await manager.tools()
            elapsed = (time.perf_counter() - started) * 1000
            if tools.failed:
                raise ConfigError(tools.failed[name])
            counter = get_counter()
            return {
                "name": name,
                "started_ms": round(elapsed, 1),
                "tools": [
                    {"name": t.name, "tokens": count_tools([_spec(t)], counter), "hints": t.hints} for t in tools.tools
                ],
                "tokens": count_tools([_spec(t) for t in tools.tools], counter),
            }
        finally:
            await manager.close()

    report = asyncio.run(go())
    if wants_json(json_flag):
        echo_json(report)
        return
    out = console()
    out.print(
        f"{shown(name)}: started in {report['started_ms']:.0f} ms, {len(report['tools'])} tools, "
        f"{report['tokens']:,} tokens of definitions",
        highlight=False,
    )
    for tool in report["tools"]:
        hint = " (says read-only)" if tool["hints"].get("read_only") else ""
        out.print(f"  {shown(tool['name'])}  {tool['tokens']:,} tokens{hint}", highlight=False)


def _spec(tool: Any) -> Any:
    from ..messages import ToolSpec

    return ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)


@mcp.command("serve")
@click.option(
    "--http", "port", type=int, metavar="PORT", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Where --http listens: loopback only.")
def serve(port: int | None, host: str) -> None:
    """tether itself as an MCP server: read-only tools over every session the store holds (recall,
    list_sessions, show_session), for Claude Code, Codex, opencode or any MCP client. Nothing it offers
    writes; what it shows is redacted of the secrets tether knows.

    Claude Code: claude mcp add tether -- tether mcp serve"""
    from ..runtime.configuration import load_config
    from ..store import Store
    from .common import with_store
    from .mcp_serve import Sessions, default_redactor, serve_http, serve_stdio

    config = load_config()

    async def go(store: Store) -> None:
        sessions = Sessions(store, default_redactor(config))
        if port is None:
            await serve_stdio(sessions)
        else:
            click.echo(f"tether MCP server at http://{host}:{port}/mcp (read-only; Ctrl-C stops it)", err=True)
            await serve_http(sessions, host, port)

    try:
        with_store(go)
    except KeyboardInterrupt:
        pass
