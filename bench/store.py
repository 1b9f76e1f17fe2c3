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
from tether.store.base import Durability

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
    appends=300,
    json_cap=150,
    fsyncs=100,
    raw_full=100,
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


# --- appending ----------------------------------------------------------------------------------------


def growth_rows(rep: Report, n: int, series: Sequence[tuple[str, Sequence[float]]]) -> None:
    """One line per contender: the median µs of each tenth of its run, under the session size it reached."""
    rep.note("growth, µs per append (median of each tenth; column = messages in the session by then)")
    rep.note(f"{'':<22}" + "".join(f"{(i + 1) * n // 10:>9,}" for i in range(10)))
    for label, samples_us in series:
        rep.note(f"{label:<22}" + "".join(f"{v:>9,.0f}" for v in tenths(samples_us)))


def summarize(rep: Report, label: str, key: str, samples_ns: Sequence[int]) -> list[float]:
    samples_us = [us(s) for s in samples_ns]
    rep.row(label, key, median(samples_us), "µs")
    rep.set(key.replace("_us", "_us_by_tenth", 1), [round(v, 1) for v in tenths(samples_us)])
    rep.note(
        f"p99 {percentile(samples_us, 99):,.0f} µs, mean {sum(samples_us) / len(samples_us):,.0f} µs, "
        f"{len(samples_us):,} appends in {sum(samples_us) / 1e6:.1f} s"
    )
    return samples_us


async def append_tether(path: Path, durability: Durability, messages: Sequence[Message]) -> list[int]:
    store = SqliteStore(path, durability=durability)
    try:
        sid = (await store.create_session(directory="/bench/append")).id
        gc.collect()
        out: list[int] = []
        for message in messages:
            t0 = time.perf_counter_ns()
            await store.append(sid, [message])
            out.append(time.perf_counter_ns() - t0)
        return out
    finally:
        await store.close()


async def append_session_handle(path: Path, messages: Sequence[Message]) -> list[int]:
    """`Session.append`, which also re-reads the session row so that `session.info` is current."""
    store = SqliteStore(path)
    try:
        session = await Session.create(store, directory="/bench/append")
        gc.collect()
        out: list[int] = []
        for message in messages:
            t0 = time.perf_counter_ns()
            await session.append(message)
            out.append(time.perf_counter_ns() - t0)
        return out
    finally:
        await store.close()


async def bench_append(rep: Report, sizes: Sizes, work: Workload, scratch: Path) -> None:
    rep.section(f"append: {sizes.appends:,} messages one at a time to one session (await store.append)")
    rep.note("tether durability normal = WAL + synchronous=NORMAL (survives kill -9); full = synchronous=FULL")
    messages = work.messages[: sizes.appends]
    normal = summarize(
        rep,
        "tether SqliteStore, durability=normal",
        "append_us_normal",
        await append_tether(scratch / "append-normal.db", "normal", messages),
    )
    full = summarize(
        rep,
        "tether SqliteStore, durability=full",
        "append_us_full",
        await append_tether(scratch / "append-full.db", "full", messages),
    )
    summarize(
        rep,
        "tether Session.append, normal (+ row refresh)",
        "session_append_us_normal",
        await append_session_handle(scratch / "append-handle.db", messages),
    )
    growth_rows(rep, sizes.appends, [("tether normal", normal), ("tether full", full)])


async def bench_sdk(rep: Report, sizes: Sizes, work: Workload, scratch: Path) -> None:
    try:
        from agents import SQLiteSession
    except ImportError:
        raise MissingExtra("bench", "agents (openai-agents)") from None
    import agents

    n = sizes.appends
    rep.section(f"append: OpenAI Agents SDK {agents.__version__} SQLiteSession.add_items, {n:,} messages one at a time")
    path = scratch / "sdk.db"
    session = SQLiteSession("bench", db_path=path)
    try:
        gc.collect()
        out: list[int] = []
        for items in work.sdk_items[:n]:
            t0 = time.perf_counter_ns()
            await session.add_items(items)  # type: ignore[arg-type]
            out.append(time.perf_counter_ns() - t0)
    finally:
        session.close()
    # The SDK sets only journal_mode=WAL, so it commits at SQLite's compiled-in synchronous level.
    with closing(sqlite3.connect(path)) as probe:
        level = probe.execute("PRAGMA synchronous").fetchone()[0]
    sync_name = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))
    rep.note(f"its connections run WAL at SQLite's default synchronous={sync_name}: compare with tether full too")
    rep.set("sqlitesession_synchronous", sync_name)
    samples = summarize(rep, "SQLiteSession.add_items", "sqlitesession_append_us", out)
    growth_rows(rep, n, [("SQLiteSession", samples)])


