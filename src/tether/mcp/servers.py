"""What an MCP server is to tether before it runs: a `ServerSpec` (how to start or reach it, its timeouts,
where it was written), made from a ``[mcp.NAME]`` table or from a project's ``.mcp.json`` (Claude Code's
shape), and the reading of ``{env:VAR}`` / ``${VAR}`` references in its values when it starts. Pure: no
process, no socket."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..config import McpServerConfig
from ..errors import ConfigError

DEFAULT_STARTUP_TIMEOUT = 30.0
DEFAULT_CALL_TIMEOUT = 120.0

BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR")
"""What a stdio server gets of tether's own environment: what programs need to start and find each other,
no secret. Everything else it gets is written in its `env`."""

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,48}\Z")
_REFERENCE = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

Transport = Literal["stdio", "http"]


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server: `name` (its tools are ``mcp__NAME__TOOL``), how it is reached (`transport`), its
    timeouts in seconds, and `source`, where it was written (shown in status and errors). `env` and
    `headers` hold references as written; `resolved_env` and `resolved_headers` read them."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    source: str = ""
    sandboxed: bool = True
    """Whether a stdio server runs in the sandbox its manager was given (``[mcp.NAME] sandbox = false``)."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(f"MCP server name {self.name!r} ({self.source}): use 1-48 letters, digits, '_', '.', '-'")
        if self.transport == "stdio" and not self.command:
            raise ConfigError(f"MCP server {self.name!r} ({self.source}): a stdio server needs a command")
        if self.transport == "http" and not (self.url and re.match(r"^https?://", self.url)):
            raise ConfigError(f"MCP server {self.name!r} ({self.source}): url must be an http:// or https:// URL")

    def resolved_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment the server process gets: `BASE_ENV` from `environ` (default: this process's),
        then its own `env` with its references read."""
        environ = os.environ if environ is None else environ
        base = {k: environ[k] for k in BASE_ENV if k in environ}
        return {**base, **{k: expand(v, environ, f"env {k} of MCP server {self.name!r}") for k, v in self.env.items()}}

    def resolved_headers(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        environ = os.environ if environ is None else environ
        return {k: expand(v, environ, f"header {k} of MCP server {self.name!r}") for k, v in self.headers.items()}

    def secret_values(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """The values its references read (tokens, mostly): kept out of what tether journals."""
        environ = os.environ if environ is None else environ
        out: list[str] = []
        for value in (*self.env.values(), *self.headers.values()):
            for m in _REFERENCE.finditer(value):
                got = environ.get(m.group(1) or m.group(2) or "")
                if got and len(got) >= 4:
                    out.append(got)
        return out

    def describe(self) -> str:
        """How it is reached, for people: the command line or the URL (no header, no env value)."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *self.args])
        return self.url or ""


def expand(value: str, environ: Mapping[str, str], what: str) -> str:
    """`value` with ``{env:VAR}`` and ``${VAR}`` (``${VAR:-default}``) read from `environ`; a variable that is
    not set (and has no default) is a `ConfigError` naming it, so that a server never starts with an empty
    token."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name in environ:
            return environ[name]
        if m.group(3) is not None:
            return m.group(3)
        raise ConfigError(f"{what}: the environment variable {name} is not set")

    return _REFERENCE.sub(sub, value)


def spec_from_config(name: str, table: McpServerConfig, source: str) -> ServerSpec:
    """A ``[mcp.NAME]`` table as a `ServerSpec`; one that says neither command nor url is a `ConfigError`."""
    kind = table.type
    if kind in ("http", "streamable-http") or (kind is None and table.url and not table.command):
        transport: Transport = "http"
    elif table.command:
        transport = "stdio"
    else:
        raise ConfigError(f"[mcp.{name}] in {source}: give a command (stdio) or a url (streamable HTTP)")
    return ServerSpec(
        name=name,
        transport=transport,
        command=table.command,
        args=tuple(table.args),
        env=dict(table.env),
        cwd=table.cwd,
        url=table.url,
        headers=dict(table.headers),
        startup_timeout=table.startup_timeout or DEFAULT_STARTUP_TIMEOUT,
        call_timeout=table.call_timeout or DEFAULT_CALL_TIMEOUT,
        source=source,
        sandboxed=table.sandbox is not False,
    )


def read_mcp_json(path: Path, raw: bytes | None = None) -> dict[str, McpServerConfig]:
    """The servers of a Claude Code ``.mcp.json`` (``{"mcpServers": {NAME: {command, args, env} | {type:
    "http", url, headers}}}``), as ``[mcp.NAME]`` tables. None there: empty. A file that is not that shape is
    a `ConfigError` naming it and the server, as is an entry of a kind tether does not speak (``sse``).
    `raw`: the file's bytes, already read."""
    if raw is None:
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from exc
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if servers is None:
        return {}
    if not isinstance(servers, dict):
        raise ConfigError(f"{path}: mcpServers must be an object of servers by name")
    out: dict[str, McpServerConfig] = {}
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: server {name!r} must be an object")
        kind = entry.get("type")
        if kind == "sse":
            raise ConfigError(f"{path}: server {name!r} uses the old SSE transport; tether speaks stdio and http")
        known = {"type", "command", "args", "env", "cwd", "url", "headers"}
        table: dict[str, Any] = {k: v for k, v in entry.items() if k in known}
        if table.get("type") not in (None, "stdio", "http", "streamable-http"):
            raise ConfigError(f"{path}: server {name!r} has an unknown type {table['type']!r}")
        try:
            out[name] = msgspec.convert(table, McpServerConfig)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{path}: server {name!r}: {exc}") from None
    return out
