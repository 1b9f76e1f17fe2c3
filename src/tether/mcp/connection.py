"""One MCP server as tether holds it: started when first needed (within its startup timeout), its tool list,
calls within its call timeout, and what becomes of it when it fails. A server that cannot start, exits,
crashes mid-call or stops answering is marked so, its error kept; the next call starts it again. Nothing
here raises past a call but `McpUnavailable` (the server) and `McpCallFailed` (the call), both with a text
the model or a person can read.

The SDK's client lives in a task of its own (`_hold`): its transport's task group is entered and left
there, and calls reach it from any task of the same event loop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import shutil
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from mcp import Client, MCPError

from ..errors import ConfigError
from ..tools.sandbox import Sandbox
from .servers import ServerSpec
from .stdio import StdioProcess, stdio_transport

log = logging.getLogger("tether.mcp")

State = Literal["idle", "starting", "ready", "failed", "stopped"]
PING_TIMEOUT = 3.0
"""Seconds a server has to answer a tool listing after a call ran past its timeout: one that does not is hung
and is stopped (the next call starts it again)."""
STOP_TIMEOUT = 8.0
TOOL_PAGES = 100
"""Pages of a tool list read at most (a server that pages without end)."""


class McpUnavailable(Exception):
    """The server cannot be used now (it did not start, or it was removed); the text says why."""


class McpCallFailed(Exception):
    """One call did not come back with a result (the server crashed, hung, or the connection broke)."""


@dataclass(frozen=True)
class ServerStatus:
    """What a person is shown of a server: its state, its tools, its last error, how often it started."""

    name: str
    transport: str
    source: str
    target: str
    state: State
    tools: list[str]
    error: str | None
    starts: int
    pid: int | None
    started_ms: float | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Connection:
    """One server. `ensure()` starts it (once, for every task that waits), `call()` runs a tool, `stop()`
    ends it. Safe to share between the tasks of one event loop."""

    def __init__(self, spec: ServerSpec, *, sandbox: Sandbox | None = None, workspace: str | None = None) -> None:
        self.spec = spec
        self.sandbox = sandbox if spec.sandboxed else None
        self.workspace = workspace
        self.state: State = "idle"
        self.error: str | None = None
        self.tools: list[mcp_types.Tool] = []
        self.starts = 0
        self.started_ms: float | None = None
        self.process: StdioProcess | None = None
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    def status(self) -> ServerStatus:
        self._notice_exit()
        return ServerStatus(
            name=self.spec.name,
            transport=self.spec.transport,
            source=self.spec.source,
            target=self.spec.describe(),
            state=self.state,
            tools=[t.name for t in self.tools],
            error=self.error,
            starts=self.starts,
            pid=self.process.pid if self.process is not None and self.state == "ready" else None,
            started_ms=self.started_ms,
        )

    async def ensure(self) -> None:
        """Start the server unless it runs; `McpUnavailable` with the reason when it cannot start in time."""
        if self._running():
            return
        async with self._lock:
            if self._running():
                return
            await self._shutdown()
            await self._start()

    async def call(self, tool: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Call `tool`, starting the server first if it is not running. A result the server marks as an
        error is returned as it is; `MCPError` is the server's refusal (unknown tool, bad arguments);
        `McpCallFailed` means no answer came (crash, hang past the timeout, connection lost)."""
        await self.ensure()
        client = self._client
        if client is None:
            raise McpUnavailable(f"MCP server {self.spec.name!r} is not running")
        timeout = self.spec.call_timeout
        try:
            async with asyncio.timeout(timeout):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            if not await self._answers_ping(client):
                await self._fail(f"hung: no answer within {timeout:g} s, nor to a tool listing after it")
                raise McpCallFailed(
                    f"MCP server {self.spec.name!r} did not answer within {timeout:g} s and no longer answers at "
                    "all; it was stopped and will be started again on the next call"
                ) from None
            raise McpCallFailed(
                f"the call to {tool} on MCP server {self.spec.name!r} took longer than its {timeout:g} s timeout "
                "(call_timeout in its [mcp] entry) and was abandoned; the server still answers"
            ) from None
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED or self._exited():
                raise McpCallFailed(
                    await self._crashed(f"the connection closed during the call ({exc.message})")
                ) from None
            raise
        except _BROKEN as exc:
            raise McpCallFailed(
                await self._crashed(f"the connection broke during the call ({type(exc).__name__})")
            ) from None

    async def stop(self) -> None:
        """End the server (a stdio process and its group; an HTTP session). Idempotent."""
        async with self._lock:
            await self._shutdown()
            self.state = "stopped"

    # --- the client's task ------------------------------------------------------------------------------

    async def _start(self) -> None:
        self.state = "starting"
        self.error = None
        self.starts += 1
        started = time.perf_counter()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stopping = asyncio.Event()
        self._runner = asyncio.create_task(self._hold(ready, self._stopping), name=f"tether-mcp-{self.spec.name}")
        try:
            async with asyncio.timeout(self.spec.startup_timeout):
                await asyncio.shield(ready)
        except TimeoutError:
            await self._shutdown()
            self._set_failed(f"did not start within {self.spec.startup_timeout:g} s (startup_timeout){self._stderr()}")
            raise McpUnavailable(self._unavailable()) from None
        except asyncio.CancelledError:
            await self._shutdown()
            self.state = "idle"
            raise
        except Exception as exc:
            await self._shutdown()
            self._set_failed(f"{_reason(exc)}{self._stderr()}")
            raise McpUnavailable(self._unavailable()) from None
        self.started_ms = (time.perf_counter() - started) * 1000
        self.state = "ready"

    async def _hold(self, ready: asyncio.Future[None], stopping: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = Client(await self._transport(stack), client_info=_CLIENT_INFO)
                await stack.enter_async_context(client)
                tools: list[mcp_types.Tool] = []
                cursor: str | None = None
                for _ in range(TOOL_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self.tools = tools
                self._client = client
                if not ready.done():
                    ready.set_result(None)
                await stopping.wait()
        except BaseException as exc:
            if not ready.done():
                if isinstance(exc, Exception):
                    ready.set_exception(exc)
                    ready.exception()  # retrieved: a start that gave up waiting (its timeout) has reported it
                else:
                    ready.cancel()
            if not isinstance(exc, Exception):
                raise
            if self.state == "ready":
                self._set_failed(f"stopped: {_reason(exc)}{self._stderr()}")
        finally:
            self._client = None

    async def _transport(self, stack: AsyncExitStack) -> Any:
        spec = self.spec
        if spec.transport == "stdio":
            assert spec.command is not None
            env = spec.resolved_env()
            self.process = StdioProcess()
            argv = [spec.command, *spec.args]
            cwd = spec.cwd or self.workspace
            if self.sandbox is None or self.sandbox.mechanism != "bwrap":
                # (Landlock is applied between fork and exec, which the SDK's process start has no hook for)
                return stdio_transport(argv, env, cwd, self.process)
            where = Path(cwd or os.getcwd()).expanduser().resolve()
            if shutil.which(spec.command, path=env.get("PATH")) is None and not os.path.isfile(where / spec.command):
                # as the process start says it unsandboxed, rather than bubblewrap's execvp once inside
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), spec.command)
            prepared = self.sandbox.prepare(argv, workspace=where, env=env)
            return stdio_transport(
                prepared.argv, prepared.env, str(where), self.process, pass_fds=prepared.pass_fds, after=prepared.close
            )
        assert spec.url is not None
        http = await stack.enter_async_context(create_mcp_http_client(headers=spec.resolved_headers()))
        return streamable_http_client(spec.url, http_client=http)

    async def _shutdown(self) -> None:
        runner, self._runner = self._runner, None
        if self._stopping is not None:
            self._stopping.set()
        if runner is None:
            return
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                await asyncio.shield(runner)
        except TimeoutError:
            runner.cancel()
            with contextlib.suppress(BaseException):
                await runner
        except BaseException:
            if not runner.done():
                raise
        self._client = None

    # --- failures ---------------------------------------------------------------------------------------

    def _running(self) -> bool:
        self._notice_exit()
        return self.state == "ready"

    def _exited(self) -> bool:
        return self.process is not None and self.process.returncode is not None

    def _notice_exit(self) -> None:
        if self.state == "ready" and self._exited():
            assert self.process is not None
            self._set_failed(f"exited with code {self.process.returncode}{self._stderr()}")
        elif self.state == "ready" and self._runner is not None and self._runner.done():
            self._set_failed(self.error or "its connection ended")

    async def _crashed(self, what: str) -> str:
        # the process may need a moment to be reaped after its pipes closed
        if self.process is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.process.exited.wait()
        if self._exited():
            assert self.process is not None
            what = f"exited with code {self.process.returncode} during the call{self._stderr()}"
        await self._fail(what)
        return f"MCP server {self.spec.name!r} {what}; it will be started again on the next call"

    async def _fail(self, why: str) -> None:
        async with self._lock:
            await self._shutdown()
            self._set_failed(why)

    def _set_failed(self, why: str) -> None:
        self.state = "failed"
        self.error = why
        log.info("MCP server %s: %s", self.spec.name, why)  # the run says it (a warning event, a tool error)

    async def _answers_ping(self, client: Client) -> bool:
        try:
            async with asyncio.timeout(PING_TIMEOUT):  # a request any server answers (ping is gone from 2026-07-28)
                await client.list_tools(cache_mode="refresh")
            return True
        except Exception:
            return False

    def _stderr(self) -> str:
        tail = self.process.stderr_tail() if self.process is not None else ""
        return f"; its stderr ends: {tail}" if tail else ""

    def _unavailable(self) -> str:
        return f"MCP server {self.spec.name!r} ({self.spec.describe()}) {self.error}"


_CLIENT_INFO = mcp_types.Implementation(name="tether", version="0.1")


_BROKEN: tuple[type[BaseException], ...] = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
)


def _reason(exc: BaseException) -> str:
    """A failure to start, in a line: the innermost error of an exception group, a missing command, a refused
    connection, an unset variable."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"cannot start: {exc.filename or exc} not found"
    if isinstance(exc, ConfigError):
        return str(exc)
    text = str(exc) or type(exc).__name__
    return f"failed to start: {type(exc).__name__}: {text}"
