"""The store's event numbers (`EventNumbers`) and global change feed (`Changes`), on every backend (the `store`
fixture): blocks above the floor and above every block reserved before, also by another process and after
a reopen; changes numbered by a sequence never reused (not even after a restart); bad input refused before
any write. And a schema-8 file that gains both tables."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tether.errors import InvalidId, InvalidInput
from tether.messages import Message
from tether.store import SqliteStore, Store
from tether.store.sqlite import SCHEMA_VERSION


async def test_blocks_are_above_the_floor_and_every_block_before(store: Store) -> None:
    sid = (await store.create_session()).id
    first = await store.reserve_numbers(sid, 1_499_999, 100)
    assert first == 1_500_000
    second = await store.reserve_numbers(sid, 1_499_999, 100)  # the same floor: after the first block
    assert second == 1_500_100
    third = await store.reserve_numbers(sid, 2_499_999, 10)  # a higher floor wins
    assert third == 2_500_000
    assert await store.reserve_numbers(sid, 0, 1) == 2_500_010
    other = (await store.create_session()).id
    assert await store.reserve_numbers(other, 0, 5) == 1  # per session


async def test_a_deleted_session_takes_its_reservations_with_it(store: Store) -> None:
    sid = (await store.create_session()).id
    await store.reserve_numbers(sid, 10, 100)
    await store.delete_session(sid)
    assert await store.reserve_numbers(sid, 10, 1) == 11


@pytest.mark.parametrize(("floor", "count"), [(-1, 1), (0, 0), (0, -3), (True, 1), (0, True), (0, 10**7), ("1", 1)])
async def test_bad_reservations_are_refused(store: Store, floor: object, count: object) -> None:
    sid = (await store.create_session()).id
    with pytest.raises(InvalidInput):
        await store.reserve_numbers(sid, floor, count)  # type: ignore[arg-type]
    assert await store.reserve_numbers(sid, 0, 1) == 1  # nothing was reserved


async def test_a_bad_session_id_is_refused(store: Store) -> None:
    with pytest.raises(InvalidId):
        await store.reserve_numbers("../x", 0, 1)


async def test_changes_are_numbered_in_order_and_read_back_after_any_id(store: Store) -> None:
    assert await store.last_change_id() == 0
    assert await store.changes_after(0) == []
    sid = (await store.create_session()).id
    made = [
        await store.append_change("session_created", session_id=sid, data={"i": i, "nested": [i]}) for i in range(5)
    ]
    ids = [c.id for c in made]
    assert ids == sorted(ids) and len(set(ids)) == 5 and ids[0] >= 1
    assert await store.last_change_id() == ids[-1]
    everything = await store.changes_after(0)
    assert everything == made
    assert [c.data["i"] for c in everything] == [0, 1, 2, 3, 4]
    assert await store.changes_after(ids[1], limit=2) == made[2:4]
    assert await store.changes_after(ids[-1]) == []
    plain = await store.append_change("status.changed")
    assert plain.session_id is None and plain.data == {} and plain.id > ids[-1]
    everything[0].data["i"] = 99  # what a reader got is its own copy
    assert (await store.changes_after(0, limit=1))[0].data["i"] == 0


async def test_concurrent_changes_get_distinct_increasing_ids(store: Store) -> None:
    made = await asyncio.gather(*(store.append_change("tick", data={"i": i}) for i in range(50)))
    ids = [c.id for c in made]
    assert len(set(ids)) == 50
    assert [c.id for c in await store.changes_after(0, limit=100)] == sorted(ids)


@pytest.mark.parametrize(
    ("kind", "session_id", "data", "error"),
    [
        ("", None, {}, InvalidInput),
        ("Bad Kind", None, {}, InvalidInput),
        (3, None, {}, InvalidInput),
        ("ok", "../nope", {}, InvalidId),
        ("ok", None, [1, 2], InvalidInput),
        ("ok", None, {"x": object()}, InvalidInput),
    ],
)
async def test_bad_changes_are_refused(
    store: Store, kind: object, session_id: object, data: object, error: type
) -> None:
    with pytest.raises(error):
        await store.append_change(kind, session_id=session_id, data=data)  # type: ignore[arg-type]
    assert await store.last_change_id() == 0


@pytest.mark.parametrize(("after", "limit"), [(-1, 10), (True, 10), ("3", 10), (0, 0), (0, 10_001)])
async def test_bad_reads_of_the_feed_are_refused(store: Store, after: object, limit: object) -> None:
    with pytest.raises(InvalidInput):
        await store.changes_after(after, limit)  # type: ignore[arg-type]


async def test_numbers_and_change_ids_survive_a_reopen_and_another_process(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with SqliteStore(path) as store:
        sid = (await store.create_session()).id
        block = await store.reserve_numbers(sid, 1_499_999, 64)
        last = (await store.append_change("one")).id
    # another connection (another process would do the same) sees and continues them
    async with SqliteStore(path) as again, SqliteStore(path) as beside:
        assert await beside.reserve_numbers(sid, 1_499_999, 64) == block + 64
        assert await again.reserve_numbers(sid, 1_499_999, 1) == block + 128
        assert await again.last_change_id() == last
        assert (await beside.append_change("two")).id == last + 1
        assert [c.kind for c in await again.changes_after(0)] == ["one", "two"]


async def test_a_change_id_is_never_reused_after_its_row_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with SqliteStore(path) as store:
        for _ in range(3):
            await store.append_change("x")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM changes")  # a pruned feed
    conn.close()
    async with SqliteStore(path) as store:
        assert await store.last_change_id() == 3
        assert (await store.append_change("y")).id == 4


async def test_a_schema_8_file_gains_the_tables(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with SqliteStore(path) as store:
        sid = (await store.create_session()).id
        await store.append(sid, [Message.user("kept")])
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE event_numbers")  # what schema 8 had: neither table
    conn.execute("DROP TABLE changes")
    conn.execute("PRAGMA user_version = 8")
    conn.close()
    async with SqliteStore(path) as store:
        assert [e.body for e in await store.read(sid)] == [Message.user("kept")]
        assert await store.reserve_numbers(sid, 1_499_999, 8) == 1_500_000
        assert (await store.append_change("after")).id == 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
    conn.close()
