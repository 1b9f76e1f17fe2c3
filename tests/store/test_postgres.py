"""What only `PostgresStore` has (the conformance suite runs everything else on it through the `store`
fixture): its schema migrations under concurrent opens, its errors when the server is away or a connection
is cut mid-operation, and the pool's recovery. A real PostgreSQL, started by the tests (tests/conftest.py)."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from tether.errors import (
    CorruptEntry,
    InvalidInput,
    SeqConflict,
    SessionBusy,
    SessionNotFound,
    StoreConnectionLost,
    StoreUnavailable,
)
from tether.messages import Entry, Message, Revert, TitleChange
from tether.store import open_store, pgschema
from tether.store import postgres as postgres_module
from tether.store.audit import AuditRecord, draft, verify
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


async def test_operations_at_once_share_a_pool_of_one_connection(postgres_url: str) -> None:
    """The connection kept aside between operations (`_Loop`) is never kept while another operation waits
    for the pool: with one connection, operations at once take turns instead of waiting out the timeout."""
    async with PostgresStore(postgres_url, min_size=1, max_size=1, timeout=3) as store:
        sids = [(await store.create_session()).id for _ in range(4)]
        started = time.monotonic()
        for round_ in range(3):
            await asyncio.gather(
                *(store.append(sid, [Message.user(f"m{round_}")], expect_seq=round_ + 1) for sid in sids),
                *(store.get_session(sid) for sid in sids),
            )
        assert time.monotonic() - started < 3
        assert [(await store.get_session(sid)).entry_count for sid in sids] == [3] * 4


async def test_the_connection_kept_between_operations_is_one_backend(postgres_url: str) -> None:
    """One operation at a time runs on the same connection (not each on the next of the pool's), and a
    connection the server ended meanwhile is replaced before it is used."""
    async with PostgresStore(postgres_url, min_size=2, max_size=4) as store:
        sid = (await store.create_session()).id
        await asyncio.gather(*(store.get_session(sid) for _ in range(4)))  # the pool holds several
        pids = set()
        for _ in range(6):
            pids.add((await store._read("SELECT pg_backend_pid()"))[0][0])
        assert len(pids) == 1
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pids.pop(),))
        await store.append(sid, [Message.user("after")], expect_seq=1)
        assert (await store.get_session(sid)).entry_count == 1


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


async def test_a_read_cancelled_while_it_waits_for_the_pool_is_cancelled(postgres_url: str) -> None:
    """A cancel of an operation that waits for a connection always ends it: never lost in the pool's wait (on
    Python 3.11 `asyncio.wait_for` loses a cancel that comes as the connection is handed over, and a lease's
    keeper went on renewing for ever), and the connection that came meanwhile goes back to the pool."""
    async with PostgresStore(postgres_url, min_size=1, max_size=1, timeout=5) as store:
        sid = (await store.create_session()).id
        went_on = 0
        for i in range(150):
            holder = asyncio.ensure_future(store._read("SELECT pg_sleep(0.002)"))
            waiting = asyncio.ensure_future(store.get_session(sid))
            behind = asyncio.ensure_future(store.get_session(sid))
            await asyncio.sleep((i % 15) * 0.0003)  # at every moment of the wait and of the handover
            if waiting.cancel():
                try:
                    await waiting
                    went_on += 1
                except asyncio.CancelledError:
                    pass
            await asyncio.gather(holder, behind)
        assert went_on == 0, f"{went_on} cancelled reads went on as if not cancelled"
        assert (await store.get_session(sid)).id == sid  # the one connection is back in the pool


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


# --- what test_sqlite.py checks of SQLite's file, checked of PostgreSQL's database ---------------------------


def _texts(entries: list[Entry]) -> list[str]:
    return [e.body.text if isinstance(e.body, Message) else f"<{e.kind}>" for e in entries]


async def test_two_stores_on_one_database_see_each_others_writes_and_conflict(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as a, PostgresStore(postgres_url) as b:
        info = await a.create_session()
        await a.append(info.id, [Message.user("from a")], expect_seq=1)
        with pytest.raises(SeqConflict) as caught:
            await b.append(info.id, [Message.user("from b, stale")], expect_seq=1)
        assert (caught.value.expected, caught.value.actual) == (1, 2)
        assert _texts(await b.read(info.id)) == ["from a"]
        await b.append(info.id, [Message.user("from b")], expect_seq=2)
        assert _texts(await a.read(info.id)) == ["from a", "from b"]


async def test_a_lease_holds_across_stores_on_one_database(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as first, PostgresStore(postgres_url) as second:
        sid = (await first.create_session()).id
        await first.acquire_lease(sid, "run_a", ttl=30, pid=4242, host="node-1")
        with pytest.raises(SessionBusy) as busy:
            await second.acquire_lease(sid, "run_b", ttl=30)
        assert (busy.value.holder, busy.value.pid, busy.value.host) == ("run_a", 4242, "node-1")
        seen = await second.get_lease(sid)
        assert seen is not None and seen.holder == "run_a"
        assert await first.release_lease(sid, "run_a")
        assert (await second.acquire_lease(sid, "run_b", ttl=30)).holder == "run_b"


async def test_first_takers_of_a_session_race_and_one_wins(postgres_url: str) -> None:
    """Eight stores (as eight nodes) take a session that never had a lease at the same moment: exactly one
    gets it, the others are told who holds it."""
    stores = [PostgresStore(postgres_url) for _ in range(8)]
    try:
        sid = (await stores[0].create_session()).id
        results = await asyncio.gather(
            *(s.acquire_lease(sid, f"run_{i}", ttl=30) for i, s in enumerate(stores)), return_exceptions=True
        )
        won = [r for r in results if not isinstance(r, BaseException)]
        assert len(won) == 1
        assert all(isinstance(r, SessionBusy) and r.holder == won[0].holder for r in results if r is not won[0])
    finally:
        for s in stores:
            await s.close()


async def test_corrupt_rows_are_skipped_and_reported(postgres_url: str) -> None:
    """Rows damaged behind tether's back (torn JSON, JSON that is not an entry, not JSON; PostgreSQL itself
    refuses text that is not UTF-8): every reader skips and reports them, the session goes on."""
    seen: list[CorruptEntry] = []
    async with PostgresStore(postgres_url, on_corrupt=seen.append) as store:
        info = await store.create_session(directory="/w", metadata={"k": "v"})
        sid = info.id
        await store.append(sid, [Message.user(f"m{i}") for i in range(1, 6)])
        with psycopg.connect(postgres_url, autocommit=True) as raw:
            for seq, payload in {
                2: '{"kind": "message", "role": "user", "parts": [{"kind": "te',
                3: '{"kind": "message", "role": "wizard"}',
                4: "not json at all",
            }.items():
                raw.execute("UPDATE entries SET payload = %s WHERE session_id = %s AND seq = %s", (payload, sid, seq))
            raw.execute("UPDATE sessions SET metadata = '{broken' WHERE id = %s", (sid,))
        assert (await store.list_sessions()).items[0].metadata == {"_corrupt_metadata": "{broken"}
        assert _texts(await store.read(sid)) == ["m1", "m5"]
        assert [(r.session_id, r.seq) for r in seen] == [(sid, 2), (sid, 3), (sid, 4)]
        seen.clear()
        assert _texts(await store.tail(sid, 3)) == ["m5"]
        assert _texts([e async for e in store.iter_entries(sid, batch=2)]) == ["m1", "m5"]
        assert [e.seq for e in await store.append(sid, [Message.user("m6"), Revert(to_seq=1)])] == [6, 7]
        fork = await store.fork(sid, 5)
        assert fork.entry_count == 5
        seen.clear()
        assert _texts(await store.read(fork.id)) == ["m1", "m5"]
        assert [r.seq for r in seen] == [2, 3, 4]


def test_the_test_cluster_says_what_to_install_when_postgresql_is_missing(tmp_path: Path) -> None:
    """tests/conftest.py finds initdb/pg_ctl on PATH or under Debian's /usr/lib/postgresql/*/bin; without
    them it fails (never skips) saying what to install or which variable names a server."""
    spec = importlib.util.spec_from_file_location("tether_tests_conftest", Path(__file__).parent.parent / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    with pytest.raises(RuntimeError, match=r"apt-get install -y postgresql.*TETHER_TEST_POSTGRES"):
        conftest._postgres_bin(tmp_path, path=str(tmp_path))
    version = tmp_path / "16" / "bin"
    version.mkdir(parents=True)
    for name in ("initdb", "pg_ctl"):
        (version / name).touch()
    (tmp_path / "9" / "bin").mkdir(parents=True)
    assert conftest._postgres_bin(tmp_path, path=str(tmp_path)) == version


# --- the audit trail, sealed on the server ---------------------------------------------------------------------


async def test_audited_appends_from_two_stores_at_once_keep_one_verifiable_chain(postgres_url: str) -> None:
    """Audited appends (a record in the append's transaction, sealed by the server after the lock: the hash
    computed in SQL) from two pools at once, with details that are not plain ASCII: one dense chain, every
    hash what `audit.seal` computes, and each append's entry there with its record."""
    odd = {"text": "naïve café ✓ \U0001f600", "nul": "a\x00b", "quote": 'say "hi"\\', "f": 0.1 + 0.2, "n": -(2**40)}
    async with PostgresStore(postgres_url, max_size=6) as a, PostgresStore(postgres_url, max_size=6) as b:
        sessions = [await a.create_session(directory="/audit") for _ in range(6)]

        async def writer(k: int) -> None:
            store = (a, b)[k % 2]
            sid = sessions[k].id
            for i in range(8):
                record = draft("tool.call", at=1e9 + i / 7, session_id=sid, actor=f"rule ✓ {k}", detail={**odd, "i": i})
                await store.append(sid, [Message.user(f"{k}/{i}")], expect_seq=i + 1, audit=[record])

        await asyncio.gather(*(writer(k) for k in range(6)))
        sealed = await a.append_audit(draft("server.refused", at=5.5, outcome="4\x0001", detail=odd))
        records = [r async for r in _audit_walk(a)]
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        assert records[-1] == sealed and await a.audit_head() == (sealed.seq, sealed.hash)
        report = await verify(_audit_walk(b), await b.audit_head())
        assert report.ok, report.problems
        calls = [r for r in records if r.kind == "tool.call"]
        assert len(calls) == 48 and all(r.detail["text"] == odd["text"] for r in calls)
        for info in sessions:
            assert (await a.get_session(info.id)).entry_count == 8


