"""The PostgreSQL benchmark, on a local server it starts itself (a throwaway cluster: initdb + pg_ctl, as the
`postgres` user when run as root; fsync and synchronous_commit on, PostgreSQL's defaults) or on `--url`:

- append: one message at a time through tether's PostgresStore, the OpenAI Agents SDK's
  `SQLAlchemySession.add_items` (SQLAlchemy's asyncio engine over asyncpg, as its docs set it up) and a bare
  INSERT committed through each driver (psycopg 3, which tether uses, and asyncpg), in interleaved rounds;
- writers: 16 sessions appended to at once (one process, a pool of 16 connections) against 1;
- resume: `Session.open` + the tail of a session of 100,000 entries (and of 1,000);
- list: the first page of sessions among 1,000,000 (loaded with one INSERT ... SELECT, not appends);
- recall: recall@5/10 on a LoCoMo file, PostgreSQL beside SQLite, with the turn keys and with each store's
  own search.

Readable rows with PASS/FAIL against the targets; the last line is one JSON object.

    python bench/postgres.py [--quick] [--only append,writers,resume,list,recall] [--url URL]
                             [--locomo ../shared/data/locomo-dev.json] [--data PATH] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from _common import (
    REPO_ROOT,
    BenchError,
    Report,
    Target,
    load_chat_data,
    median,
    percentile,
    scratch_dir,
    tenths,
    time_async,
    us,
)

from store import TAIL, Workload, fill, resume_once
from tether.errors import MissingExtra
from tether.messages import Message, encode_body

SECTIONS = ("append", "writers", "resume", "list", "recall")
ROUNDS = 10
PAGE = 50
LOCOMO_DEFAULT = REPO_ROOT.parent / "shared" / "data" / "locomo-dev.json"

TARGETS = (
    Target("pg_append_ratio_vs_sqlalchemysession", ">=", 3),
    Target("pg_append_vs_raw", "<=", 2),
    Target("pg_resume_ms_100k", "<=", 5),
    Target("pg_list_ms_1m", "<=", 10),
)


@dataclass(frozen=True)
class Sizes:
    appends: int = 2_000
    writer_seconds: float = 5.0
    writers: int = 16
    resume_small: int = 1_000
    resume_large: int = 100_000
    resume_repeat: int = 30
    sessions: int = 1_000_000
    list_repeat: int = 30


QUICK = replace(
    Sizes(), appends=300, writer_seconds=1.5, resume_large=10_000, resume_repeat=10, sessions=50_000, list_repeat=10
)


# --- the server -------------------------------------------------------------------------------------------


def _postgres_bin() -> Path:
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parent.parent.name)
    if not found:
        raise BenchError(
            "no PostgreSQL here: install Debian's postgresql package (apt-get install -y postgresql), or name a "
            "running server with --url postgresql://user@host:port/db (a role that may create databases)"
        )
    return found[-1].parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_server() -> Iterator[str]:
    """A throwaway cluster with PostgreSQL's durable defaults (fsync on, synchronous_commit on), on a loopback
    port; the URL of its `postgres` database. Removed at the end."""
    bin_dir = _postgres_bin()
    prefix: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        import pwd

        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"
    try:
        done = subprocess.run(
            [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
             "--locale=C"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"initdb failed: {done.stderr[-1500:]}")
        port = _free_port()
        options = (
            f"-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={folder} "
            "-c max_connections=100 -c shared_buffers=256MB"
        )
        done = subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-o", options,
             "-w", "-t", "120", "start"],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"pg_ctl start failed: {done.stderr[-1500:]}")
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                capture_output=True,
                timeout=180,
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def new_database(server: str, stem: str) -> str:
    """A fresh database on the server; its URL."""
    import psycopg

    name = f"bench_{stem}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return with_database(server, name)


def server_settings(url: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        out = {}
        for name in ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "shared_buffers"):
            out[name] = str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
        return out


# --- appending one message ----------------------------------------------------------------------------------


class Contender:
    key = ""
    label = ""

    def __init__(self, n: int, url: str) -> None:
        self.n, self.url = n, url

    async def open(self) -> None: ...

    async def step(self, i: int) -> int:
        raise NotImplementedError

    async def settle(self) -> None:
        """After each round's timed steps: work the contender left running (untimed, before the next one)."""

    async def close(self) -> None: ...


