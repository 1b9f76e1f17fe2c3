"""MCP servers in a run: which servers a workspace has (the user's ``[mcp.NAME]``, the workspace's
``.tether/config.toml`` ``[mcp.NAME]`` and its ``.mcp.json``), the process's `McpManager` made from them, and
what a run does with it as it starts (`bind_mcp`): its servers started at once, their tools added to the
run's (a server that fails is a warning event, and the run goes on without its tools), and the servers and
tool list journaled as an ``mcp_tools`` marker, with what changed since the session last ran.

A workspace's servers start only once the user's own config says so (``[mcp.NAME] enabled = true``): a
cloned repository's ``.mcp.json`` must not run a program because someone ran tether in it."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from .. import markers
from ..config import Config, McpServerConfig, parse_config
from ..context.tokens import count_tools, get_counter
from ..errors import ConfigError, NotFound
from ..events import Event, Progress
from ..mcp.servers import ServerSpec, read_mcp_json, spec_from_config
from ..messages import Message, ToolSpec
from ..paths import config_path
from ..redaction import config_secrets
from ..tools.deferred import DEFAULT_SHARE, ToolSearchTool, defer
from ..tools.sandbox import Sandbox
from . import audit, filecache
from .configuration import project_config_path, run_sandbox, write_config

if TYPE_CHECKING:
    from ..mcp.manager import McpManager
    from .state import RunState

MCP_JSON = ".mcp.json"
MCP_MARKER = markers.MCP_MARKER
"""The MCP servers and tools a run had, journaled as it starts (`markers.McpTools`)."""
SESSION_KEY = "mcp_tools"
"""Where a session keeps what its last run saw of each server: ``metadata["mcp_tools"][NAME] = {"digest",
"tools", "tokens"}``, and ``["tool_search"]`` when the tools were offered through it."""
SEARCH_KEY = "tool_search"


@dataclass(frozen=True)
class ConfiguredServer:
    """A server as configured: its spec, whether it may start, and if not, why."""

    spec: ServerSpec
    enabled: bool
    why: str = ""


def configured_servers(
    config: Config, workspace: str | os.PathLike[str] | None, *, problems: list[str] | None = None
) -> list[ConfiguredServer]:
    """Every MCP server the user's config and the workspace name, the workspace's over the user's of the
    same name; a workspace's server is enabled by the user's ``[mcp.NAME] enabled = true``. A bad entry is a
    `ConfigError` naming its file; with `problems`, a bad workspace file is said there instead, and its
    servers left out (a cloned repository's broken `.mcp.json` must not stop a run)."""
    user_source = str(config_path())
    user = dict(config.mcp)
    out: dict[str, ConfiguredServer] = {}
    for name, table in user.items():
        if table.command is None and table.url is None:
            continue  # only enables (or disables) a workspace's server of this name
        out[name] = ConfiguredServer(spec_from_config(name, table, user_source), table.enabled is not False, "")
        if table.enabled is False:
            out[name] = ConfiguredServer(out[name].spec, False, f"enabled = false in {user_source}")
    if workspace is not None:
        try:
            tables = _workspace_tables(Path(workspace))
        except ConfigError as exc:
            if problems is None:
                raise
            problems.append(f"the workspace's MCP servers are left out: {exc}")
            tables = []
        for name, table, source in tables:
            mine = user.get(name)
            enabled = mine is not None and mine.enabled is True
            why = "" if enabled else f"a workspace's server: add [mcp.{name}] enabled = true to {user_source} to run it"
            out[name] = ConfiguredServer(spec_from_config(name, table, source), enabled, why)
    return list(out.values())


def _workspace_tables(workspace: Path) -> list[tuple[str, McpServerConfig, str]]:
    """The servers of the workspace's ``.mcp.json`` and ``.tether/config.toml`` (each file read again only
    when it changed: every run's start asks)."""
    out: list[tuple[str, McpServerConfig, str]] = []
    path = workspace / MCP_JSON
    try:
        servers = filecache.parsed(path, _mcp_json)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    for name, table in (servers or {}).items():
        out.append((name, table, str(path)))
    project = project_config_path(workspace)
    try:
        tables = filecache.parsed(project, _project_servers)
    except OSError as exc:
        raise ConfigError(f"{project}: cannot read config: {exc}") from exc
    for name, table in (tables or {}).items():
        out.append((name, table, str(project)))
    return out


def _mcp_json(path: Path, raw: bytes) -> dict[str, McpServerConfig]:
    return read_mcp_json(path, raw)


def _project_servers(path: Path, raw: bytes) -> dict[str, McpServerConfig]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    return dict(parse_config(text, source=str(path)).mcp)


def open_mcp(config: Config, workspace: str | os.PathLike[str] | None) -> McpManager | None:
    """A manager of the enabled servers of `workspace` (nothing started yet), or None when there are none.
    A `ConfigError` when there are some and the ``mcp`` extra is not installed."""
    problems: list[str] = []
    specs = [c.spec for c in configured_servers(config, workspace, problems=problems) if c.enabled]
    if not specs:
        return None
    manager = new_manager(specs, config=config, workspace=workspace)
    manager.notices.extend(problems)
    return manager


SERVER_CACHES = ("~/.cache", "~/.npm")
"""Writable for stdio MCP servers besides the workspace: where `uvx` and `npx` keep what they fetch."""


def server_sandbox(config: Config) -> Sandbox | None:
    """Where stdio MCP servers run: the commands' sandbox (``[sandbox]``'s mode and mechanism) with the
    network on, since reaching a service is what many servers are for, and the package caches `uvx` and
    `npx` start them from writable; None with the sandbox off."""
    sandbox = run_sandbox(config)
    if sandbox.policy.mode == "off":
        return None
    writable = (*sandbox.policy.writable, *SERVER_CACHES)
    return Sandbox(replace(sandbox.policy, network="on", writable=writable), found=sandbox.found)


def new_manager(
    specs: list[ServerSpec] | None = None,
    *,
    config: Config | None = None,
    workspace: str | os.PathLike[str] | None = None,
) -> McpManager:
    try:
        from ..mcp.manager import McpManager
    except ImportError as exc:
        raise ConfigError(
            f"MCP servers are configured but the MCP SDK is missing ({exc}): pip install 'tether[mcp]'"
        ) from None
    sandbox = server_sandbox(config or Config())
    manager = McpManager(specs or [], sandbox=sandbox, workspace=os.fspath(workspace) if workspace else None)
    if sandbox is not None and sandbox.mechanism != "bwrap":
        manager.notices.append(
            f"stdio MCP servers run unconfined here: they are sandboxed by bubblewrap only ({sandbox.summary()})"
        )
    return manager


def tool_digest(tools: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(tools, sort_keys=True, default=str).encode()).hexdigest()[:16]


async def bind_mcp(state: RunState) -> list[Event]:
    """Start the run's MCP servers, add their tools to the run's, and journal what it got (see the module
    docstring). Returns the warnings to emit: a server that did not start, tools changed since the
    session's last run."""
    manager = state.options.mcp
    if manager is None or len(manager) == 0:
        return []
    starts = {s.name: s.starts for s in manager.status()}
    found = await manager.tools()
    for status in manager.status():  # who started what, kept where it lasts (the audit trail)
        if status.starts > starts.get(status.name, 0):
            await audit.record(
                state.session.store,
                "mcp.started",
                session_id=state.session_id,
                outcome="failed" if status.name in found.failed else "ok",
                detail={
                    "server": status.name,
                    "source": status.source,
                    "target": status.target,
                    "tools": len(status.tools),
                    "error": found.failed.get(status.name),
                },
                redactor=state.journal.redactor,
            )
    profile = state.options.agent
    tools = state.tools.subset(state.tools.names())
    described: dict[str, list[dict[str, Any]]] = {}
    mcp_names: list[str] = []
    for tool in found.tools:
        if profile is not None and (
            profile.read_only
            or (profile.tools is not None and not any(fnmatch.fnmatchcase(tool.name, p) for p in profile.tools))
        ):
            continue
        if tool.name in tools:
            continue  # a built-in of the same name wins (never happens with the mcp__ prefix)
        tools.register(tool)
        mcp_names.append(tool.name)
        described.setdefault(tool.server, []).append(
            {"name": tool.remote, "description": tool.description, "parameters": tool.parameters}
        )
    state.tools = tools
    search = _offer(state, mcp_names)
    # values read from {env:VAR} references never reach the journal
    extra = {
        f"mcp.{manager.spec(n).name}.{i}": v
        for n in found.servers
        for i, v in enumerate(manager.spec(n).secret_values())
    }
    if extra:
        config = state.options.config or Config()
        state.journal.redactor = state.secrets.redactor(os.environ, {**config_secrets(config), **extra})

    before = state.session.info.metadata.get(SESSION_KEY)
    before = before if isinstance(before, dict) else {}
    now = {server: tool_digest(items) for server, items in described.items()}
    changed: dict[str, markers.McpToolsChange] = {}
    events: list[Event] = []
    for server, digest in now.items():
        old = before.get(server)
        if isinstance(old, dict) and old.get("digest") != digest:
            names = {t["name"] for t in described[server]}
            old_names = set(old.get("tools") or [])
            change = markers.McpToolsChange(added=sorted(names - old_names), removed=sorted(old_names - names))
            changed[server] = change
            same = "" if change.added or change.removed else " (their descriptions or parameters)"
            events.append(
                _warning(
                    f"MCP server {server!r}: its tools changed since this session last ran{same}: "
                    + _delta(changed[server])
                )
            )
    for problem in found.failed.values():
        events.append(_warning(problem + " (its tools are not offered in this run)"))
    events.extend(_warning(notice) for notice in manager.notices)
    servers = {
        s: markers.McpServerTools(tools=[t["name"] for t in items], digest=now[s]) for s, items in described.items()
    }
    body = markers.McpTools(servers=servers, changed=changed, failed=dict(found.failed), tool_search=search)
    await state.append(markers.to_marker(body))
    counter = get_counter(model=state.options.model)
    offered = set(mcp_names)
    costs = {
        s: count_tools(
            [
                ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
                for t in found.tools
                if t.server == s and t.name in offered
            ],
            counter,
        )
        for s in now
    }
    remembered: dict[str, Any] = {
        **{k: v for k, v in before.items() if k != SEARCH_KEY},
        **{s: {"digest": now[s], "tools": servers[s].tools, "tokens": costs[s]} for s in now},
    }
    if search is not None:
        remembered[SEARCH_KEY] = search
    if remembered != before:
        await state.session.update(metadata={**state.session.info.metadata, SESSION_KEY: remembered})
    return events


def _offer(state: RunState, mcp_names: list[str]) -> dict[str, int] | None:
    """Set the definitions the model is sent: every tool when they fit in ``[tools] search_share`` of the
    window (default 10%); else the MCP tools go behind `tool_search` (those the session's history called stay
    offered) and what that saves is returned, for the journal."""
    tools = state.tools
    specs = tools.specs()
    config = state.options.config or Config()
    share = config.tools.search_share if config.tools.search_share is not None else DEFAULT_SHARE
    counter = get_counter(model=state.options.model)

    def count(items: Sequence[ToolSpec]) -> int:
        return count_tools(items, counter)

    plan = defer(specs, mcp_names, int(share * state.model_info.context_window), count)
    if plan is None:
        state.specs = specs
        return None
    kept, deferred = plan
    called = {c.name for e in state.entries if isinstance(e.body, Message) for c in e.body.tool_calls}
    loaded = {s.name for s in deferred if s.name in called}

    def offered() -> list[ToolSpec]:
        return [*kept, *(s for s in deferred if s.name in loaded)]

    def on_load(names: list[str]) -> None:
        loaded.update(names)
        state.specs = offered()

    finder = ToolSearchTool(deferred, on_load)
    tools.register(finder, replace=True)
    kept.append(ToolSpec(name=finder.name, description=finder.description, parameters=finder.parameters))
    state.specs = offered()
    every = count(specs)
    sent = count(state.specs)
    return {"deferred": len(deferred), "tokens_all": every, "tokens_offered": sent, "tokens_saved": every - sent}


def mcp_costs(metadata: dict[str, Any]) -> dict[str, Any]:
    """What the MCP tools cost at a session's last run (`SESSION_KEY`): server -> ``{"tools": N, "tokens":
    T}``, and ``"tool_search"``: what going through `tool_search` saved."""
    kept = metadata.get(SESSION_KEY)
    out: dict[str, Any] = {}
    if not isinstance(kept, dict):
        return out
    for name, value in kept.items():
        if name == SEARCH_KEY and isinstance(value, dict):
            out[SEARCH_KEY] = value
        elif isinstance(value, dict):
            out[name] = {"tools": len(value.get("tools") or []), "tokens": value.get("tokens")}
    return out


def _delta(change: markers.McpToolsChange) -> str:
    parts = []
    if change.added:
        parts.append("added " + ", ".join(change.added))
    if change.removed:
        parts.append("removed " + ", ".join(change.removed))
    return "; ".join(parts) or "same names"


def _warning(text: str) -> Event:
    return Progress(what="mcp", detail=text, data={"level": "warning"})


class McpServerView(msgspec.Struct, kw_only=True):
    """One MCP server as `GET /mcp` and `tether mcp list` show it (no env value, no header)."""

    name: str
    transport: str
    source: str
    target: str
    state: str
    """idle (not started yet), starting, ready, failed (see `error`; the next call starts it again), stopped."""
    tools: list[str] = msgspec.field(default_factory=list)
    error: str | None = None
    starts: int = 0
    pid: int | None = None
    started_ms: float | None = None


class McpOverview(msgspec.Struct, kw_only=True):
    servers: list[McpServerView]


def server_views(manager: McpManager | None) -> McpOverview:
    if manager is None:
        return McpOverview(servers=[])
    return McpOverview(servers=[msgspec.convert(s.as_dict(), McpServerView) for s in manager.status()])


class ProcessServers:
    """The MCP servers of a long-lived process (a `SessionManager`'s, so a server's): the user's configured
    ones, and those added while it runs (`add`, `remove`: a3s's ``add_mcp_server``). Its runs share them."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.manager: McpManager | None = open_mcp(config, None)

    def overview(self) -> McpOverview:
        return server_views(self.manager)

    async def add(self, name: str, table: McpServerConfig, *, start: bool = True) -> McpServerView:
        """Add (or replace) a server; started now unless `start` is False, so that a bad one is seen at once
        (its view says why it failed; it stays configured, to be fixed or removed)."""
        spec = spec_from_config(name, table, "added at run time")
        if self.manager is None:
            self.manager = new_manager(config=self.config)
        await self.manager.replace_server(spec)
        if start:
            await self.manager.start([name])
        return self._view(name)

    async def remove(self, name: str) -> None:
        if self.manager is None or name not in self.manager:
            raise NotFound(f"no MCP server named {name!r}")
        await self.manager.remove(name)

    async def start(self, name: str) -> McpServerView:
        if self.manager is None or name not in self.manager:
            raise NotFound(f"no MCP server named {name!r}")
        await self.manager.start([name])
        return self._view(name)

    async def close(self) -> None:
        if self.manager is not None:
            await self.manager.close()

    def _view(self, name: str) -> McpServerView:
        return next(v for v in self.overview().servers if v.name == name)


def save_server(path: Path, name: str, table: McpServerConfig, *, replace: bool = False) -> Path:
    """Write ``[mcp.NAME]`` into the config file at `path` (made if missing), everything else kept as written;
    an existing server of that name is a `ConfigError` unless `replace`. The result is parsed before it
    replaces the file."""
    text = _read(path)
    current = parse_config(text, source=str(path)).mcp if text else {}
    if name in current:
        if not replace:
            raise ConfigError(f"{path} already has [mcp.{name}]; remove it first (tether mcp remove {name})")
        text = _without_table(path, text, name)
    lines = [f"[mcp.{json.dumps(name)}]"]
    for key, value in msgspec.to_builtins(table).items():
        lines.append(f"{key} = {_toml_value(value)}")
    text = (
        text
        + ("\n" if text and not text.endswith("\n") else "")
        + ("\n" if text.strip() else "")
        + "\n".join(lines)
        + "\n"
    )
    written = parse_config(text, source=str(path)).mcp.get(name)
    if written != table:
        raise ConfigError(f"{path}: cannot write [mcp.{name}] safely; add it by hand")
    write_config(path, text)
    return path


def delete_server(path: Path, name: str) -> bool:
    """Take ``[mcp.NAME]`` out of the config file at `path`; False when it has none."""
    text = _read(path)
    if not text or name not in parse_config(text, source=str(path)).mcp:
        return False
    write_config(path, _without_table(path, text, name))
    return True


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc


def _without_table(path: Path, text: str, name: str) -> str:
    quoted = re.escape(name) + "|" + re.escape(json.dumps(name)) + "|" + re.escape(f"'{name}'")
    header = re.compile(rf"^\s*\[\s*mcp\s*\.\s*(?:{quoted})\s*(?:\.[^\]]*)?\]\s*(#.*)?$")
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if re.match(r"^\s*\[", line):
            skipping = header.match(line.rstrip("\n")) is not None
        if not skipping:
            out.append(line)
    result = "".join(out)
    if name in parse_config(result, source=str(path)).mcp:  # written another way (an inline table, [mcp] x = {...})
        raise ConfigError(f"{path}: cannot remove [mcp.{name}] safely here; edit the file by hand")
    return result


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise ConfigError(f"cannot write {value!r} to a config file")
