"""The event streams: every frame has an `id:` (the session's event number); a client that reconnects with
`Last-Event-ID` mid-run gets what it missed from the journal and then the live events, with nothing lost and
nothing twice; `?after=` replays the same way; an idle stream sends heartbeats; a client that stops reading
is moved to the journal, not held in memory; `/events` tells what happens to every session."""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import struct
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from tether.client import TetherClient
from tether.config import Config, RuntimeConfig
from tether.events import DURABLE_TYPES, Done, Event, RunStarted, TextDelta
from tether.messages import Message
from tether.runtime.activity import (
    ApprovalPending,
    ApprovalSettled,
    SessionCreated,
    SessionDeleted,
    SessionUpdated,
    StatusChanged,
)
from tether.server import ServerSettings

from .conftest import GATES, Served, asks, gated, serve, tool_steps


def frames(server: Served, path: str, count: int, headers: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The first `count` frames of a stream, read raw: each a dict of its fields (comments as ":")."""
    connection = http.client.HTTPConnection(server.host, timeout=60)
    out: list[dict[str, str]] = []
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("content-type", "").startswith("text/event-stream")
        frame: dict[str, str] = {}
        while len(out) < count:
            line = response.readline().decode().rstrip("\r\n")
            if not line:
                if frame:
                    out.append(frame)
                frame = {}
                continue
            name, _, value = line.partition(":")
            frame[name or ":"] = value.removeprefix(" ")
        return out
    finally:
        connection.close()


async def test_every_frame_has_the_events_number_as_its_id(tmp_path: Path) -> None:
    """Live frames (the answer's deltas, which come after the run waited at a gate the test opens once it
    follows) and replayed ones alike."""
    GATES["ids"] = threading.Event()

    def open_gate(frame: Any) -> None:
        seen.append((frame.id, frame.data))
        if '"tool_call_start"' in frame.data:
            GATES["ids"].set()

    with serve(tmp_path, gated("ids")) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="wait, then answer")
            assert created.run is not None
            seen: list[tuple[str, str]] = []
            events = [
                e
                async for e in client.events(
                    created.session.id,
                    after=created.run.after,
                    until_done=True,
                    on_frame=open_gate,
                )
            ]
        assert [int(i) for i, _ in seen] == [e.n for e in events] and any(isinstance(e, TextDelta) for e in events)
        assert all(f'"n":{i}' in data for i, data in seen)
        # replayed from the journal: the durable events and the run's start and end, with the same ids
        replayed = [e for e in events if isinstance(e, (*DURABLE_TYPES, RunStarted, Done))]
        path = f"/sessions/{created.session.id}/events?after=0"
        raw = await asyncio.to_thread(frames, served, path, len(replayed))
        assert [int(f["id"]) for f in raw] == [e.n for e in replayed]


async def test_a_reconnect_mid_run_loses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    """One client reads to the end in one go; another drops its connection mid-run (at a gate the run waits
    at), reconnects with the last id it saw, and reads on: together its two pieces are the first client's
    events exactly, but for the live deltas the replay cannot give (their text is in the durable events)."""
    GATES.pop("mid", None)

    def model(request):  # type: ignore[no-untyped-def]
        tools = sum(m.role == "tool" for m in request.messages)
        if tools < 3:
            name, args = ("wait_for", {"gate": "mid"}) if tools == 1 else ("look", {"what": f"#{tools}"})
            from tether import Message, ToolCallPart

            return Message.assistant(
                f"step {tools}", tool_calls=[ToolCallPart(id=f"c{tools}", name=name, arguments=args)]
            )
        return "all done"

    with serve(tmp_path, model) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="work")
            assert created.run is not None
            sid, after = created.session.id, created.run.after
            whole_task = asyncio.create_task(_collect(client, sid, after))
            first: list[Event] = []
            async for event in client.events(sid, after=after):
                first.append(event)
                if type(event).__name__ == "ToolCallStart" and getattr(event, "name", "") == "wait_for":
                    break  # the connection is closed here, mid-run
            GATES.setdefault("mid", threading.Event()).set()
            second = [e async for e in client.events(sid, after=first[-1].n, until_done=True)]
            whole = await whole_task
    durable = (*DURABLE_TYPES, RunStarted, Done)
    pieces = [e for e in first + second if isinstance(e, durable)]
    expected = [e for e in whole if isinstance(e, durable)]
    assert pieces == expected
    assert len({e.n for e in first + second}) == len(first + second)
    assert isinstance(expected[-1], Done) and expected[-1].text == "all done"


async def _collect(client: TetherClient, sid: str, after: int) -> list[Event]:
    return [e async for e in client.events(sid, after=after, until_done=True)]


async def test_last_event_id_wins_over_after_and_replays_from_the_journal(tmp_path: Path) -> None:
    with serve(tmp_path, tool_steps(1)) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="look once")
            assert created.run is not None
            events = await _collect(client, created.session.id, created.run.after)
        middle = events[len(events) // 2]
        path = f"/sessions/{created.session.id}/events?after=0"
        # a replay comes from the journal: the durable events and the run's end, not the live deltas (which
        # the first client sees or not, depending on how soon it connected)
        rest = [e for e in events if e.n > middle.n and isinstance(e, (*DURABLE_TYPES, RunStarted, Done))]
        raw = await asyncio.to_thread(frames, served, path, len(rest), {"Last-Event-ID": str(middle.n)})
        assert [int(f["id"]) for f in raw] == [e.n for e in rest]


def test_an_idle_stream_sends_heartbeats(tmp_path: Path) -> None:
    with serve(tmp_path, settings=ServerSettings(heartbeat=0.05)) as served:

        async def make() -> str:
            return (await served.state.store.create_session(directory=str(served.workspace))).id

        sid = served.call(make())
        raw = frames(served, f"/sessions/{sid}/events", 2)
        assert all(":" in f and "data" not in f for f in raw)


async def test_a_client_that_stops_reading_is_brought_back_through_the_journal(tmp_path: Path) -> None:
    """A run streams 100,000 deltas, far faster than any client reads them, while this client reads nothing
    at all: the server holds 4 events for it at most (its subscriber buffer here), drops the rest and moves
    it to the journal. Reading afterwards, it gets every durable event once, and fewer deltas than were sent
    (their text is in the durable events): nothing was held for it in memory. (How far behind a client may
    fall before that happens is the manager's, tested in tests/runtime/test_manager.py.)"""
    answer = "w" * 100_000

    def model(request):  # type: ignore[no-untyped-def]
        from tether.providers.scripted import ScriptedResponse

        return ScriptedResponse(answer)

    with serve(tmp_path, model) as served:
        served.state.manager.subscriber_buffer = 4
        # 50,000 tokens, past an unknown model's output limit: allowed here, the answer's length is the point
        served.state.manager.config = Config(runtime=RuntimeConfig(max_answer_tokens=100_000))
        served.provider.chunk_size = 1
        async with TetherClient(served.url) as client:
            sid = (await client.create_session(str(served.workspace))).session.id
            stream = client.events(sid)
            reader = asyncio.create_task(anext(stream))  # subscribed, then reads nothing while the run goes
            while not served.state.manager._sessions.get(sid) or not served.state.manager._sessions[sid].subscribers:
                await asyncio.sleep(0.01)
            await client.prompt(sid, "say it long")
            while (await client.get_session(sid)).status != "idle":
                await asyncio.sleep(0.05)
            got = [await reader]
            async for event in stream:
                got.append(event)
                if isinstance(event, Done):
                    break
            await stream.aclose()
            whole = [e async for e in client.events(sid, after=0, until_done=True)]
    durable = [e.n for e in got if isinstance(e, DURABLE_TYPES)]
    assert durable == [e.n for e in whole if isinstance(e, DURABLE_TYPES)] and len(durable) == len(set(durable))
    assert isinstance(got[-1], Done) and got[-1].text == answer
    deltas = sum(type(e).__name__ == "TextDelta" for e in got)
    assert deltas < len(answer)  # it was moved to the journal rather than sent every delta


async def test_the_activity_stream_tells_what_happens_to_every_session(server: Served) -> None:
    async with TetherClient(server.url) as client:
        feed = client.activity(after=0)
        created = await client.create_session(str(server.workspace), prompt="hello")
        assert created.run is not None
        await _collect(client, created.session.id, created.run.after)
        seen = []
        async for item in feed:
            seen.append(item)
            if isinstance(item, StatusChanged) and item.status == "idle":
                break
        await client.delete_session(created.session.id)
        async for item in feed:
            seen.append(item)
            if isinstance(item, SessionDeleted):
                break
        await feed.aclose()
    kinds = [type(i).__name__ for i in seen]
    assert isinstance(seen[0], SessionCreated) and seen[0].session.id == created.session.id
    assert "StatusChanged" in kinds and "SessionUpdated" in kinds and kinds[-1] == "SessionDeleted"
    assert [i.n for i in seen] == sorted({i.n for i in seen})


async def read_until(feed: AsyncIterator[Any], seen: list[Any], stop: Callable[[Any], bool]) -> None:
    """Append what `feed` gives to `seen` until an item `stop` says is the last."""
    async for item in feed:
        seen.append(item)
        if stop(item):
            return


def idle(item: Any) -> bool:
    return isinstance(item, StatusChanged) and item.status == "idle"


async def test_the_activity_stream_tells_when_a_call_waits_for_a_person_and_when_it_stops_waiting(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, asks("the config")) as served:
        async with TetherClient(served.url) as client:
            feed = client.activity(after=0)
            created = await client.create_session(str(served.workspace), prompt="change it")
            sid = created.session.id
            seen: list[Any] = []
            await read_until(feed, seen, lambda item: isinstance(item, ApprovalPending))
            assert seen[-1].request.call_id == "ch1" and seen[-1].root_id == sid
            await client.answer(sid, "ch1", approved=True)
            await read_until(feed, seen, idle)
            await feed.aclose()
    statuses = [i.status for i in seen if isinstance(i, StatusChanged)]
    assert statuses.index("waiting_for_approval") < statuses.index("idle")
    settled = [i for i in seen if isinstance(i, ApprovalSettled)]
    assert [(s.session_id, s.call_id, s.approved) for s in settled] == [(sid, "ch1", True)]
    after_answer = statuses[statuses.index("waiting_for_approval") + 1 :]
    assert after_answer[0] == "running"  # the run goes on once answered


async def test_a_cancel_while_a_call_waits_leaves_its_request_pending_on_every_face(tmp_path: Path) -> None:
    """Cancelled while it waits for a person: the request stays in the journal, `GET /approvals` lists it
    (with its workspace) and an answer resumes the session. `/events` says the same: no `approval_settled`
    (before, it said settled, and a page built on the feed dropped a request that still waited)."""
    with serve(tmp_path, asks("the config")) as served:
        async with TetherClient(served.url) as client:
            feed = client.activity(after=0)
            created = await client.create_session(str(served.workspace), prompt="change it")
            sid = created.session.id
            seen: list[Any] = []
            await read_until(feed, seen, lambda item: isinstance(item, ApprovalPending))
            assert await client.cancel(sid)
            mark = len(seen)  # the cancel's own: the session's row, then where it stands
            await read_until(
                feed,
                seen,
                lambda i: isinstance(i, StatusChanged) and any(isinstance(u, SessionUpdated) for u in seen[mark:]),
            )
            assert seen[-1].status == "waiting_for_approval"
            (left,) = await client.approvals()
            assert (left.session_id, left.call_id, left.workspace) == (sid, "ch1", str(served.workspace))
            assert not [i for i in seen if isinstance(i, ApprovalSettled)], [type(i).__name__ for i in seen]
            # answered now: the session resumes, its run takes the answer, and the feed says it settled
            await client.answer(sid, "ch1", approved=True)
            await read_until(feed, seen, idle)
            await feed.aclose()
    settled = [(i.call_id, i.approved) for i in seen if isinstance(i, ApprovalSettled)]
    assert settled == [("ch1", True)], [type(i).__name__ for i in seen]


async def test_events_across_a_restart_replay_what_the_follower_missed(tmp_path: Path) -> None:
    """A follower of `/events` that saw the first change, then lost the server, reconnects to the server
    started again on the same store with the number it had: it gets the changes made after it, those of the
    stopped server too, each once (on main the restarted server numbered from 1 again: a silent gap)."""
    with serve(tmp_path) as served:
        async with TetherClient(served.url) as client:
            feed = client.activity(after=0)
            first = await client.create_session(str(served.workspace))
            seen = await anext(feed)
            assert isinstance(seen, SessionCreated) and seen.session.id == first.session.id
            await feed.aclose()
            missed = [await client.create_session(str(served.workspace)) for _ in range(3)]
    with serve(tmp_path) as served:
        async with TetherClient(served.url) as client:
            after_restart = await client.create_session(str(served.workspace))
            feed = client.activity(after=seen.n)
            got = []
            async with asyncio.timeout(60):  # on main the missed ones never came
                async for item in feed:
                    got.append(item)
                    if isinstance(item, SessionCreated) and item.session.id == after_restart.session.id:
                        break
            await feed.aclose()
    created = [i.session.id for i in got if isinstance(i, SessionCreated)]
    assert created == [c.session.id for c in [*missed, after_restart]]
    assert [i.n for i in got] == sorted({i.n for i in got}) and got[0].n > seen.n


async def test_a_number_the_store_never_gave_is_told_to_resync(server: Served) -> None:
    async with TetherClient(server.url) as client:
        made = await client.create_session(str(server.workspace))
        feed = client.activity(after=10**9)
        first = await anext(feed)
        await feed.aclose()
    assert type(first).__name__ == "Resync" and first.n >= 1 and made.session.id


async def test_each_new_session_is_announced_once(server: Served) -> None:
    async with TetherClient(server.url) as client:
        feed = client.activity(after=0)
        opener = await client.create_session(str(server.workspace))
        first = await anext(feed)  # the feed is followed from here on: the store watcher looks
        assert isinstance(first, SessionCreated) and first.session.id == opener.session.id
        made = [await client.create_session(str(server.workspace)) for _ in range(2)]
        await asyncio.sleep(2.5)  # two looks of the store watcher, which used to tell them again
        marker = await client.create_session(str(server.workspace))
        got = []
        async for item in feed:
            got.append(item)
            if isinstance(item, SessionCreated) and item.session.id == marker.session.id:
                break
        await feed.aclose()
    about = [getattr(i, "session", None) for i in got]
    ids = [s.id for s in about if s is not None]
    for m in made:
        assert ids.count(m.session.id) == 1, [type(i).__name__ for i in got]


def test_a_replay_to_a_client_that_went_away_stops_quietly(tmp_path: Path, caplog: Any) -> None:
    """A client asks for a long session's events from the start and goes away (its connection reset) after
    the first bytes: the replay stops there, without writing the frames left into the closed socket (asyncio
    logs each such write: "socket.send() raised exception."), and the subscription ends."""
    with serve(tmp_path) as served:

        async def fill() -> str:
            store = served.state.store
            info = await store.create_session(directory=str(served.workspace))
            for i in range(0, 3000, 100):
                batch: list[Message] = []
                for j in range(i, i + 100):
                    batch += [
                        Message.user(f"question {j} " + "q" * 4000),
                        Message.assistant(f"answer {j} " + "a" * 4000),
                    ]
                await store.append(info.id, batch)
            return str(info.id)

        sid = served.call(fill())
        caplog.set_level(logging.WARNING)
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", int(served.url.rsplit(":", 1)[1])), timeout=30) as sock:
                sock.sendall(f"GET /sessions/{sid}/events?after=0 HTTP/1.1\r\nHost: {served.host}\r\n\r\n".encode())
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not FIN
        manager = served.state.manager

        def following() -> int:
            return sum(len(entry.subscribers) for entry in list(manager._sessions.values()))

        for _ in range(1000):  # the replay notices within a write or two; the session's run is idle
            if following() == 0:
                break
            threading.Event().wait(0.01)
        assert following() == 0
        threading.Event().wait(0.5)  # what a replay still writing would log meanwhile
    noisy = [r for r in caplog.records if "socket.send() raised exception" in r.getMessage()]
    assert noisy == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors[:5]]
