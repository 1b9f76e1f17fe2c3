"""Real MCP servers for the tests: the SDK-written `sdk_server.py` over stdio and over streamable HTTP on
loopback, and the PyPI servers `mcp-server-time` and `mcp-server-git` (the dev extra)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install 'tether[mcp]')")

from tether.mcp.servers import ServerSpec

SERVER = Path(__file__).with_name("sdk_server.py")


def stdio_spec(name: str = "t", *extra: str, **fields: object) -> ServerSpec:
    """The SDK-written test server over stdio."""
    fields.setdefault("startup_timeout", 60.0)
    fields.setdefault("call_timeout", 30.0)
    return ServerSpec(
        name=name,
        transport="stdio",
        command=sys.executable,
        args=(str(SERVER), "stdio", *extra),
        source="test",
        **fields,
    )  # type: ignore[arg-type]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_dead(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """The SDK-written server over streamable HTTP on a loopback port; its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"the HTTP test server did not start: {err[-2000:]}") from None
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
