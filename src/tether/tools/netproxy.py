"""The sandbox's network allow-list: an HTTP proxy on loopback, in tether's own process, that lets a
sandboxed command reach the hosts the policy names and no other. The sandbox lets the command's TCP reach
this proxy's port only (Landlock's network rules) and points ``HTTP_PROXY``/``HTTPS_PROXY`` at it; the proxy
reads the host of each ``CONNECT host:port`` (HTTPS, and any TCP a client tunnels) or absolute-form request
(plain HTTP), and answers ``403 Forbidden (tether sandbox)`` for any host not allowed.

Hosts are matched by name as the client asked for them (``pypi.org``, ``*.github.com``, ``host:port``), so a
name that resolves to an internal address is still that name's to allow."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sandbox import Sandbox

log = logging.getLogger("tether.tools")

HEAD_LIMIT = 64 * 1024
CONNECT_TIMEOUT = 15.0


def host_allowed(allowed: Sequence[str], host: str, port: int) -> bool:
    """Whether `host:port` is in `allowed` (``host``, ``host:port``, ``*.domain``; case does not matter)."""
    host = host.strip("[]").lower().rstrip(".")
    for entry in allowed:
        entry = entry.lower().strip()
        name, _, want = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if want and not want.isdigit():
            name, want = entry, ""
        if want and int(want) != port:
            continue
        if fnmatch.fnmatchcase(host, name) or (name.startswith("*.") and host == name[2:]):
            return True
    return False


class AllowListProxy:
    """One proxy for one list of hosts, on one event loop."""

    def __init__(self, allowed: Sequence[str]) -> None:
        self.allowed = tuple(allowed)
        self.server: asyncio.Server | None = None
        self.port = 0
        self.refused: list[str] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, TimeoutError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > HEAD_LIMIT:
            return
        line, _, rest = head.partition(b"\r\n")
        method, target, version = line.decode("latin-1").split(" ", 2)
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            port = int(port_text)
            path_head = b""
        else:
            if not target.lower().startswith("http://"):
                await self._refuse(writer, target, "400 Bad Request", "an absolute http:// URL or CONNECT is needed")
                return
            authority, _, path = target[7:].partition("/")
            host, _, port_text = authority.rpartition(":") if ":" in authority else (authority, "", "80")
            port = int(port_text)
            headers = [h for h in rest.split(b"\r\n") if h and not h.lower().startswith((b"proxy-", b"connection:"))]
            path_head = f"{method} /{path} {version}\r\n".encode("latin-1")
            path_head += b"\r\n".join([*headers, b"Connection: close", b"", b""])
        if not host_allowed(self.allowed, host, port):
            self.refused.append(f"{host}:{port}")
            await self._refuse(writer, f"{host}:{port}", "403 Forbidden (tether sandbox)", "not in the allowed hosts")
            return
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
        try:
            if path_head:
                up_writer.write(path_head)
            else:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            with contextlib.suppress(Exception):
                up_writer.close()

    @staticmethod
    async def _refuse(writer: asyncio.StreamWriter, what: str, status: str, why: str) -> None:
        body = f"tether sandbox: {what} is {why}\n".encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(Exception):
            await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(Exception):
            writer.write_eof()


_PROXIES: dict[tuple[int, tuple[str, ...]], AllowListProxy] = {}


async def ensure_proxy(sandbox: Sandbox) -> None:
    """Start the allow-list proxy of `sandbox`'s policy on this event loop (once) and tell the sandbox its
    port."""
    hosts = sandbox.policy.network
    if isinstance(hosts, str):
        return
    key = (id(asyncio.get_running_loop()), tuple(hosts))
    proxy = _PROXIES.get(key)
    if proxy is None or proxy.server is None or not proxy.server.is_serving():
        proxy = AllowListProxy(hosts)
        await proxy.start()
        _PROXIES[key] = proxy
    sandbox.proxy_port = proxy.port
