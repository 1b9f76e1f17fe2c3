"""The REST routes, each a thin call to the runtime: sessions (list, search, create, get, update, delete,
children), their entries, prompts and runs (prompt, cancel, pause, resume), fork, revert, compact and its
undo, the context a model would see, export and import, recall, models, health. Sessions are named as the
CLI names them (a full id or a unique piece of one, `runtime.lookup`)."""

from __future__ import annotations

import io
import json
import os
from typing import Annotated, Any, Literal

import msgspec
from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from starlette.responses import Response, StreamingResponse

from .. import __version__
from ..config import McpServerConfig
from ..context.compaction import CompactionResult, undo_compaction
from ..errors import InvalidInput, NotFound
from ..importers.claude_code_export import export_claude_code
from ..importers.codex_export import export_codex
from ..importers.tether_json import FORMAT as EXPORT_FORMAT
from ..importers.tether_json import VERSION as EXPORT_VERSION
from ..importers.tether_json import export_json, import_json, parse_export
from ..messages import Entry, encode_json
from ..paths import canonical_directory
from ..recall import RecallResult, recall
from ..runtime import audit
from ..runtime.activity import ActivityStatus, SessionCreated, SessionUpdated
from ..runtime.handle import SessionHandle
from ..runtime.launch import WIRE_OPTIONS
from ..runtime.lease import live_lease
from ..runtime.lookup import find_session
from ..runtime.mcp import McpOverview, McpServerView
from ..runtime.memory import Note, forget, remember
from ..runtime.memory import notes as memory_notes
from ..runtime.operations import (
    ModelsOverview,
    compact_now,
    context_view,
    models_overview,
    revert_session,
    search_sessions,
)
from ..runtime.permission import Answer as PersonAnswer
from ..runtime.permission import ApprovalRequest
from ..runtime.rules import with_session_rules
from ..runtime.titles import retitle
from ..store import UNSET
from ..store.records import SEARCH_ROLES, SessionInfo
from ..transcript import export_markdown
from ..wire import (
    ABSOLUTE_PATH,
    CURSOR,
    MAX_SEQ,
    SESSION_REF,
    AddMcpServer,
    AddNote,
    AnswerApproval,
    Answered,
    Approval,
    ApprovalList,
    CompactRequest,
    ContextBudget,
    ContextMessage,
    ContextReport,
    CreatedSession,
    CreateSession,
    Deleted,
    EntryPage,
    ForkRequest,
    Health,
    NoteList,
    Outcome,
    PromptRequest,
    ResumeRequest,
    RetitleRequest,
    RevertRequest,
    RunAccepted,
    RunSettings,
    SessionPage,
    SessionView,
    SinkHealth,
    UpdateSession,
)
from .openapi import Answer, Routes
from .state import IMPORT_PATH, ServerState


async def _state(request: Request) -> ServerState:
    # async: FastAPI runs a plain `def` dependency in its thread pool, a thread hop on every request
    state: ServerState = request.app.state.tether
    return state


State = Annotated[ServerState, Depends(_state)]
Ref = Annotated[
    str,
    PathParam(description="A session id, or a unique piece of one (at least 6 characters)", pattern=SESSION_REF),
]
MAX_PAGE = 1000


def answer(value: Any, status: int = 200) -> Response:
    return Response(encode_json(value), status_code=status, media_type="application/json")


def _directory(path: str | None) -> str | None:
    if path is None:
        return None
    if not os.path.isabs(path):
        raise InvalidInput(f"give the directory as an absolute path, not {path[:200]!r}")
    return canonical_directory(path)


def _run_fields(options: RunSettings) -> dict[str, Any]:
    """The fields of the `RunRequest` the body asks for that it gave (the manager's defaults hold for the
    others)."""
    request = options.request()
    return {name: getattr(request, name) for name in WIRE_OPTIONS if name in options.model_fields_set}


# --- sessions ------------------------------------------------------------------------------------------------


