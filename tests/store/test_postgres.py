"""What only `PostgresStore` has (the conformance suite runs everything else on it through the `store`
fixture): its schema migrations under concurrent opens, its errors when the server is away or a connection
is cut mid-operation, and the pool's recovery. A real PostgreSQL, started by the tests (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import psycopg
import pytest

from tether.errors import InvalidInput, StoreConnectionLost, StoreUnavailable
from tether.messages import Message
from tether.store import open_store
from tether.store.pgschema import SCHEMA_VERSION
from tether.store.postgres import PostgresStore

OPENERS = 6


def _version(url: str) -> list[tuple[int]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT version FROM tether_schema").fetchall()


def test_a_fresh_database_is_migrated_once_by_processes_that_open_it_at_once(postgres_url: str) -> None:
    """Six processes open the same empty database at the same moment (a barrier on a pipe): every one opens,
    the schema is made once (a second run of its CREATEs would fail), and its version is this tether's."""
    probe = (
        "import sys; from tether.store.postgres import PostgresStore\n"
        "sys.stdin.readline()\n"
        f"PostgresStore({postgres_url!r}); print('opened')\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(OPENERS)
    ]
    time.sleep(1.0)  # every interpreter started and waiting
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=120) for proc in procs]
    assert [p.returncode for p in procs] == [0] * OPENERS, outs
    assert [o.strip() for o, _ in outs] == ["opened"] * OPENERS
    assert _version(postgres_url) == [(SCHEMA_VERSION,)]


