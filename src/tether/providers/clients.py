"""SDK clients shared by the runs of one process, so that a run after the first reuses the HTTP connections
(TCP, and TLS to a hosted API) of those before it.

A provider made for one run, without `SharedClients`, makes its own SDK client on its first call and its
connection pool with it: every prompt to a `tether serve` paid a new connection, a TLS handshake to a hosted
API (two or three round trips, tens to hundreds of milliseconds before the first token), and left a client
for the collector to find. The server's manager keeps one `SharedClients` and resolves its runs' models
with it (`resolve_provider(..., clients=...)`): providers of the same settings (kind, base URL, key,
timeout, headers) take the same client, and `aclose` on one of them leaves the client to its owner, which
closes them all when it shuts down.

An SDK client belongs to the event loop it was first used on (its connections do); one asked for on another
loop is made anew there, and the old loop's are dropped without closing (their loop is gone or elsewhere)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol, TypeVar


class Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class SharedClients:
    """SDK clients by the settings that make them (see the module docstring)."""

    def __init__(self) -> None:
        self._clients: dict[Hashable, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.made = 0
        """Clients made so far (for tests and benchmarks: how many connection pools the runs needed)."""

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, key: Hashable, make: Callable[[], C]) -> C:
        """The client of `key` on the running loop, made with `make()` the first time (or after `aclose`)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._clients = {}
            self._loop = loop
        client: C | None = self._clients.get(key)
        if client is None:
            client = self._clients[key] = make()
            self.made += 1
        return client

    async def aclose(self) -> None:
        """Close every client (their connections); a later `get` makes new ones. Those of another loop than
        the running one are dropped: their connections cannot be closed from here."""
        clients, self._clients = list(self._clients.values()), {}
        if self._loop is not asyncio.get_running_loop():
            return
        for client in clients:
            with contextlib.suppress(Exception):
                await client.close()


def client_for(
    clients: SharedClients | None,
    sdk: Callable[..., C],
    *,
    kind: str,
    api_key: str,
    base_url: str | None,
    timeout: float,
    headers: Mapping[str, str],
) -> C:
    """A provider's SDK client (`sdk`: the SDK's async client class): its own without `clients`, else the one
    of these settings that the runs before it used. The SDK's own retries are off (the provider's `retry`
    decides, so that a retry never follows a forwarded token). Keyed by a digest of the key and the headers
    (a header may carry a key too): they themselves stay in the client."""

    def make() -> C:
        return sdk(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0, default_headers=dict(headers) or None
        )

    if clients is None:
        return make()
    secrets = json.dumps([api_key, sorted(headers.items())])
    return clients.get((kind, hashlib.sha256(secrets.encode()).hexdigest(), base_url, timeout), make)


async def release(clients: SharedClients | None, client: Closable) -> None:
    """A provider done with `client`: closed when it was its own; a shared one is left to its owner."""
    if clients is None:
        await client.close()