async def list_sessions(
    state: State,
    directory: Annotated[
        str | None, Query(description="Only this directory's sessions", max_length=4096, pattern=ABSOLUTE_PATH)
    ] = None,
    q: Annotated[str | None, Query(description="Only sessions whose messages match (best first, one page)")] = None,
    children: Annotated[bool, Query(description="Include child (sub-agent) sessions")] = False,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(description="The next_cursor of the page before", pattern=CURSOR)] = None,
) -> Response:
    where = _directory(directory)
    if q is not None:
        found = await search_sessions(state.store, q, directory=where, limit=limit, include_children=children)
        return answer(SessionPage(items=found, statuses=await _statuses(state, found)))
    page = await state.store.list_sessions(
        directory=where, parent_id=UNSET if children else None, limit=limit, cursor=cursor
    )
    return answer(
        SessionPage(items=page.items, next_cursor=page.next_cursor, statuses=await _statuses(state, page.items))
    )


async def _statuses(state: ServerState, items: list[SessionInfo]) -> dict[str, ActivityStatus]:
    """The statuses of the sessions in `items` that have a run in the service: here, or in a sibling worker
    or node (the others are not looked up: a list costs what its page costs). Before, a session another
    worker ran was missing, and read as idle, depending on which worker answered."""
    running = set(state.manager.running())
    if state.mesh is not None:
        mesh = state.mesh
        running |= {s.id for s in items if mesh.relays(s.id) or await mesh.claimed_elsewhere(s.id)}
    return {s.id: await state.manager.status(s.id) for s in items if s.id in running}


async def create_session(state: State, body: CreateSession) -> Response:
    directory = _directory(body.directory)
    assert directory is not None
    if not os.path.isdir(directory):
        raise NotFound(f"the directory {directory} does not exist on the server")
    if body.prompt is not None:
        # the title goes with the run's request: it is journaled as the session is made, before the run holds
        # it (journaled beside the run, it took the number the run's next entry expected: seq_conflict)
        handle = await state.manager.start(
            None, body.prompt, directory=directory, title=body.title, **_run_fields(body)
        )
        info = await state.store.get_session(handle.session_id)
        run = RunAccepted(session_id=info.id, after=handle.after)
        return answer(CreatedSession(session=info, run=run), 201)
    session = await SessionHandle.create(
        state.store,
        directory=directory,
        title=body.title,
        model=body.model,
        agent=body.agent,
        system_prompt=body.system_prompt,
    )
    if body.title:  # a person's title, journaled: the title model of its first run leaves it
        await session.set_title(body.title)
        await session.refresh()
    await state.manager.announce(SessionCreated(session=session.info))
    return answer(CreatedSession(session=session.info), 201)


async def get_session(state: State, session_id: Ref) -> Response:
    info = await find_session(state.store, session_id)
    status = await state.manager.status(info.id)
    lease = await live_lease(state.store, info.id)  # as the status reads it: a dead holder's is not listed
    return answer(SessionView(session=info, status=status, lease=lease))


async def update_session(state: State, session_id: Ref, body: UpdateSession) -> Response:
    info = await find_session(state.store, session_id)
    async with state.manager.exclusive(info.id):
        handle = SessionHandle(state.store, info)
        if body.title is not None:
            await handle.set_title(body.title)
        if body.state is not None:
            await handle.update(state=body.state)
        if body.rules is not None:
            await handle.update(metadata=with_session_rules(handle.info.metadata, body.rules.model_dump()))
        info = await handle.refresh()
    await state.manager.announce(SessionUpdated(session=info))
    return answer(info)


async def delete_session(state: State, session_id: Ref) -> Response:
    info = await find_session(state.store, session_id)
    return answer(Deleted(deleted=await state.manager.delete(info.id)))


async def list_children(
    state: State,
    session_id: Ref,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(description="The next_cursor of the page before", pattern=CURSOR)] = None,
) -> Response:
    info = await find_session(state.store, session_id)
    page = await state.store.list_sessions(parent_id=info.id, limit=limit, cursor=cursor)
    return answer(
        SessionPage(items=page.items, next_cursor=page.next_cursor, statuses=await _statuses(state, page.items))
    )


# --- entries ------------------------------------------------------------------------------------------------