async def test_opening_again_changes_nothing_and_the_data_stays(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as store:
        info = await store.create_session(title="kept")
        await store.append(info.id, [Message.user("hello")])
    async with PostgresStore(postgres_url) as again:
        assert (await again.get_session(info.id)).title == "kept"
        assert [e.seq for e in await again.read(info.id)] == [1]
    assert _version(postgres_url) == [(SCHEMA_VERSION,)]


def test_a_database_of_a_newer_tether_is_refused_untouched(postgres_url: str) -> None:
    PostgresStore(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("UPDATE tether_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreUnavailable, match="newer tether") as caught:
        PostgresStore(postgres_url)
    assert "upgrade tether" in str(caught.value)
    assert _version(postgres_url) == [(SCHEMA_VERSION + 1,)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket is closed


def test_a_server_that_does_not_answer_is_a_typed_error_naming_it() -> None:
    port = _closed_port()
    url = f"postgresql://tether:secret-password@127.0.0.1:{port}/sessions"
    with pytest.raises(StoreConnectionLost) as caught:
        open_store(url)
    message = str(caught.value)
    assert f"127.0.0.1:{port}/sessions" in message and "secret-password" not in message
    assert isinstance(caught.value, StoreUnavailable)


def test_bad_pool_sizes_are_refused(postgres_url: str) -> None:
    with pytest.raises(InvalidInput, match="min_size"):
        PostgresStore(postgres_url, min_size=3, max_size=2)


def _terminate(admin_url: str, database_url: str, *, keep: int | None = None) -> int:
    """End every backend connected to `database_url`'s database (but `keep`), waiting until each is gone."""
    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(admin_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
            (name, keep if keep is not None else -1),
        ).fetchall()
    return len(rows)


async def test_the_pool_recovers_when_the_server_ends_its_connections(postgres_url: str, postgres_server: str) -> None:
    """A server restart or an administrator ends every connection while the pool holds them idle: the next
    operations do not fail, the pool drops the dead connections before it hands them out."""
    async with PostgresStore(postgres_url, min_size=3, max_size=3) as store:
        info = await store.create_session()
        await asyncio.gather(*(store.get_session(info.id) for _ in range(6)))  # every connection used once
        for round_ in range(3):
            assert _terminate(postgres_server, postgres_url) >= 1
            entries = await store.append(info.id, [Message.user(f"after kill {round_}")])
            assert entries[0].seq == round_ + 1
            assert (await store.get_session(info.id)).entry_count == round_ + 1


async def test_a_connection_lost_mid_append_is_typed_and_writes_nothing(
    postgres_url: str, postgres_server: str
) -> None:
    """An append waits on the session's row (another transaction holds it); its backend is ended under it:
    the append raises `StoreConnectionLost`, none of its three entries is there, the counters did not move,
    and the store's next append, on another connection, goes on at the next seq."""
    async with PostgresStore(postgres_url) as store:
        info = await store.create_session()
        await store.append(info.id, [Message.user("before")])
        with psycopg.connect(postgres_url) as holder:
            holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (info.id,))
            blocked = asyncio.ensure_future(
                store.append(info.id, [Message.user(f"lost {i}") for i in range(3)], expect_seq=2)
            )
            name = postgres_url.rsplit("/", 1)[1]
            with psycopg.connect(postgres_server, autocommit=True) as admin:
                for _ in range(200):  # until the append is waiting for the row lock
                    waiting = admin.execute(
                        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'", (name,)
                    ).fetchall()
                    if waiting:
                        break
                    await asyncio.sleep(0.02)
                assert waiting, "the append never waited for the lock"
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (waiting[0][0],))
            with pytest.raises(StoreConnectionLost, match="kept whole or not at all"):
                await blocked
            holder.rollback()
        got = await store.get_session(info.id)
        assert (got.entry_count, got.message_count) == (1, 1)
        assert [e.body for e in await store.read(info.id)] == [Message.user("before")]
        after = await store.append(info.id, [Message.user("next")], expect_seq=2)
        assert [e.seq for e in after] == [2]


async def test_appends_under_repeated_kills_keep_every_acknowledged_batch_whole(
    postgres_url: str, postgres_server: str
) -> None:
    """Four writers append batches of three while every backend of the database is ended again and again:
    each append is acknowledged or raises `StoreConnectionLost`, never anything else; afterwards every
    acknowledged batch is there, every batch is whole (never one or two of its three), seqs are dense and
    the counters match the entries."""
    async with PostgresStore(postgres_url, max_size=4) as store:
        sessions = [(await store.create_session()).id for _ in range(4)]
        acked: dict[str, set[str]] = {sid: set() for sid in sessions}
        lost = 0
        stop = asyncio.Event()

        async def writer(sid: str) -> None:
            nonlocal lost
            i = 0
            while not stop.is_set():
                tag = f"{sid}-{i}"
                try:
                    await store.append(sid, [Message.user(f"{tag}/{j}") for j in range(3)])
                    acked[sid].add(tag)
                except StoreConnectionLost:
                    lost += 1
                i += 1

        tasks = [asyncio.ensure_future(writer(sid)) for sid in sessions]
        killed = 0
        for _ in range(10):
            await asyncio.sleep(0.15)
            killed += await asyncio.to_thread(_terminate, postgres_server, postgres_url)
        stop.set()
        await asyncio.gather(*tasks)
        assert killed >= 10
        for sid in sessions:
            entries = await store.read(sid)
            info = await store.get_session(sid)
            assert [e.seq for e in entries] == list(range(1, info.entry_count + 1))
            assert info.message_count == info.entry_count
            tags: dict[str, list[int]] = {}
            for e in entries:
                tag, part = e.body.text.rsplit("/", 1)
                tags.setdefault(tag, []).append(int(part))
            assert all(parts == [0, 1, 2] for parts in tags.values()), "a batch was half written"
            assert acked[sid] <= set(tags), "an acknowledged batch is missing"
        print(f"{killed} backends ended, {lost} appends lost their connection, {sum(map(len, acked.values()))} acked")


async def test_a_cancelled_append_still_commits_whole(postgres_url: str) -> None:
    """As on SQLite: a write runs to its end when the task awaiting it is cancelled (the caller stops
    waiting; the entries are written, or not, whole)."""
    async with PostgresStore(postgres_url) as store:
        info = await store.create_session()
        with psycopg.connect(postgres_url) as holder:
            holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (info.id,))
            task = asyncio.ensure_future(store.append(info.id, [Message.user("a"), Message.user("b")]))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            holder.rollback()
        for _ in range(100):
            if (await store.get_session(info.id)).entry_count:
                break
            await asyncio.sleep(0.02)
        assert [e.body.text for e in await store.read(info.id)] == ["a", "b"]


async def test_numbers_and_change_ids_hold_across_stores_and_a_pruned_feed(postgres_url: str) -> None:
    """Two stores on one database (as two processes or nodes): reservations continue each other's, change ids
    are shared and increasing, and a change id is never given again after its row is gone."""
    async with PostgresStore(postgres_url) as store:
        sid = (await store.create_session()).id
        block = await store.reserve_numbers(sid, 1_499_999, 64)
        last = (await store.append_change("one")).id
    async with PostgresStore(postgres_url) as again, PostgresStore(postgres_url) as beside:
        assert await beside.reserve_numbers(sid, 1_499_999, 64) == block + 64
        assert await again.reserve_numbers(sid, 1_499_999, 1) == block + 128
        assert await again.last_change_id() == last
        assert (await beside.append_change("two")).id == last + 1
        assert [c.kind for c in await again.changes_after(0)] == ["one", "two"]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DELETE FROM changes")  # a pruned feed
    async with PostgresStore(postgres_url) as store:
        assert await store.last_change_id() == last + 1
        assert (await store.append_change("three")).id == last + 2


async def test_changes_commit_in_id_order_under_concurrent_writers(postgres_url: str) -> None:
    """A follower that polls while many writers record changes never sees an id appear below one it has
    already read (ids are taken and committed under one lock), so following by id misses nothing."""
    async with PostgresStore(postgres_url, max_size=8) as store:
        done = asyncio.Event()
        seen: list[int] = []

        async def follow() -> None:
            after = 0
            while True:
                finished = done.is_set()
                for change in await store.changes_after(after, 1000):
                    seen.append(change.id)
                    after = change.id
                if finished:
                    return
                await asyncio.sleep(0)

        follower = asyncio.ensure_future(follow())
        made = await asyncio.gather(*(store.append_change("tick", data={"i": i}) for i in range(200)))
        done.set()
        await follower
        assert seen == sorted(c.id for c in made)
