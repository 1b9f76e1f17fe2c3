"""The SQLite append path's upkeep: the background checkpointer keeps the WAL bounded while a writer appends
back to back (the WAL is started over, not grown), and a fork's counters are those of the entries it holds
whichever way they are found (copied from a whole source, read from a short head, or the source's less a
short tail: on every backend, through the `store` fixture). No timings are asserted."""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Callable
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import pytest

from tether.messages import EntryBody, Marker, Message, TextPart, Usage
from tether.store import SqliteStore, Store
from tether.store import sqlite as sqlite_module
from tether.store.bookkeeping import message_counters


def wal_restarts(db: Path) -> int:
    """The WAL header's checkpoint sequence number: SQLite adds one each time a writer starts the WAL over."""
    with open(f"{db}-wal", "rb") as f:
        header = f.read(32)
    return int(struct.unpack(">I", header[12:16])[0])


def wal_bytes(db: Path) -> int:
    return Path(f"{db}-wal").stat().st_size


def reply(i: int) -> Message:
    usage = Usage(input_tokens=10 * i, output_tokens=i, cost=Decimal(i) / 1000 if i % 3 else None)
    return Message(role="assistant", parts=[TextPart(text=f"reply {i} " + "x" * (i % 7) * 300)], usage=usage)


def history(n: int) -> list[EntryBody]:
    out: list[EntryBody] = []
    for i in range(1, n + 1):
        out.append(Marker(name=f"m{i}") if i % 5 == 0 else (Message.user(f"ask {i}") if i % 2 else reply(i)))
    return out


# --- the WAL stays bounded ---------------------------------------------------------------------------------


class Recording:
    """The checkpoint's connection, noting its statements. After the first, `beside` rows are written as if by
    the store (its count of changes grows) and `then` runs: what a writer does while the first pass runs."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        checkpointer: sqlite_module._Checkpointer,
        beside: int = 0,
        then: Callable[[], object] = lambda: None,
    ) -> None:
        self.conn, self.checkpointer, self.beside, self.then = conn, checkpointer, beside, then
        self.statements: list[str] = []

    def execute(self, sql: str) -> sqlite3.Cursor:
        self.statements.append(sql)
        cursor = self.conn.execute(sql)
        if len(self.statements) == 1:
            self.checkpointer._changes += self.beside
            self.then()
        return cursor


async def test_frames_written_beside_the_checkpoint_are_copied_so_the_next_append_starts_the_wal_over(
    tmp_path: Path,
) -> None:
    db = tmp_path / "tether.db"
    async with SqliteStore(db) as store:
        sid = (await store.create_session()).id
        for i in range(40):  # fewer than CHECKPOINT_EVERY: the thread is not started
            await store.append(sid, [Message.user(f"m{i}")])
        checkpointer = store._checkpointer
        assert checkpointer is not None and checkpointer._thread is None
        before, size = wal_restarts(db), wal_bytes(db)
        with closing(sqlite3.connect(db, isolation_level=None)) as other, closing(sqlite3.connect(db)) as writer:

            def write() -> None:  # another writer commits while the first pass runs
                with writer:
                    writer.execute("INSERT INTO leases (session_id, holder, since, expires_at) VALUES ('x', 'y', 0, 0)")

            recording = Recording(other, checkpointer, then=write)
            checkpointer.checkpoint(recording)  # type: ignore[arg-type]
            assert recording.statements == ["PRAGMA wal_checkpoint(PASSIVE)"] * 2
        await store.append(sid, [Message.user("after")])
        # a PASSIVE checkpoint alone left the other writer's frames uncopied: the WAL went on growing
        assert wal_restarts(db) == before + 1
        assert wal_bytes(db) == size  # written over from the start, not grown
        assert [e.seq for e in await store.tail(sid, 2)] == [40, 41]


async def test_back_to_back_appends_keep_the_wal_bounded(tmp_path: Path) -> None:
    # A PASSIVE checkpoint alone, beside a writer that never pauses, never let SQLite start the WAL over:
    # it grew by every append. The background thread starts it over every few hundred appends.
    db = tmp_path / "tether.db"
    n = 8000  # enough that a WAL started over every few hundred appends stays far below one never started over
    async with SqliteStore(db) as store:
        sid = (await store.create_session()).id
        for i in range(n):
            await store.append(sid, [Message.user(f"message {i} " + "y" * 150)])
        restarts, size = wal_restarts(db), wal_bytes(db)
        assert [e.seq for e in await store.tail(sid, 1)] == [n]
    assert restarts >= 2
    grown = n * 4096  # each append writes at least its entry's page: what the WAL holds if never started over
    assert size < grown / 2, (size, restarts)


LOCKED_ROWS = sqlite_module.CHECKPOINT_LOCKED_ROWS


@pytest.mark.parametrize(("beside", "passes"), [(0, 2), (LOCKED_ROWS, 2), (LOCKED_ROWS + 1, 1), (100_000, 1)])
async def test_the_locked_checkpoint_only_follows_little_written_beside_the_first(
    tmp_path: Path, beside: int, passes: int
) -> None:
    """A fork or an import committed during the first checkpoint is not copied holding the store's lock."""
    db = tmp_path / "tether.db"
    async with SqliteStore(db) as store:
        checkpointer = store._checkpointer
        assert checkpointer is not None
        with closing(sqlite3.connect(db, isolation_level=None)) as other:
            recording = Recording(other, checkpointer, beside=beside)
            checkpointer.checkpoint(recording)  # type: ignore[arg-type]
        assert recording.statements == ["PRAGMA wal_checkpoint(PASSIVE)"] * passes


