"""The server's door, an ASGI middleware in front of every route: the Host, parsed whole, must be one the
server answers to (a DNS-rebinding page reaches it under its own name), an `Origin` must be the server's own or
one allowed for CORS (a page elsewhere may not drive an agent that runs shell commands), the bearer token must
match when one is set (compared in constant time), and a body may not pass its size limit (413, whether or not
it says its length). A browser may show the token as the cookie `POST /auth/session` sets (an `EventSource`
cannot send a header); the Host and Origin checks hold for it all the same, and a request that changes
something on the cookie's strength must carry an Origin (browsers send one with each) or the `X-Tether-Client`
header (a program's). Each refusal is a typed error body, as every route's errors are. A streamed answer gets a
turn of the event loop between chunks written in the same pass, so that a client that went away stops its
stream at once."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import cookie_parser

from ..store.audit import ACTOR
from .errors import error_body
from .settings import ServerSettings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
OnRefusal = Callable[[Scope, int, str], Awaitable[None]]
"""Told of each request the guard refuses (its scope, status and code): the audit trail's record."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CLIENT_HEADER = "x-tether-client"
"""A header a program may send with the cookie instead of an `Origin` (no cross-site form or simple request
can carry a custom header)."""


class _Passes:
    """The passes of each event loop, counted only while someone asks: `now()` is the number of the pass it
    is asked in (a callback scheduled for the next pass moves it on)."""

    def __init__(self) -> None:
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[int]] = weakref.WeakKeyDictionary()

    def now(self) -> int:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = [0, 0]  # the pass's number, whether its end is scheduled
        if not state[1]:
            state[1] = 1
            loop.call_soon(self._next, state)
        return state[0]

    @staticmethod
    def _next(state: list[int]) -> None:
        state[0] += 1
        state[1] = 0


_PASSES = _Passes()

COOKIE = "tether_session"
"""The web page's cookie: `cookie_value` of the token (HttpOnly, SameSite=Strict; set by `POST /auth/session`)."""


def cookie_value(token: str) -> str:
    """What the cookie holds: a keyed hash of the token, not the token itself (a cookie read off a disk is no
    bearer token for another client)."""
    return hmac.new(token.encode(), b"tether web session", hashlib.sha256).hexdigest()


