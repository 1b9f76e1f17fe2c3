"""A stdio MCP server as a transport for the SDK's `Client`: the process started by tether itself, so that
it gets only the environment it is given (`ServerSpec.resolved_env`), runs in its own process group that
tether's `GroupWatcher` kills when tether dies however it dies (the `bash` tool's watcher), and keeps the
tail of what it writes on stderr for the error a person or the model reads when it fails.

The bridge between the server's pipes and the session's streams is the SDK's own protocol (one JSON-RPC
message per line), as in `mcp.client.stdio`; the shutdown is the spec's: close stdin, wait, then kill the
group."""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import mcp_types
from anyio.streams.text import TextReceiveStream
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from ..tools.builtin.shell import WATCHER

STDERR_LINES = 40
"""Lines of a server's stderr kept for its errors."""
EXIT_GRACE = 2.0
"""Seconds a server has to exit after its stdin closes, before its group is killed."""


class StdioProcess:
    """What tether knows of a running stdio server: its pid (its group's id), its exit code once it exited,
    and its stderr's last lines."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.returncode: int | None = None
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.exited = anyio.Event()

    def stderr_tail(self, lines: int = 5) -> str:
        return "\n".join(list(self.stderr)[-lines:])


@asynccontextmanager
async def stdio_transport(
    argv: list[str],
    env: dict[str, str],
    cwd: str | None,
    info: StdioProcess,
    *,
    pass_fds: tuple[int, ...] = (),
    after: Callable[[], None] | None = None,
) -> AsyncIterator[TransportStreams]:
    """Start `argv` with exactly `env` in `cwd`, watched by this process's `GroupWatcher`, and exchange
    JSON-RPC lines with it (`pass_fds` kept open for it, `after` called once it started: the sandbox's).
    `info` is filled in as it runs. `OSError` when it cannot start."""
    try:
        process = await anyio.open_process(
            argv, env=env, cwd=cwd, stdin=-1, stdout=-1, stderr=-1, start_new_session=True, pass_fds=pass_fds
        )
    finally:
        if after is not None:
            after()
    info.pid = process.pid
    WATCHER.add(process.pid)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        buffer = ""
        try:
            async with read_writer:
                async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                    *lines, buffer = (buffer + chunk).split("\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        try:
                            message: SessionMessage | Exception = SessionMessage(
                                mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                            )
                        except ValueError as exc:
                            message = exc
                        await read_writer.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            pass

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the end instead of waiting on a dead pipe

    async def stderr_reader() -> None:
        assert process.stderr is not None
        buffer = ""
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            async for chunk in TextReceiveStream(process.stderr, errors="replace"):
                *lines, buffer = (buffer + chunk).split("\n")
                info.stderr.extend(line[:500] for line in lines if line.strip())

    async def waiter() -> None:
        info.returncode = await process.wait()
        info.exited.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        tg.start_soon(stderr_reader)
        tg.start_soon(waiter)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, info)
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
            tg.cancel_scope.cancel()
    WATCHER.discard_if_empty(process.pid)


async def _stop(process: anyio.abc.Process, info: StdioProcess) -> None:
    """Close its stdin, give it `EXIT_GRACE` to exit, then kill its whole group (what it started too)."""
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE):
        await info.exited.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with anyio.move_on_after(EXIT_GRACE):
        await info.exited.wait()