# --- fork counters --------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", [False, True])
async def test_fork_counters_at_every_position(store: Store, split: bool) -> None:
    bodies = history(23)
    sid = (await store.create_session()).id
    if split:
        await store.append(sid, bodies[:7])
        for body in bodies[7:]:
            await store.append(sid, [body])
    else:
        await store.append(sid, bodies)
    src = await store.get_session(sid)
    for at in range(len(bodies) + 1):
        fork = await store.fork(sid, at)
        messages, t_in, t_out, cost = message_counters(bodies[:at])
        assert (fork.entry_count, fork.message_count, fork.input_tokens, fork.output_tokens, fork.cost) == (
            at,
            messages,
            t_in,
            t_out,
            cost,
        ), at
        assert [e.body for e in await store.read(fork.id)] == bodies[:at]
        assert await store.get_session(fork.id) == fork
    assert await store.get_session(sid) == src


async def test_a_whole_fork_has_the_source_counters_even_past_a_damaged_entry(tmp_path: Path) -> None:
    """A fork of everything copies every row, a damaged one too, and the source's counters with them."""
    db = tmp_path / "tether.db"
    async with SqliteStore(db, on_corrupt=lambda error: None) as store:
        sid = (await store.create_session()).id
        await store.append(sid, [reply(1), reply(2), Message.user("q"), reply(4)])
        with closing(sqlite3.connect(db, isolation_level=None)) as other:
            other.execute("UPDATE entries SET payload = '{not json' WHERE session_id = ? AND seq = 2", (sid,))
        src = await store.get_session(sid)
        fork = await store.fork(sid)
        assert (fork.message_count, fork.input_tokens, fork.output_tokens, fork.cost) == (
            src.message_count,
            src.input_tokens,
            src.output_tokens,
            src.cost,
        )
        assert [e.seq for e in await store.read(fork.id)] == [1, 3, 4]  # the damaged row was copied too


async def test_a_fork_is_indexed_for_search(store: Store) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [Message.user("the zebra question"), reply(2)])
    whole = await store.fork(sid)
    hits = await store.search("zebra")
    assert {(h.session_id, h.seq) for h in hits} == {(sid, 1), (whole.id, 1)}