async def _audit_walk(store: PostgresStore) -> AsyncIterator[AuditRecord]:
    after = 0
    while page := await store.list_audit(after=after, limit=100):
        for record in page:
            yield record
        after = page[-1].seq


async def test_an_audited_append_that_conflicts_seals_nothing(postgres_url: str) -> None:
    """The records of an append are sealed in the append's statement only when it writes: a stale expect_seq
    or a missing session leaves the trail as it was, and the next audited append goes on from its head."""
    async with PostgresStore(postgres_url) as store:
        info = await store.create_session(directory="/audit")
        record = draft("tool.call", at=1.0, session_id=info.id, actor="rule allow", detail={"tool": "bash"})
        await store.append(info.id, [Message.user("one")], expect_seq=1, audit=[record])
        head = await store.audit_head()
        with pytest.raises(SeqConflict):
            await store.append(info.id, [Message.user("stale")], expect_seq=1, audit=[record])
        with pytest.raises(SessionNotFound):
            await store.append("ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", [Message.user("x")], audit=[record])
        assert await store.audit_head() == head
        await store.append(info.id, [Message.user("two")], expect_seq=2, audit=[record, record])
        records = [r async for r in _audit_walk(store)]
        assert [r.seq for r in records] == list(range(1, len(records) + 1)) and len(records) == head[0] + 2  # type: ignore[index]
        assert (await verify(_audit_walk(store), await store.audit_head())).ok


