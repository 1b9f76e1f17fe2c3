"""The relay (`relay.py`) of a PostgreSQL store: tables of its own in the store's database (`tether_relay`,
`tether_relay_peers`, `tether_relay_runs`, made on first use under an advisory lock, so that nodes starting
at once do not race), written through one connection of this process and read by every node. A post takes
a transaction-scoped advisory lock before it inserts, so that rows become visible in the order of their ids
(a reader that goes on from the last id it saw skips none that commit later), and sends one `NOTIFY` naming
the session and event number of its last row: a wake-up of a few dozen bytes, far under NOTIFY's 8,000, never
the event itself (PostgreSQL does not keep notifications; the rows are read from the table). A second
connection LISTENs; a reader waits on it, and looks anyway every `POLL` seconds."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from ..errors import StoreUnavailable
from ..ids import new_id
from .relay import Orphan, Peer, RelayPost, RelayRow, Wakeup, peer_dead

log = logging.getLogger("tether.store")

CHANNEL = "tether_relay"
_LOCK = 0x7E7E_7E1A
"""The advisory lock key of the relay's posts (and of making its tables)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tether_relay (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at double precision NOT NULL,
    origin text NOT NULL,
    kind text NOT NULL,
    session_id text NOT NULL,
    n bigint NOT NULL,
    body bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS tether_relay_at ON tether_relay(at);