def json_rewrite(path: Path, session_id: str, messages: list[Message]) -> None:
    """Save the whole session as one JSON file: temp file, fsync, rename (codetether's and a3s-code's scheme;
    the directory is not fsynced, as in theirs)."""
    data = encode_json({"id": session_id, "messages": messages})
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def bench_json(rep: Report, sizes: Sizes, work: Workload, scratch: Path) -> None:
    n = min(sizes.json_cap, len(work.messages))
    rep.section(f"append: whole-session JSON rewrite per save (temp + fsync + rename), capped at {n:,} messages")
    rep.note(f"it re-serializes the whole history per save (O(n) per append, O(n^2) per run), so it stops at {n:,}")
    path = scratch / "session.json"
    history: list[Message] = []
    gc.collect()
    out: list[int] = []
    for message in work.messages[:n]:
        t0 = time.perf_counter_ns()
        history.append(message)
        json_rewrite(path, "ses_bench", history)
        out.append(time.perf_counter_ns() - t0)
    samples = summarize(rep, f"JSON rewrite, median over {n:,} saves", "json_rewrite_us", out)
    by_tenth = tenths(samples)
    rep.row("JSON rewrite, first tenth of the run", "json_rewrite_us_first_tenth", by_tenth[0], "µs")
    rep.row(f"JSON rewrite, last tenth (session of ~{n:,})", "json_rewrite_us_last_tenth", by_tenth[-1], "µs")
    rep.row("JSON rewrite growth, last tenth / first", "json_rewrite_growth", by_tenth[-1] / by_tenth[0], "x", digits=2)
    rep.set("json_rewrite_cap", n)
    rep.set("json_file_bytes_at_cap", path.stat().st_size)
    # A straight line through the tenths (cost grows with the bytes rewritten) says where it would be later.
    xs = [(i + 0.5) * n / len(by_tenth) for i in range(len(by_tenth))]
    a, b = linear_fit(xs, by_tenth)
    rep.row(
        f"JSON rewrite at {sizes.appends:,}, linear extrapolation",
        "json_rewrite_us_extrapolated",
        a + b * sizes.appends,
        "µs",
    )
    growth_rows(rep, n, [("JSON rewrite", samples)])


# --- the floor ----------------------------------------------------------------------------------------


def raw_sqlite(path: Path, synchronous: str, payloads: Sequence[str]) -> list[int]:
    """BEGIN IMMEDIATE + INSERT + COMMIT of each payload in a bare table: what any SQLite journal must pay."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(
            "CREATE TABLE log (session_id TEXT NOT NULL, seq INTEGER NOT NULL, payload TEXT NOT NULL,"
            " PRIMARY KEY (session_id, seq))"
        )
        gc.collect()
        out: list[int] = []
        for seq, payload in enumerate(payloads, 1):
            t0 = time.perf_counter_ns()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO log VALUES (?, ?, ?)", ("ses_bench", seq, payload))
            conn.execute("COMMIT")
            out.append(time.perf_counter_ns() - t0)
        return out
    finally:
        conn.close()


def raw_fsync(path: Path, n: int) -> list[int]:
    """Append a small block and fsync it, `n` times: the cost of making one write durable on this disk."""
    block = b"\x00" * FSYNC_BLOCK
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        out: list[int] = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            os.write(fd, block)
            os.fsync(fd)
            out.append(time.perf_counter_ns() - t0)
        return out
    finally:
        os.close(fd)


async def bench_floor(rep: Report, sizes: Sizes, work: Workload, scratch: Path) -> None:
    rep.section("floor: the same disk with no framework")
    fsyncs = raw_fsync(scratch / "fsync.bin", sizes.fsyncs)
    rep.row(
        f"write {FSYNC_BLOCK // 1024} KiB + fsync, median of {sizes.fsyncs:,}",
        "fsync_us",
        median([us(s) for s in fsyncs]),
        "µs",
    )
    normal = raw_sqlite(scratch / "raw-normal.db", "NORMAL", work.payloads[: sizes.appends])
    rep.row(
        f"bare sqlite3 commit, synchronous=NORMAL ({sizes.appends:,})",
        "raw_sqlite_us",
        median([us(s) for s in normal]),
        "µs",
    )
    full = raw_sqlite(scratch / "raw-full.db", "FULL", work.payloads[: sizes.raw_full])
    rep.row(
        f"bare sqlite3 commit, synchronous=FULL ({sizes.raw_full:,})",
        "raw_sqlite_full_us",
        median([us(s) for s in full]),
        "µs",
    )
    rep.note("each commit: BEGIN IMMEDIATE + INSERT of the JSON tether stores for that message + COMMIT, WAL")


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
        if "floor" in only:
            await bench_floor(rep, sizes, work, scratch)
        if "append" in only:
            await bench_append(rep, sizes, work, scratch)
        if "sdk" in only:
            await bench_sdk(rep, sizes, work, scratch)
        if "json" in only:
            await bench_json(rep, sizes, work, scratch)
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
