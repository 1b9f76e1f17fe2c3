"""The sessions' change cursor (`SessionChanges.changed_sessions`) on every backend (the `store` fixture): every
kind of write shows up after the position read before it, deletions as ids, paging, bad input; a SQLite file
of schema 8 gains the cursor with its sessions in it; and on PostgreSQL a transaction that commits after a
later one (its id older) is still found."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tether.errors import InvalidInput
from tether.messages import Entry, Message
from tether.store import SqliteStore, Store
from tether.store.records import SessionInfo


async def drain(store: Store, after: int) -> tuple[set[str], set[str], int]:
    """Every change since `after`, page after page: (ids written, ids deleted, the next position)."""
    written: set[str] = set()
    deleted: set[str] = set()
    while True:
        page = await store.changed_sessions(after, limit=2)
        written |= {s.id for s in page.sessions}
        deleted |= set(page.deleted)
        after = page.position
        if not page.more:
            return written, deleted, after


async def test_every_write_moves_its_session_past_the_position_read_before(store: Store) -> None:
    a = await store.create_session(title="a")
    b = await store.create_session(title="b")
    written, deleted, position = await drain(store, 0)
    assert {a.id, b.id} <= written and not deleted

    await store.append(a.id, [Message.user("hello")])
    written, _, position = await drain(store, position)
    assert a.id in written
    # the rows come as they are now
    page = await store.changed_sessions(0, limit=1000)
    assert next(s for s in page.sessions if s.id == a.id).entry_count == 1

    writes = [
        (b.id, lambda: store.update_session(b.id, title="renamed")),
        (b.id, lambda: store.append(b.id, [Message.user("x")])),
        (a.id, lambda: store.append(a.id, [Message.user("again")])),
        (a.id, lambda: store.append(a.id, [Message.user("and again")])),  # the latest one, written again
    ]
    for sid, write in writes:
        before = position
        await write()
        written, _, position = await drain(store, before)
        assert sid in written, "a write that no reader after it would see"

    fork = await store.fork(a.id)
    child = await store.create_session(parent_id=a.id)
    info = SessionInfo(id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", created_at=1.0, updated_at=2.0, title="imported")
    await store.import_session(info, [Entry(1, 1.5, Message.user("old"))])
    written, _, position = await drain(store, position)
    assert {fork.id, child.id, info.id} <= written

    gone = await store.delete_session(a.id)
    written, deleted, position = await drain(store, position)
    assert set(gone) <= deleted and a.id not in written
    _, _, later = await drain(store, position)
    assert later >= position


async def test_a_session_appended_to_again_and_again_is_seen_each_time(store: Store) -> None:
    sid = (await store.create_session()).id
    _, _, position = await drain(store, 0)
    for i in range(5):
        await store.append(sid, [Message.user(f"m{i}")])
        page = await store.changed_sessions(position)
        assert [s.entry_count for s in page.sessions if s.id == sid] == [i + 1]
        position = page.position


@pytest.mark.parametrize("bad", [{"after": -1}, {"after": "0"}, {"limit": 0}, {"limit": 10_001}, {"after": True}])
async def test_bad_positions_and_limits_are_refused(store: Store, bad: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        await store.changed_sessions(**bad)  # type: ignore[arg-type]


async def test_a_position_from_elsewhere_starts_over_rather_than_miss_anything(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    try:
        sid = (await store.create_session()).id
        page = await store.changed_sessions(10**9)
        assert [s.id for s in page.sessions] == [sid]
    finally:
        await store.close()


async def test_a_schema_8_file_gains_the_cursor_with_its_sessions(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    ids = [(await store.create_session()).id for _ in range(3)]
    await store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE session_changes")
    for op in ("insert", "update", "delete"):
        conn.execute(f"DROP TRIGGER sessions_changed_{op}")
    conn.execute("PRAGMA user_version = 8")
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    try:
        written, _, position = await drain(store, 0)
        assert written == set(ids)
        await store.append(ids[0], [Message.user("after the migration")])
        assert ids[0] in (await drain(store, position))[0]
    finally:
        await store.close()


async def test_postgres_finds_a_commit_that_came_after_a_younger_transaction(postgres_url: str) -> None:
    """Transaction A (older id) writes session a and waits; B writes session b and commits; a reader reads
    (sees b, not a); A commits. The next read from the position the first returned finds a."""
    import psycopg

    from tether.store.postgres import PostgresStore

    store = PostgresStore(postgres_url)
    try:
        a = (await store.create_session()).id
        b = (await store.create_session()).id
        _, _, position = await drain(store, 0)
        slow = await psycopg.AsyncConnection.connect(postgres_url)
        try:
            await slow.execute("UPDATE sessions SET title = 'slow' WHERE id = %s", (a,))  # A: its xid now
            await store.update_session(b, title="fast")  # B commits first
            written, _, position = await drain(store, position)
            assert b in written and a not in written
            await slow.commit()
        finally:
            await slow.close()
        written, _, _ = await drain(store, position)
        assert a in written
        assert (await store.get_session(a)).title == "slow"
    finally:
        await store.close()


async def test_postgres_readers_and_writers_at_once_miss_nothing(postgres_url: str) -> None:
    from tether.store.postgres import PostgresStore

    store = PostgresStore(postgres_url, max_size=8)
    try:
        ids = [(await store.create_session()).id for _ in range(8)]
        _, _, position = await drain(store, 0)
        seen: dict[str, int] = {}
        done = asyncio.Event()

        async def writer(sid: str) -> None:
            for i in range(15):
                await store.append(sid, [Message.user(f"{i}")])

        async def reader() -> None:
            nonlocal position
            while True:
                finished = done.is_set()
                page = await store.changed_sessions(position)
                for s in page.sessions:
                    seen[s.id] = max(seen.get(s.id, 0), s.entry_count)
                position = page.position
                if finished:
                    return
                await asyncio.sleep(0.005)

        task = asyncio.create_task(reader())
        await asyncio.gather(*(writer(sid) for sid in ids))
        done.set()
        await task
        assert seen == {sid: 15 for sid in ids}
    finally:
        await store.close()
