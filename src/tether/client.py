"""`TetherClient`: a small typed client of a tether server (`tether serve`), on httpx2. Each method is one
route and gives back the runtime's own types (`SessionInfo`, `Entry`, the events); an error answer raises the
tether exception it names (`SessionBusy` with its holder, `SessionNotFound`, `InvalidInput`, ...), or
`RemoteError` for one without a class here. `events` follows a session over SSE and reconnects by itself
with the last event id, so that a dropped connection loses nothing.

    async with TetherClient("http://127.0.0.1:7477", token=...) as client:
        run = await client.prompt(session_id, "fix the failing test")
        async for event in client.events(session_id, after=run.after, until_done=True):
            ...
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

import msgspec

from . import errors as E
from .context.compaction import CompactionResult
from .errors import MissingExtra, RemoteError
from .events import Done, Error, Event
from .messages import Entry
from .recall import RecallResult
from .runtime.activity import Activity
from .runtime.launch import WIRE_OPTIONS, RunRequest
from .runtime.mcp import McpOverview, McpServerView
from .runtime.memory import Note
from .runtime.operations import ModelsOverview
from .store.audit import AuditRecord, AuditReport
from .store.records import SessionInfo, Share
from .wire import (
    Answered,
    Approval,
    ApprovalList,
    ContextReport,
    CreatedSession,
    CreatedShare,
    Deleted,
    EntryPage,
    ErrorBody,
    Health,
    NoteList,
    Outcome,
    RunAccepted,
    SessionPage,
    SessionView,
    ShareList,
    run_body,
)

T = TypeVar("T")

TOKEN_ENV = "TETHER_SERVER_TOKEN"


def _httpx() -> Any:
    try:
        import httpx2
    except ImportError:
        raise MissingExtra("server", "httpx2") from None
    return httpx2


def raise_for_error(status: int, body: bytes) -> None:
    """Raise the tether exception that an error answer names (`TetherError.from_wire`: its code, message and
    details), or `RemoteError` for a code no class here has."""
    try:
        error = msgspec.json.decode(body, type=ErrorBody).error
    except msgspec.MsgspecError:
        raise RemoteError(f"the server answered {status}: {body[:200]!r}", status=status, code="http_error") from None
    cls = E.error_class(error.code)
    made: E.TetherError | None = None
    if cls is not None and cls is not RemoteError:
        with contextlib.suppress(TypeError, ValueError):  # details a class cannot be made from
            made = cls.from_wire(error.message, error.details)
    if made is not None:
        raise made
    raise RemoteError(error.message, status=status, code=error.code, details=error.details)


class TetherClient:
    """A client of one server (see the module docstring). `token` defaults to `TETHER_SERVER_TOKEN`."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        httpx = _httpx()
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)
        self._stream_timeout = httpx.Timeout(timeout, read=None)

    async def __aenter__(self) -> TetherClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        type_: type[T],
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
    ) -> T:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        response = await self._http.request(method, path, json=json, params=query, content=content)
        if response.status_code >= 400:
            raise_for_error(response.status_code, response.content)
        return msgspec.json.decode(response.content, type=type_)

    # --- sessions ------------------------------------------------------------------------------------------

    async def health(self) -> Health:
        return await self._call("GET", "/health", Health)

    async def list_sessions(
        self,
        *,
        directory: str | None = None,
        query: str | None = None,
        children: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        params = {"directory": directory, "q": query, "children": children, "limit": limit, "cursor": cursor}
        return await self._call("GET", "/sessions", SessionPage, params=params)

    async def create_session(
        self,
        directory: str,
        *,
        prompt: str | None = None,
        title: str | None = None,
        request: RunRequest | None = None,
        **fields: Any,
    ) -> CreatedSession:
        """A new session (with `prompt`: and its first run). How its runs go is `request` (a `RunRequest`:
        its wire fields are sent), or `fields`, the same fields by name: model, agent, tools, max_steps,
        system_prompt, confirmed, permission_mode, allow, deny."""
        body = {"directory": directory, "prompt": prompt, "title": title, **_run(request, fields)}
        return await self._call("POST", "/sessions", CreatedSession, json=_given(body))

    async def get_session(self, session_id: str) -> SessionView:
        return await self._call("GET", f"/sessions/{session_id}", SessionView)

    async def update_session(
        self,
        session_id: str,
        *,
        title: str | None = None,
        state: Literal["active", "paused"] | None = None,
        rules: Mapping[str, Sequence[str]] | None = None,
    ) -> SessionInfo:
        """Change a session's title, state, or its own approval rules (``{"allow": [...], "ask": [...],
        "deny": [...]}``, replacing the ones it had; empty lists remove them)."""
        body = _given(title=title, state=state, rules=dict(rules) if rules is not None else None)
        return await self._call("PATCH", f"/sessions/{session_id}", SessionInfo, json=body)

    async def delete_session(self, session_id: str) -> list[str]:
        return (await self._call("DELETE", f"/sessions/{session_id}", Deleted)).deleted

    async def children(self, session_id: str, *, limit: int = 50, cursor: str | None = None) -> SessionPage:
        params = {"limit": limit, "cursor": cursor}
        return await self._call("GET", f"/sessions/{session_id}/children", SessionPage, params=params)

    async def entries(
        self,
        session_id: str,
        *,
        start: int = 1,
        end: int | None = None,
        tail: int | None = None,
        active: bool = True,
        limit: int = 200,
    ) -> EntryPage:
        params = {"start": start, "end": end, "tail": tail, "active": active, "limit": limit}
        return await self._call("GET", f"/sessions/{session_id}/entries", EntryPage, params=params)

    async def entry(self, session_id: str, seq: int) -> Entry:
        return await self._call("GET", f"/sessions/{session_id}/entries/{seq}", Entry)

    # --- runs ----------------------------------------------------------------------------------------------

    async def prompt(
        self,
        session_id: str,
        prompt: str,
        *,
        queue: bool = True,
        steer: bool = False,
        request: RunRequest | None = None,
        **fields: Any,
    ) -> RunAccepted:
        """Start a run (or queue the prompt, or `steer` it into the run in progress); returns at once. With
        `queue=False`, a busy session raises `SessionBusy` naming the holder. The run's options: `request` or
        `fields`, as for `create_session`."""
        body = _given(prompt=prompt, queue=queue, steer=steer, **_run(request, fields))
        return await self._call("POST", f"/sessions/{session_id}/prompt", RunAccepted, json=body)

    async def cancel(self, session_id: str) -> bool:
        return (await self._call("POST", f"/sessions/{session_id}/cancel", Outcome)).done

    async def pause(self, session_id: str) -> bool:
        return (await self._call("POST", f"/sessions/{session_id}/pause", Outcome)).done

    async def resume(
        self, session_id: str, prompt: str | None = None, *, request: RunRequest | None = None, **fields: Any
    ) -> RunAccepted:
        body = _given(prompt=prompt, **_run(request, fields))
        return await self._call("POST", f"/sessions/{session_id}/resume", RunAccepted, json=body)

    # --- edits ---------------------------------------------------------------------------------------------

    async def fork(self, session_id: str, *, at: int | None = None, title: str | None = None) -> SessionInfo:
        return await self._call("POST", f"/sessions/{session_id}/fork", SessionInfo, json=_given(at=at, title=title))

    async def revert(self, session_id: str, to_seq: int, *, reason: str | None = None) -> Entry:
        body = _given(to_seq=to_seq, reason=reason)
        return await self._call("POST", f"/sessions/{session_id}/revert", Entry, json=body)

    async def compact(
        self, session_id: str, *, model: str | None = None, mechanical: bool = False, keep_tokens: int | None = None
    ) -> CompactionResult:
        body = _given(model=model, mechanical=mechanical, keep_tokens=keep_tokens)
        return await self._call("POST", f"/sessions/{session_id}/compact", CompactionResult, json=body)

    async def retitle(self, session_id: str, *, model: str | None = None) -> SessionInfo:
        """Have a model title the session again, from its first exchange."""
        return await self._call("POST", f"/sessions/{session_id}/retitle", SessionInfo, json=_given(model=model))

    async def undo_compaction(self, session_id: str) -> Entry:
        return await self._call("POST", f"/sessions/{session_id}/compact/undo", Entry)

    async def context(self, session_id: str, *, model: str | None = None) -> ContextReport:
        return await self._call("GET", f"/sessions/{session_id}/context", ContextReport, params={"model": model})

    async def export(
        self, session_id: str, *, format: Literal["json", "markdown", "html", "claude-code", "codex"] = "json"
    ) -> bytes:
        response = await self._http.get(f"/sessions/{session_id}/export", params={"format": format})
        if response.status_code >= 400:
            raise_for_error(response.status_code, response.content)
        return bytes(response.content)

    async def share(self, session_id: str, *, expires_in: float | None = None) -> CreatedShare:
        """A read-only link to the session's transcript, until revoked or for `expires_in` seconds."""
        body = _given(expires_in=expires_in)
        return await self._call("POST", f"/sessions/{session_id}/shares", CreatedShare, json=body)

    async def shares(self, session_id: str) -> list[Share]:
        """The session's share links, oldest first (no tokens)."""
        return (await self._call("GET", f"/sessions/{session_id}/shares", ShareList)).shares

    async def revoke_share(self, session_id: str, share_id: str) -> Share:
        """Revoke one of the session's links: it stops at once."""
        return await self._call("DELETE", f"/sessions/{session_id}/shares/{share_id}", Share)

    async def import_session(self, data: bytes, *, new_id: bool = False) -> SessionInfo:
        return await self._call("POST", "/sessions/import", SessionInfo, content=data, params={"new_id": new_id})

    async def approvals(self, session_id: str | None = None) -> list[Approval]:
        """The tool calls that wait for a person's answer (of every session, or of one)."""
        return (await self._call("GET", "/approvals", ApprovalList, params={"session_id": session_id})).approvals

    async def answer(
        self,
        session_id: str,
        call_id: str,
        *,
        approved: bool,
        scope: Literal["once", "session", "project"] = "once",
        message: str = "",
    ) -> RunAccepted | None:
        """Answer an approval request; a run the answer resumed is returned (None: the waiting run goes on)."""
        body = {"approved": approved, "scope": scope, "message": message}
        path = f"/sessions/{session_id}/approvals/{call_id}"
        return (await self._call("POST", path, Answered, json=body)).run

    async def recall(self, query: str, **filters: Any) -> RecallResult:
        return await self._call("GET", "/recall", RecallResult, params={"q": query, **filters})

    async def models(self, *, provider: str | None = None) -> ModelsOverview:
        return await self._call("GET", "/models", ModelsOverview, params={"provider": provider})

    # --- memory notes ----------------------------------------------------------------------------------------

    async def memory_notes(self, directory: str | None = None) -> list[Note]:
        """The notes of the project at `directory` (absolute) and the user's, newest first."""
        return (await self._call("GET", "/memory", NoteList, params={"directory": directory})).notes

    async def remember(self, text: str, *, directory: str | None = None, scope: str = "project") -> Note:
        return await self._call(
            "POST", "/memory", Note, json=_given({"text": text, "scope": scope, "directory": directory})
        )

    async def forget(self, note_id: str, *, directory: str | None = None) -> Note:
        return await self._call("DELETE", f"/memory/{note_id}", Note, params={"directory": directory})

    # --- MCP servers ---------------------------------------------------------------------------------------

    async def mcp_status(self) -> McpOverview:
        """The server's MCP servers: state, tools, last error."""
        return await self._call("GET", "/mcp", McpOverview)

    async def add_mcp_server(self, name: str, *, start: bool = True, **table: Any) -> McpServerView:
        """Add (or replace) an MCP server: ``command=``/``args=``/``env=`` or ``url=``/``headers=``, as a
        ``[mcp.NAME]`` table; started now unless `start` is False."""
        return await self._call(
            "POST", "/mcp/servers", McpServerView, json=_given({"name": name, "start": start, **table})
        )

    async def remove_mcp_server(self, name: str) -> None:
        await self._call("DELETE", f"/mcp/servers/{name}", Deleted)

    async def start_mcp_server(self, name: str) -> McpServerView:
        return await self._call("POST", f"/mcp/servers/{name}/start", McpServerView)

    # --- the audit trail -----------------------------------------------------------------------------------

    async def audit(self, *, after: int = 0, limit: int = 100, **filters: Any) -> list[AuditRecord]:
        """A page of the audit trail, oldest first, after seq `after` (`filters`: since, until, session, kind);
        the server's bearer token only."""
        page = await self._call("GET", "/audit", dict[str, Any], params={"after": after, "limit": limit, **filters})
        return msgspec.convert(page["records"], list[AuditRecord])

    async def verify_audit(self) -> AuditReport:
        return await self._call("GET", "/audit/verify", AuditReport)

    # --- events --------------------------------------------------------------------------------------------

    async def events(
        self,
        session_id: str,
        *,
        after: int | None = None,
        until_done: bool = False,
        reconnect: int = 5,
        on_frame: Any = None,
    ) -> AsyncIterator[Event]:
        """The session's events (after `after`: first what was missed). A dropped stream is opened again with
        the last event id, `reconnect` times in a row at most. `until_done`: stop after the `Done` or
        `Error` of the session's own run."""
        decoder = msgspec.json.Decoder(Event)
        last = after
        failures = 0
        httpx = _httpx()
        while True:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            try:
                async with self._http.sse(
                    f"/sessions/{session_id}/events", headers=headers, timeout=self._stream_timeout
                ) as source:
                    if source.response.status_code >= 400:
                        await source.response.aread()
                        raise_for_error(source.response.status_code, source.response.content)
                    async for frame in source:
                        if not frame.data:
                            continue
                        if on_frame is not None:
                            on_frame(frame)
                        event = decoder.decode(frame.data)
                        if frame.id:
                            last = int(frame.id)
                        failures = 0
                        yield event
                        if until_done and isinstance(event, Done | Error) and event.session_id == session_id:
                            return
            except httpx.TransportError:  # dropped, or the server went away: open it again after the last id
                failures += 1
                if failures > reconnect:
                    raise
                await asyncio.sleep(min(0.1 * 2**failures, 2.0))

    async def activity(self, *, after: int | None = None) -> AsyncIterator[Activity]:
        """What happens to every session (`GET /events`), from now on or after `after`."""
        decoder = msgspec.json.Decoder(Activity)
        params = {"after": after} if after is not None else {}
        async with self._http.sse("/events", params=params, timeout=self._stream_timeout) as source:
            if source.response.status_code >= 400:
                await source.response.aread()
                raise_for_error(source.response.status_code, source.response.content)
            async for frame in source:
                if frame.data:
                    yield decoder.decode(frame.data)


def _run(request: RunRequest | None, fields: dict[str, Any]) -> dict[str, Any]:
    """The run options of a request body: `request`'s wire fields, or `fields` made into a `RunRequest`
    first (a name it has no field for fails here, not at the server)."""
    if request is not None and fields:
        raise TypeError("give the run's options as `request` or as fields, not both")
    if request is None:
        unknown = sorted(set(fields) - set(WIRE_OPTIONS))
        if unknown:
            raise TypeError(f"not an option of a run: {', '.join(unknown)} (they are: {', '.join(WIRE_OPTIONS)})")
        fields = {k: tuple(v) if k in ("allow", "deny") else v for k, v in fields.items() if v is not None}
        request = RunRequest(None, **fields)
    return run_body(request)


def _given(body: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A request body without the fields left out (None), so that the server's defaults hold."""
    return {k: v for k, v in {**(body or {}), **fields}.items() if v is not None}
