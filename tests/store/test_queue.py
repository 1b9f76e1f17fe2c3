"""The durable prompt queue (`PromptQueue`), on every backend (the `store` fixture: memory, SQLite,
PostgreSQL): prompts kept in order per session, found by session without a scan, dropped once, gone with
their session; a schema-10 SQLite file gains the table on open, its sessions kept."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tether.errors import InvalidId, SessionNotFound
from tether.ids import new_session_id
from tether.messages import Message
from tether.store import Store
from tether.store.sqlite import SCHEMA_VERSION, SqliteStore


async def test_prompts_are_kept_in_order_per_session_with_where_the_session_stood(store: Store) -> None:
    a = (await store.create_session()).id
    b = (await store.create_session()).id
    await store.append(a, [Message.user("one"), Message.assistant("two")])
    first = await store.enqueue_prompt(a, b'{"prompt": "p1"}')
    other = await store.enqueue_prompt(b, b"b1")
    await store.append(a, [Message.user("three")])
    second = await store.enqueue_prompt(a, b'{"prompt": "p2"}')
    assert first.after_seq == 2 and second.after_seq == 3 and other.after_seq == 0
    assert first.id < other.id < second.id
    queued = await store.queued_prompts(a)
    assert [(q.id, q.body, q.session_id, q.after_seq) for q in queued] == [
        (first.id, b'{"prompt": "p1"}', a, 2),
        (second.id, b'{"prompt": "p2"}', a, 3),
    ]
    assert queued[0].queued_at <= queued[1].queued_at
    assert sorted(await store.queued_sessions()) == sorted([a, b])
    assert await store.queued_prompts(new_session_id()) == []


async def test_a_prompt_is_dropped_once_and_ids_are_never_reused(store: Store) -> None:
    sid = (await store.create_session()).id
    one = await store.enqueue_prompt(sid, b"1")
    two = await store.enqueue_prompt(sid, b"2")
    assert await store.drop_prompt(sid, one.id) is True
    assert await store.drop_prompt(sid, one.id) is False  # taken already
    assert await store.drop_prompt(new_session_id(), two.id) is False  # not that session's
    assert [q.id for q in await store.queued_prompts(sid)] == [two.id]
    assert await store.drop_prompt(sid, two.id) is True
    assert await store.queued_sessions() == []
    three = await store.enqueue_prompt(sid, b"3")
    assert three.id > two.id


async def test_two_writers_at_once_each_get_their_own_id(store: Store) -> None:
    sid = (await store.create_session()).id
    items = await asyncio.gather(*(store.enqueue_prompt(sid, str(i).encode()) for i in range(20)))
    assert len({q.id for q in items}) == 20
    assert sorted(q.body for q in await store.queued_prompts(sid)) == sorted(str(i).encode() for i in range(20))


async def test_a_prompt_for_no_session_is_refused_and_deleting_a_session_drops_its_queue(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.enqueue_prompt(new_session_id(), b"x")
    with pytest.raises((InvalidId, SessionNotFound)):
        await store.enqueue_prompt("../etc", b"x")
    parent = (await store.create_session()).id
    child = (await store.create_session(parent_id=parent)).id
    kept = (await store.create_session()).id
    for sid in (parent, child, kept):
        await store.enqueue_prompt(sid, b"x")
    await store.delete_session(parent)
    assert await store.queued_sessions() == [kept]
    assert await store.queued_prompts(child) == []


async def test_a_schema_10_file_gets_the_queue_on_open(tmp_path: Path) -> None:
    path = tmp_path / "v10.db"
    store = SqliteStore(path)
    sid = (await store.create_session()).id
    await store.append(sid, [Message.user("kept")])
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE prompt_queue")
    conn.execute("PRAGMA user_version = 10")
    conn.close()
    store = SqliteStore(path)
    try:
        assert [e.seq for e in await store.read(sid)] == [1]
        assert (await store.enqueue_prompt(sid, b"after")).after_seq == 1
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 11
    assert conn.execute("SELECT body FROM prompt_queue").fetchall() == [(b"after",)]
    conn.close()