async def test_every_kind_of_append_marks_its_session_in_the_change_cursor(postgres_url: str) -> None:
    """An append marks its session itself (`pgschema._V7`: the trigger skips updates that move `entry_count`;
    `_V9`: the mark is its queue row), by each of its statements: one entry, several, with audit records sealed
    in it, and with a revert (its own transaction); a rename still marks it through the trigger."""
    async with PostgresStore(postgres_url) as store:
        sid = (await store.create_session()).id
        position = (await store.changed_sessions(0)).position
        record = draft("tool.call", at=1.0, session_id=sid, actor="rule allow", detail={"tool": "bash"})
        writes = [
            lambda: store.append(sid, [Message.user("one")]),
            lambda: store.append(sid, [Message.user("two"), Message.user("three")]),
            lambda: store.append(sid, [Message.user("four")], audit=[record]),
            lambda: store.append(sid, [Message.user("five"), Revert(to_seq=1)]),
            lambda: store.update_session(sid, title="renamed"),
        ]
        for write in writes:
            await write()
            page = await store.changed_sessions(position)
            assert [s.id for s in page.sessions] == [sid], "a write that no reader after it would see"
            position = page.position
            assert not (await store.changed_sessions(position)).sessions
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT count(*) FROM session_changes").fetchone() == (1,)