async def list_entries(
    state: State,
    session_id: Ref,
    start: Annotated[int, Query(ge=1, le=MAX_SEQ, description="The first entry (raw journal)")] = 1,
    end: Annotated[
        int | None, Query(ge=1, le=MAX_SEQ, description="The last entry (default: start + limit - 1)")
    ] = None,
    tail: Annotated[int | None, Query(ge=1, le=MAX_PAGE, description="The last N entries instead")] = None,
    active: Annotated[bool, Query(description="With tail: leave out what reverts hid")] = True,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 200,
) -> Response:
    info = await find_session(state.store, session_id)
    if tail is not None:
        entries = await SessionHandle(state.store, info).tail(tail, active=active)
    else:
        last = start + limit - 1 if end is None else min(end, start + limit - 1)
        if last < start:
            raise InvalidInput(f"end ({end}) comes before start ({start})")
        entries = await state.store.read(info.id, start, last)
    return answer(EntryPage(entries=entries, last_seq=info.entry_count))


async def get_entry(state: State, session_id: Ref, seq: Annotated[int, PathParam(ge=1, le=MAX_SEQ)]) -> Response:
    info = await find_session(state.store, session_id)
    found = await state.store.read(info.id, seq, seq)
    if not found:
        raise NotFound(f"session {info.id} has no entry {seq}")
    return answer(found[0])


# --- runs ---------------------------------------------------------------------------------------------------


async def prompt(state: State, session_id: Ref, body: PromptRequest) -> Response:
    info = await find_session(state.store, session_id, settle=False)  # the run settles what it finds
    handle = await state.manager.start(
        info.id, body.prompt, steer=body.steer, queue=body.queue, info=info, **_run_fields(body)
    )
    return answer(
        RunAccepted(session_id=info.id, after=handle.after, queued=handle.queued, steered=handle.steered), 202
    )


async def cancel(state: State, session_id: Ref) -> Response:
    info = await find_session(state.store, session_id)
    return answer(Outcome(done=await state.manager.cancel(info.id)))


async def pause(state: State, session_id: Ref) -> Response:
    info = await find_session(state.store, session_id)
    return answer(Outcome(done=await state.manager.pause(info.id)))


async def resume(state: State, session_id: Ref, body: Annotated[ResumeRequest | None, Body()] = None) -> Response:
    info = await find_session(state.store, session_id)
    body = body or ResumeRequest()
    handle = await state.manager.start(info.id, body.prompt, info=info, **_run_fields(body))
    return answer(RunAccepted(session_id=info.id, after=handle.after, queued=handle.queued), 202)


# --- edits --------------------------------------------------------------------------------------------------


async def fork(state: State, session_id: Ref, body: Annotated[ForkRequest | None, Body()] = None) -> Response:
    info = await find_session(state.store, session_id)
    body = body or ForkRequest()
    if body.at is not None and body.at > info.entry_count:
        raise NotFound(f"session {info.id} has no entry {body.at} (it has {info.entry_count})")
    new = await state.store.fork(info.id, body.at, title=body.title)
    await state.manager.announce(SessionCreated(session=new))
    return answer(new, 201)


async def revert(state: State, session_id: Ref, body: RevertRequest) -> Response:
    info = await find_session(state.store, session_id)
    async with state.manager.exclusive(info.id):
        entry = await revert_session(state.store, info, body.to_seq, reason=body.reason)
        info = await state.store.get_session(info.id)
    await state.manager.announce(SessionUpdated(session=info))
    return answer(entry, 201)


async def compact(state: State, session_id: Ref, body: Annotated[CompactRequest | None, Body()] = None) -> Response:
    info = await find_session(state.store, session_id)
    body = body or CompactRequest()
    async with state.manager.exclusive(info.id):
        result = await compact_now(
            state.store,
            info.id,
            config=state.config,
            model=body.model,
            mechanical=body.mechanical,
            keep_tokens=body.keep_tokens,
            resolve=state.manager.resolve,
        )
    if result.entry is not None:
        await state.manager.announce(SessionUpdated(session=await state.store.get_session(info.id)))
    return answer(result)


async def retitle_session(
    state: State, session_id: Ref, body: Annotated[RetitleRequest | None, Body()] = None
) -> Response:
    info = await find_session(state.store, session_id)
    body = body or RetitleRequest()
    async with state.manager.exclusive(info.id):
        await retitle(
            state.store,
            info.id,
            config=state.config,
            model=body.model,
            resolve=state.manager.resolve,
            lease=False,
        )
    info = await state.store.get_session(info.id)
    await state.manager.announce(SessionUpdated(session=info))
    return answer(info)


