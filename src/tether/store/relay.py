"""The relay: what the processes that share one store (the workers of a `tether serve --workers N`, the nodes
of a service on one PostgreSQL) tell each other that the journal does not hold. A row names a session and
carries one thing for whoever has it: a run's event (live ones too: text deltas, run starts and ends, which
are never journaled), an approval request that waits or was settled, an answer to one, a cancel or a pause.
Rows are written in batches (one transaction for what piled up), read by id from any process, and pruned
after `KEEP` seconds: a reader that fell further behind reads the journal instead (durable events only), as
a slow subscriber does.

Who is there: each process is a *peer* (a row with its host, process id and wake address, refreshed every
`HEARTBEAT`); a peer not seen for `PEER_TTL` seconds, or whose process on this host is gone, is dead. Which
peer runs which session: a *run claim* per session, written when a run starts and removed when it ends; the
claim of a dead peer whose session's lease is free again is an orphan, and the first live peer to `take_run`
it resumes the session (the lease still decides who may write: a claim only says who should look).

The wake-up is the backend's: PostgreSQL's NOTIFY (`pgrelay.py`, the payload only the session and event
number, far under NOTIFY's 8,000 bytes, never the event), and for a SQLite file a datagram on an abstract
UNIX socket to each peer of this host, with a short poll behind both. The SQLite relay is a side file beside
the store (`<store>.relay`), written with `synchronous=OFF`: nothing in it must outlive a crash of the
machine (the journal has every durable event; live ones are gone with their run anyway)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

from ..errors import TetherError
from ..ids import new_id
from .faults import is_busy, store_fault
from .walfile import connect_wal

Kind = Literal[
    "event", "pending", "settled", "answer", "cancel", "pause", "hello", "change", "queued", "place", "ran", "load"
]
"""What a row carries: a run's event; an approval request that waits, or no longer does; an answer to one;
a cancel or a pause for the run of the session; a peer that joined (so that the others post to it at once,
not from their next heartbeat on); a change recorded in the store's change feed (its id: the others'
`/events` followers read it from the store); a prompt queued durably for the session (its id in the store's
queue: the peer that runs the session reads the queue after its run); a prompt queued durably for a session
no peer runs, placed with the peer named in the body (JSON: the peer, the time it was placed), which runs
the session's queue; the end
of a queued prompt's run (its id, and the `Done` or `Error`: for the peer that queued it); how many sessions
the peer runs or is about to (its number: its siblings place runs by it)."""

R = TypeVar("R")

KEEP = 120.0
"""Seconds a row is kept for readers that fell behind."""
HEARTBEAT = 1.0
"""Seconds between a peer's marks that it lives."""
PEER_TTL = 6.0
"""Seconds after its last mark that a peer counts as dead (on another host; on this one its process is
looked at)."""
POLL = 0.25
"""Seconds a reader waits for a wake-up before it looks anyway."""
LOCK_POLL = 0.0001
"""Seconds between two tries for the SQLite relay's write lock."""
LOCK_IN_PLACE = 0.0005
"""Seconds a write to the SQLite relay tries for its lock on the loop's own thread (the loop held), before it is
handed to the relay's thread: a hop there and back costs a pass of the loop, milliseconds on a busy one."""
CARRY_MAX = 60_000
"""Bytes of rows a wake-up datagram carries at most (more: the peers read them from the file)."""
INBOX_MAX = 10_000
"""Rows kept from the wake-ups at most, should nobody read them."""
LOCK_WAIT = 10.0
"""Seconds a write to the SQLite relay waits for its lock at most."""


class RelayPost(msgspec.Struct, frozen=True, array_like=True):
    """A row to write: its kind, the session it is for, a number (the event's, or 0) and its body (JSON)."""

    kind: Kind
    session_id: str
    n: int
    body: bytes


class RelayRow(msgspec.Struct, frozen=True, kw_only=True):
    """A row read: `id` increases in the order rows were written (never reused), `origin` the peer that
    wrote it."""

    id: int
    origin: str
    kind: Kind
    session_id: str
    n: int
    body: bytes