class Guard:
    """See the module docstring. `open_paths`: path prefixes served without the token (the share view, the web page's files);
    `open_exact`: paths served without the token, matched whole (the web page, the token exchange);
    `large_bodies`: paths whose body may be up to `settings.max_import_body` (an import); `page`: the web
    page's path, which a link on another site may open (a top-level navigation), as it may a share link."""

    def __init__(
        self,
        app: ASGIApp,
        settings: ServerSettings,
        *,
        open_paths: tuple[str, ...] = (),
        open_exact: tuple[str, ...] = (),
        large_bodies: tuple[str, ...] = (),
        page: str | None = None,
        on_refusal: OnRefusal | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.open_paths = open_paths
        self.open_exact = open_exact
        self.large_bodies = large_bodies
        self.page = page
        self.on_refusal = on_refusal
        self._token = settings.token.encode() if settings.token else None
        self._cookie = cookie_value(settings.token).encode() if settings.token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)  # lifespan
            return
        headers: dict[str, list[str]] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        refusal = self._refusal(scope, headers)
        if refusal is not None and self.on_refusal is not None:
            await self.on_refusal(scope, refusal[0], refusal[1])
        if refusal is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            await _answer(send, *refusal)
            return
        actor = ACTOR.set(self._actor(scope, headers))  # who the audit trail names for what this request does
        try:
            await self._admit(scope, receive, send, headers)
        finally:
            ACTOR.reset(actor)

    def _actor(self, scope: Scope, headers: dict[str, list[str]]) -> str:
        client = scope.get("client")
        where = f" {client[0]}" if client else ""
        if any(scope["path"].startswith(p) for p in self.open_paths):
            return "share" + where if self._token is not None else "open" + where
        if self._token is None:
            return "open" + where
        given = headers.get("authorization", [""])[-1]
        return ("token" if given.lower().startswith("bearer ") else "cookie") + where

    async def _admit(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, list[str]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.settings.max_import_body if scope["path"] in self.large_bodies else self.settings.max_body
        length = headers.get("content-length", ["0"])[-1]
        if not length.isdigit():
            await _answer(send, 400, "invalid_request", "Content-Length is not a number")
            return
        if int(length) > limit:
            await _answer(send, 413, "payload_too_large", f"the body may hold {limit} bytes at most")
            return
        received = 0

        async def counted_receive() -> Message:
            # a body sent in chunks, with no length said: counted as it comes, refused once past the limit
            # (the route's error handler answers 413, as it answers every error)
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, f"the body may hold {limit} bytes at most")
            return message

        last_pass = -1

        async def paced_send(message: Message) -> None:
            # a streamed body (an event stream's replay, an export) is written a chunk at a time, each write
            # returning at once while the socket takes it: without a turn of the event loop between them, a
            # client that went away is noticed only after the whole replay went into the closed socket (and
            # asyncio logged each write). So a chunk that follows another in the same pass waits for the next
            # one, which lets the server see the loss and stop; a live stream, whose chunks come a pass or more
            # apart, never waits (a turn after every chunk was a task step per event per client).
            nonlocal last_pass
            if message["type"] == "http.response.body":
                if _PASSES.now() == last_pass:
                    await asyncio.sleep(0)
                last_pass = _PASSES.now()
            await send(message)

        await self.app(scope, counted_receive, paced_send)

    def _refusal(self, scope: Scope, headers: dict[str, list[str]]) -> tuple[int, str, str, dict[str, str]] | None:
        hosts = headers.get("host", [])
        if len(hosts) != 1 or not self.settings.host_allowed(hosts[0]):
            shown = hosts[0][:100] if hosts else "none"
            return 403, "forbidden_host", f"this server does not answer to the Host {shown!r}", {}
        origins = headers.get("origin", [])
        if origins and not self._origin_allowed(origins, scope, hosts[0]):
            return 403, "forbidden_origin", f"requests from the origin {origins[0][:100]!r} are not allowed", {}
        public = any(scope["path"].startswith(p) for p in self.open_paths)
        reading = scope.get("method") in ("GET", "HEAD")
        # a share link followed from a mail or a chat elsewhere is a cross-site navigation: it may read; so may
        # a link to the web page itself (it holds no data, and what it then asks for is same-origin)
        opening_page = (
            scope["path"] == self.page
            and headers.get("sec-fetch-mode", [""])[-1] == "navigate"
            and headers.get("sec-fetch-dest", ["document"])[-1] == "document"
        )
        followed_link = reading and (public or opening_page)
        if headers.get("sec-fetch-site", [""])[-1] == "cross-site" and not origins and not followed_link:
            return 403, "forbidden_origin", "cross-site requests are not allowed", {}
        if self._token is None or public or scope["path"] in self.open_exact:
            return None
        if scope.get("method") == "OPTIONS" and origins and "access-control-request-method" in headers:
            return None  # a CORS preflight from an allowed origin carries no credentials
        given = headers.get("authorization", [""])[-1]
        scheme, _, token = given.partition(" ")
        bearer = scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._token)
        if bearer:
            return None
        if not self._cookie_matches(headers.get("cookie", [])):
            why = (
                "this is not the server's bearer token"
                if given
                else "a bearer token is required (Authorization: Bearer TOKEN)"
            )
            return 401, "unauthorized", why, {"www-authenticate": 'Bearer realm="tether"'}
        if scope.get("method") not in SAFE_METHODS and not origins and CLIENT_HEADER not in headers:
            # a cookie goes with every request a browser makes, whoever asked for it: a change made on the
            # cookie's strength must show it comes from this server's page (its Origin, checked above, which
            # browsers send with every unsafe request) or from a program (a header no form can send)
            return (
                403,
                "forbidden_origin",
                f"a request that changes something, signed in by cookie, needs an Origin or the {CLIENT_HEADER} "
                "header (or the bearer token)",
                {},
            )
        return None

    def _cookie_matches(self, cookies: list[str]) -> bool:
        # parsed as browsers send them (starlette's parser: another app's odd cookie on this host does not
        # hide ours, as it can with http.cookies)
        assert self._cookie is not None
        for header in cookies:
            given = cookie_parser(header).get(COOKIE)
            if given is not None and hmac.compare_digest(given.encode(), self._cookie):
                return True
        return False

    def _origin_allowed(self, origins: list[str], scope: Scope, host: str) -> bool:
        if len(origins) != 1:
            return False
        origin = origins[0].rstrip("/")
        if origin in self.settings.cors_origins:
            return True
        scheme = scope.get("scheme", "http")
        scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
        return bool(origin == f"{scheme}://{host}")


async def _answer(send: Send, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
    body = error_body(code, message)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