async def undo_compact(state: State, session_id: Ref) -> Response:
    info = await find_session(state.store, session_id)
    async with state.manager.exclusive(info.id):
        entry = await undo_compaction(state.store, info.id)
    await state.manager.announce(SessionUpdated(session=await state.store.get_session(info.id)))
    return answer(entry, 201)


async def context(
    state: State,
    session_id: Ref,
    model: Annotated[str | None, Query(description="Fit to this model's window (default: the session's)")] = None,
) -> Response:
    info = await find_session(state.store, session_id)
    view = await context_view(state.store, info.id, config=state.config, model=model)
    d = view.derived
    report = ContextReport(
        session_id=info.id,
        model=view.model,
        budget=ContextBudget(
            context_window=view.budget.context_window,
            reserved_output=view.budget.reserved_output,
            safety_margin=view.budget.safety_margin,
            usable=view.budget.usable,
            compact_threshold=view.budget.threshold(view.settings.compact_threshold or 0.9),
        ),
        auto_compact=view.settings.auto_compact is not False,
        mode=d.mode,
        estimate=d.estimate,
        needed_tokens=d.needed_tokens,
        fixed_tokens=d.fixed_tokens,
        fits=d.fits,
        compaction_seq=d.compaction_seq,
        first_kept_seq=d.first_kept_seq,
        omissions=d.omissions,
        messages=[
            ContextMessage(seq=seq, role=m.role, tokens=n, message=m)
            for seq, m, n in zip(d.seqs, d.messages, view.tokens, strict=True)
        ],
    )
    return answer(report)


# --- export, import ------------------------------------------------------------------------------------------