class Peer(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    host: str
    pid: int
    wake: str
    seen: float


class Orphan(msgspec.Struct, frozen=True, kw_only=True):
    """A session whose run claim belongs to a peer that is dead."""

    session_id: str
    peer: str


def process_gone(pid: int) -> bool:
    """Whether no process with this id lives on this machine (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ", 1)[1][:1] == b"Z"
    except OSError:
        return False


def peer_dead(peer: Peer, now: float, host: str) -> bool:
    if peer.host == host:
        return process_gone(peer.pid)
    return peer.seen < now - PEER_TTL


@runtime_checkable
class Relay(Protocol):
    """One process's end of the relay (see the module docstring). `peer` names this process."""

    peer: str

    async def join(self) -> None:
        """Say this peer is there (and open its wake-up), before anything is posted or read."""
        ...

    async def heartbeat(self) -> list[Peer]:
        """Mark this peer alive; returns the other peers that live (which `post` wakes)."""
        ...

    async def post(self, rows: Sequence[RelayPost]) -> None:
        """Write `rows` in one transaction, in order, and wake the other peers."""
        ...

    async def rows_after(self, after: int, limit: int = 1000) -> list[RelayRow]:
        """The rows with id > `after`, oldest first (this peer's own too)."""
        ...

    async def last_id(self) -> int:
        """The id of the last row written (0: none yet)."""
        ...

    def rows_here(self, after: int) -> list[RelayRow]:
        """The rows after `after` this peer holds already, oldest first, read from nowhere: only those that
        follow on from `after` (the SQLite relay's wake-ups carry the rows; PostgreSQL's carry none)."""
        ...

    def on_rows(self, took: Callable[[], bool] | None) -> None:
        """Have `took` called as a wake-up brings rows (`rows_here` gives them): true when it took them all,
        else the reader is woken as for any post."""
        ...

    async def wait(self, timeout: float) -> None:
        """Return when another peer may have posted, or after `timeout` seconds."""
        ...

    async def claim_run(self, session_id: str) -> None:
        """Record that this peer runs the session (replacing a claim of anyone else)."""
        ...

    async def release_run(self, session_id: str) -> None:
        """Remove this peer's claim of the session (another's stays)."""
        ...

    async def claimant(self, session_id: str) -> str | None:
        """The peer that claims the session's run, or None."""
        ...

    async def orphans(self) -> list[Orphan]:
        """The run claims of dead peers."""
        ...

    async def take_run(self, orphan: Orphan) -> bool:
        """Move an orphan's claim to this peer; False when another peer took it first."""
        ...

    async def prune(self, before: float) -> int:
        """Remove rows written before `before`, and dead peers' rows in the peer list; returns the rows gone."""
        ...

    async def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS relay (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    origin TEXT NOT NULL,
    kind TEXT NOT NULL,
    session_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    body BLOB NOT NULL
);
DROP INDEX IF EXISTS relay_at;
CREATE TABLE IF NOT EXISTS peers (
    peer TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    wake TEXT NOT NULL,
    seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    session_id TEXT PRIMARY KEY,
    peer TEXT NOT NULL,
    since REAL NOT NULL
);
"""


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA synchronous = OFF")
    conn.executescript(_SCHEMA)


class Wakeup:
    """What the relay's one reader waits for (`wait`, with a timeout) and a wake-up sets (`set`, from a callback
    of the loop): the reader runs in the loop's next pass. (`asyncio.wait_for` on an `asyncio.Event` takes
    three: its inner task, then its callback, then the waiter; on a busy loop each pass is milliseconds, and a
    follower on another worker gets every relayed event that much later.)"""

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until set (at once if it was since the last wait) or `timeout` seconds passed; then unset."""
        if not self._set:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        self._set = False


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _tried(attempt: Callable[[], int | None], seconds: float) -> int | None:
    """`attempt()` until it writes (not None), tried again every `LOCK_POLL` for `seconds` at most."""
    deadline = time.monotonic() + seconds
    while (done := attempt()) is None and time.monotonic() < deadline:
        time.sleep(LOCK_POLL)
    return done


class _Wake(asyncio.DatagramProtocol):
    def __init__(self, received: Callable[[bytes], None]) -> None:
        self.received = received

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.received(data)


class _Carried(msgspec.Struct, frozen=True, array_like=True):
    """The rows of one post, on the wake-up datagram: who wrote them, and the id of the first (the others'
    follow it: one transaction's)."""

    origin: str
    first: int
    rows: list[RelayPost]


_CARRIED = b"R"
_carry = msgspec.msgpack.Encoder()
_uncarry = msgspec.msgpack.Decoder(_Carried)


def relay_path(store_path: str | os.PathLike[str]) -> Path:
    """Where the relay of the SQLite store at `store_path` is kept."""
    return Path(f"{os.fspath(store_path)}.relay")