class TetherAppend(Contender):
    """`await store.append(sid, [message], expect_seq=n)`: what the run's journal does for each entry."""

    key, label = "pg_append_us", "tether PostgresStore.append (psycopg 3)"

    def __init__(self, n: int, url: str, messages: Sequence[Message]) -> None:
        super().__init__(n, url)
        self.messages = messages
        self.store: Any = None
        self.sid = ""
        self.flush: Any = None
        self.flushed: list[int] = []  # ns each background flush of the search terms took

    async def open(self) -> None:
        from tether.store.postgres import PostgresStore

        self.store = PostgresStore(self.url)
        self.sid = (await self.store.create_session(directory="/bench/append")).id

    async def step(self, i: int) -> int:
        store, sid, message = self.store, self.sid, self.messages[i]
        t0 = time.perf_counter_ns()
        await store.append(sid, [message], expect_seq=i + 1)
        took = time.perf_counter_ns() - t0
        flush = store._indexing()  # a flush of the search terms this append started, in the background
        if flush is not None and flush is not self.flush:
            self.flush, started = flush, time.perf_counter_ns()
            flush.add_done_callback(lambda _: self.flushed.append(time.perf_counter_ns() - started))
        return took

    async def settle(self) -> None:
        """A flush still running is awaited here, so that it never runs beside another contender's steps."""
        flush = self.store._indexing()
        if flush is not None:
            await flush

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()


class SqlAlchemyAppend(Contender):
    """The OpenAI Agents SDK's `SQLAlchemySession.add_items(items)` on `postgresql+asyncpg://`."""

    key, label = "sqlalchemysession_append_us", "Agents SDK SQLAlchemySession.add_items (asyncpg)"

    def __init__(self, n: int, url: str, items: Sequence[list[dict[str, Any]]]) -> None:
        super().__init__(n, url)
        self.items = items
        self.session: Any = None
        self.engine: Any = None
        self.version = "?"

    async def open(self) -> None:
        try:
            import agents
            from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
            from sqlalchemy.ext.asyncio import create_async_engine
        except ImportError as e:
            raise MissingExtra("bench", f"{e.name} (openai-agents, sqlalchemy[asyncio], asyncpg)") from None
        self.version = agents.__version__
        self.engine = create_async_engine(self.url.replace("postgresql://", "postgresql+asyncpg://", 1))
        self.session = SQLAlchemySession("bench", engine=self.engine, create_tables=True)
        await self.session.get_items(limit=1)  # the tables are made before the first timed call

    async def step(self, i: int) -> int:
        session, items = self.session, self.items[i]
        t0 = time.perf_counter_ns()
        await session.add_items(items)
        return time.perf_counter_ns() - t0

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()


RAW_TABLE = (
    "CREATE TABLE IF NOT EXISTS raw_log (session_id text NOT NULL, seq bigint NOT NULL, payload text NOT NULL,"
    " PRIMARY KEY (session_id, seq))"
)
RAW_INSERT = "INSERT INTO raw_log (session_id, seq, payload) VALUES ({0}, {1}, {2})"


class PsycopgRaw(Contender):
    """A bare INSERT of the same payload, committed (autocommit: one round trip), through psycopg 3's
    async connection: the floor under tether's append on the same driver."""

    key, label = "raw_psycopg_insert_us", "bare INSERT + COMMIT, psycopg 3 (async)"

    def __init__(self, n: int, url: str, payloads: Sequence[str]) -> None:
        super().__init__(n, url)
        self.payloads = payloads
        self.conn: Any = None

    async def open(self) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        await self.conn.execute(RAW_TABLE)
        self.sql = RAW_INSERT.format("%s", "%s", "%s")

    async def step(self, i: int) -> int:
        conn, sql, payload = self.conn, self.sql, self.payloads[i]
        t0 = time.perf_counter_ns()
        await conn.execute(sql, ("psycopg", i + 1, payload))
        return time.perf_counter_ns() - t0

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


class AsyncpgRaw(PsycopgRaw):
    """The same bare INSERT + COMMIT through asyncpg (a prepared statement, as asyncpg always does)."""

    key, label = "raw_asyncpg_insert_us", "bare INSERT + COMMIT, asyncpg"

    async def open(self) -> None:
        import asyncpg

        self.conn = await asyncpg.connect(self.url)
        await self.conn.execute(RAW_TABLE)
        self.sql = RAW_INSERT.format("$1", "$2", "$3")

    async def step(self, i: int) -> int:
        conn, sql, payload = self.conn, self.sql, self.payloads[i]
        t0 = time.perf_counter_ns()
        await conn.execute(sql, "asyncpg", i + 1, payload)
        return time.perf_counter_ns() - t0


