"""How a tether server is reached and guarded: where it binds, its bearer token, the Host names and Origins it
answers, the size of a request body. Checked before anything starts: a bind off loopback without a token is
refused. Plain data, no web framework imported (so that `tether serve --help` stays fast)."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import socket
from dataclasses import dataclass, field

from ..errors import ConfigError

TOKEN_ENV = "TETHER_SERVER_TOKEN"
"""The environment variable that holds the server's bearer token."""

DEFAULT_PORT = 7477
MAX_BODY = 1 << 20
"""Bytes a request body may hold (a prompt, an edit): 1 MiB."""
MAX_IMPORT_BODY = 64 << 20
"""Bytes an imported session may hold: 64 MiB."""
HEARTBEAT = 15.0
"""Seconds between the comments an idle event stream sends, so that proxies and clients know it lives."""

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9.])?)(?::[0-9]{1,5})?")
"""A Host header: a name or an IPv4 address, or an IPv6 address in brackets, and an optional port."""


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine's loopback only."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("", "0.0.0.0", "::")


def new_token() -> str:
    """A bearer token of 256 random bits."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ServerSettings:
    """Where the server listens and what it lets in (see the module docstring).

    `token`: required on every route when set (on loopback too), as ``Authorization: Bearer TOKEN``.
    `allowed_hosts`: Host header names answered besides the loopback names and the bound address (a name the
    server is reached by through a proxy or DNS); ``"*"`` answers any (only with a token).
    `cors_origins`: web origins (``https://app.example``) allowed to call the API from a browser; none by
    default, and then a request that carries any other `Origin` than the server's own is refused."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_body: int = MAX_BODY
    max_import_body: int = MAX_IMPORT_BODY
    heartbeat: float = HEARTBEAT
    shutdown_grace: float = 5.0
    """Seconds the runs in progress get to finish when the server stops, before they are cancelled."""
    relay: bool = True
    """Join the store's relay (`store/relay.py`): the other workers and nodes over the same store get this
    server's run events, approvals and run claims, and it gets theirs. Off: runs elsewhere show only as the
    journal has them (durable events, polled)."""
    hosts: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not is_loopback(self.host) and not self.token:
            raise ConfigError(
                f"tether serve binds {self.host}, which is not loopback, and has no token: set {TOKEN_ENV} "
                "(or let `tether serve` generate one), or bind 127.0.0.1"
            )
        if self.token is not None and len(self.token) < 16:
            raise ConfigError(f"the server token must have at least 16 characters ({TOKEN_ENV})")
        if "*" in self.allowed_hosts and not self.token:
            raise ConfigError("answering any Host name (--allow-host '*') needs a token")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is out of range")
        if self.max_body < 1 or self.max_import_body < 1 or self.heartbeat <= 0:
            raise ConfigError("body limits and the heartbeat must be positive")
        for origin in self.cors_origins:
            if origin != origin.rstrip("/") or "://" not in origin:
                raise ConfigError(f"a CORS origin is scheme://host[:port] with no path, not {origin!r}")
        names = {*LOOPBACK_NAMES, *(h.lower() for h in self.allowed_hosts)}
        if not is_wildcard(self.host):
            names.add(self.host.strip("[]").lower())
        else:
            names.update({socket.gethostname().lower(), socket.getfqdn().lower()})
        object.__setattr__(self, "hosts", frozenset(names))

    @classmethod
    def from_environment(cls, **fields: object) -> ServerSettings:
        """Settings with the token from `TETHER_SERVER_TOKEN` unless `fields` gives one."""
        if "token" not in fields or fields["token"] is None:
            fields["token"] = os.environ.get(TOKEN_ENV) or None
        return cls(**fields)  # type: ignore[arg-type]

    def host_allowed(self, host_header: str) -> bool:
        """Whether a request's Host is one this server answers to. The header is parsed whole, as RFC 9110
        writes it (``name``, ``name:port``, ``[v6]``, ``[v6]:port``): anything else, such as
        ``127.0.0.1:7477@evil.example``, is no Host at all, whatever its start says."""
        parsed = _HOST.fullmatch(host_header.strip())
        if parsed is None:
            return False
        if "*" in self.allowed_hosts:
            return True
        name = parsed.group(1).strip("[]").lower()
        return name in self.hosts or (name.endswith(".localhost") and is_loopback(name))
