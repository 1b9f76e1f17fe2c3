"""The web page: `GET /` (the page) and `GET /ui/{file}` (its scripts, styles and the vendored Markdown and
sanitizer libraries), served from the package's `web/` folder as they are (no build step, nothing from a
CDN), under a Content-Security-Policy that lets the page load nothing but its own files and talk to nothing
but this server. And `POST /auth/session`: a browser's `EventSource` cannot send a bearer header, so the page
trades the token (given to it in the URL's fragment, which no request carries) for an HttpOnly, SameSite=Strict
cookie that the guard accepts as it accepts the bearer token."""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Annotated

import msgspec
from fastapi import Body, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from ..errors import NotFound
from ..runtime import audit
from .errors import error_body
from .guard import COOKIE, cookie_value
from .openapi import Answer, Routes
from .routes import State, answer

WEB = Path(__file__).parent / "web"
PAGE_PATH = "/"
"""Where the page is served; a link to it from another site opens it (the guard lets that navigation in)."""
OPEN_EXACT = (PAGE_PATH, "/auth/session")
"""Paths the guard lets through without a token: the page (which holds no data: it asks for the token when
the API refuses it) and the exchange of a token for a cookie (which checks the token itself)."""
OPEN_PREFIXES = ("/ui/",)
"""The page's own files (public, like the page)."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",  # a site that opened the page keeps no handle on its window
    "Cache-Control": "no-cache",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
}


def _files() -> dict[str, tuple[bytes, str]]:
    """The files the page may load, by their path under /ui/ (only these: nothing else on disk is reachable),
    with their media type: read once, when the app is made (a few hundred KiB shipped with the package), not
    from disk on the event loop at every request."""
    return {
        p.relative_to(WEB).as_posix(): (p.read_bytes(), _TYPES[p.suffix])
        for p in sorted(WEB.rglob("*"))
        if p.is_file() and p.suffix in _TYPES and p.name != "index.html"
    }


class TokenExchange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(..., min_length=1, max_length=1000, description="The server's token")


class WebSession(msgspec.Struct, kw_only=True):
    token_required: bool
    """Whether this server asks for a token (when it does not, no cookie is set: none is needed)."""
    authenticated: bool
    """Whether this request may use the API (its cookie or bearer token is right, or none is needed)."""


def add_routes(app: FastAPI, routes: Routes) -> None:
    files = _files()
    page = (WEB / "index.html").read_bytes()

    async def index() -> Response:
        return Response(page, media_type=_TYPES[".html"], headers=PAGE_HEADERS)

    async def asset(path: str) -> Response:
        found = files.get(path)
        if found is None:
            raise NotFound(f"the page has no file {path[:200]!r}")
        body, media_type = found
        return Response(body, media_type=media_type, headers=PAGE_HEADERS)

    app.add_api_route(PAGE_PATH, index, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui/{path:path}", asset, methods=["GET"], include_in_schema=False)

    async def open_session(state: State, request: Request, body: Annotated[TokenExchange, Body()]) -> Response:
        token = state.settings.token
        if token is None:
            return answer(WebSession(token_required=False, authenticated=True))
        if not hmac.compare_digest(body.token.encode(), token.encode()):
            client = request.client.host if request.client else None
            detail = {"method": "POST", "path": "/auth/session", "client": client}
            who = f"anonymous {client}" if client else "anonymous"
            await audit.record(state.store, "server.unauthorized", actor=who, outcome="401 unauthorized", detail=detail)
            return Response(
                error_body("unauthorized", "that is not this server's token"),
                status_code=401,
                media_type="application/json",
            )
        response = answer(WebSession(token_required=True, authenticated=True))
        response.set_cookie(
            COOKIE,
            cookie_value(token),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    async def check_session(state: State, request: Request) -> Response:
        token = state.settings.token
        if token is None:
            return answer(WebSession(token_required=False, authenticated=True))
        given = request.cookies.get(COOKIE, "")
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        ok = hmac.compare_digest(given.encode(), cookie_value(token).encode()) or (
            scheme.lower() == "bearer" and hmac.compare_digest(bearer.strip().encode(), token.encode())
        )
        return answer(WebSession(token_required=True, authenticated=ok))

    async def close_session(state: State) -> Response:
        response = answer(WebSession(token_required=state.settings.token is not None, authenticated=False))
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    routes.add(app, "POST", "/auth/session", open_session,
               answers={200: Answer(WebSession, "The token is right: the cookie is set (when one is needed)")},
               errors=(400, 401, 422), summary="Trade the token for the web page's cookie (HttpOnly, SameSite=Strict)",
               tag="server")  # fmt: skip
    routes.add(app, "GET", "/auth/session", check_session,
               answers={200: Answer(WebSession, "Whether a token is needed, and whether this request has it")},
               summary="Whether the web page is signed in", tag="server")  # fmt: skip
    routes.add(app, "DELETE", "/auth/session", close_session,
               answers={200: Answer(WebSession, "The cookie is cleared")},
               summary="Forget the web page's cookie", tag="server")  # fmt: skip