def sdk_items(work: Workload) -> list[list[dict[str, Any]]]:
    return work.sdk_items


async def bench_append(rep: Report, sizes: Sizes, work: Workload, server: str) -> None:
    url = new_database(server, "append")
    payloads = [encode_body(m).decode() for m in work.messages]
    chosen: list[Contender] = [
        TetherAppend(sizes.appends, url, work.messages),
        SqlAlchemyAppend(sizes.appends, url, sdk_items(work)),
        PsycopgRaw(sizes.appends, url, payloads),
        AsyncpgRaw(sizes.appends, url, payloads),
    ]
    samples: dict[str, list[int]] = {c.key: [] for c in chosen}
    rep.section(f"append: one message at a time, {sizes.appends:,} each, {ROUNDS} interleaved rounds")
    started = time.perf_counter()
    try:
        for c in chosen:
            await c.open()
        gc.collect()
        gc.freeze()
        for r in range(ROUNDS):
            for c in chosen:
                gc.collect()
                out = samples[c.key]
                for i in range(r * c.n // ROUNDS, (r + 1) * c.n // ROUNDS):
                    out.append(await c.step(i))
                await c.settle()
            rep.note(f"round {r + 1}/{ROUNDS} done, {time.perf_counter() - started:.0f} s")
        tether = next(c for c in chosen if isinstance(c, TetherAppend))
        left = await tether.store.search_backlog()
    finally:
        gc.unfreeze()
        for c in chosen:
            await c.close()
    medians: dict[str, float] = {}
    for c in chosen:
        got = [us(s) for s in samples[c.key]]
        medians[c.key] = median(got)
        rep.row(c.label, c.key, medians[c.key], "µs")
        rep.note(f"p99 {percentile(got, 99):,.0f} µs; medians by tenth {[round(v) for v in tenths(got)]}")
    if tether.flushed:
        from tether.store.postgres import INDEX_EVERY

        rep.row(
            f"search terms, flushed in the background every {INDEX_EVERY} appends, per message",
            "pg_index_us_per_message", sum(tether.flushed) / 1000 / (tether.n - left), "µs",
        )  # fmt: skip
        rep.note(
            f"{len(tether.flushed)} flushes, median {median([us(t) for t in tether.flushed]) / 1000:.1f} ms: "
            "the work the append no longer does (to_tsvector and the GIN insert), off its path"
        )
    sqla = next(c for c in chosen if isinstance(c, SqlAlchemyAppend))
    rep.set("agents_version", sqla.version)
    tether_us = medians["pg_append_us"]
    rep.row(
        "SQLAlchemySession µs / tether µs", "pg_append_ratio_vs_sqlalchemysession",
        medians["sqlalchemysession_append_us"] / tether_us, "x", digits=2,
    )  # fmt: skip
    rep.row(
        "tether µs / bare INSERT + COMMIT (psycopg) µs",
        "pg_append_vs_raw",
        tether_us / medians["raw_psycopg_insert_us"],
        "x",
        digits=2,
    )
    rep.row(
        "bare INSERT + COMMIT: asyncpg µs / psycopg µs", "raw_asyncpg_vs_psycopg",
        medians["raw_asyncpg_insert_us"] / medians["raw_psycopg_insert_us"], "x", digits=2,
    )  # fmt: skip


# --- many writers -------------------------------------------------------------------------------------------


async def writers_rate(url: str, writers: int, seconds: float, messages: Sequence[Message]) -> float:
    """Messages per second that `writers` sessions appended at once (one task each, one message per append,
    each its own connection from one pool), over `seconds`."""
    from tether.store.postgres import PostgresStore

    store = PostgresStore(url, min_size=writers, max_size=writers)
    try:
        sids = [(await store.create_session(directory="/bench/writers")).id for _ in range(writers)]
        counts = [0] * writers
        seqs = [0] * writers

        async def writer(k: int, until: float) -> None:
            while time.perf_counter() < until:
                seqs[k] += 1
                await store.append(sids[k], [messages[seqs[k] % len(messages)]], expect_seq=seqs[k])
                counts[k] += 1

        await asyncio.gather(*(writer(k, time.perf_counter() + 0.5) for k in range(writers)))  # every connection open
        counts = [0] * writers
        t0 = time.perf_counter()
        stop = t0 + seconds
        await asyncio.gather(*(writer(k, stop) for k in range(writers)))
        return sum(counts) / (time.perf_counter() - t0)
    finally:
        await store.close()


async def bench_writers(rep: Report, sizes: Sizes, work: Workload, server: str) -> None:
    rep.section(f"writers: {sizes.writers} sessions appended to at once against 1, {sizes.writer_seconds:g} s each")
    url = new_database(server, "writers")
    one = await writers_rate(url, 1, sizes.writer_seconds, work.messages)
    many = await writers_rate(url, sizes.writers, sizes.writer_seconds, work.messages)
    rep.row("1 writer", "pg_writers_1_msgs_per_s", one, "msg/s", digits=0)
    rep.row(f"{sizes.writers} writers", f"pg_writers_{sizes.writers}_msgs_per_s", many, "msg/s", digits=0)
    rep.row(f"{sizes.writers} writers / 1 writer", "pg_writers_scaling", many / one, "x", digits=2)
    rep.note("one Python process (the tasks share its event loop and one core), the server on the same machine")


# --- resume -------------------------------------------------------------------------------------------------


async def bench_resume(rep: Report, sizes: Sizes, work: Workload, server: str) -> None:
    from tether.store.postgres import PostgresStore

    small, large = sizes.resume_small, sizes.resume_large
    rep.section(f"resume: Session.open + tail({TAIL}) of sessions of {small:,} and {large:,} messages")
    store = PostgresStore(new_database(server, "resume"))
    try:
        ids: dict[int, str] = {}
        t0 = time.perf_counter()
        for n in (small, large):
            ids[n] = (await store.create_session(directory="/bench/resume")).id
            bodies = [work.messages[i % len(work.messages)] for i in range(n)]
            await fill(store, ids[n], bodies)  # type: ignore[arg-type]  # any Store
        rep.note(f"filled through store.append in batches of 1,000 in {time.perf_counter() - t0:.1f} s")
        warm: dict[int, float] = {}
        for n, key in ((small, "1k"), (large, "100k" if large == 100_000 else f"{large // 1000}k")):
            got = await resume_once(store, ids[n])  # type: ignore[arg-type]
            if got != min(TAIL, n):
                raise BenchError(f"resume of a {n}-message session returned {got} entries, not {min(TAIL, n)}")
            samples = await time_async(lambda sid=ids[n]: resume_once(store, sid), sizes.resume_repeat, warmup=3)
            warm[n] = median(samples) / 1e6
            rep.row(
                f"{n:,} messages (warm pool, median of {sizes.resume_repeat})",
                f"pg_resume_ms_{key}",
                warm[n],
                "ms",
                digits=2,
            )
        rep.row(f"{large:,} / {small:,}", "pg_resume_ratio_large_vs_1k", warm[large] / warm[small], "x", digits=2)
    finally:
        await store.close()


# --- listing ------------------------------------------------------------------------------------------------

BULK_SESSIONS = """
INSERT INTO sessions (id, directory, title, created_at, updated_at, entry_count, message_count)
SELECT 'ses_' || lpad(upper(to_hex(g)), 26, '0'), '/bench/d' || (g %% 1000), 'session ' || g,
       1700000000 + g, 1700000000 + g + (g %% 7), 0, 0
FROM generate_series(1, %s) AS g
"""


async def bench_list(rep: Report, sizes: Sizes, server: str) -> None:
    import psycopg

    from tether.store.postgres import PostgresStore

    n = sizes.sessions
    label = "1m" if n == 1_000_000 else f"{n // 1000}k"
    rep.section(f"list: the first page ({PAGE}) among {n:,} sessions (loaded by one INSERT ... SELECT)")
    url = new_database(server, "list")
    store = PostgresStore(url)  # its schema first
    try:
        t0 = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(BULK_SESSIONS, (n,))
            conn.execute("VACUUM ANALYZE sessions")
        rep.note(f"loaded and analyzed in {time.perf_counter() - t0:.1f} s")
        first = await store.list_sessions(limit=PAGE)
        if len(first.items) != PAGE or first.next_cursor is None:
            raise BenchError(f"the first page held {len(first.items)} sessions")
        samples = await time_async(lambda: store.list_sessions(limit=PAGE), sizes.list_repeat)
        rep.row(
            f"first page, all sessions (median of {sizes.list_repeat})",
            f"pg_list_ms_{label}",
            median(samples) / 1e6,
            "ms",
            digits=2,
        )
        cursor = first.next_cursor
        samples = await time_async(lambda: store.list_sessions(limit=PAGE, cursor=cursor), sizes.list_repeat)
        rep.row("second page (by cursor)", f"pg_list_next_ms_{label}", median(samples) / 1e6, "ms", digits=2)
        samples = await time_async(lambda: store.list_sessions(directory="/bench/d7", limit=PAGE), sizes.list_repeat)
        rep.row(
            "first page of one directory (1,000 sessions)",
            f"pg_list_dir_ms_{label}",
            median(samples) / 1e6,
            "ms",
            digits=2,
        )
    finally:
        await store.close()


# --- recall -------------------------------------------------------------------------------------------------


async def bench_recall(rep: Report, server: str, locomo: Path, scratch: Path) -> None:
    import recall as recall_bench
    from tether.recall import DEFAULT_TUNING
    from tether.store import SqliteStore
    from tether.store.postgres import PostgresStore

    if not locomo.is_file():
        raise BenchError(
            f"{locomo} is not a file: give --locomo PATH (../shared/data/locomo-dev.json next to the repository, "
            "or data/locomo10.json from github.com/snap-research/LoCoMo, CC BY-NC 4.0)"
        )
    conversations = recall_bench.load_locomo(locomo)
    questions = sum(len(c.questions) for c in conversations)
    rep.section(f"recall on {locomo.name}: {len(conversations)} conversations, {questions} questions, lexical")
    rep.set("locomo", str(locomo))
    stores = {"sqlite": SqliteStore(scratch / "recall.db"), "pg": PostgresStore(new_database(server, "recall"))}
    try:
        for name, store in stores.items():
            t0 = time.perf_counter()
            await recall_bench.store_locomo(store, conversations)
            async for _ in store.backfill_search(batch=1000):
                pass
            rep.note(f"{name}: stored and indexed in {time.perf_counter() - t0:.1f} s")
        for keys, how in ((True, "turn keys"), (False, "the store's own search")):
            for name, store in stores.items():
                out = await recall_bench.evaluate(store, conversations, semantic=None, tuning=DEFAULT_TUNING, keys=keys)
                tag = f"{name}_{'keys' if keys else 'store'}"
                for k in (5, 10):
                    rep.row(
                        f"{name}, {how}: recall@{k}",
                        f"recall_at_{k}_{tag}",
                        recall_bench.mean_of(out.at[k]),
                        "",
                        digits=3,
                    )
                rep.row(f"{name}, {how}: p50 per query", f"recall_p50_ms_{tag}", median(out.latencies), "ms", digits=1)
    finally:
        for store in stores.values():
            await store.close()


# --- main ---------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a check that it runs")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    parser.add_argument("--url", help="a running server (a role that may create databases) instead of a local one")
    parser.add_argument("--locomo", default=str(LOCOMO_DEFAULT), help="the LoCoMo file recall is scored on")
    parser.add_argument("--data", help="tau-bench trajectories for the messages (default: ../shared/data)")
    parser.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if not only <= set(SECTIONS):
        parser.error(f"unknown section(s) {sorted(only - set(SECTIONS))}; choose from {SECTIONS}")
    sizes = QUICK if args.quick else Sizes()
    rep = Report(TARGETS)
    try:
        data = load_chat_data(args.data)
        work = Workload.build(data, max(sizes.appends, 2_000))
        rep.set("data", data.source)
        rep.set("load_before", [round(x, 2) for x in os.getloadavg()])
        rep.set("python", platform.python_version())
        with scratch_dir(args.dir) as scratch, local_server() if args.url is None else _given(args.url) as server:
            settings = server_settings(server)
            rep.set("server", settings)
            rep.section(
                f"PostgreSQL {settings['server_version']} ({'local, started here' if args.url is None else 'given'}):"
                f" fsync={settings['fsync']}, synchronous_commit={settings['synchronous_commit']},"
                f" wal_sync_method={settings['wal_sync_method']}; load {os.getloadavg()[0]:.2f}"
            )
            if "append" in only:
                asyncio.run(bench_append(rep, sizes, work, server))
            if "writers" in only:
                asyncio.run(bench_writers(rep, sizes, work, server))
            if "resume" in only:
                asyncio.run(bench_resume(rep, sizes, work, server))
            if "list" in only:
                asyncio.run(bench_list(rep, sizes, server))
            if "recall" in only:
                asyncio.run(bench_recall(rep, server, Path(args.locomo).expanduser(), scratch))
        rep.set("load_after", [round(x, 2) for x in os.getloadavg()])
        rep.set("cpus", os.cpu_count())
    except (BenchError, MissingExtra) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rep.finish()
    return 0


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    sys.exit(main())
