"""The REST routes against a real server on loopback, through `tether.client`: sessions (create, list with
paging, directory filter and search, get, retitle, state, delete, children), entries (range, tail, one),
prompts (run, queue, refuse when busy with the holder), cancel, fork, revert, compact and its undo, the
context, export and import, recall, models, health."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
from pathlib import Path

import pytest

from tether.client import TetherClient
from tether.errors import (
    ConfigError,
    ImportFormatError,
    InvalidInput,
    NotFound,
    NotYet,
    SessionBusy,
    SessionNotFound,
)
from tether.events import Done, Event, RunStarted
from tether.messages import Message, Revert, TitleChange
from tether.server import ServerSettings
from tether.store import SqliteStore

from .conftest import GATES, Served, asks, gated, serve, tool_steps


async def finish(client: TetherClient, session_id: str, after: int) -> list[Event]:
    return [e async for e in client.events(session_id, after=after, until_done=True)]


async def test_a_session_is_created_with_its_first_run_and_read_back(server: Served) -> None:
    async with TetherClient(server.url) as client:
        created = await client.create_session(str(server.workspace), prompt="hello", title="greeting")
        assert created.run is not None and created.session.title == "greeting"
        events = await finish(client, created.session.id, created.run.after)
        assert isinstance(events[0], RunStarted) and isinstance(events[-1], Done)
        assert events[-1].text == "answer to hello"
        view = await client.get_session(created.session.id)
        assert view.status == "idle" and view.session.message_count == 2 and view.lease is None
        page = await client.entries(created.session.id)
        texts = [e.body.text for e in page.entries if isinstance(e.body, Message)]
        assert texts == ["hello", "answer to hello"] and page.last_seq == len(page.entries)
        # the person's title first, journaled as the session was made: journaled beside the run, it took the
        # number the run's next entry expected (seq_conflict), and a title model could replace it
        assert page.entries[0].body == TitleChange(title="greeting") and view.session.title == "greeting"
        one = await client.entry(created.session.id, page.entries[-1].seq)
        assert one == page.entries[-1]
        tail = await client.entries(created.session.id, tail=1)
        assert tail.entries == [page.entries[-1]]
        with pytest.raises(NotFound):
            await client.entry(created.session.id, 999)


async def test_a_bad_option_leaves_no_session_behind(server: Served) -> None:
    async with TetherClient(server.url) as client:
        with pytest.raises(InvalidInput, match="tool"):
            await client.create_session(str(server.workspace), prompt="x", tools="no_such_tool")
        with pytest.raises(InvalidInput, match="absolute"):
            await client.create_session("relative/dir")
        assert (await client.list_sessions()).items == []


async def test_listing_pages_filters_by_directory_and_searches(server: Served, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    async with TetherClient(server.url) as client:
        made = [(await client.create_session(str(server.workspace), title=f"s{i}")).session.id for i in range(5)]
        elsewhere = (await client.create_session(str(other), prompt="the zebra migration plan")).session.id
        seen: list[str] = []
        cursor = None
        while True:
            page = await client.list_sessions(directory=str(server.workspace), limit=2, cursor=cursor)
            seen += [s.id for s in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert sorted(seen) == sorted(made) and len(seen) == len(set(seen))
        await finish(client, elsewhere, 0)
        found = await client.list_sessions(query="zebra")
        assert [s.id for s in found.items] == [elsewhere]
        assert (await client.list_sessions(query="zebra", directory=str(server.workspace))).items == []


async def test_a_busy_session_refuses_an_unqueued_prompt_with_its_holder_and_queues_the_rest(
    tmp_path: Path,
) -> None:
    GATES.pop("busy", None)
    with serve(tmp_path, gated("busy")) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="first")
            assert created.run is not None
            sid = created.session.id
            events = client.events(sid, after=created.run.after)
            assert isinstance(await anext(events), RunStarted)
            with pytest.raises(SessionBusy) as busy:
                await client.prompt(sid, "not now", queue=False)
            assert busy.value.holder and busy.value.session_id == sid
            queued = await client.prompt(sid, "second")
            assert queued.queued
            with pytest.raises(SessionBusy):
                await client.revert(sid, 0)
            with pytest.raises(SessionBusy):
                await client.delete_session(sid)
            GATES.setdefault("busy", __import__("threading").Event()).set()
            dones = []
            async for event in events:
                if isinstance(event, Done):
                    dones.append(event.text)
                    if len(dones) == 2:
                        break
            await events.aclose()
            assert dones == ["answered first", "answered second"]


async def test_cancel_stops_the_run_and_keeps_what_it_did(tmp_path: Path) -> None:
    GATES.pop("never", None)
    with serve(tmp_path, gated("never")) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="wait")
            assert created.run is not None
            sid = created.session.id
            events = client.events(sid, after=created.run.after)
            async for event in events:
                if type(event).__name__ == "ToolCallStart":
                    break
            assert await client.cancel(sid)
            async for event in events:
                if type(event).__name__ == "Error":
                    assert event.code == "cancelled"  # type: ignore[attr-defined]
                    break
            await events.aclose()
            assert (await client.get_session(sid)).status == "idle"
            assert not await client.cancel(sid)
            page = await client.entries(sid)
            assert page.entries[0].body.text == "wait"  # type: ignore[union-attr]


async def test_fork_revert_retitle_state_and_delete(server: Served) -> None:
    async with TetherClient(server.url) as client:
        created = await client.create_session(str(server.workspace), prompt="one")
        sid = created.session.id
        assert created.run is not None
        await finish(client, sid, created.run.after)
        run = await client.prompt(sid, "two")
        await finish(client, sid, run.after)
        fork = await client.fork(sid, at=2, title="a fork")
        assert fork.forked_from == sid and fork.forked_at == 2 and fork.entry_count == 2
        entry = await client.revert(sid, 2, reason="back")
        assert isinstance(entry.body, Revert) and entry.body.to_seq == 2
        retitled = await client.update_session(sid, title="renamed", state="paused")
        assert retitled.title == "renamed" and retitled.state == "paused"
        last = await client.entries(sid, tail=1, active=False)
        assert isinstance(last.entries[0].body, TitleChange)
        assert await client.delete_session(sid) == [sid]
        with pytest.raises(SessionNotFound):
            await client.get_session(sid)
        assert (await client.get_session(fork.id)).session.id == fork.id


async def test_compact_context_and_undo(server: Served) -> None:
    async with TetherClient(server.url) as client:
        sid = (await client.create_session(str(server.workspace), model="local/smollm2-135m")).session.id
        await asyncio.to_thread(_fill, server, sid)
        with pytest.raises(ConfigError, match="unknown model"):
            await client.context(sid, model="scripted/nothing")
        context = await client.context(sid)
        assert context.session_id == sid and len(context.messages) == 80
        result = await client.compact(sid, mechanical=True, keep_tokens=200)
        assert result.entry is not None and result.strategy == "deterministic"
        after = await client.context(sid)
        assert after.compaction_seq == result.entry.seq and len(after.messages) < 80
        undo = await client.undo_compaction(sid)
        assert isinstance(undo.body, Revert) and undo.body.to_seq == result.entry.seq - 1
        with pytest.raises(NotFound):
            await client.undo_compaction(sid)


def _fill(server: Served, sid: str) -> None:
    async def fill() -> None:
        for i in range(40):
            await server.state.store.append(
                sid, [Message.user(f"question {i} " + "words " * 30), Message.assistant(f"answer {i}")]
            )

    server.call(fill())


async def test_export_and_import_round_trip(server: Served) -> None:
    async with TetherClient(server.url) as client:
        created = await client.create_session(str(server.workspace), prompt="export me")
        assert created.run is not None
        sid = created.session.id
        await finish(client, sid, created.run.after)
        data = await client.export(sid)
        assert json.loads(data)["session"]["id"] == sid
        markdown = (await client.export(sid, format="markdown")).decode()
        assert "export me" in markdown
        copy = await client.import_session(data, new_id=True)
        assert copy.id != sid and copy.entry_count == 2
        with pytest.raises(ImportFormatError):
            await client.import_session(b'{"not": "an export"}')


async def test_recall_models_health_and_children(server: Served) -> None:
    async with TetherClient(server.url) as client:
        created = await client.create_session(str(server.workspace), prompt="the quokka is in the garden")
        assert created.run is not None
        await finish(client, created.session.id, created.run.after)
        found = await client.recall("quokka", directory=str(server.workspace))
        assert found.hits and found.hits[0].session_id == created.session.id
        models = await client.models()
        assert models.default and models.providers and models.models
        health = await client.health()
        assert health.status == "ok" and health.store == "SqliteStore"
        assert (await client.children(created.session.id)).items == []


async def test_steps_with_tools_run_to_their_end(tmp_path: Path) -> None:
    with serve(tmp_path, tool_steps(3)) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="look three times")
            assert created.run is not None
            events = await finish(client, created.session.id, created.run.after)
            names = [type(e).__name__ for e in events]
            assert names.count("ToolCallStart") == 3 and names.count("ToolCallComplete") == 3
            assert isinstance(events[-1], Done) and events[-1].steps == 4


def test_errors_are_typed_bodies_never_tracebacks(server: Served) -> None:
    cases = [
        ("GET", "/sessions/ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", None, 404, "session_not_found"),
        ("GET", "/sessions/..", None, 422, "invalid_request"),  # the spec's pattern of a session id
        ("GET", "/sessions/a..b/entries", None, 422, "invalid_request"),
        ("GET", "/sessions/%2e%2e%2fetc", None, 404, "not_found"),
        ("GET", "/sessions?limit=0", None, 422, "invalid_request"),
        ("GET", "/sessions?cursor=!!", None, 422, "invalid_request"),  # the spec's pattern of a cursor
        ("GET", "/sessions?cursor=bm90IGEgY3Vyc29y", None, 404, "unknown_name"),  # well-formed, names no page
        ("POST", "/sessions", {"directory": 3}, 422, "invalid_request"),
        ("POST", "/sessions", {"directory": "/", "surprise": 1}, 422, "invalid_request"),
        ("DELETE", "/health", None, 405, "method_not_allowed"),
        ("GET", "/nowhere", None, 404, "not_found"),
    ]
    for method, path, body, status, code in cases:
        got_status, text = raw_request(server, method, path, body)
        assert (got_status, json.loads(text)["error"]["code"]) == (status, code), (path, text)
        assert "Traceback" not in text


def test_a_body_that_is_not_json_is_said_so(server: Served) -> None:
    """Truncated JSON named the character where decoding stopped as if it were a field ("body.13"); JSON sent
    as text/plain was "not a valid dictionary", when what was wrong is its content type."""
    connection = http.client.HTTPConnection(server.host, timeout=30)
    try:
        for data, kind, said in (
            (b'{"directory": "/tmp"', "application/json", "not valid JSON at character"),
            (json.dumps({"directory": str(server.workspace)}).encode(), "text/plain", "(it came as text/plain)"),
        ):
            connection.request("POST", "/sessions", body=data, headers={"Content-Type": kind})
            response = connection.getresponse()
            error = json.loads(response.read())["error"]
            assert response.status == 422 and error["code"] == "invalid_request", error
            assert said in error["message"] and error["details"]["problems"][0]["where"] == "body", error
    finally:
        connection.close()


def raw_request(
    server: Served, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """A request sent as it is written (http.client leaves `..` in a path alone, as an attacker would)."""
    connection = http.client.HTTPConnection(server.host, timeout=30)
    try:
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


async def test_a_server_that_stops_cancels_its_runs_through_the_manager(tmp_path: Path) -> None:
    """Stopping mid-run (grace 0): the run is cancelled as a cancel does (its partial work kept, its lease
    given back), its followers get its end, and their stream then closes."""
    GATES.pop("stop", None)
    with serve(tmp_path, gated("stop"), settings=ServerSettings(shutdown_grace=0)) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="long job")
            assert created.run is not None
            sid = created.session.id
            seen: list[Event] = []
            events = client.events(sid, after=created.run.after, reconnect=0)
            async for event in events:
                seen.append(event)
                if type(event).__name__ == "ToolCallStart":
                    break
            served.server.should_exit = True
            with contextlib.suppress(Exception):  # the stream closes when the server is gone
                async for event in events:
                    seen.append(event)
            store = SqliteStore(tmp_path / "server.db")
    assert type(seen[-1]).__name__ == "Error" and seen[-1].code == "cancelled"  # type: ignore[attr-defined]
    async with store:
        assert await store.get_lease(sid) is None
        assert (await store.read(sid))[0].body.text == "long job"  # type: ignore[union-attr]


async def test_a_call_that_asks_waits_for_an_answer_over_http(tmp_path: Path) -> None:
    with serve(tmp_path, asks("the config")) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="change it")
            assert created.run is not None
            sid = created.session.id
            events = client.events(sid, after=created.run.after)
            async for event in events:
                if type(event).__name__ == "ApprovalRequested":
                    break
            (waiting,) = await client.approvals()
            assert waiting.session_id == sid and waiting.call_id == "ch1" and waiting.tool == "change"
            assert (await client.approvals(sid)) == [waiting]
            assert (await client.get_session(sid)).status in ("running", "waiting_for_approval")
            with pytest.raises(InvalidInput):
                await client.answer(sid, "no_such_call", approved=True)
            assert await client.answer(sid, "ch1", approved=True) is None  # the waiting run goes on
            async for event in events:
                if isinstance(event, Done):
                    assert event.text == "result: changed the config"
                    break
            await events.aclose()
            assert await client.approvals() == []


async def test_a_sessions_own_rules_are_set_over_http_and_its_next_run_applies_them(tmp_path: Path) -> None:
    with serve(tmp_path, asks("the config")) as served:
        async with TetherClient(served.url) as client:
            sid = (await client.create_session(str(served.workspace))).session.id
            with pytest.raises(InvalidInput, match="is not a rule"):
                await client.update_session(sid, rules={"allow": ["change(("]})
            with pytest.raises(InvalidInput, match="is not a rule"):  # an empty pattern: the spec says no
                await client.update_session(sid, rules={"deny": ["bash()"]})
            assert "permissions" not in (await client.get_session(sid)).session.metadata  # nothing half-written
            info = await client.update_session(sid, rules={"allow": ["change"], "deny": ["bash(rm *)"]})
            assert info.metadata["permissions"] == {"deny": ["bash(rm *)"], "allow": ["change"]}
            run = await client.prompt(sid, "change it")
            events = [e async for e in client.events(sid, after=run.after, until_done=True)]
            assert not [e for e in events if type(e).__name__ == "ApprovalRequested"]  # allowed by the session's rule
            assert isinstance(events[-1], Done) and events[-1].text == "result: changed the config"
            cleared = await client.update_session(sid, rules={})
            assert "permissions" not in cleared.metadata


async def test_the_server_titles_a_session_again(server: Served) -> None:
    async with TetherClient(server.url) as client:
        sid = (await client.create_session(str(server.workspace), title="hand-made")).session.id
        (made,) = (await client.entries(sid)).entries  # a person's title: a run's title model leaves it
        assert made.body == TitleChange(title="hand-made")
        with pytest.raises(NotYet, match="no exchange to title yet"):  # 409: not yet, nothing failed
            await client.retitle(sid)
        await asyncio.to_thread(
            server.call, server.state.store.append(sid, [Message.user("fix the parser"), Message.assistant("Fixed.")])
        )
        info = await client.retitle(sid)
        # the test server's model answers "answer to <what it read>": its title, cleaned
        assert info.title is not None and info.title.startswith("answer to User: fix the parser")
        assert "\\n" not in info.title and len(info.title) <= 80
        assert (await client.get_session(sid)).session.title == info.title
        request = server.provider.requests[-1]
        assert request.system is not None and "title" in request.system and request.max_output_tokens == 32


async def test_a_request_left_by_a_stopped_server_is_listed_by_the_next_one(tmp_path: Path) -> None:
    """`GET /approvals` with no filter lists what waits in the store, also a request whose run stopped with
    its server (on main it listed only what this process's runs waited on)."""
    with serve(tmp_path, asks("the config")) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="change it")
            assert created.run is not None
            sid = created.session.id
            events = client.events(sid, after=created.run.after)
            async for event in events:
                if type(event).__name__ == "ApprovalRequested":
                    break
            await events.aclose()
    with serve(tmp_path, asks("the config")) as served:  # the run stopped with its server; the request is journaled
        async with TetherClient(served.url) as client:
            (left,) = await client.approvals()
            assert left.session_id == sid and left.call_id == "ch1"
            assert await client.approvals(sid) == [left]
            assert (await client.get_session(sid)).status == "waiting_for_approval"
            run = await client.answer(sid, "ch1", approved=True)  # resumes the session, whose run takes it
            assert run is not None
            done = [e async for e in client.events(sid, after=run.after, until_done=True)]
            assert isinstance(done[-1], Done) and done[-1].text == "result: changed the config"
            assert await client.approvals() == []


