"""The store benchmark: appending one message at a time (tether's SqliteStore at both durabilities, the OpenAI
Agents SDK's SQLiteSession, a whole-file JSON rewrite, and the disk's own floor), then resuming, listing and
forking at scale. Readable rows with PASS/FAIL against the targets; the last line is one JSON object.

    python bench/store.py [--quick] [--only floor,append,sdk,json,resume,list,fork] [--data PATH] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from _common import (
    BenchError,
    ChatData,
    ChatMessage,
    Report,
    Target,
    filesystem_of,
    linear_fit,
    load_chat_data,
    long_conversation,
    median,
    ms,
    peak_rss_mb,
    percentile,
    run_json_child,
    scratch_dir,
    tenths,
    time_async,
    to_message,
    us,
)

from tether.errors import MissingExtra
from tether.messages import EntryBody, Message, encode_body, encode_json
from tether.session import Session
from tether.store import SqliteStore
from tether.store.records import Durability

SECTIONS = ("floor", "append", "sdk", "json", "resume", "list", "fork")
TAIL = 200
PAGE = 50
FSYNC_BLOCK = 4096

TARGETS = (
    Target("append_ratio_vs_sqlitesession", ">=", 5),
    Target("append_vs_raw", "<=", 2.5),
    Target("append_full_vs_fsync", "<=", 2),
    Target("resume_ms_100k", "<=", 3),
    Target("resume_ratio_100k_vs_1k", "<=", 1.5),
    Target("resume_rss_mb_100k", "<=", 50),
    Target("list_ms_100k", "<=", 10),
    Target("list_dir_ms_100k", "<=", 10),
    Target("fork_ms_10k", "<=", 100),
)


@dataclass(frozen=True)
class Sizes:
    appends: int = 20_000  # tether normal, tether full, SQLiteSession and the raw sqlite floor
    json_cap: int = 5_000  # the JSON rewrite is O(n^2) over a run: it stops here
    fsyncs: int = 1_000
    raw_full: int = 2_000  # raw sqlite at synchronous=FULL: one fsync each, so fewer
    resume_small: int = 1_000
    resume_large: int = 100_000
    resume_repeat: int = 30
    resume_children: int = 3
    sessions: int = 100_000
    directories: int = 200
    list_repeat: int = 50
    fork_size: int = 10_000
    fork_repeat: int = 10


FULL = Sizes()
QUICK = Sizes(
    appends=200,
    json_cap=100,
    fsyncs=50,
    raw_full=50,
    resume_small=1_000,
    resume_large=10_000,
    resume_repeat=10,
    resume_children=1,
    sessions=3_000,
    directories=30,
    list_repeat=10,
    fork_size=1_000,
    fork_repeat=5,
)


@dataclass
class Workload:
    """The messages every contender appends, converted once: each distinct chat message becomes one tether
    Message, one list of SDK items and one payload, shared by every repeat of it in the long conversation."""

    chats: list[ChatMessage]
    messages: list[Message]
    sdk_items: list[list[dict[str, Any]]]
    payloads: list[str]

    @classmethod
    def build(cls, data: ChatData, n: int) -> Workload:
        chats = long_conversation(data.trajectories, n)
        seen: dict[int, tuple[Message, list[dict[str, Any]], str]] = {}
        for chat in chats:
            if id(chat) not in seen:
                message = to_message(chat)
                seen[id(chat)] = (message, to_sdk_items(chat), encode_body(message).decode())
        return cls(
            chats,
            [seen[id(c)][0] for c in chats],
            [seen[id(c)][1] for c in chats],
            [seen[id(c)][2] for c in chats],
        )


def to_sdk_items(chat: ChatMessage) -> list[dict[str, Any]]:
    """The OpenAI Agents SDK's items (Responses API input items) for one chat message, as its Runner stores
    them: input messages as role/content, the model's text as an output message, tool calls and their
    outputs as function_call / function_call_output items."""
    role = chat.get("role")
    content = chat.get("content") or ""
    if role in ("system", "user"):
        return [{"role": role, "content": content}]
    if role == "tool":
        return [{"type": "function_call_output", "call_id": chat.get("tool_call_id", ""), "output": content}]
    items: list[dict[str, Any]] = []
    if content:
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        )
    for call in chat.get("tool_calls") or []:
        fn = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id", ""),
                "name": fn.get("name", ""),
                "arguments": fn.get("arguments") or "",
            }
        )
    return items or [{"type": "message", "role": "assistant", "status": "completed", "content": []}]


# --- appending, and the floor under it ----------------------------------------------------------------
#
# Every contender that appends (tether, the SDK, the JSON rewrite, the bare floor) runs in the same ten
# rounds, each round appending its next tenth. Load from other processes then falls on all of them alike,
# so their ratios stay honest on a shared machine, and tenth i of every contender comes from one window.

ROUNDS = 10


class Contender:
    """Something that appends `n` times: `open`, then `step(i)` for i = 0..n-1 in order, each returning the
    nanoseconds of the one call a user would make, then `close`."""

    section: str
    key: str
    label: str
    short: str  # its name in the growth table

    def __init__(self, n: int) -> None:
        self.n = n

    async def open(self) -> None:
        pass

    async def step(self, i: int) -> int:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class FsyncFloor(Contender):
    """Append a small block to a file and fsync it: what making one write durable costs on this disk."""

    section, key, short = "floor", "fsync_us", "write + fsync"

    def __init__(self, n: int, path: Path) -> None:
        super().__init__(n)
        self.path = path
        self.label = f"write {FSYNC_BLOCK // 1024} KiB + fsync ({n:,})"
        self.block = b"\x00" * FSYNC_BLOCK
        self.fd = -1

    async def open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    async def step(self, i: int) -> int:
        t0 = time.perf_counter_ns()
        os.write(self.fd, self.block)
        os.fsync(self.fd)
        return time.perf_counter_ns() - t0

    async def close(self) -> None:
        os.close(self.fd)


class SqliteFloor(Contender):
    """BEGIN IMMEDIATE + INSERT + COMMIT of the payload tether stores, in a bare WAL table, no framework."""

    section = "floor"

    def __init__(self, n: int, path: Path, synchronous: str, payloads: Sequence[str]) -> None:
        super().__init__(n)
        self.path, self.synchronous, self.payloads = path, synchronous, payloads
        self.key = "raw_sqlite_us" if synchronous == "NORMAL" else "raw_sqlite_full_us"
        self.label = f"bare sqlite3 commit, synchronous={synchronous} ({n:,})"
        self.short = f"sqlite {synchronous}"
        self.conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        self.conn = conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        conn.execute(
            "CREATE TABLE log (session_id TEXT NOT NULL, seq INTEGER NOT NULL, payload TEXT NOT NULL,"
            " PRIMARY KEY (session_id, seq))"
        )

    async def step(self, i: int) -> int:
        assert self.conn is not None
        conn, payload = self.conn, self.payloads[i]
        t0 = time.perf_counter_ns()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO log VALUES (?, ?, ?)", ("ses_bench", i + 1, payload))
        conn.execute("COMMIT")
        return time.perf_counter_ns() - t0

    async def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class TetherAppend(Contender):
    """`await store.append(sid, [message])`, or with `handle` `await session.append(message)`, which also
    re-reads the session row so that `session.info` stays current."""

    section = "append"

    def __init__(
        self, n: int, path: Path, durability: Durability, messages: Sequence[Message], *, handle: bool
    ) -> None:
        super().__init__(n)
        self.path, self.durability, self.messages, self.handle = path, durability, messages, handle
        if handle:
            self.key = f"session_append_us_{durability}"
            self.label = f"tether Session.append, {durability} (+ row refresh)"
            self.short = "Session.append"
        else:
            self.key = f"append_us_{durability}"
            self.label = f"tether SqliteStore, durability={durability}"
            self.short = f"tether {durability}"
        self.store: SqliteStore | None = None
        self.session: Session | None = None

    async def open(self) -> None:
        self.store = SqliteStore(self.path, durability=self.durability)
        self.session = await Session.create(self.store, directory="/bench/append")

    async def step(self, i: int) -> int:
        assert self.store is not None and self.session is not None
        message = self.messages[i]
        if self.handle:
            session = self.session
            t0 = time.perf_counter_ns()
            await session.append(message)
            return time.perf_counter_ns() - t0
        store, sid = self.store, self.session.id
        t0 = time.perf_counter_ns()
        await store.append(sid, [message])
        return time.perf_counter_ns() - t0

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()


class SdkAppend(Contender):
    """The OpenAI Agents SDK: `await session.add_items(items)`, one call per message."""

    section, key, label, short = "sdk", "sqlitesession_append_us", "SQLiteSession.add_items", "SQLiteSession"

    def __init__(self, n: int, path: Path, items: Sequence[list[dict[str, Any]]]) -> None:
        super().__init__(n)
        self.path, self.items = path, items
        self.session: Any = None
        self.version = "?"
        self.synchronous = "?"

    async def open(self) -> None:
        try:
            import agents
            from agents import SQLiteSession
        except ImportError:
            raise MissingExtra("bench", "agents (openai-agents)") from None
        self.version = agents.__version__
        self.session = SQLiteSession("bench", db_path=self.path)

    async def step(self, i: int) -> int:
        session, items = self.session, self.items[i]
        t0 = time.perf_counter_ns()
        await session.add_items(items)
        return time.perf_counter_ns() - t0

    async def close(self) -> None:
        if self.session is None:
            return
        self.session.close()
        # The SDK sets only journal_mode=WAL, so it commits at SQLite's compiled-in synchronous level.
        with closing(sqlite3.connect(self.path)) as probe:
            level = probe.execute("PRAGMA synchronous").fetchone()[0]
        self.synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))


class JsonRewrite(Contender):
    """The whole session saved as one JSON file per append: temp file, fsync, rename (codetether's and
    a3s-code's scheme; the directory is not fsynced, as in theirs)."""

    section, key, short = "json", "json_rewrite_us", "JSON rewrite"

    def __init__(self, n: int, path: Path, messages: Sequence[Message]) -> None:
        super().__init__(n)
        self.path, self.messages = path, messages
        self.label = f"JSON rewrite, median over {n:,} saves"
        self.history: list[Message] = []

    async def step(self, i: int) -> int:
        t0 = time.perf_counter_ns()
        self.history.append(self.messages[i])
        data = encode_json({"id": "ses_bench", "messages": self.history})
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        return time.perf_counter_ns() - t0


def contenders(only: set[str], sizes: Sizes, work: Workload, scratch: Path) -> list[Contender]:
    everyone: list[Contender] = [
        FsyncFloor(sizes.fsyncs, scratch / "fsync.bin"),
        SqliteFloor(sizes.appends, scratch / "raw-normal.db", "NORMAL", work.payloads),
        SqliteFloor(sizes.raw_full, scratch / "raw-full.db", "FULL", work.payloads),
        TetherAppend(sizes.appends, scratch / "append-normal.db", "normal", work.messages, handle=False),
        TetherAppend(sizes.appends, scratch / "append-full.db", "full", work.messages, handle=False),
        TetherAppend(sizes.appends, scratch / "append-handle.db", "normal", work.messages, handle=True),
        SdkAppend(sizes.appends, scratch / "sdk.db", work.sdk_items),
        JsonRewrite(min(sizes.json_cap, len(work.messages)), scratch / "session.json", work.messages),
    ]
    return [c for c in everyone if c.section in only]


async def run_rounds(chosen: Sequence[Contender]) -> dict[str, list[int]]:
    samples: dict[str, list[int]] = {c.key: [] for c in chosen}
    print(f"\n== appending: {', '.join(c.key for c in chosen)} in {ROUNDS} interleaved rounds", flush=True)
    started = time.perf_counter()
    try:
        for c in chosen:
            await c.open()
        # Freeze what setup made (the workload, the SDK's modules) so that the collections below, which keep
        # one contender's garbage from being collected on another's clock, only walk what the run adds.
        gc.collect()
        gc.freeze()
        for r in range(ROUNDS):
            for c in chosen:
                gc.collect()
                out = samples[c.key]
                for i in range(r * c.n // ROUNDS, (r + 1) * c.n // ROUNDS):
                    out.append(await c.step(i))
            print(f"   round {r + 1}/{ROUNDS} done, {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        gc.unfreeze()
        for c in chosen:
            await c.close()
    return samples


def summarize(rep: Report, c: Contender, samples_ns: Sequence[int]) -> list[float]:
    """The median row, the spread, and the medians of each tenth (kept in the JSON as `<key>_by_tenth`)."""
    samples_us = [us(s) for s in samples_ns]
    rep.row(c.label, c.key, median(samples_us), "µs")
    rep.set(c.key.replace("_us", "_us_by_tenth", 1), [round(v, 1) for v in tenths(samples_us)])
    rep.note(
        f"p99 {percentile(samples_us, 99):,.0f} µs, mean {sum(samples_us) / len(samples_us):,.0f} µs, "
        f"{len(samples_us):,} in {sum(samples_us) / 1e6:.1f} s"
    )
    return samples_us


def growth_rows(rep: Report, n: int, series: Sequence[tuple[str, Sequence[float]]]) -> None:
    """One line per contender: the median µs of each tenth of its run, under the session size it reached."""
    rep.note("growth, µs per append (median of each tenth; column = messages in the session by then)")
    rep.note(f"{'':<22}" + "".join(f"{(i + 1) * n // 10:>9,}" for i in range(10)))
    for label, samples_us in series:
        rep.note(f"{label:<22}" + "".join(f"{v:>9,.0f}" for v in tenths(samples_us)))


def report_appends(rep: Report, sizes: Sizes, chosen: Sequence[Contender], samples: dict[str, list[int]]) -> None:
    by_section: dict[str, list[Contender]] = {}
    for c in chosen:
        by_section.setdefault(c.section, []).append(c)
    if "floor" in by_section:
        rep.section("floor: the same disk with no framework")
        rep.note("bare sqlite3: BEGIN IMMEDIATE + INSERT of the JSON tether stores for the message + COMMIT, WAL")
        series = [(c.short, summarize(rep, c, samples[c.key])) for c in by_section["floor"]]
        rep.note("per round, µs (how loaded the disk was in each round; rows have their own counts):")
        for label, values in series:
            rep.note(f"{label:<22}" + "".join(f"{v:>9,.0f}" for v in tenths(values)))

    if "append" in by_section:
        rep.section(f"append: {sizes.appends:,} messages one at a time to one session")
        rep.note("durability normal = WAL + synchronous=NORMAL (survives kill -9); full = synchronous=FULL")
        series = [(c.short, summarize(rep, c, samples[c.key])) for c in by_section["append"]]
        growth_rows(rep, sizes.appends, series)

    for c in by_section.get("sdk", []):
        assert isinstance(c, SdkAppend)
        rep.section(f"append: OpenAI Agents SDK {c.version} SQLiteSession, {c.n:,} messages one at a time")
        rep.note(f"it runs WAL at SQLite's default synchronous={c.synchronous}: compare it with tether full too")
        rep.set("sqlitesession_synchronous", c.synchronous)
        growth_rows(rep, c.n, [("SQLiteSession", summarize(rep, c, samples[c.key]))])

    for c in by_section.get("json", []):
        n = c.n
        rep.section(f"append: whole-session JSON rewrite per save (temp + fsync + rename), capped at {n:,}")
        rep.note(f"it re-serializes the whole history per save (O(n) each, O(n^2) a run), so it stops at {n:,}")
        values = summarize(rep, c, samples[c.key])
        by_tenth = tenths(values)
        rep.row("JSON rewrite, first tenth of the run", "json_rewrite_us_first_tenth", by_tenth[0], "µs")
        rep.row(f"JSON rewrite, last tenth (session of ~{n:,})", "json_rewrite_us_last_tenth", by_tenth[-1], "µs")
        rep.row(
            "JSON rewrite growth, last tenth / first", "json_rewrite_growth", by_tenth[-1] / by_tenth[0], "x", digits=2
        )
        rep.set("json_rewrite_cap", n)
        # A straight line through the tenths (the cost follows the bytes rewritten) says where it would be later;
        # when noise hid the growth (a tiny --quick run on a busy disk) there is nothing to extrapolate.
        xs = [(i + 0.5) * n / len(by_tenth) for i in range(len(by_tenth))]
        a, b = linear_fit(xs, by_tenth)
        rep.row(
            f"JSON rewrite at {sizes.appends:,}, linear extrapolation",
            "json_rewrite_us_extrapolated",
            a + b * sizes.appends if b > 0 else None,
            "µs",
        )
        growth_rows(rep, n, [("JSON rewrite", values)])


# --- resuming, listing, forking -----------------------------------------------------------------------


async def fill(store: SqliteStore, session_id: str, bodies: Sequence[EntryBody], batch: int = 1_000) -> None:
    for i in range(0, len(bodies), batch):
        await store.append(session_id, bodies[i : i + batch])


async def resume_once(store: SqliteStore, session_id: str) -> int:
    """What a user's `--continue` does: open the session handle and load the tail of its active history."""
    session = await Session.open(store, session_id)
    return len(await session.tail(TAIL))


async def child_resume(path: str, session_id: str) -> dict[str, Any]:
    """Runs in a fresh interpreter (`--child-resume`): cold open + resume time, and peak RSS over the
    interpreter's own after importing tether."""
    base = peak_rss_mb()
    t0 = time.perf_counter_ns()
    store = SqliteStore(path)
    try:
        got = await resume_once(store, session_id)
        elapsed = time.perf_counter_ns() - t0
    finally:
        await store.close()
    return {"entries": got, "ms": ms(elapsed), "base_mb": base, "peak_mb": peak_rss_mb()}


def size_label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"


async def bench_resume(rep: Report, sizes: Sizes, work: Workload, scratch: Path) -> None:
    small, large = sizes.resume_small, sizes.resume_large
    rep.section(f"resume: Session.open + tail({TAIL}) of sessions of {small:,} and {large:,} messages")
    path = scratch / "resume.db"
    store = SqliteStore(path)
    ids: dict[int, str] = {}
    t0 = time.perf_counter()
    for n in (small, large):
        ids[n] = (await store.create_session(directory="/bench/resume")).id
        await fill(store, ids[n], work.messages[:n])
    rep.note(f"filled through store.append in batches of 1,000 in {time.perf_counter() - t0:.1f} s")
    warm: dict[int, float] = {}
    for n, key in ((small, "1k"), (large, "100k")):
        got = await resume_once(store, ids[n])
        if got != min(TAIL, n):
            raise BenchError(f"resume of a {n}-message session returned {got} entries, not {min(TAIL, n)}")
        samples = await time_async(partial(resume_once, store, ids[n]), sizes.resume_repeat)
        warm[n] = median([ms(s) for s in samples])
        rep.row(
            f"warm, {size_label(n)} messages (same store, median of {sizes.resume_repeat})",
            f"resume_ms_{key}",
            warm[n],
            "ms",
            digits=3,
        )
    await store.close()
    rep.row(
        f"ratio {size_label(large)} / {size_label(small)} (warm)",
        "resume_ratio_100k_vs_1k",
        warm[large] / warm[small],
        "x",
        digits=2,
    )

    for n, key in ((small, "1k"), (large, "100k")):
        reopen: list[int] = []
        for _ in range(sizes.resume_repeat):
            t1 = time.perf_counter_ns()
            fresh = SqliteStore(path)
            await resume_once(fresh, ids[n])
            reopen.append(time.perf_counter_ns() - t1)
            await fresh.close()
        rep.row(
            f"fresh SqliteStore + resume, {size_label(n)} (median)",
            f"resume_reopen_ms_{key}",
            median([ms(s) for s in reopen]),
            "ms",
            digits=3,
        )

    script = str(Path(__file__).resolve())
    for n, key in ((small, "1k"), (large, "100k")):
        runs = [run_json_child([script, "--child-resume", str(path), ids[n]]) for _ in range(sizes.resume_children)]
        if any(r["entries"] != min(TAIL, n) for r in runs):
            raise BenchError(f"a child resumed {[r['entries'] for r in runs]} entries, not {min(TAIL, n)}")
        what = f"{size_label(n)}, fresh process ({len(runs)} run{'s' if len(runs) > 1 else ''})"
        rep.row(f"cold open + resume, {what}", f"resume_cold_ms_{key}", median([r["ms"] for r in runs]), "ms", digits=3)
        rep.row(
            f"peak RSS over tether-imported interpreter, {size_label(n)}",
            f"resume_rss_mb_{key}",
            max(r["peak_mb"] - r["base_mb"] for r in runs),
            "MB",
            digits=2,
        )
        rep.row(
            f"peak RSS absolute, {size_label(n)}",
            f"resume_rss_abs_mb_{key}",
            max(r["peak_mb"] for r in runs),
            "MB",
            digits=1,
        )


async def bench_list(rep: Report, sizes: Sizes, scratch: Path) -> None:
    n, dirs = sizes.sessions, sizes.directories
    rep.section(f"list: first page of {PAGE} among {n:,} sessions spread over {dirs} directories")
    store = SqliteStore(scratch / "list.db")
    try:
        t0 = time.perf_counter()
        for i in range(n):
            await store.create_session(directory=f"/work/project-{i % dirs:03d}", title=f"session {i}")
        rep.note(f"populated through store.create_session, one transaction each, in {time.perf_counter() - t0:.1f} s")

        first = await store.list_sessions(limit=PAGE)
        if len(first.items) != min(PAGE, n) or (first.next_cursor is None) != (n <= PAGE):
            raise BenchError(f"the first page held {len(first.items)} sessions and cursor {first.next_cursor!r}")
        cursor = first.next_cursor
        in_first_dir = len(range(0, n, dirs))
        page = await store.list_sessions(directory="/work/project-000", limit=PAGE)
        if len(page.items) != min(PAGE, in_first_dir):
            raise BenchError(f"a directory page held {len(page.items)} sessions, not {min(PAGE, in_first_dir)}")
        turn = itertools.count()

        async def by_directory() -> object:
            return await store.list_sessions(directory=f"/work/project-{next(turn) % dirs:03d}", limit=PAGE)

        cases = (
            ("unfiltered", "list_ms_100k", lambda: store.list_sessions(limit=PAGE)),
            ("by directory (a new one each call)", "list_dir_ms_100k", by_directory),
            (
                "top-level only (parent_id=None)",
                "list_top_ms_100k",
                lambda: store.list_sessions(parent_id=None, limit=PAGE),
            ),
            ("second page, by cursor", "list_page2_ms_100k", lambda: store.list_sessions(limit=PAGE, cursor=cursor)),
        )
        for label, key, call in cases:
            samples = await time_async(call, sizes.list_repeat)
            rep.row(f"{label}, median of {sizes.list_repeat}", key, median([ms(s) for s in samples]), "ms", digits=3)
    finally:
        await store.close()


async def bench_fork(rep: Report, sizes: Sizes, work: Workload, scratch: Path) -> None:
    n = sizes.fork_size
    rep.section(f"fork: Session.fork of a {n:,}-message session")
    store = SqliteStore(scratch / "fork.db")
    try:
        source = await Session.create(store, directory="/bench/fork")
        await fill(store, source.id, work.messages[:n])
        await source.refresh()
        samples: list[int] = []
        for i in range(sizes.fork_repeat + 1):
            t0 = time.perf_counter_ns()
            forked = await source.fork()
            elapsed = time.perf_counter_ns() - t0
            if forked.info.entry_count != n:
                raise BenchError(f"the fork holds {forked.info.entry_count} entries, not {n}")
            await forked.delete()  # keeps the file the same size for every repeat
            if i:  # the first one warms the cache
                samples.append(elapsed)
        rep.row(
            f"fork whole session, median of {sizes.fork_repeat}",
            "fork_ms_10k",
            median([ms(s) for s in samples]),
            "ms",
            digits=2,
        )
    finally:
        await store.close()


# --- the run ------------------------------------------------------------------------------------------


COMPARISONS = (
    (
        "SQLiteSession µs / tether normal µs",
        "append_ratio_vs_sqlitesession",
        "sqlitesession_append_us",
        "append_us_normal",
    ),
    (
        "SQLiteSession µs / tether full µs (both fsync)",
        "append_ratio_full_vs_sqlitesession",
        "sqlitesession_append_us",
        "append_us_full",
    ),
    ("tether normal µs / bare sqlite3 NORMAL µs", "append_vs_raw", "append_us_normal", "raw_sqlite_us"),
    ("tether full µs / bare sqlite3 FULL µs", "append_full_vs_raw_full", "append_us_full", "raw_sqlite_full_us"),
    ("tether full µs / write+fsync µs", "append_full_vs_fsync", "append_us_full", "fsync_us"),
    ("bare sqlite3 FULL µs / write+fsync µs", "raw_full_vs_fsync", "raw_sqlite_full_us", "fsync_us"),
    (
        "JSON rewrite (last tenth) µs / tether full µs",
        "json_last_tenth_vs_full",
        "json_rewrite_us_last_tenth",
        "append_us_full",
    ),
)


def comparisons(rep: Report) -> None:
    """Ratios across sections; those whose sides were not both measured (see --only) stay null."""
    ratios = []
    for label, key, top, bottom in COMPARISONS:
        a, b = rep.figures.get(top), rep.figures.get(bottom)
        ratios.append((label, key, a / b if a is not None and b else None))
    if any(value is not None for _, _, value in ratios):
        rep.section("comparisons")
    for label, key, value in ratios:
        if value is None:
            rep.set(key, None)
        else:
            rep.row(label, key, value, "x", digits=2)


async def run(args: argparse.Namespace) -> None:
    sizes = QUICK if args.quick else FULL
    if args.appends:
        sizes = replace(sizes, appends=args.appends, raw_full=min(sizes.raw_full, args.appends))
    if args.json_cap:
        sizes = replace(sizes, json_cap=args.json_cap)
    if args.sessions:
        sizes = replace(sizes, sessions=args.sessions)
    only = parse_only(args.only)
    data = load_chat_data(args.data, force_generated=args.generated)
    rep = Report(TARGETS)
    started = time.perf_counter()
    print(
        f"tether store benchmark{' (--quick: small sizes, figures are not comparable to the targets)' if args.quick else ''}"
    )
    print(
        f"data: {data.source}"
        + ("  (tau-bench file not found: generated messages of the same shape)" if data.source == "generated" else "")
    )
    need = max(sizes.appends, sizes.json_cap, sizes.resume_large if "resume" in only else 0, sizes.fork_size)
    work = Workload.build(data, need)
    print(
        f"workload: {len(work.messages):,} messages, median payload {median([len(p) for p in work.payloads[:10_000]]):,.0f} bytes"
    )
    load_start = os.getloadavg()
    with scratch_dir(args.dir, keep=args.keep) as scratch:
        where = "--dir" if args.dir else "the repo's .bench-out/"
        print(f"scratch: {scratch} (under {where}; filesystem {filesystem_of(scratch)}; every file of the run is here)")
        print(
            f"machine: {os.cpu_count()} cpus, load average {load_start[0]:.2f} at start; python {platform.python_version()}, sqlite {sqlite3.sqlite_version}"
        )
        rep.set("data_source", "generated" if data.source == "generated" else "tau-airline-trajectories")
        rep.set("data_path", None if data.source == "generated" else data.source.removeprefix("tau:"))
        rep.set("scratch_dir", str(scratch))
        rep.set("filesystem", filesystem_of(scratch))
        chosen = contenders(only, sizes, work, scratch)
        if chosen:
            report_appends(rep, sizes, chosen, await run_rounds(chosen))
        if "resume" in only:
            await bench_resume(rep, sizes, work, scratch)
        if "list" in only:
            await bench_list(rep, sizes, scratch)
        if "fork" in only:
            await bench_fork(rep, sizes, work, scratch)
        comparisons(rep)
    for t in TARGETS:
        rep.figures.setdefault(t.key, None)
    rep.set("quick", bool(args.quick))
    rep.set("sections", [s for s in SECTIONS if s in only])
    rep.set("sizes", asdict(sizes))
    rep.set("cpus", os.cpu_count())
    rep.set("loadavg_start", round(load_start[0], 2))
    rep.set("loadavg_end", round(os.getloadavg()[0], 2))
    rep.set("python", platform.python_version())
    rep.set("sqlite", sqlite3.sqlite_version)
    rep.set("elapsed_s", round(time.perf_counter() - started, 1))
    rep.finish()


def parse_only(value: str | None) -> set[str]:
    if not value:
        return set(SECTIONS)
    chosen = {s.strip() for s in value.split(",") if s.strip()}
    unknown = chosen - set(SECTIONS)
    if unknown or not chosen:
        raise BenchError(f"--only takes a comma-separated list of {', '.join(SECTIONS)}; not {value!r}")
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds, for tests and smoke runs)")
    parser.add_argument("--only", help=f"comma-separated sections to run: {','.join(SECTIONS)} (default: all)")
    parser.add_argument("--data", help="tau-bench trajectory file (default: $TETHER_BENCH_DATA, else ../shared/data)")
    parser.add_argument("--generated", action="store_true", help="use generated messages even if the data file exists")
    parser.add_argument("--dir", help="where to put the run's files (default: the repo's .bench-out/)")
    parser.add_argument("--keep", action="store_true", help="keep the run's files")
    parser.add_argument("--appends", type=int, help="messages per append run (default 20,000; --quick 300)")
    parser.add_argument("--json-cap", type=int, help="where the JSON-rewrite baseline stops (default 5,000)")
    parser.add_argument("--sessions", type=int, help="sessions for the listing benchmark (default 100,000)")
    parser.add_argument("--child-resume", nargs=2, metavar=("DB", "SESSION"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("appends", "json_cap", "sessions"):
        value = getattr(args, name)
        if value is not None and value < 10:
            parser.error(f"--{name.replace('_', '-')} must be at least 10")
    if args.child_resume:
        print(json.dumps(asyncio.run(child_resume(*args.child_resume))))
        return 0
    try:
        asyncio.run(run(args))
    except (BenchError, MissingExtra) as e:
        print(f"bench/store.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
