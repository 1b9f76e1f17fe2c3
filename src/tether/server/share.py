"""Share links over HTTP. Behind the server's token, as every route: make a session's share
(`POST /sessions/{id}/shares`, the token shown once), list them (no tokens), revoke one. Open without it,
the share view `GET /share/{token}`: the session's transcript as read-only HTML (a page of entries at a
time) and nothing else, read from the store on each request (a revoke or a delete stops the link at once),
under headers that let the page load nothing, be framed nowhere and leak the token to no one. A link that
is wrong, expired or revoked gets one answer, 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, FastAPI, Query, Request
from fastapi import Path as PathParam
from starlette.responses import Response, StreamingResponse

from ..errors import NotFound
from ..runtime.lookup import find_session
from ..runtime.sharing import SHARE_PATH, create_share, find_share, open_share, share_url
from ..store.records import Share
from ..transcript_html import CSP, CSS
from ..wire import CreatedShare, CreateShare, ShareList
from .errors import tether_error_body
from .openapi import Answer, Routes
from .routes import Ref, State, answer

SHARE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "private, no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}
"""The share view's headers: its own style sheet only, no script, no frame, no referrer (the token is in the
URL), no cache (a revoked link must not live on in one), no indexing."""

_GONE = (
    '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    f"<title>Link not found · tether</title><style>{CSS}</style></head><body><main>"
    '<header class="session"><h1>This link does not open a session</h1></header>'
    "<p>It may be mistyped, expired, or revoked by the person who shared it.</p></main></body></html>\n"
)


ShareRef = Annotated[str, PathParam(description="The share's id (shr_...)", max_length=200)]
Token = Annotated[str, PathParam(description="The share link's token", max_length=200)]


async def make_share(
    state: State, session_id: Ref, request: Request, body: Annotated[CreateShare | None, Body()] = None
) -> Response:
    info = await find_session(state.store, session_id)
    made = await create_share(state.store, info.id, expires_in=(body or CreateShare()).expires_in)
    share = made.share
    created = CreatedShare(
        id=share.id,
        session_id=share.session_id,
        token=made.token,
        url=share_url(str(request.base_url), made.token),
        created_at=share.created_at,
        expires_at=share.expires_at,
    )
    return answer(created, 201)


async def list_shares(state: State, session_id: Ref) -> Response:
    info = await find_session(state.store, session_id)
    return answer(ShareList(shares=await state.store.list_shares(info.id)))


async def revoke(state: State, session_id: Ref, share_id: ShareRef) -> Response:
    info = await find_session(state.store, session_id)
    share = await find_share(state.store, share_id, session_id=info.id)
    return answer(await state.store.revoke_share(share.id))


SHARE_PAGE = 1000
"""Entries per page of the share view: a long session opens at once, a page at a time."""


async def view(
    state: State,
    token: Token,
    request: Request,
    start: Annotated[
        int, Query(alias="from", ge=1, le=2**62, description=f"The entry the page starts at ({SHARE_PAGE:,} a page)")
    ] = 1,
) -> Response:
    try:
        share, info = await open_share(state.store, token)
    except NotFound as exc:
        if "text/html" in request.headers.get("accept", ""):
            return Response(_GONE, status_code=404, media_type="text/html; charset=utf-8", headers=SHARE_HEADERS)
        status, body = tether_error_body(exc)
        return Response(body, status_code=status, media_type="application/json", headers=SHARE_HEADERS)
    from ..transcript_html import Page, html_chunks

    page = Page(start, SHARE_PAGE, lambda seq: f"?from={seq}" if seq > 1 else "?")
    chunks = html_chunks(state.store, share.session_id, shared=True, info=info, page=page)
    return StreamingResponse(chunks, media_type="text/html; charset=utf-8", headers=SHARE_HEADERS)


def add_routes(app: FastAPI, routes: Routes) -> None:
    def ok(tp: Any, description: str, status: int = 200) -> dict[int, Answer]:
        return {status: Answer(tp, description)}

    add, s = routes.add, "shares"
    add(app, "POST", "/sessions/{session_id}/shares", make_share,
        answers=ok(CreatedShare, "The new link: its token and URL are shown this once", 201),
        errors=(400, 404), summary="Share a session: a read-only link, optionally expiring", tag=s)  # fmt: skip
    add(app, "GET", "/sessions/{session_id}/shares", list_shares, answers=ok(ShareList, "The session's shares"),
        errors=(400, 404), summary="List a session's share links (without their tokens)", tag=s)  # fmt: skip
    add(app, "DELETE", "/sessions/{session_id}/shares/{share_id}", revoke,
        answers=ok(Share, "The share, revoked: its link stops at once"),
        errors=(400, 404), summary="Revoke a share link", tag=s)  # fmt: skip
    add(app, "GET", SHARE_PATH + "{token}", view,
        answers={
            200: Answer(None, "The session's transcript, read-only", media_type="text/html", schema={"type": "string"}),
            404: Answer(None, "No such link (wrong, expired or revoked): a page for a browser (Accept: text/html), "
                        "else the error", media_type="text/html", schema={"type": "string"}),
        },
        errors=(404,), summary="The share view (no bearer token needed): the transcript as HTML, a page at a time",
        tag=s, openapi_extra={"security": [{}]})  # fmt: skip
