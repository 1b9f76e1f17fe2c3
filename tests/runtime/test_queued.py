"""The durable prompt queue from the runtime's side (`queued.py`, `Queueing`): what a row holds, a manager
that picks up what a killed one queued (in order, once each), a row whose prompt a dead run journaled already
(dropped, not run again), a row no version can read (dropped and said), what cannot be queued durably (a
program's own tools: memory only), and a cancel that drops what waited. The real kill -9 of `tether serve`
is in tests/server/test_queued_prompts.py."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from tether.config import Config
from tether.events import Done
from tether.messages import Message
from tether.providers.base import ModelRequest
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime import queued
from tether.runtime.launch import RunRequest
from tether.runtime.manager import SessionManager
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry, function_tool

GATE: list[asyncio.Event] = []
"""The gate of the current test (an event belongs to the loop of the test that waits on it)."""


@function_tool(read_only=True)
async def hold() -> str:
    """Wait until the test lets go."""
    await GATE[-1].wait()
    return "let go"


def respond(request: ModelRequest) -> Message | str:
    last = request.messages[-1]
    if last.role == "user" and last.text == "hold":
        from tether.messages import ToolCallPart

        return Message.assistant(tool_calls=[ToolCallPart(id="h1", name="hold", arguments={})])
    return f"answer to {last.text}" if last.role == "user" else "held"


def manager(store: SqliteStore, tmp_path: Path) -> SessionManager:
    provider = ScriptedProvider(respond, chunk_size=4)

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider, "test", unknown_model("scripted", "test"))

    defaults = RunRequest(None, directory=tmp_path, registry=ToolRegistry([hold]))
    return SessionManager(store, config=Config(), defaults=defaults, resolve=resolve)


async def texts(store: SqliteStore, sid: str) -> list[str]:
    return [e.body.text for e in await store.read(sid) if isinstance(e.body, Message) and e.body.role != "tool"]


async def settled(m: SessionManager, sid: str) -> None:
    for _ in range(2000):
        if not m.running() and sid not in m._sessions:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the queue was not run")


def test_a_row_holds_the_prompt_and_its_wire_settings_only() -> None:
    assert queued.wire_settings({"model": "m", "allow": ("bash(ls)",)}) == {"model": "m", "allow": ["bash(ls)"]}
    assert queued.wire_settings({"registry": object()}) is None  # a program's own tools: memory only
    body = queued.encode("hi", {"max_steps": 3, "deny": ["bash(rm*)"]})
    from tether.store.records import QueuedPrompt

    prompt, fields = queued.decode(QueuedPrompt(id=7, session_id="s", after_seq=0, body=body, queued_at=0.0))
    assert prompt.text == "hi" and prompt.metadata == {queued.QUEUED_KEY: 7}
    assert fields == {"max_steps": 3, "deny": ("bash(rm*)",)}


async def test_a_prompt_queued_behind_a_run_is_in_the_store_until_its_run_and_then_gone(tmp_path: Path) -> None:
    GATE.append(asyncio.Event())
    store = SqliteStore(tmp_path / "t.db")
    m = manager(store, tmp_path)
    try:
        first = await m.start(None, "hold")
        sid = first.session_id
        while sid not in m.running():
            await asyncio.sleep(0.01)
        second = await m.start(sid, "two", max_steps=5)
        local = await m.start(sid, "three", registry=ToolRegistry([hold]))  # not a wire setting: memory only
        assert second.queued and second.queued_id is not None and local.queued and local.queued_id is None
        assert [q.id for q in await store.queued_prompts(sid)] == [second.queued_id]
        GATE[-1].set()
        for handle in (first, second, local):
            assert isinstance(await asyncio.wait_for(handle.result(), 20), Done)
        assert await store.queued_prompts(sid) == []
        assert await texts(store, sid) == ["hold", "", "held", "two", "answer to two", "three", "answer to three"]
        journaled = [e.body for e in await store.read(sid) if isinstance(e.body, Message) and e.body.text == "two"]
        assert journaled[0].metadata == {queued.QUEUED_KEY: second.queued_id}
    finally:
        await m.shutdown()
        await store.close()


async def test_a_new_manager_runs_what_a_dead_one_queued_in_order_once_each(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    sid = (await store.create_session(directory=str(tmp_path))).id
    await store.append(sid, [Message.user("first"), Message.assistant("first answered")])
    for text in ("p1", "p2", "p3"):
        await store.enqueue_prompt(sid, queued.encode(text, {}))
    # p1's run journaled it and died before dropping its row: it is not run again
    (p1, _, _) = await store.queued_prompts(sid)
    await store.append(sid, [queued.tagged("p1", p1.id), Message.assistant("answer to p1")])
    m = manager(store, tmp_path)
    try:
        assert await m.recover_queued() == 1
        await settled(m, sid)
        assert await texts(store, sid) == [
            "first", "first answered", "p1", "answer to p1", "p2", "answer to p2", "p3", "answer to p3",
        ]  # fmt: skip
        assert await store.queued_prompts(sid) == [] and await store.queued_sessions() == []
        assert await m.recover_queued() == 0
    finally:
        await m.shutdown()
        await store.close()


async def test_two_managers_that_both_pick_up_a_queue_run_each_prompt_once(tmp_path: Path) -> None:
    """Two processes restarted at once (two workers) both find the queue: the lease and `admit` decide."""
    stores = [SqliteStore(tmp_path / "t.db"), SqliteStore(tmp_path / "t.db")]
    sid = (await stores[0].create_session(directory=str(tmp_path))).id
    for i in range(6):
        await stores[0].enqueue_prompt(sid, queued.encode(f"p{i}", {}))
    managers = [manager(s, tmp_path) for s in stores]
    try:
        await asyncio.gather(*(m.recover_queued() for m in managers))
        for m in managers:
            await settled(m, sid)
        assert await stores[0].queued_prompts(sid) == []
        prompts = [t for t in await texts(stores[0], sid) if not t.startswith("answer")]
        assert prompts == [f"p{i}" for i in range(6)]
    finally:
        for m in managers:
            await m.shutdown()
        for s in stores:
            await s.close()


async def test_a_row_that_cannot_be_read_is_dropped_and_said(tmp_path: Path, caplog: Any) -> None:
    store = SqliteStore(tmp_path / "t.db")
    sid = (await store.create_session(directory=str(tmp_path))).id
    await store.enqueue_prompt(sid, b"not json")
    await store.enqueue_prompt(sid, queued.encode("fine", {"no_such_option": 1}))
    await store.enqueue_prompt(sid, queued.encode("ok", {}))
    m = manager(store, tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="tether.runtime"):
            await m.recover_queued()
            await settled(m, sid)
        assert await texts(store, sid) == ["ok", "answer to ok"]
        assert await store.queued_prompts(sid) == []
        assert sum("cannot run" in r.getMessage() for r in caplog.records) == 2
    finally:
        await m.shutdown()
        await store.close()


async def test_cancel_drops_what_waited_and_a_shutdown_keeps_it(tmp_path: Path) -> None:
    GATE.append(asyncio.Event())
    store = SqliteStore(tmp_path / "t.db")
    m = manager(store, tmp_path)
    try:
        first = await m.start(None, "hold")
        sid = first.session_id
        while sid not in m.running():
            await asyncio.sleep(0.01)
        await m.start(sid, "dropped")
        assert len(await store.queued_prompts(sid)) == 1
        assert await m.cancel(sid) is True
        assert await store.queued_prompts(sid) == []
        second = await m.start(sid, "hold")
        while sid not in m.running():
            await asyncio.sleep(0.01)
        kept = await m.start(sid, "kept")
    finally:
        await m.shutdown()  # a server stopping: what waits stays queued for the next one
    assert second.finished and kept.finished
    assert [q.id for q in await store.queued_prompts(sid)] == [kept.queued_id]
    await store.close()


@pytest.mark.parametrize("bad", [b"", b"[]", b'{"prompt": 3}'])
def test_bodies_of_the_wrong_shape_are_refused_by_decode(bad: bytes) -> None:
    from tether.store.records import QueuedPrompt

    with pytest.raises(Exception) as caught:
        queued.decode(QueuedPrompt(id=1, session_id="s", after_seq=0, body=bad, queued_at=0.0))
    assert type(caught.value).__module__ == "msgspec"
