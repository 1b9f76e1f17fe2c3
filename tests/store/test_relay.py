"""The relay (`store/relay.py`), of a SQLite store (its side file) and of a PostgreSQL one (`pgrelay.py`, on a
real server the tests start): rows written in batches and read back in order by any peer, a wake-up from one
peer to another (a datagram; NOTIFY), run claims, orphans of a dead peer taken by one peer only, pruning."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.store import open_relay
from tether.store.relay import Orphan, Relay, RelayPost, SqliteRelay, Wakeup, relay_path
from tether.store.sqlite import SqliteStore


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the relay is: a SQLite side file's path, or a PostgreSQL database's URL."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "r")


def relay(where: str) -> Relay:
    if where.startswith("postgresql:"):
        from tether.store.pgrelay import PgRelay

        return PgRelay(where)
    return SqliteRelay(where)


async def test_rows_are_read_back_in_order_by_every_peer(where: str) -> None:
    a, b = relay(where), relay(where)
    await a.join()
    await b.join()
    try:
        assert await b.last_id() == 0
        await a.post([RelayPost("event", "ses_1", 5, b'{"x":1}'), RelayPost("answer", "ses_2", 0, b"[]")])
        await b.post([RelayPost("cancel", "ses_1", 0, b"{}")])
        rows = await b.rows_after(0)
        assert [(r.origin, r.kind, r.session_id, r.n, r.body) for r in rows] == [
            (a.peer, "event", "ses_1", 5, b'{"x":1}'),
            (a.peer, "answer", "ses_2", 0, b"[]"),
            (b.peer, "cancel", "ses_1", 0, b"{}"),
        ]
        assert [r.id for r in rows] == sorted(r.id for r in rows) and await a.last_id() == rows[-1].id
        assert await a.rows_after(rows[0].id, limit=1) == [rows[1]]
        await a.post([])  # nothing to write: no transaction
        assert await a.last_id() == rows[-1].id
    finally:
        await a.close()
        await b.close()


async def test_a_post_wakes_the_other_peers_at_once(where: str) -> None:
    a, b = relay(where), relay(where)
    await a.join()
    await b.join()
    try:
        assert [p.peer for p in await a.heartbeat()] == [b.peer]  # a learns where b is woken
        waiting = asyncio.create_task(b.wait(30.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        started = time.monotonic()
        await a.post([RelayPost("event", "ses_1", 1, b"{}")])
        await asyncio.wait_for(waiting, 5.0)
        assert time.monotonic() - started < 1.0  # woken, not timed out after 30 s
    finally:
        await a.close()
        await b.close()


async def test_a_sqlite_relay_s_wake_up_carries_the_rows_so_the_next_ones_are_not_read_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows of a post ride on its wake-up: a peer that has every row before them gives them from there;
    one that lacks the next row (a wake-up lost, or rows too large to carry) reads the file, in order."""
    from tether.store import relay as relay_module

    a, b = SqliteRelay(tmp_path / "r"), SqliteRelay(tmp_path / "r")
    await a.join()
    await b.join()
    try:
        await a.heartbeat()  # a learns where b is woken
        start = await b.last_id()
        reads: list[str] = []
        real_read = b._read

        async def counted(sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
            reads.append(sql)
            return await real_read(sql, params)

        monkeypatch.setattr(b, "_read", counted)
        await a.post([RelayPost("event", "ses_1", 1, b'{"x":1}'), RelayPost("change", "", 7, b"{}")])
        await asyncio.wait_for(b.wait(30.0), 5.0)
        rows = await b.rows_after(start)
        assert [(r.origin, r.kind, r.n, r.body) for r in rows] == [
            (a.peer, "event", 1, b'{"x":1}'),
            (a.peer, "change", 7, b"{}"),
        ]
        assert reads == []  # from the wake-up, not the file
        assert [r.id for r in rows] == [r.id for r in await a.rows_after(start)]  # the file's own ids

        await b.post([RelayPost("cancel", "ses_1", 0, b"{}")])  # b's own row follows on too
        assert [r.kind for r in await b.rows_after(rows[-1].id)] == ["cancel"] and reads == []

        # a wake-up lost: the next row is not there, so the file is read (and what came after it too)
        after = await a.last_id()
        monkeypatch.setattr(a, "_others", [])
        await a.post([RelayPost("event", "ses_1", 2, b"{}")])
        monkeypatch.setattr(a, "_others", [b._wake_name])
        await a.post([RelayPost("event", "ses_1", 3, b"{}")])
        await asyncio.wait_for(b.wait(30.0), 5.0)
        assert [r.n for r in await b.rows_after(after)] == [2, 3] and len(reads) == 1

        # rows too large to carry: a plain wake-up, and the file
        monkeypatch.setattr(relay_module, "CARRY_MAX", 10)
        after = await a.last_id()
        await a.post([RelayPost("event", "ses_1", 4, b"{}")])
        await asyncio.wait_for(b.wait(30.0), 5.0)
        assert [r.n for r in await b.rows_after(after)] == [4] and len(reads) == 2
        assert not b._inbox  # nothing kept of what was given
    finally:
        await a.close()
        await b.close()


async def test_a_dead_peers_claims_are_orphans_taken_by_one_peer_only(where: str) -> None:
    path = where
    # a peer in another process, which claims a run and is killed
    script = (
        "import asyncio, os, sys, time\n"
        "from tether.store.pgrelay import PgRelay\n"
        "from tether.store.relay import SqliteRelay\n"
        "async def main():\n"
        "    r = (PgRelay if sys.argv[1].startswith('postgresql:') else SqliteRelay)(sys.argv[1])\n"
        "    await r.join()\n"
        "    await r.claim_run('ses_dead')\n"
        "    print(r.peer, flush=True)\n"
        "    time.sleep(3600)\n"
        "asyncio.run(main())\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    dead_peer = child.stdout.readline().strip()
    a, b = relay(path), relay(path)
    await a.join()
    await b.join()
    try:
        await a.claim_run("ses_live")
        assert await b.orphans() == []  # the child lives; a lives
        child.kill()
        child.wait(10)
        orphans = await b.orphans()
        assert orphans == [Orphan(session_id="ses_dead", peer=dead_peer)] == await a.orphans()
        assert await a.take_run(orphans[0]) is True
        assert await b.take_run(orphans[0]) is False  # a took it first
        assert await b.orphans() == []  # now a's, and a lives
        await a.release_run("ses_dead")
        await b.release_run("ses_live")  # not b's: stays
        assert await b.orphans() == []
        await a.close()  # a leaves without ending its run: its claim is an orphan
        assert [(o.session_id, o.peer) for o in await b.orphans()] == [("ses_live", a.peer)]
    finally:
        await b.close()


async def test_old_rows_and_dead_peers_are_pruned(where: str) -> None:
    a = relay(where)
    await a.join()
    try:
        await a.post([RelayPost("event", "ses_1", 1, b"{}")])
        cut = time.time()
        await asyncio.sleep(0.01)
        await a.post([RelayPost("event", "ses_1", 2, b"{}")])
        assert await a.prune(cut) == 1
        assert [r.n for r in await a.rows_after(0)] == [2]
        last = await a.last_id()
        assert await a.prune(time.time() + 1) == 1
        await a.post([RelayPost("event", "ses_1", 3, b"{}")])
        assert [r.id for r in await a.rows_after(0)] == [last + 1]  # ids are never reused
    finally:
        await a.close()


async def test_open_relay_names_the_side_file_of_a_sqlite_store(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "t.db") as store:
        relay = open_relay(store)
        assert isinstance(relay, SqliteRelay) and relay.path == str(relay_path(tmp_path / "t.db"))
    from tether.store.memory import MemoryStore

    assert open_relay(MemoryStore()) is None


async def test_a_sqlite_relay_writes_at_once_unless_the_file_is_locked_then_in_order_from_its_thread(
    tmp_path: Path,
) -> None:
    """The common write costs no hop to the relay's thread; with the file's lock held by another process
    (a worker mid-write) the writes wait in the thread, the event loop goes on, and they land in order."""
    import sqlite3

    path = tmp_path / "r"
    a = SqliteRelay(path)
    await a.join()
    try:
        await a.post([RelayPost("event", "s", 1, b"{}")])
        assert a._in_thread == 0  # written on the loop's own thread: nothing handed over
        assert a._fast is not None and a._fast.execute("PRAGMA synchronous").fetchone() == (
            0,
        )  # no fsync, as documented
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        posts = [asyncio.ensure_future(a.post([RelayPost("event", "s", n, b"{}")])) for n in (2, 3)]
        claim = asyncio.ensure_future(a.claim_run("s"))
        ticks = 0
        for _ in range(20):
            await asyncio.sleep(0.01)
            ticks += 1
        assert not any(p.done() for p in posts) and not claim.done()  # waiting, in the thread
        assert ticks == 20  # while the loop went on
        holder.execute("COMMIT")
        holder.close()
        await asyncio.gather(*posts, claim)
        assert [r.n for r in await a.rows_after(0)] == [1, 2, 3]
        assert await a.claimant("s") == a.peer
    finally:
        await a.close()


@contextlib.asynccontextmanager
async def with_holder(path: Path) -> AsyncIterator[tuple[SqliteRelay, sqlite3.Connection]]:
    """A joined SQLite relay on `path`, and another connection to its file, to hold its write lock with (as
    another peer's write does)."""
    relay = SqliteRelay(path)
    await relay.join()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        yield relay, holder
    finally:
        holder.close()
        await relay.close()


async def test_a_relay_lock_let_go_at_once_is_waited_for_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another peer's write holds the lock a moment: the post tries again on the loop's thread (a few short
    sleeps) and lands there, with no hop to the relay's thread."""
    from tether.store import relay as relay_module

    naps: list[float] = []

    def nap(seconds: float) -> None:  # the other peer commits while this one sleeps its first nap
        naps.append(seconds)
        if len(naps) == 1:
            holder.execute("COMMIT")

    async def no_hop(*args: object) -> object:
        raise AssertionError("handed to the relay's thread")

    async with with_holder(tmp_path / "r") as (a, holder):
        monkeypatch.setattr(relay_module.time, "sleep", nap)
        monkeypatch.setattr(a, "_in_own_thread", no_hop)
        holder.execute("BEGIN IMMEDIATE")
        await a.post([RelayPost("event", "s", 1, b"{}")])
        assert naps == [relay_module.LOCK_POLL]
        monkeypatch.undo()
        assert [r.n for r in await a.rows_after(0)] == [1]


async def test_a_write_whose_caller_gave_up_still_holds_the_thread_s_turn(tmp_path: Path) -> None:
    """A write waiting in the thread for the lock goes on when its caller is cancelled: until it is done,
    the fast connection (the thread's meanwhile) is left alone and later writes queue behind it."""
    async with with_holder(tmp_path / "r") as (a, holder):
        holder.execute("BEGIN IMMEDIATE")
        first = asyncio.ensure_future(a.post([RelayPost("event", "s", 1, b"{}")]))
        await asyncio.sleep(0.05)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert a._in_thread == 1  # its caller left; the thread still has it
        second = asyncio.ensure_future(a.post([RelayPost("event", "s", 2, b"{}")]))
        await asyncio.sleep(0.05)
        assert not second.done()  # behind the first, in the thread
        holder.execute("COMMIT")
        await second
        assert a._in_thread == 0 and [r.n for r in await a.rows_after(0)] == [1, 2]


async def test_a_relay_locked_for_too_long_is_a_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.errors import StoreError
    from tether.store import relay as relay_module

    monkeypatch.setattr(relay_module, "LOCK_WAIT", 0.2)
    async with with_holder(tmp_path / "r") as (a, holder):
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError, match="locked"):
            await a.post([RelayPost("event", "s", 1, b"{}")])
        holder.execute("COMMIT")
        await a.post([RelayPost("event", "s", 2, b"{}")])  # free again: written
        assert [r.n for r in await a.rows_after(0)] == [2]


async def test_a_wakeup_resumes_its_reader_in_the_loop_s_next_pass() -> None:
    wake = Wakeup()
    order: list[str] = []

    async def reader() -> None:
        await wake.wait(30)
        order.append("reader")

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)  # it waits
    loop = asyncio.get_running_loop()

    def passing(k: int) -> None:
        order.append(f"pass {k}")
        if k < 3:
            loop.call_soon(passing, k + 1)

    wake.set()  # as the datagram's or the NOTIFY's callback does
    loop.call_soon(passing, 1)
    await asyncio.wait_for(task, 5)
    assert order.index("reader") < order.index("pass 1")


async def test_a_wakeup_set_before_the_wait_is_not_lost_and_a_wait_unset_times_out() -> None:
    wake = Wakeup()
    wake.set()
    started = time.monotonic()
    await wake.wait(30)  # at once: it was set since the last wait
    assert time.monotonic() - started < 1
    await wake.wait(0.05)  # unset by the wait before: the timeout ends it
    assert time.monotonic() - started >= 0.05
    waiting = asyncio.create_task(wake.wait(30))
    await asyncio.sleep(0)
    waiting.cancel()  # a reader stopped while it waits leaves nothing behind
    with pytest.raises(asyncio.CancelledError):
        await waiting
    wake.set()
    await asyncio.wait_for(wake.wait(30), 1)