CREATE TABLE IF NOT EXISTS tether_relay_peers (
    peer text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    wake text NOT NULL,
    seen double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS tether_relay_runs (
    session_id text PRIMARY KEY,
    peer text NOT NULL,
    since double precision NOT NULL
);
"""


_POST_SQL = f"""
WITH l AS (SELECT pg_advisory_xact_lock({_LOCK}), set_config('synchronous_commit', 'off', true)),
ins AS (
    INSERT INTO tether_relay(at, origin, kind, session_id, n, body)
    SELECT %(at)s, %(origin)s, t.kind, t.session_id, t.n, t.body
    FROM l, unnest(%(kinds)s::text[], %(sids)s::text[], %(ns)s::int8[], %(bodies)s::bytea[]) WITH ORDINALITY
        AS t(kind, session_id, n, body, ord)
    ORDER BY t.ord
)
SELECT pg_notify('{CHANNEL}', %(last)s)
"""
"""A post, one statement (its own transaction, one round trip): the lock that orders every node's posts is
taken (`l`, scanned before any row and its id are made) and held to the commit, never for a round trip to
this process, whose event loop is busy with its runs. The relay is a transport, not a record (the journal
is): its commit does not wait for the WAL's flush to disk (readers see the rows at the commit all the same).
The NOTIFY goes out at the commit."""


def _post_params(peer: str, now: float, rows: Sequence[RelayPost]) -> dict[str, Any]:
    last = rows[-1]
    return {
        "at": now,
        "origin": peer,
        "kinds": [r.kind for r in rows],
        "sids": [r.session_id for r in rows],
        "ns": [r.n for r in rows],
        "bodies": [r.body for r in rows],
        "last": f"{last.session_id},{last.n}",
    }


class PgRelay:
    """See the module docstring."""

    def __init__(self, url: str, *, peer: str | None = None) -> None:
        self.url = url
        self.host = socket.gethostname()
        self.peer = peer or f"{self.host}:{os.getpid()}:{new_id('peer')}"
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._listener: psycopg.AsyncConnection[Any] | None = None
        self._listening: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._woken = Wakeup()

    def _fault(self, e: BaseException, doing: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"the relay could not {doing} PostgreSQL: {' '.join(str(e).split())}", "check the server"
        )

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        return self._conn

    async def _run(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self._lock:
            try:
                conn = await self._connection()
                async with conn.cursor() as cur:
                    await cur.execute(sql, params)
                    return cur.rowcount
            except psycopg.Error as e:
                raise self._fault(e, "write to") from e

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async with self._lock:
            try:
                conn = await self._connection()
                async with conn.cursor() as cur:
                    await cur.execute(sql, params)
                    return await cur.fetchall()
            except psycopg.Error as e:
                raise self._fault(e, "read from") from e

    async def join(self) -> None:
        try:
            conn = await self._connection()
            async with self._lock, conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    await conn.execute(statement)
            self._listener = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            await self._listener.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as e:
            raise self._fault(e, "join the relay on") from e
        self._listening = asyncio.get_running_loop().create_task(self._listen(), name="tether-relay-listen")
        await self.heartbeat()

    async def _listen(self) -> None:
        assert self._listener is not None
        while True:
            try:
                async for note in self._listener.notifies():
                    # A post of this process's own (its connection's backend) wakes no one here: reading its
                    # own rows back would only hold the connection that its next post waits for.
                    if self._conn is None or self._conn.closed or note.pid != self._conn.info.backend_pid:
                        self._woken.set()
            except psycopg.Error:
                log.warning("the relay's LISTEN connection failed; polling until it is back", exc_info=True)
                self._woken.set()
                await asyncio.sleep(1.0)
                with contextlib.suppress(psycopg.Error):
                    self._listener = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
                    await self._listener.execute(f"LISTEN {CHANNEL}")

    async def heartbeat(self) -> list[Peer]:
        now = time.time()
        await self._run(
            "INSERT INTO tether_relay_peers(peer, host, pid, wake, seen) VALUES (%s, %s, %s, '', %s) "
            "ON CONFLICT(peer) DO UPDATE SET seen = excluded.seen",
            (self.peer, self.host, os.getpid(), now),
        )
        rows = await self._fetch("SELECT peer, host, pid, seen FROM tether_relay_peers WHERE peer != %s", (self.peer,))
        peers = [Peer(peer=p, host=h, pid=i, wake="", seen=s) for p, h, i, s in rows]
        return [p for p in peers if not peer_dead(p, now, self.host)]

    async def post(self, rows: Sequence[RelayPost]) -> None:
        if not rows:
            return
        now = time.time()
        async with self._lock:
            try:
                conn = await self._connection()
                await conn.execute(_POST_SQL, _post_params(self.peer, now, rows))
            except psycopg.Error as e:
                raise self._fault(e, "write to") from e

    async def rows_after(self, after: int, limit: int = 1000) -> list[RelayRow]:
        rows = await self._fetch(
            "SELECT id, origin, kind, session_id, n, body FROM tether_relay WHERE id > %s ORDER BY id LIMIT %s",
            (after, limit),
        )
        return [RelayRow(id=i, origin=o, kind=k, session_id=s, n=n, body=bytes(b)) for i, o, k, s, n, b in rows]

    async def last_id(self) -> int:
        ((last,),) = await self._fetch("SELECT coalesce(max(id), 0) FROM tether_relay")
        return int(last)

    def rows_here(self, after: int) -> list[RelayRow]:
        return []  # a NOTIFY names the session and the event's number, never the rows

    def on_rows(self, took: Callable[[], bool] | None) -> None:
        pass

    async def wait(self, timeout: float) -> None:
        await self._woken.wait(timeout)

    async def claim_run(self, session_id: str) -> None:
        await self._run(
            "INSERT INTO tether_relay_runs(session_id, peer, since) VALUES (%s, %s, %s) "
            "ON CONFLICT(session_id) DO UPDATE SET peer = excluded.peer, since = excluded.since",
            (session_id, self.peer, time.time()),
        )

    async def release_run(self, session_id: str) -> None:
        await self._run("DELETE FROM tether_relay_runs WHERE session_id = %s AND peer = %s", (session_id, self.peer))

    async def claimant(self, session_id: str) -> str | None:
        rows = await self._fetch("SELECT peer FROM tether_relay_runs WHERE session_id = %s", (session_id,))
        return str(rows[0][0]) if rows else None

    async def orphans(self) -> list[Orphan]:
        now = time.time()
        rows = await self._fetch(
            "SELECT r.session_id, r.peer, p.host, p.pid, p.seen FROM tether_relay_runs r "
            "LEFT JOIN tether_relay_peers p ON p.peer = r.peer WHERE r.peer != %s",
            (self.peer,),
        )
        return [
            Orphan(session_id=sid, peer=peer)
            for sid, peer, host, pid, seen in rows
            if host is None or peer_dead(Peer(peer=peer, host=host, pid=pid, wake="", seen=seen), now, self.host)
        ]

    async def take_run(self, orphan: Orphan) -> bool:
        taken = await self._run(
            "UPDATE tether_relay_runs SET peer = %s, since = %s WHERE session_id = %s AND peer = %s",
            (self.peer, time.time(), orphan.session_id, orphan.peer),
        )
        return taken == 1

    async def prune(self, before: float) -> int:
        gone = await self._run("DELETE FROM tether_relay WHERE at < %s", (before,))
        now = time.time()
        rows = await self._fetch("SELECT peer, host, pid, seen FROM tether_relay_peers WHERE peer != %s", (self.peer,))
        for p, h, i, s in rows:
            if peer_dead(Peer(peer=p, host=h, pid=i, wake="", seen=s), now, self.host):
                await self._run("DELETE FROM tether_relay_peers WHERE peer = %s", (p,))
        return gone

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        with contextlib.suppress(psycopg.Error, StoreUnavailable):
            if self._conn is not None and not self._conn.closed:
                await self._run("DELETE FROM tether_relay_peers WHERE peer = %s", (self.peer,))
        for conn in (self._conn, self._listener):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
        self._conn = self._listener = None
