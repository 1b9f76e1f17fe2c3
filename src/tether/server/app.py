"""The ASGI application: `create_app` builds it over a store and a `SessionManager` (made when it starts,
in its event loop), behind the `Guard`, with every error as a typed body and the OpenAPI document at
`/openapi.json`. The routes themselves are in `routes` (REST), `streams` (SSE) and `web` (the web page)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.routing import Match

from .. import __version__
from ..config import Config
from ..errors import InvalidRequest, TetherError
from ..runtime import audit, sinks
from ..runtime.configuration import load_config
from ..runtime.manager import SessionManager
from ..runtime.mesh import Mesh
from ..runtime.sharing import SHARE_PATH
from ..store import Store, open_relay, open_store
from ..wire import PATTERNS
from .errors import error_body, tether_error_body
from .guard import Guard
from .openapi import Routes, build_openapi
from .settings import ServerSettings
from .state import IMPORT_PATH, ServerState

log = logging.getLogger("tether.server")

ManagerFactory = Callable[[Store, Config], SessionManager]


def create_app(
    settings: ServerSettings | None = None,
    *,
    store_url: str | None = None,
    store: Store | None = None,
    config: Config | None = None,
    make_manager: ManagerFactory | None = None,
) -> FastAPI:
    """The server as an ASGI app. The store is `store` (the caller closes it) or opened from `store_url`
    (the default store unless given) when the app starts and closed when it stops; `make_manager` builds
    the `SessionManager` (a test's, with a scripted provider) instead of the default one."""
    settings = settings or ServerSettings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = store is None
        opened = store if store is not None else open_store(store_url)
        conf = config if config is not None else load_config()
        manager = make_manager(opened, conf) if make_manager is not None else SessionManager(opened, config=conf)
        state = ServerState(opened, manager, settings, conf)
        relay = open_relay(opened) if settings.relay else None
        if relay is not None:  # the other workers and nodes over this store hear of this one's runs, and it of theirs
            state.mesh = manager.mesh = Mesh(manager, relay)
            await state.mesh.start()
        await manager.recover_queued()  # prompts a killed server had queued (202 queued): they run now, once each
        await audit.retain(opened, conf)
        state.sinks = sinks.runner_for(opened, conf)  # the event sinks follow the journal, off every run's path
        if state.sinks is not None:
            state.sinks.start()
        app.state.tether = state
        try:
            yield
        finally:
            await state.stop()
            if own:
                await opened.close()

    app = FastAPI(
        title="tether",
        version=__version__,
        description="Sessions of AI coding agents: list, read, run, steer, follow (SSE), fork, revert, compact.",
        lifespan=lifespan,
        docs_url=None,
        redirect_slashes=False,
        redoc_url=None,
        openapi_url=None,
        openapi_tags=[
            {"name": "sessions", "description": "Sessions and their journals"},
            {"name": "runs", "description": "Prompts, and the runs that answer them"},
            {"name": "events", "description": "Server-sent events"},
            {"name": "shares", "description": "Read-only links to a session's transcript"},
            {"name": "server", "description": "The server and its models"},
        ],
    )
    routes = Routes()
    from . import audit as audit_routes
    from . import routes as rest
    from . import share, streams, web

    rest.add_routes(app, routes)
    streams.add_routes(app, routes)
    share.add_routes(app, routes)
    audit_routes.add_routes(app, routes)
    web.add_routes(app, routes)
    document: dict[str, Any] = {}

    async def openapi_json() -> Response:
        if not document:
            document.update(build_openapi(app, routes, extra_types=streams.EXTRA_TYPES))
        from ..messages import encode_json

        return Response(encode_json(document), media_type="application/json")

    app.add_api_route("/openapi.json", openapi_json, methods=["GET"], include_in_schema=False)
    _handle_errors(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )
    app.add_middleware(
        Guard,
        settings=settings,
        open_paths=(SHARE_PATH, *web.OPEN_PREFIXES),
        open_exact=web.OPEN_EXACT,
        large_bodies=(IMPORT_PATH,),
        page=web.PAGE_PATH,
        on_refusal=_refusal_recorder(app),
    )
    return app


def _refusal_recorder(app: FastAPI) -> Callable[[Any, int, str], Awaitable[None]]:
    """What the guard refused, into the audit trail: a missing or wrong token as ``server.unauthorized`` (a
    failed sign-in), anything else as ``server.refused``. A share link's token is not written down."""

    async def record(scope: Any, status: int, code: str) -> None:
        state = getattr(app.state, "tether", None)
        if state is None:
            return
        path = str(scope.get("path", ""))
        if path.startswith(SHARE_PATH):
            path = SHARE_PATH + "..."
        client = scope.get("client")
        kind = "server.unauthorized" if status == 401 else "server.refused"
        detail = {"method": scope.get("method"), "path": path[:300], "client": client[0] if client else None}
        who = f"anonymous {client[0]}" if client else "anonymous"
        await audit.record(state.store, kind, actor=who, outcome=f"{status} {code}", detail=detail)

    return record


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 400: "invalid_request"}