async def test_an_appends_mark_waits_in_the_queue_and_the_flush_carries_it_over(postgres_url: str) -> None:
    """An append leaves `session_changes` alone (`pgschema._V9`): its mark is its queue rows, stamped with its
    transaction's id, which the flush moves over in the statement that deletes them. A reader that last read
    before the append sees the session whether it reads before the flush or after it; one that read after the
    append does not see it again because of the flush."""
    async with PostgresStore(postgres_url) as store, PostgresStore(postgres_url) as other:
        sid = (await store.create_session()).id
        await store.create_session()  # made before the reader's position: never reported
        start = (await store.changed_sessions(0)).position
        mark = "SELECT xid::text FROM session_changes WHERE session_id = %s"
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            created = conn.execute(mark, (sid,)).fetchone()
            await other.append(sid, [Message.user("one"), Message.assistant("two")])
            assert conn.execute(mark, (sid,)).fetchone() == created
            queued = conn.execute("SELECT DISTINCT xid::text FROM search_queue WHERE session_id = %s", (sid,))
            (appended,) = queued.fetchall()  # both rows, one transaction
            page = await store.changed_sessions(start)
            assert [(s.id, s.entry_count) for s in page.sessions] == [(sid, 2)]
            seen = page.position
            assert [h.seq for h in await store.search("one")] == [1]  # a search flushes first
            assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (0,)
            assert conn.execute(mark, (sid,)).fetchone() == appended
        assert [s.id for s in (await store.changed_sessions(start)).sessions] == [sid]
        assert not (await store.changed_sessions(seen)).sessions


async def test_appended_messages_wait_for_their_terms_and_a_search_makes_them_first(postgres_url: str) -> None:
    """An append writes no search terms (`pgschema._V8`): its messages wait, counted by `search_backlog`, and a
    search indexes them before it runs, so it finds every committed append, including another store's."""
    async with PostgresStore(postgres_url) as store, PostgresStore(postgres_url) as other:
        sid = (await store.create_session(directory="/w")).id
        await store.append(sid, [Message.user("ocelot one"), Revert(to_seq=0), Message.assistant("ocelot two")])
        await other.append(sid, [Message.user("ocelot three")])
        assert await store.search_backlog() == 3  # the messages, not the revert
        with psycopg.connect(postgres_url) as conn:
            # every entry is queued (its row is the append's change mark, `pgschema._V9`); three have words
            assert conn.execute("SELECT seq FROM search_queue ORDER BY seq").fetchall() == [(1,), (2,), (3,), (4,)]
            assert conn.execute("SELECT count(*) FROM entry_terms").fetchone() == (0,)
        hits = await other.search("ocelot", include_reverted=True)
        assert sorted(h.seq for h in hits) == [1, 3, 4]
        assert await store.search_backlog() == 0
        with psycopg.connect(postgres_url) as conn:  # the revert has no terms: the flush only took its row off
            rows = conn.execute("SELECT seq, role FROM entry_terms ORDER BY seq").fetchall()
            assert rows == [(1, 1), (3, 2), (4, 1)]
            assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (0,)


