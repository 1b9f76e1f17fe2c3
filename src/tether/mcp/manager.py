"""`McpManager`: the MCP servers of one tether process, by name. Servers start when a run first needs
their tools, all at once (`tools`); a server that fails is a warning and its tools are missing from that
run, never the end of it. Servers are added, removed and looked at while runs go on (`add`, `remove`,
`status`): what the server's ``GET /mcp`` and `tether mcp` show."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import mcp_types

from mcp import MCPError

from ..errors import InvalidInput, ToolError
from ..tools.sandbox import Sandbox
from .connection import Connection, McpCallFailed, McpUnavailable, ServerStatus
from .servers import ServerSpec
from .tools import McpTool, tool_name


@dataclass
class ToolSet:
    """What `McpManager.tools` found: the tools of every server that started, and why each one that did not
    failed (its tools are then not offered)."""

    tools: list[McpTool] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Server name -> why it is not running."""
    servers: dict[str, list[str]] = field(default_factory=dict)
    """Server name -> the names of its tools as the server gives them (what a run journals)."""


class McpManager:
    """The servers of one process. Shared by every run of it; `close` ends them all."""

    def __init__(
        self, specs: Iterable[ServerSpec] = (), *, sandbox: Sandbox | None = None, workspace: str | None = None
    ) -> None:
        self.sandbox = sandbox
        """Where stdio servers run (`tools.sandbox`; each in `workspace`, or its own ``cwd``); None: unconfined."""
        self.workspace = workspace
        self._connections: dict[str, Connection] = {}
        self.notices: list[str] = []
        """What was wrong with the configuration the servers came from (a workspace's broken `.mcp.json`): each
        run that uses them says it."""
        for spec in specs:
            self.add(spec)

    def __contains__(self, name: object) -> bool:
        return name in self._connections

    def __len__(self) -> int:
        return len(self._connections)

    def names(self) -> list[str]:
        return list(self._connections)

    def spec(self, name: str) -> ServerSpec:
        return self._get(name).spec

    def add(self, spec: ServerSpec, *, replace: bool = False) -> None:
        """Add a server (not started until a run needs it). A second one of the same name is an
        `InvalidInput` unless `replace` (the old one is then stopped by `remove` first: use `replace_server`)."""
        if spec.name in self._connections and not replace:
            raise InvalidInput(f"an MCP server named {spec.name!r} is already configured")
        self._connections[spec.name] = Connection(spec, sandbox=self.sandbox, workspace=self.workspace)

    async def replace_server(self, spec: ServerSpec) -> None:
        if spec.name in self._connections:
            await self.remove(spec.name)
        self.add(spec)

    async def remove(self, name: str) -> None:
        """Stop a server and forget it; its tools answer that it was removed from then on."""
        connection = self._get(name)
        del self._connections[name]
        await connection.stop()

    def status(self) -> list[ServerStatus]:
        return [c.status() for c in self._connections.values()]

    async def start(self, names: Iterable[str] | None = None) -> dict[str, str | None]:
        """Start the named servers (default: all) at once; name -> None (running) or why it is not."""
        chosen = [self._get(n) for n in (names if names is not None else list(self._connections))]

        async def one(connection: Connection) -> str | None:
            try:
                await connection.ensure()
            except McpUnavailable as exc:
                return str(exc)
            return None

        results = await asyncio.gather(*(one(c) for c in chosen))
        return {c.spec.name: r for c, r in zip(chosen, results, strict=True)}

    async def tools(self, names: Iterable[str] | None = None) -> ToolSet:
        """The tools of the named servers (default: all), each server started if it is not running."""
        problems = await self.start(names)
        out = ToolSet()
        taken: set[str] = set()
        for name, problem in problems.items():
            if problem is not None:
                out.failed[name] = problem
                continue
            connection = self._connections.get(name)
            if connection is None:
                continue
            out.servers[name] = [t.name for t in connection.tools]
            for tool in connection.tools:
                public = tool_name(name, tool.name)
                if public in taken:  # two remote names that read the same once made safe
                    public = tool_name(name, f"{tool.name}_{len(taken)}")
                taken.add(public)
                out.tools.append(McpTool.of(name, tool, self.call, public))
        return out

    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call `tool` on `server`; every failure is a `ToolError` the model reads (the server is started
        again on the next call when it crashed or hung)."""
        connection = self._connections.get(server)
        if connection is None:
            raise ToolError(f"the MCP server {server!r} was removed; its tools are gone")
        try:
            return await connection.call(tool, arguments)
        except McpUnavailable as exc:
            raise ToolError(str(exc)) from None
        except McpCallFailed as exc:
            raise ToolError(str(exc)) from None
        except MCPError as exc:
            raise ToolError(f"MCP server {server!r} refused the call to {tool}: {exc.message}") from None

    async def close(self) -> None:
        """Stop every server (the manager can start them again)."""
        await asyncio.gather(*(c.stop() for c in self._connections.values()), return_exceptions=True)

    def _get(self, name: str) -> Connection:
        try:
            return self._connections[name]
        except KeyError:
            known = ", ".join(self._connections) or "none"
            raise InvalidInput(f"no MCP server named {name!r} (configured: {known})") from None