async def test_a_prompt_for_a_session_another_process_runs_is_refused_never_dropped(server: Served) -> None:
    """While a live process (here a `sleep`, named by its pid on this host) holds the session's lease, a
    prompt is refused with 409, whatever the queue option, and nothing is journaled (on main: 202 with
    `queued: false`, and the prompt was lost). Once that process is gone, its lease no longer shows, and the
    same prompt runs."""
    import socket
    import subprocess

    holder = subprocess.Popen(["sleep", "60"])
    try:
        async with TetherClient(server.url) as client:
            sid = (await client.create_session(str(server.workspace))).session.id
            await asyncio.to_thread(
                server.call,
                server.state.store.acquire_lease(
                    sid, "run_elsewhere", ttl=300, pid=holder.pid, host=socket.gethostname()
                ),
            )
            view = await client.get_session(sid)
            assert view.status == "busy_elsewhere" and view.lease is not None
            for queue in (True, False):
                with pytest.raises(SessionBusy, match="run_elsewhere"):
                    await client.prompt(sid, "are you there?", queue=queue)
            with pytest.raises(SessionBusy):
                await client.resume(sid)
            assert (await client.get_session(sid)).session.entry_count == 0  # nothing taken, nothing lost
            holder.kill()
            holder.wait(10)
            view = await client.get_session(sid)  # a dead holder's lease is not listed: it is taken over at once
            assert view.status == "idle" and view.lease is None
            run = await client.prompt(sid, "are you there?")
            assert run.queued is False and run.steered is False
            events = [e async for e in client.events(sid, after=run.after, until_done=True)]
            assert isinstance(events[-1], Done)
            assert (await client.get_session(sid)).session.entry_count == 2
    finally:
        holder.kill()
        holder.wait(10)