async def test_entries_without_words_do_not_use_up_a_searchs_flush(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every entry is queued (its change mark, `pgschema._V9`), but a search's flush counts messages: entries
    without words ahead of them in the queue are taken off on the way, and the search still finds every
    committed message; `backfill_search` reports the messages left, as `search_backlog` does."""
    monkeypatch.setattr(postgres_module, "SEARCH_INDEX", 3)
    monkeypatch.setattr(postgres_module, "INDEX_BATCH", 4)
    async with PostgresStore(postgres_url) as store:
        sid = (await store.create_session()).id
        await store.append(sid, [TitleChange(title=f"title {i}") for i in range(9)])
        await store.append(sid, [Message.user(f"kestrel {i}") for i in range(3)])
        assert await store.search_backlog() == 3
        assert sorted(h.seq for h in await store.search("kestrel")) == [10, 11, 12]
        assert await store.search_backlog() == 0
        other = (await store.create_session()).id
        await store.append(other, [TitleChange(title="t"), Message.user("osprey"), TitleChange(title="u")])
        steps = [p async for p in store.backfill_search(batch=1)]
        assert [(p.entries_indexed, p.backlog) for p in steps] == [(1, 0)]
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (0,)


async def test_a_store_flushes_its_appends_in_the_background_every_so_many(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `INDEX_EVERY` indexed entries a store appends, a flush of its own indexes them (without keeping
    the append waiting), so the backlog a search meets stays small."""
    monkeypatch.setattr(postgres_module, "INDEX_EVERY", 8)
    async with PostgresStore(postgres_url) as store:
        sid = (await store.create_session()).id
        for i in range(7):
            await store.append(sid, [Message.user(f"word{i}")])
        assert store._indexing() is None and await store.search_backlog() == 7
        await store.append(sid, [Message.user("word7")])
        flush = store._indexing()
        assert flush is not None
        await flush
        assert await store.search_backlog() == 0
        assert [h.seq for h in await store.search("word3")] == [4]


async def test_a_store_flushes_what_it_queued_when_it_closes(postgres_url: str) -> None:
    """A short-lived writer (a `tether run`, a script) that never searches leaves no rows in the queue: its
    close flushes what it appended, terms and change marks, so the queue does not grow with such writers."""
    async with PostgresStore(postgres_url) as store:
        sid = (await store.create_session()).id
        await store.append(sid, [Message.user("heron"), TitleChange(title="t"), Message.assistant("egret")])
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (3,)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (0,)
        assert conn.execute("SELECT seq FROM entry_terms ORDER BY seq").fetchall() == [(1,), (3,)]
        assert conn.execute("SELECT count(*) FROM session_changes WHERE session_id = %s", (sid,)).fetchone() == (1,)
    async with PostgresStore(postgres_url) as store:
        assert [h.seq for h in await store.search("egret")] == [3]
        assert [s.id for s in (await store.changed_sessions(0)).sessions] == [sid]


async def test_searches_that_flush_at_once_from_several_stores_each_see_every_append(postgres_url: str) -> None:
    """Four stores (four pools, as four processes) append and search at the same time: the flushes lock the
    rows they index in one order (no deadlock), and a search waits for a flush under way on another store
    rather than miss its rows."""
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    try:
        sid = (await stores[0].create_session()).id

        async def work(k: int) -> None:
            for i in range(30):
                (entry,) = await stores[k].append(sid, [Message.user(f"tag{k}x{i} common")])
                hits = await stores[(k + 1) % 4].search(f"tag{k}x{i}")
                assert [h.seq for h in hits] == [entry.seq], f"store {k}'s append {i} was not found"

        await asyncio.gather(*(work(k) for k in range(4)))
        assert await stores[0].search_backlog() == 0
        assert len(await stores[1].search("common", limit=200)) == 120
    finally:
        for store in stores:
            await store.close()


async def test_a_damaged_row_never_waits_for_terms_forever(postgres_url: str) -> None:
    """A queued message whose payload is not an entry any more is taken off the queue with no terms: it matches
    no search and is no longer in the backlog; reading it still reports it."""
    seen: list[CorruptEntry] = []
    async with PostgresStore(postgres_url, on_corrupt=seen.append) as store:
        sid = (await store.create_session()).id
        await store.append(sid, [Message.user("alpha"), Message.user("beta")])
        with psycopg.connect(postgres_url, autocommit=True) as raw:
            raw.execute("UPDATE entries SET payload = 'torn {' WHERE session_id = %s AND seq = 1", (sid,))
        assert [h.seq for h in await store.search("beta")] == [2]
        assert await store.search("alpha") == [] and await store.search_backlog() == 0
        assert _texts(await store.read(sid)) == ["beta"] and [r.seq for r in seen] == [1]


async def test_backfill_reports_sessions_done_and_left(postgres_url: str) -> None:
    """`backfill_search` indexes what waits, a batch per transaction, and says how many sessions it finished,
    how many still wait and how many entries are left."""
    async with PostgresStore(postgres_url) as store:
        sids = [(await store.create_session()).id for _ in range(3)]
        for n, sid in enumerate(sids):
            await store.append(sid, [Message.user(f"m{n}x{i}") for i in range(4)])
        steps = [p async for p in store.backfill_search(batch=5)]
        assert [(p.entries_indexed, p.backlog, p.sessions_left) for p in steps] == [(5, 7, 2), (10, 2, 1), (12, 0, 0)]
        assert [p.sessions_done for p in steps] == [1, 2, 3]
        assert [p async for p in store.backfill_search()] == []


async def test_a_fork_and_a_delete_keep_the_queue_and_the_terms_in_step(postgres_url: str) -> None:
    """A fork copies its messages' place in the search index as it is at that moment (terms made, or still
    queued); deleting a session takes its queued messages and its terms with it."""
    async with PostgresStore(postgres_url) as store:
        sid = (await store.create_session()).id
        await store.append(sid, [Message.user("lynx early")])
        assert [h.seq for h in await store.search("lynx")] == [1]  # indexed by the search
        await store.append(sid, [Message.user("lynx late"), Message.user("beyond the fork")])
        fork = await store.fork(sid, 2)
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT seq FROM entry_terms WHERE session_id = %s", (fork.id,)).fetchall() == [(1,)]
            assert conn.execute("SELECT seq FROM search_queue WHERE session_id = %s", (fork.id,)).fetchall() == [(2,)]
        hits = await store.search("lynx")
        assert sorted((h.session_id == fork.id, h.seq) for h in hits) == [(False, 1), (False, 2), (True, 1), (True, 2)]
        assert await store.search("beyond", session_id=fork.id) == []
        await store.append(sid, [Message.user("queued then deleted")])
        await store.delete_session(sid)
        with psycopg.connect(postgres_url) as conn:
            for table in ("entry_terms", "search_queue"):
                assert conn.execute(f"SELECT count(*) FROM {table} WHERE session_id = %s", (sid,)).fetchone() == (0,)
        assert [h.session_id for h in await store.search("lynx")] == [fork.id, fork.id]


def test_migration_8_moves_the_terms_out_of_the_entries(postgres_url: str) -> None:
    """A database at migration 7 (terms in `entries`) is brought to 8: every message's terms are in
    `entry_terms` with its role and time, nothing is queued, and its search finds what it found before."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert pgschema.migrate(conn, known=7) == (0, 7)
        conn.execute(
            "INSERT INTO sessions (id, created_at, updated_at, entry_count, message_count) VALUES ('ses_a', 1, 1, 2, 1)"
        )
        conn.execute(
            "INSERT INTO entries (session_id, seq, kind, created_at, payload, role, terms) VALUES"
            " ('ses_a', 1, 'message', 5.0, %s, 1, to_tsvector('tether_search', 'zebra crossing')),"
            " ('ses_a', 2, 'title', 6.0, '{}', NULL, NULL)",
            ('{"kind":"message","role":"user","parts":[{"kind":"text","text":"zebra crossing"}]}',),
        )
        assert pgschema.migrate(conn) == (7, SCHEMA_VERSION)
        assert conn.execute("SELECT session_id, seq, role, created_at FROM entry_terms").fetchall() == [
            ("ses_a", 1, 1, 5.0)
        ]
        assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (0,)
    store = PostgresStore(postgres_url)

    async def check() -> None:
        async with store:
            assert [(h.session_id, h.seq) for h in await store.search("zebra")] == [("ses_a", 1)]

    asyncio.run(check())


def test_migration_9_stamps_what_waits_in_the_queue(postgres_url: str) -> None:
    """A database at migration 8 with a message queued (an older tether's append) is brought to 9: the row
    takes the migration's transaction id, a reader from before it sees the session, and the flush carries
    the mark into `session_changes` and indexes the message as before."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert pgschema.migrate(conn, known=8) == (0, 8)
        conn.execute(
            "INSERT INTO sessions (id, created_at, updated_at, entry_count, message_count) VALUES ('ses_a', 1, 1, 1, 1)"
        )
        conn.execute(
            "INSERT INTO entries (session_id, seq, kind, created_at, payload, role) VALUES ('ses_a', 1, 'message',"
            " 5.0, %s, 1)",
            ('{"kind":"message","role":"user","parts":[{"kind":"text","text":"zebra crossing"}]}',),
        )
        conn.execute("INSERT INTO search_queue (session_id, seq) VALUES ('ses_a', 1)")
        (position,) = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").fetchall()[0]
        assert pgschema.migrate(conn) == (8, SCHEMA_VERSION)
        stamped = conn.execute("SELECT xid::text::bigint FROM search_queue").fetchone()
        assert stamped is not None and stamped[0] >= position
    store = PostgresStore(postgres_url)

    async def check() -> None:
        async with store:
            assert [s.id for s in (await store.changed_sessions(position)).sessions] == ["ses_a"]
            assert [(h.session_id, h.seq) for h in await store.search("zebra")] == [("ses_a", 1)]
            assert [s.id for s in (await store.changed_sessions(position)).sessions] == ["ses_a"]

    asyncio.run(check())
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM search_queue").fetchone() == (0,)
        assert conn.execute("SELECT xid::text::bigint FROM session_changes WHERE session_id = 'ses_a'").fetchone() == (
            stamped[0],
        )


async def test_a_flush_and_a_delete_that_meet_on_the_queue_both_finish(postgres_url: str) -> None:
    """A flush and a delete of the session lock its queued rows in the same (key) order, whatever order the
    table holds them in: with a third transaction holding a row in the middle, the flush takes the rows before
    it and waits, the delete waits behind the flush, and once the row is let go both finish (no deadlock),
    leaving nothing of the session."""
    async with PostgresStore(postgres_url) as store, PostgresStore(postgres_url) as other:
        sid = (await store.create_session()).id
        await store.append(sid, [Message.user(f"heron {i}") for i in range(10)])
        with psycopg.connect(postgres_url, autocommit=True) as raw:  # the queue's rows stored out of key order
            raw.execute("DELETE FROM search_queue")
            raw.execute("INSERT INTO search_queue SELECT %s, n FROM generate_series(10, 1, -1) n", (sid,))
            raw.execute("ANALYZE search_queue")
        with psycopg.connect(postgres_url) as holder:
            holder.execute("SELECT 1 FROM search_queue WHERE session_id = %s AND seq = 7 FOR UPDATE", (sid,))
            flush = asyncio.ensure_future(store._index_pending(100))
            await asyncio.sleep(0.3)
            delete = asyncio.ensure_future(other.delete_session(sid))
            await asyncio.sleep(0.3)
            assert not flush.done() and not delete.done()
            holder.rollback()
        await asyncio.wait_for(asyncio.gather(flush, delete), 30)
        with psycopg.connect(postgres_url) as conn:
            for table in ("entries", "search_queue", "entry_terms"):
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table


async def test_rows_an_older_tether_left_do_not_stop_a_flush_or_an_import(postgres_url: str) -> None:
    """An older node's delete leaves queued keys with no entry and terms of a session that is gone: a search's
    flush takes the keys off without stopping short of the appends behind them, and an import of that session
    id writes its terms over the old ones."""
    async with PostgresStore(postgres_url) as store:
        info = await store.create_session()
        await store.append(info.id, [Message.user("osprey one"), Message.user("osprey two")])
        assert len(await store.search("osprey")) == 2
        info = await store.get_session(info.id)
        entries = await store.read(info.id)
        with psycopg.connect(postgres_url, autocommit=True) as raw:  # what an older tether's delete leaves
            raw.execute("DELETE FROM entries WHERE session_id = %s", (info.id,))
            raw.execute("DELETE FROM sessions WHERE id = %s", (info.id,))
            raw.execute(
                "INSERT INTO search_queue SELECT 'ses_gone', n FROM generate_series(1, %s) n",
                (postgres_module.INDEX_BATCH + 5,),
            )
        other = (await store.create_session()).id
        await store.append(other, [Message.user("osprey three")])
        assert [h.session_id for h in await store.search("osprey")] == [other]
        assert await store.search_backlog() == 0
        await store.import_session(info, entries)
        assert sorted(h.seq for h in await store.search("osprey", session_id=info.id)) == [1, 2]


async def test_a_search_that_cannot_index_still_answers_from_what_is_indexed(postgres_url: str) -> None:
    """On a database that has become read-only (a hot standby, a read-only role), a search cannot take the
    queue's messages: it answers from the terms already there, and says why in the log."""
    async with PostgresStore(postgres_url) as store:  # open until the end: its close would flush the queue
        sid = (await store.create_session()).id
        await store.append(sid, [Message.user("grebe indexed")])
        assert len(await store.search("grebe")) == 1
        await store.append(sid, [Message.user("grebe waiting")])
        with psycopg.connect(postgres_url, autocommit=True) as raw:
            name = raw.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
            raw.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        async with PostgresStore(postgres_url) as reader:
            assert [h.seq for h in await reader.search("grebe")] == [1]
            assert await reader.search_backlog() == 1