async def export(
    state: State,
    session_id: Ref,
    format: Annotated[Literal["json", "markdown", "html", "claude-code", "codex"], Query()] = "json",
    raw: Annotated[bool, Query(description="Markdown and HTML: include reverted entries")] = False,
    children: Annotated[bool, Query(description="HTML: nest each sub-agent's transcript under its call")] = False,
) -> Response:
    info = await find_session(state.store, session_id)
    await audit.record(state.store, "session.exported", session_id=info.id, detail={"format": format, "to": "http"})
    if format in ("claude-code", "codex"):
        return await _export_foreign(state, info.id, format)
    name = f"{info.id}.{ {'json': 'json', 'markdown': 'md', 'html': 'html'}[format] }"
    disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
    if format == "html":
        from ..transcript_html import CSP, html_chunks

        # written as it is read; an attachment, and under the page's own policy if opened in place
        headers = {**disposition, "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}
        chunks = html_chunks(state.store, info.id, raw=raw, children=children, info=info)
        return StreamingResponse(chunks, media_type="text/html; charset=utf-8", headers=headers)
    if format == "json":
        out = io.BytesIO()
        await export_json(state.store, info.id, out)
        return Response(out.getvalue(), media_type="application/json", headers=disposition)
    text = io.StringIO()
    await export_markdown(state.store, info.id, text, raw=raw)
    return Response(text.getvalue(), media_type="text/markdown; charset=utf-8", headers=disposition)


async def _export_foreign(state: State, session_id: str, format: str) -> Response:
    """A Claude Code transcript or a Codex rollout (JSON Lines); what the format could not carry is in the
    ``X-Tether-Export-Report`` header (JSON), as the CLI says it on stderr."""
    out = io.BytesIO()
    writer = export_claude_code if format == "claude-code" else export_codex
    report = await writer(state.store, session_id, out)
    headers = {
        "Content-Disposition": f'attachment; filename="{report.target_id}.jsonl"',
        "X-Tether-Export-Report": json.dumps(report.as_dict(), ensure_ascii=True),
    }
    return Response(out.getvalue(), media_type="application/x-ndjson", headers=headers)


async def import_session(
    state: State,
    request: Request,
    new_id: Annotated[bool, Query(description="Give it a new id (the original is kept in its metadata)")] = False,
) -> Response:
    data = await request.body()
    info = await import_json(state.store, parse_export(data, source="the request body"), new_id=new_id)
    await state.manager.announce(SessionCreated(session=info))
    return answer(info, 201)


# --- approvals ---------------------------------------------------------------------------------------------


def _approval(request: ApprovalRequest) -> Approval:
    return Approval(
        session_id=request.session_id,
        call_id=request.call_id,
        tool=request.tool,
        arguments=request.arguments,
        reason=request.reason,
        suggestion=list(request.suggestion),
        workspace=request.workspace,
    )


async def list_approvals(
    state: State,
    session_id: Annotated[
        str | None,
        Query(pattern=SESSION_REF, description="Only this session's (and its sub-agents'), journaled ones too"),
    ] = None,
) -> Response:
    sid = (await find_session(state.store, session_id)).id if session_id else None
    return answer(ApprovalList(approvals=[_approval(r) for r in await state.manager.approvals(sid)]))


async def answer_approval(
    state: State,
    session_id: Ref,
    call_id: Annotated[str, PathParam(max_length=200)],
    body: AnswerApproval,
) -> Response:
    info = await find_session(state.store, session_id)
    given = PersonAnswer(
        approved=body.approved, scope=body.scope, message=body.message, by="user"
    )  # a person, answering over HTTP
    handle = await state.manager.answer(info.id, call_id, given)
    run = RunAccepted(session_id=info.id, after=handle.after) if handle is not None else None
    return answer(Answered(run=run))


# --- recall, models, health ------------------------------------------------------------------------------------


async def recall_route(
    state: State,
    q: Annotated[str, Query(min_length=1, max_length=10_000, description="What to look for")],
    directory: Annotated[
        str | None, Query(description="Only this directory's sessions", max_length=4096, pattern=ABSOLUTE_PATH)
    ] = None,
    session_id: Annotated[str | None, Query(pattern=SESSION_REF, description="Only this session")] = None,
    role: Annotated[Literal["user", "assistant", "tool"] | None, Query()] = None,
    since: Annotated[
        float | None, Query(ge=0, le=1e12, description="Entries from this time on (epoch seconds)")
    ] = None,
    until: Annotated[float | None, Query(ge=0, le=1e12, description="Entries before this time")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    context: Annotated[int, Query(ge=0, le=20, description="Neighbours shown around each hit")] = 1,
    reverted: Annotated[bool, Query(description="Include entries a revert hid")] = False,
) -> Response:
    assert role is None or role in SEARCH_ROLES
    sid = (await find_session(state.store, session_id)).id if session_id else None
    result = await recall(
        state.store,
        q,
        directory=_directory(directory),
        session_id=sid,
        role=role,
        since=since,
        until=until,
        limit=limit,
        context=context,
        include_reverted=reverted,
    )
    return answer(result)


async def models(
    state: State, provider: Annotated[str | None, Query(max_length=100, description="Only this provider")] = None
) -> Response:
    return answer(models_overview(state.config, provider=provider))


# --- MCP servers -----------------------------------------------------------------------------------------------


async def mcp_overview(state: State) -> Response:
    return answer(state.manager.mcp.overview())


async def add_mcp_server(state: State, body: AddMcpServer) -> Response:
    table = msgspec.convert(body.model_dump(exclude={"name", "start"}, exclude_none=True), McpServerConfig)
    return answer(await state.manager.mcp.add(body.name, table, start=body.start), 201)


async def remove_mcp_server(state: State, name: Annotated[str, PathParam(max_length=48)]) -> Response:
    await state.manager.mcp.remove(name)
    return answer(Deleted(deleted=[name]))


async def start_mcp_server(state: State, name: Annotated[str, PathParam(max_length=48)]) -> Response:
    return answer(await state.manager.mcp.start(name))


# --- memory notes ----------------------------------------------------------------------------------------------

Directory = Annotated[
    str | None, Query(max_length=4096, pattern=ABSOLUTE_PATH, description="The project's absolute path")
]


async def list_notes(state: State, directory: Directory = None) -> Response:
    return answer(NoteList(notes=await memory_notes(state.store, _directory(directory))))


async def add_note(state: State, body: AddNote) -> Response:
    directory = _directory(body.directory)
    if body.scope == "project" and directory is None:
        raise InvalidInput("a project note needs the project's directory")
    return answer(await remember(state.store, body.text, scope=body.scope, workspace=directory), 201)


async def forget_note(
    state: State, note_id: Annotated[str, PathParam(max_length=100)], directory: Directory = None
) -> Response:
    return answer(await forget(state.store, note_id, _directory(directory)))


async def health(state: State) -> Response:
    sinks = {k: SinkHealth(**v) for k, v in state.sinks.health().items()} if state.sinks is not None else None
    running = len(state.manager.running())
    return answer(
        Health(status="ok", version=__version__, store=type(state.store).__name__, running=running, sinks=sinks)
    )


EXPORT_SCHEMA = {
    "type": "object",
    "description": "A tether JSON export (GET /sessions/{id}/export). Beyond this schema, the import checks what "
    "no schema can say (entries numbered 1..n, as many as the session's `entry_count`, reverts that point back, "
    "valid ids): a document that fails those is refused as a whole (422, `import_format_error`).",
    "required": ["format", "version", "session", "entries"],
    "properties": {
        "format": {"const": EXPORT_FORMAT},
        "version": {"type": "integer", "minimum": 1, "maximum": EXPORT_VERSION},
        "session": {"$ref": "#/components/schemas/SessionInfo"},
        "entries": {"type": "array", "items": {"$ref": "#/components/schemas/Entry"}},
    },
}


def add_routes(app: FastAPI, routes: Routes) -> None:
    def ok(tp: Any, description: str, status: int = 200) -> dict[int, Answer]:
        return {status: Answer(tp, description)}

    s, r = "sessions", "runs"
    add = routes.add
    add(app, "GET", "/sessions", list_sessions, answers=ok(SessionPage, "A page of sessions, most recently updated first"),
        errors=(400, 404), summary="List or search sessions", tag=s)  # fmt: skip
    add(app, "POST", "/sessions", create_session, answers=ok(CreatedSession, "The new session (and its run)", 201),
        errors=(400, 404, 409, 422), summary="Create a session, and start its first run with a prompt", tag=s)  # fmt: skip
    add(app, "POST", IMPORT_PATH, import_session, answers=ok(SessionInfo, "The imported session", 201),
        errors=(400, 413, 422), summary="Import a session from a tether JSON export", tag=s,
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": EXPORT_SCHEMA}}}})  # fmt: skip
    add(app, "GET", "/sessions/{session_id}", get_session, answers=ok(SessionView, "The session, its status, its lease"),
        errors=(400, 404), summary="Get a session", tag=s)  # fmt: skip
    add(app, "PATCH", "/sessions/{session_id}", update_session, answers=ok(SessionInfo, "The session as updated"),
        errors=(400, 404, 409), summary="Retitle a session, or set its state", tag=s)  # fmt: skip
    add(app, "DELETE", "/sessions/{session_id}", delete_session, answers=ok(Deleted, "The sessions deleted"),
        errors=(400, 404, 409), summary="Delete a session and its child sessions", tag=s)  # fmt: skip
    add(app, "GET", "/sessions/{session_id}/children", list_children, answers=ok(SessionPage, "Its child sessions"),
        errors=(400, 404), summary="List a session's child (sub-agent) sessions", tag=s)  # fmt: skip
    add(app, "GET", "/sessions/{session_id}/entries", list_entries, answers=ok(EntryPage, "Entries, in order"),
        errors=(400, 404), summary="Read a range of entries, or the tail", tag=s)  # fmt: skip
    add(app, "GET", "/sessions/{session_id}/entries/{seq}", get_entry, answers=ok(Entry, "The entry"),
        errors=(400, 404), summary="Read one entry", tag=s)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/prompt", prompt,
        answers=ok(RunAccepted, "Taken: follow the session's events after `after`", 202),
        errors=(400, 404, 409, 422), summary="Prompt a session: start a run, or queue or steer the prompt", tag=r)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/cancel", cancel, answers=ok(Outcome, "Whether a run was cancelled"),
        errors=(400, 404), summary="Cancel the session's run and the prompts waiting", tag=r)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/pause", pause, answers=ok(Outcome, "Whether a run was asked to pause"),
        errors=(400, 404), summary="Pause the session's run at its next step", tag=r)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/resume", resume, answers=ok(RunAccepted, "Taken", 202),
        errors=(400, 404, 409, 422), summary="Resume a paused or stopped session", tag=r)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/fork", fork, answers=ok(SessionInfo, "The new session", 201),
        errors=(400, 404), summary="Fork a session (a copy up to an entry)", tag=s)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/revert", revert, answers=ok(Entry, "The revert entry", 201),
        errors=(400, 404, 409), summary="Revert: hide the entries after one from the active history", tag=s)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/compact", compact, answers=ok(CompactionResult, "What was done"),
        errors=(400, 404, 409, 422, 502), summary="Compact a session now", tag=s)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/retitle", retitle_session, answers=ok(SessionInfo, "The session, titled"),
        errors=(400, 404, 409, 502), summary="Have a model title a session again (from its first exchange)", tag=s)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/compact/undo", undo_compact, answers=ok(Entry, "The revert entry", 201),
        errors=(400, 404, 409), summary="Undo the latest compaction", tag=s)  # fmt: skip
    add(app, "GET", "/sessions/{session_id}/context", context, answers=ok(ContextReport, "What the model would see"),
        errors=(400, 404, 422), summary="The context of the session's next step", tag=s)  # fmt: skip
    add(app, "GET", "/sessions/{session_id}/export", export,
        answers={200: Answer(None, "The export: tether JSON (what import reads), Markdown, one HTML page, or a "
                             "Claude Code transcript / Codex rollout (JSON Lines)", schema={"type": "object"},
                             also={"text/markdown": {"type": "string"}, "text/html": {"type": "string"},
                                   "application/x-ndjson": {"type": "string"}})},
        errors=(400, 404), summary="Export a session", tag=s)  # fmt: skip
    add(app, "GET", "/approvals", list_approvals, answers=ok(ApprovalList, "The requests waiting, oldest first"),
        errors=(400, 404), summary="Tool calls that wait for a person's answer", tag=r)  # fmt: skip
    add(app, "POST", "/sessions/{session_id}/approvals/{call_id}", answer_approval,
        answers=ok(Answered, "Answered: the run goes on (or the session resumes to take it)"),
        errors=(400, 404, 409), summary="Answer an approval request: yes (once, session, project) or no", tag=r)  # fmt: skip
    add(app, "GET", "/recall", recall_route, answers=ok(RecallResult, "The hits, best first"),
        errors=(400, 404), summary="Search what was said in earlier sessions", tag=s)  # fmt: skip
    add(app, "GET", "/models", models, answers=ok(ModelsOverview, "The model catalog"),
        summary="Known models, configured providers, the default model", tag="server")  # fmt: skip
    m = "mcp"
    add(app, "GET", "/mcp", mcp_overview, answers=ok(McpOverview, "Each server: its state, tools, last error"),
        summary="The MCP servers whose tools runs get", tag=m)  # fmt: skip
    add(app, "POST", "/mcp/servers", add_mcp_server, answers=ok(McpServerView, "The server (started, or why not)", 201),
        errors=(400, 422), summary="Add (or replace) an MCP server while the server runs", tag=m)  # fmt: skip
    add(app, "DELETE", "/mcp/servers/{name}", remove_mcp_server, answers=ok(Deleted, "The server removed"),
        errors=(400, 404), summary="Stop and remove an MCP server", tag=m)  # fmt: skip
    add(app, "POST", "/mcp/servers/{name}/start", start_mcp_server, answers=ok(McpServerView, "The server now"),
        errors=(400, 404), summary="Start (or restart a failed) MCP server now", tag=m)  # fmt: skip
    add(app, "GET", "/memory", list_notes, answers=ok(NoteList, "The notes of the project and the user, newest first"),
        errors=(400,), summary="Memory notes shown to every run", tag="memory")  # fmt: skip
    add(app, "POST", "/memory", add_note, answers=ok(Note, "The note kept", 201),
        errors=(400, 422), summary="Keep a memory note", tag="memory")  # fmt: skip
    add(app, "DELETE", "/memory/{note_id}", forget_note, answers=ok(Note, "The note forgotten"),
        errors=(400, 404), summary="Forget a memory note", tag="memory")  # fmt: skip
    add(app, "GET", "/health", health, answers=ok(Health, "The server is up"), summary="Health", tag="server")