async def test_booleans_and_strings_are_not_numbers_and_nothing_is_done_with_them(server: Served) -> None:
    """`{"to_seq": false}` once reverted a session to nothing (false taken as 0); a share with
    `{"expires_in": true}` made a one-second link; `"5"` was 5. Each is refused whole (422) and changes nothing."""
    async with TetherClient(server.url) as client:
        sid = (await client.create_session(str(server.workspace))).session.id
        await asyncio.to_thread(_fill, server, sid)
        before = (await client.get_session(sid)).session.entry_count
        cases: list[tuple[str, dict[str, object]]] = [
            (f"/sessions/{sid}/revert", {"to_seq": False}),
            (f"/sessions/{sid}/revert", {"to_seq": True}),
            (f"/sessions/{sid}/revert", {"to_seq": "5"}),
            (f"/sessions/{sid}/fork", {"at": False}),
            (f"/sessions/{sid}/fork", {"at": "3"}),
            (f"/sessions/{sid}/shares", {"expires_in": True}),
            (f"/sessions/{sid}/compact", {"keep_tokens": True}),
            (f"/sessions/{sid}/prompt", {"prompt": "x", "max_steps": True}),
        ]
        for path, body in cases:
            status, text = raw_request(server, "POST", path, body)
            assert (status, json.loads(text)["error"]["code"]) == (422, "invalid_request"), (path, body, text)
        assert (await client.get_session(sid)).session.entry_count == before
        assert (await client.list_sessions()).items[0].id == sid and len((await client.list_sessions()).items) == 1
        assert await client.shares(sid) == []
        # a number with no fraction is the integer JSON Schema says it is; one past the journal names no entry
        status, _ = raw_request(server, "POST", f"/sessions/{sid}/revert", {"to_seq": float(before)})
        assert status == 201
        status, text = raw_request(server, "POST", f"/sessions/{sid}/fork", {"at": before + 5})
        assert (status, json.loads(text)["error"]["code"]) == (404, "not_found")
