"""The audit trail over HTTP: `GET /audit` (records, oldest first, a page at a time) and `GET /audit/verify`
(what `tether audit verify` says). Both answer only a request that carries the server's bearer token: not
the web page's cookie, not a share link, and not a server started without a token (anyone who reaches it
would read who did what)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from fastapi import FastAPI, Query
from starlette.responses import Response

from ..runtime.audit import walk_trail
from ..store.audit import ACTOR, AuditRecord, AuditReport, verify
from ..store.protocols import Audit
from .errors import error_body
from .openapi import Answer, Routes
from .routes import MAX_PAGE, State, answer


class AuditPage(msgspec.Struct, kw_only=True):
    """Records of the trail, oldest first; `next_after` is the `after` of the next page (null: no more)."""

    records: list[AuditRecord]
    next_after: int | None


def _refused() -> Response | None:
    if not (ACTOR.get() or "").startswith("token"):
        body = error_body(
            "forbidden",
            "the audit trail needs the server's bearer token (Authorization: Bearer TOKEN; the token is TETHER_SERVER_TOKEN, or the one `tether serve --token-required` printed)",
        )
        return Response(body, status_code=403, media_type="application/json")
    return None


async def list_audit(
    state: State,
    after: Annotated[int, Query(ge=0, description="Records after this seq")] = 0,
    since: Annotated[float | None, Query(description="Made at or after this time (Unix seconds)")] = None,
    until: Annotated[float | None, Query(description="Made before this time (Unix seconds)")] = None,
    session: Annotated[str | None, Query(max_length=200, description="One session's records")] = None,
    kind: Annotated[str | None, Query(max_length=100, description="A kind (tool.call) or a family (tool)")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> Response:
    refused = _refused()
    if refused is not None:
        return refused
    store: Any = state.store
    if not isinstance(store, Audit):
        return answer(AuditPage(records=[], next_after=None))
    records = await store.list_audit(after=after, since=since, until=until, session_id=session, kind=kind, limit=limit)
    return answer(AuditPage(records=records, next_after=records[-1].seq if len(records) == limit else None))


async def verify_audit(state: State) -> Response:
    refused = _refused()
    if refused is not None:
        return refused
    store: Any = state.store
    if not isinstance(store, Audit):
        return answer(AuditReport(records=0, first=None, last=None, problems=[]))
    return answer(await verify(walk_trail(store), await store.audit_head()))


def add_routes(app: FastAPI, routes: Routes) -> None:
    add, t = routes.add, "server"
    add(app, "GET", "/audit", list_audit, answers={200: Answer(AuditPage, "Records of the audit trail, oldest first")},
        errors=(400, 403), summary="The audit trail: who did what (the bearer token only)", tag=t)  # fmt: skip
    add(app, "GET", "/audit/verify", verify_audit, answers={200: Answer(AuditReport, "What the chain check found")},
        errors=(403,), summary="Check the audit trail's chain: a changed or removed record, by its seq", tag=t)  # fmt: skip