class SqliteRelay:
    """The relay of a SQLite store, in its side file (see the module docstring). Woken by a datagram on an
    abstract UNIX socket (Linux); elsewhere it polls every `POLL` seconds."""

    def __init__(self, path: str | os.PathLike[str], *, peer: str | None = None) -> None:
        self.path = str(path)
        self.host = socket.gethostname()
        self.peer = peer or f"{self.host}:{os.getpid()}:{new_id('peer')}"
        self._conn: sqlite3.Connection | None = None
        self._woken = Wakeup()
        self._transport: asyncio.DatagramTransport | None = None
        self._wake_name = ""
        self._sender: socket.socket | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-relay")
        self._fast: sqlite3.Connection | None = None
        """A second connection that never waits (busy timeout 0), for every write: on the loop's own thread
        while nothing of this relay is in its thread (the common write, with the file's lock free, costs tens
        of microseconds there, where a hop to the thread and back costs milliseconds on a busy event loop),
        else in the thread, which tries again every `LOCK_POLL` until the lock is free."""
        self._handed = 0
        """Writes and reads handed to the thread (counted by the loop's thread only)..."""
        self._done = 0
        """...and those the thread finished (counted by the thread only, as it finishes one: a caller that
        was cancelled stops waiting for it, not the thread using the fast connection)."""
        self._others: list[str] = []
        """The wake addresses of the other live peers of this host (refreshed by `heartbeat`)."""
        self._took: Callable[[], bool] | None = None
        self._inbox: dict[int, RelayRow] = {}
        """Rows by id, as the wake-ups brought them (and this peer's own, as it wrote them): `rows_after`
        gives those that follow on from where its reader is without reading the file (a read after another
        process wrote costs tens of microseconds of SQLite's own before the first row); the file is read
        only when the row that comes next is not here."""

    # --- the connection ----------------------------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = connect_wal(self.path, timeout=10.0, setup=_setup)
            except sqlite3.Error as e:
                raise store_fault(e, self.path, "open") from e
            self._conn = conn
        return self._conn

    def _fast_conn(self) -> sqlite3.Connection:
        if self._fast is None:
            self.conn  # noqa: B018 (the file and its tables, made once)
            try:
                fast = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0.0)
                fast.execute("PRAGMA synchronous = OFF")  # a connection's own setting, as the other's
                self._fast = fast
            except sqlite3.Error as e:
                raise store_fault(e, self.path, "open") from e
        return self._fast

    def _write_now(
        self,
        sql: str,
        rows: Sequence[Sequence[object]] | None = None,
        params: Sequence[object] = (),
        last_id: bool = False,
    ) -> int | None:
        """The write in one transaction on the fast connection, which never waits: the rows it changed (with
        `last_id`, the id of the last row it inserted); None when another peer holds the file's lock (nothing
        written)."""
        conn = self._fast_conn()
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                if is_busy(e):
                    return None
                raise
            try:
                cursor = conn.executemany(sql, rows) if rows is not None else conn.execute(sql, params)
                done = conn.execute("SELECT last_insert_rowid()").fetchone()[0] if last_id else cursor.rowcount
                conn.execute("COMMIT")
            except BaseException as e:
                conn.execute("ROLLBACK")
                if isinstance(e, sqlite3.OperationalError) and is_busy(e):
                    return None
                raise
            return int(done)
        except sqlite3.Error as e:
            raise store_fault(e, self.path, "write to") from e

    def _read_now(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            raise store_fault(e, self.path, "read") from e

    async def _write(
        self,
        sql: str,
        rows: Sequence[Sequence[object]] | None = None,
        params: Sequence[object] = (),
        last_id: bool = False,
    ) -> int:
        """A write here at once when the file's lock is free and nothing of this relay waits in its thread;
        else in the relay's own thread, behind what waits there: another worker holding the file's lock for
        a moment never stalls this process's event loop."""
        attempt = functools.partial(self._write_now, sql, rows, params, last_id)
        if not self._in_thread and (done := _tried(attempt, LOCK_IN_PLACE)) is not None:
            return done  # (another peer's write holds the lock a tenth of a millisecond or so)
        return await self._in_own_thread(self._write_waiting, attempt)

    def _write_waiting(self, attempt: Callable[[], int | None]) -> int:
        """(In the relay's thread.) The write once the file's lock is free, tried again every `LOCK_POLL`
        seconds for `LOCK_WAIT` at most: SQLite's own wait sleeps 1, 2, then 5 ms between its tries, for a
        lock the other peers hold a tenth of a millisecond at a time. It goes through the fast connection,
        which the loop's thread leaves alone while anything of this relay is in the thread."""
        done = _tried(attempt, LOCK_WAIT)
        if done is None:
            raise store_fault(sqlite3.OperationalError("database is locked"), self.path, "write to")
        return done

    async def _read(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        if not self._in_thread:  # a read in WAL mode never waits for a writer
            try:
                return self._fast_conn().execute(sql, params).fetchall()
            except sqlite3.Error as e:
                if not is_busy(e):
                    raise store_fault(e, self.path, "read") from e
        return await self._in_own_thread(self._read_now, sql, params)

    @property
    def _in_thread(self) -> int:
        """Writes and reads handed to the thread and not yet done: while there are any, the next one goes
        there too, behind them (in order), and the loop's thread leaves the fast connection alone."""
        return self._handed - self._done

    async def _in_own_thread(self, fn: Callable[..., R], *args: object) -> R:
        def job() -> R:
            try:
                return fn(*args)
            finally:
                self._done += 1

        self._handed += 1
        return await asyncio.get_running_loop().run_in_executor(self._thread, job)

    # --- peers -------------------------------------------------------------------------------------

    async def join(self) -> None:
        if hasattr(socket, "AF_UNIX") and os.uname().sysname == "Linux":
            name = f"\0tether-relay-{self.peer}"
            with contextlib.suppress(OSError):
                loop = asyncio.get_running_loop()
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.bind(name)
                sock.setblocking(False)
                transport, _ = await loop.create_datagram_endpoint(lambda: _Wake(self._received), sock=sock)
                self._transport = transport
                self._wake_name = name
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
        await self.heartbeat()

    async def heartbeat(self) -> list[Peer]:
        now = time.time()
        await self._write(
            "INSERT INTO peers(peer, host, pid, wake, seen) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(peer) DO UPDATE SET seen = excluded.seen",
            params=(self.peer, self.host, os.getpid(), self._wake_name, now),
        )
        peers = [
            Peer(peer=str(p), host=str(h), pid=int(i), wake=str(w), seen=float(s))
            for p, h, i, w, s in await self._read(
                "SELECT peer, host, pid, wake, seen FROM peers WHERE peer != ?", (self.peer,)
            )
        ]
        alive = [p for p in peers if not peer_dead(p, now, self.host)]
        self._others = [p.wake for p in alive if p.wake and p.host == self.host]
        return alive

    # --- rows --------------------------------------------------------------------------------------

    async def post(self, rows: Sequence[RelayPost]) -> None:
        if not rows:
            return
        now = time.time()
        last = await self._write(
            "INSERT INTO relay(at, origin, kind, session_id, n, body) VALUES (?, ?, ?, ?, ?, ?)",
            [(now, self.peer, r.kind, r.session_id, r.n, r.body) for r in rows],
            last_id=True,
        )
        first = last - len(rows) + 1  # one transaction's rows: consecutive ids
        self._keep(self.peer, first, rows)
        if self._sender is not None and self._others:
            # the rows themselves ride on the wake-up, for a peer that has every row before them (see `_inbox`)
            carried = _CARRIED + _carry.encode(_Carried(self.peer, first, list(rows)))
            wake = carried if len(carried) <= CARRY_MAX else b"!"
            for address in self._others:
                with contextlib.suppress(OSError):  # gone, or its queue is full: it reads the file anyway
                    self._sender.sendto(wake, address)

    def _received(self, data: bytes) -> None:
        """A wake-up came (from the datagram's callback): the rows it carries are kept for `rows_after`, and
        given at once to `on_rows`'s callback when there is one."""
        if data.startswith(_CARRIED):
            try:
                carried = _uncarry.decode(memoryview(data)[len(_CARRIED) :])
            except msgspec.DecodeError:
                carried = None  # not ours (another version): the file has the rows
            if carried is not None:
                self._keep(carried.origin, carried.first, carried.rows)
                if self._took is not None and self._took() and not self._inbox:
                    return  # all given: nothing for the reader to look for
        self._woken.set()

    def on_rows(self, took: Callable[[], bool] | None) -> None:
        self._took = took

    def rows_here(self, after: int, limit: int | None = None) -> list[RelayRow]:
        inbox = self._inbox
        rows: list[RelayRow] = []
        while (limit is None or len(rows) < limit) and (row := inbox.pop(after + len(rows) + 1, None)) is not None:
            rows.append(row)
        self._forget_through(rows[-1].id if rows else after)
        return rows

    def _forget_through(self, last: int) -> None:
        """Drop what was kept of the rows up to `last`: given already (from here or from the file)."""
        if self._inbox and min(self._inbox) <= last:
            for i in [i for i in self._inbox if i <= last]:
                del self._inbox[i]

    def _keep(self, origin: str, first: int, rows: Sequence[RelayPost]) -> None:
        if len(self._inbox) > INBOX_MAX:
            self._inbox.clear()  # nobody reads them (the file still has them all)
        for i, r in enumerate(rows, first):
            self._inbox[i] = RelayRow(id=i, origin=origin, kind=r.kind, session_id=r.session_id, n=r.n, body=r.body)

    async def rows_after(self, after: int, limit: int = 1000) -> list[RelayRow]:
        rows = self.rows_here(after, limit)
        if not rows:  # a row the wake-ups did not bring (a peer's datagram lost, or too large): the file has it
            rows = [
                RelayRow(id=int(i), origin=str(o), kind=k, session_id=str(s), n=int(n), body=bytes(b))
                for i, o, k, s, n, b in await self._read(
                    "SELECT id, origin, kind, session_id, n, body FROM relay WHERE id > ? ORDER BY id LIMIT ?",
                    (after, limit),
                )
            ]
            if rows:
                self._forget_through(rows[-1].id)
        return rows

    async def last_id(self) -> int:
        ((last,),) = await self._read("SELECT coalesce(max(id), 0) FROM relay")
        return int(last)

    async def wait(self, timeout: float) -> None:
        await self._woken.wait(timeout)

    # --- run claims --------------------------------------------------------------------------------

    async def claim_run(self, session_id: str) -> None:
        await self._write(
            "INSERT INTO runs(session_id, peer, since) VALUES (?, ?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET peer = excluded.peer, since = excluded.since",
            params=(session_id, self.peer, time.time()),
        )

    async def release_run(self, session_id: str) -> None:
        await self._write("DELETE FROM runs WHERE session_id = ? AND peer = ?", params=(session_id, self.peer))

    async def claimant(self, session_id: str) -> str | None:
        rows = await self._read("SELECT peer FROM runs WHERE session_id = ?", (session_id,))
        return str(rows[0][0]) if rows else None

    async def orphans(self) -> list[Orphan]:
        now = time.time()
        rows = await self._read(
            "SELECT r.session_id, r.peer, p.host, p.pid, p.seen FROM runs r LEFT JOIN peers p ON p.peer = r.peer "
            "WHERE r.peer != ?",
            (self.peer,),
        )
        out = []
        for sid, peer, host, pid, seen in rows:
            gone = host is None or peer_dead(
                Peer(peer=str(peer), host=str(host), pid=int(pid), wake="", seen=float(seen)),
                now,
                self.host,
            )
            if gone:
                out.append(Orphan(session_id=str(sid), peer=str(peer)))
        return out

    async def take_run(self, orphan: Orphan) -> bool:
        taken = await self._write(
            "UPDATE runs SET peer = ?, since = ? WHERE session_id = ? AND peer = ?",
            params=(self.peer, time.time(), orphan.session_id, orphan.peer),
        )
        return taken == 1

    async def prune(self, before: float) -> int:
        # Rows are pruned up to the first one written at or after `before`, found by walking the ids from the
        # oldest: the rows of one host's peers are written in about the order of their times, and the walk
        # passes over the rows it deletes. An index on `at` would find it at once, but every post paid to keep
        # it: 40 of a post's 80-100 microseconds, on the path of every event another worker follows.
        gone = await self._write(
            "DELETE FROM relay WHERE id < coalesce("
            "(SELECT id FROM relay WHERE at >= ? ORDER BY id LIMIT 1), (SELECT max(id) + 1 FROM relay))",
            params=(before,),
        )
        self._inbox.clear()  # none of it may outlive the file's rows (the file has what is left)
        now = time.time()
        for p, h, i, s in await self._read("SELECT peer, host, pid, seen FROM peers WHERE peer != ?", (self.peer,)):
            if peer_dead(Peer(peer=str(p), host=str(h), pid=int(i), wake="", seen=float(s)), now, self.host):
                # its claims stay: with no peer row they are orphans (`orphans`)
                await self._write("DELETE FROM peers WHERE peer = ?", params=(str(p),))
        return gone

    async def close(self) -> None:
        with contextlib.suppress(TetherError, RuntimeError):
            if self._conn is not None:
                await self._write("DELETE FROM peers WHERE peer = ?", params=(self.peer,))
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self._sender is not None:
            self._sender.close()
            self._sender = None
        self._thread.shutdown(wait=True)
        if self._fast is not None:
            self._fast.close()
            self._fast = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
