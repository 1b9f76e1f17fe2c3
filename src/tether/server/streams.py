"""The event streams (Server-Sent Events): `GET /sessions/{id}/events`, a session's run events, and `GET
/events`, what happens to every session. Each frame's `id:` is the event's number (the session's own: a
sub-agent's event, numbered in its own session, carries the number of its parent's last event, so that a
reconnect never skips the parent's); `Last-Event-ID` (or `?after=`) replays what was missed, the durable
events from the journal, then goes on live, with no gap and no duplicate (`SessionManager.subscribe`, whose
buffer per client is bounded: one that falls behind is brought back through the journal). A comment every
`heartbeat` seconds keeps an idle stream alive; a client that reads nothing for `SEND_TIMEOUT` seconds is
dropped (it reconnects with its `Last-Event-ID`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import FastAPI, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..errors import InvalidInput
from ..events import Event, event_json
from ..messages import encode_json
from ..runtime.activity import Activity
from ..runtime.lookup import find_session
from ..wire import EVENT_NUMBER, MAX_EVENT
from .openapi import Answer, Routes
from .routes import Ref, State
from .state import ServerState

SEND_TIMEOUT = 60.0
"""Seconds a frame may wait for a client that does not read before the stream is closed."""
WRITE_BYTES = 16 * 1024
"""Frames are written together up to about this many bytes at a time."""
EXTRA_TYPES: tuple[Any, ...] = ()
STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def _after(last_event_id: str | None, after: int | None) -> int | None:
    """Where a stream starts: the `Last-Event-ID` a reconnecting client sends wins over `?after=`."""
    if last_event_id is not None and last_event_id.strip():
        value = last_event_id.strip()
        if not value.isdigit() or int(value) > MAX_EVENT:
            raise InvalidInput(f"Last-Event-ID must be an event number, not {value[:40]!r}")
        return int(value)
    return after


def _response(state: ServerState, frames: AsyncIterator[ServerSentEvent] | AsyncIterator[bytes]) -> EventSourceResponse:
    return EventSourceResponse(
        frames,
        ping=state.settings.heartbeat,
        send_timeout=SEND_TIMEOUT,
        headers=STREAM_HEADERS,
        # when sse-starlette sees the server stop, the stream gets the grace period: the manager's shutdown
        # ends it after the runs' last events went out
        shutdown_event=anyio.Event(),
        shutdown_grace_period=state.settings.shutdown_grace + 1.0,
    )


async def session_events(
    state: State,
    request: Request,
    session_id: Ref,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT, description="Replay the events after this number, then go live")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", pattern=EVENT_NUMBER)] = None,
) -> EventSourceResponse:
    info = await find_session(state.store, session_id)
    start = _after(last_event_id, after)
    if start is None:
        start = await state.manager.position(info.id)

    async def frames() -> AsyncIterator[bytes]:
        # What piled up since the last write goes out in one write (up to WRITE_BYTES): with many followers,
        # a write (and its send timeout) per event was most of the server's time. The cap keeps what a client
        # that stopped reading holds (its last write waits in the transport) near what one event was.
        # An event's JSON has no line break.
        own = start
        async for batch in state.manager.subscribe_batches(info.id, after=start):
            chunk = bytearray()
            for event in batch:
                if event.session_id == info.id:
                    own = event.n
                chunk += b"id: %d\r\ndata: %s\r\n\r\n" % (own, event_json(event))
                if len(chunk) >= WRITE_BYTES:
                    yield bytes(chunk)
                    chunk = bytearray()
            if chunk:
                yield bytes(chunk)

    return _response(state, frames())


async def activity(
    state: State,
    request: Request,
    after: Annotated[
        int | None, Query(ge=0, le=MAX_EVENT, description="Replay what the server keeps after this number")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", pattern=EVENT_NUMBER)] = None,
) -> EventSourceResponse:
    start = _after(last_event_id, after)

    async def frames() -> AsyncIterator[ServerSentEvent]:
        item: Activity
        async for item in state.manager.follow_activity(start):
            yield ServerSentEvent(data=encode_json(item).decode(), id=str(item.n))

    return _response(state, frames())


EVENT_STREAM = {
    "type": "string",
    "description": "text/event-stream: frames `id: N` and `data: JSON` (the item schema), and `: ping` comments",
}


def add_routes(app: FastAPI, routes: Routes) -> None:
    routes.add(
        app,
        "GET",
        "/sessions/{session_id}/events",
        session_events,
        answers={
            200: Answer(Event, "The session's events: each frame's data one event", "text/event-stream", EVENT_STREAM)
        },
        errors=(400, 404),
        summary="Follow a session's events (SSE; Last-Event-ID or ?after= replays what was missed)",
        tag="events",
        response_class=EventSourceResponse,
    )
    routes.add(
        app,
        "GET",
        "/events",
        activity,
        answers={
            200: Answer(
                Activity,
                "What happens to the sessions: each frame's data one activity",
                "text/event-stream",
                EVENT_STREAM,
            )
        },
        errors=(400,),
        summary="Follow every session: created, updated, deleted, status (SSE)",
        tag="events",
        response_class=EventSourceResponse,
    )