def _located(error: Any, content_type: str | None) -> dict[str, str]:
    """Where a validation error is and what it is, for a person. Two that FastAPI words for itself: a body
    that is not JSON (its "loc" is the character where decoding stopped, which read as a field path), and a
    JSON body sent without its content type (FastAPI then hands the bytes to the model: "a valid dictionary")."""
    loc = tuple(error.get("loc", ()))
    if error.get("type") == "json_invalid" and loc[:1] == ("body",):
        at = f" at character {loc[1]}" if len(loc) > 1 else ""
        why = (error.get("ctx") or {}).get("error")
        return {"where": "body", "problem": f"not valid JSON{at}" + (f" ({why})" if why else "")}
    kind = (content_type or "").split(";")[0].strip().lower()
    if loc == ("body",) and isinstance(error.get("input"), bytes | str) and not kind.endswith("json"):
        sent = f"it came as {kind}" if kind else "it came without one"
        return {"where": "body", "problem": f"send a JSON object with Content-Type: application/json ({sent})"}
    return {"where": ".".join(str(p) for p in loc), "problem": _problem(error)}


def _problem(error: Any) -> str:
    """A validation error for a person: a value that misses a pattern of the spec says what it is not."""
    meaning = PATTERNS.get(str((error.get("ctx") or {}).get("pattern", "")))
    if error.get("type") == "string_pattern_mismatch" and meaning is not None:
        return f"{str(error.get('input'))[:200]!r} {meaning}"
    return str(error.get("msg", ""))


def _allowed(app: FastAPI, request: Request) -> list[str]:
    """Every method served at the request's path, by the routes of its most specific template (a path of
    its own, such as ``/sessions/import``, before ``/sessions/{session_id}``), as the spec lists them."""
    matching = [r for r in app.routes if r.matches(request.scope)[0] is not Match.NONE]
    if not matching:
        return []
    fewest = min(len(getattr(r, "param_convertors", {})) for r in matching)
    return sorted(
        {
            m
            for r in matching
            if len(getattr(r, "param_convertors", {})) == fewest
            for m in getattr(r, "methods", None) or ()
        }
    )


def _handle_errors(app: FastAPI) -> None:
    @app.exception_handler(TetherError)
    async def tether_error(request: Request, exc: TetherError) -> Response:
        status, body = tether_error_body(exc)
        if status >= 500:
            log.warning("%s %s: %s", request.method, request.url.path, exc, exc_info=exc)
        return Response(body, status_code=status, media_type="application/json")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        problems = [_located(e, request.headers.get("content-type")) for e in exc.errors()]
        shown = "; ".join(f"{p['where']}: {p['problem']}" for p in problems[:5])
        status, body = tether_error_body(InvalidRequest(f"the request does not validate: {shown}", problems=problems))
        return Response(body, status_code=status, media_type="application/json")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        body = error_body(code, str(exc.detail))
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed(app, request))
        return Response(body, status_code=exc.status_code, media_type="application/json", headers=headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        body = error_body("internal", "the server failed on this request (its log says why)")
        return Response(body, status_code=500, media_type="application/json")
