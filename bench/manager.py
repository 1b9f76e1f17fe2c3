"""`SessionManager` at scale: 1,000 concurrent sessions in one process on a scripted model, 100 subscribers
of one session, the cost of a run's lease, and the memory of a session the manager holds.

Every session runs one prompt of 10 steps: the scripted model calls a no-op tool 9 times, then answers (10
model calls). Before each answer the model "thinks" for `--latency-ms` (5 ms): an `asyncio.sleep`, the model's
own time. The store is the real `SqliteStore` (durability normal) in one file.

Figures (the README says the same at more length):

- `step_cpu_us_single`, `step_cpu_us_concurrent`, `manager_step_overhead_ratio` (target <= 1.5): tether's CPU
  per step. A batch of sessions is started through `SessionManager.start` and run to its results; the
  process's CPU time (user + system, every thread: the store's checkpointer, the garbage collector, the event
  loop itself and the 1,000 lease watchers all count) over that window, less the CPU spent inside the
  scripted model's stream, divided by the model calls made. Start-up (new session, lease, first read) and end
  (release) are in it: a run is 10 steps, so they are a tenth of its per-step cost. Single: one session
  alone, 20 runs, median. Concurrent: 1,000 sessions started at once, one figure per round, median of the
  rounds (singles and concurrent batches alternate, so load from other processes falls on both). The ratio
  is concurrent over single. CPU, not wall time: with 1,000 sessions on one event loop the wall time of a
  step is the time the loop takes to get round the other 999 (the run is CPU-bound: 10,000 steps' worth of
  work against 5 ms of model latency), which says nothing about what tether spends per step; the CPU per
  step does, and it grows exactly when something scales with the number of sessions (watchers polling,
  scans over all sessions, a bigger heap for the collector, a contended writer).
- `fanout_p99_ms` (target <= 10): 100 subscribers (`SessionManager.subscribe`) follow one session while it
  runs `--fanout-runs` prompts; the manager then holds the 1,000 sessions of the first section, idle. For
  each event and each subscriber: from the moment the manager publishes it (`_publish`, timed by a subclass)
  to the moment the subscriber's `async for` gets it. Nearest-rank p99 over every (event, subscriber) pair.
  Beside it, not targeted: `fanout_p99_ms_busy`, the same while the 1,000 other sessions run, with
  `loop_lag_p99_ms_busy` (how late a 1 ms timer fires in that window): a saturated event loop delays
  every wake-up by a round of the loop, and the busy fan-out is that lag, not the fan-out.
- `lease_us` (RunLease `acquire` + `release`: what a run pays to take and give back its session, without
  the watcher), `lease_store_us` (the store's `acquire_lease` + `release_lease`), `lease_floor_us` (a bare
  SQLite write transaction on the same file and connection: `BEGIN IMMEDIATE`, one `INSERT OR REPLACE` of a
  small row, `COMMIT`), and `lease_vs_floor` = lease_us / lease_floor_us (target <= 3; acquire and release are
  two transactions, so 2 is the floor of the ratio). Interleaved, medians of `--lease-repeat`.
- `rss_kb_per_idle_session` (target <= 200): in a fresh process, after one concurrent batch of 1,000 sessions
  (warm-up: imports, caches, the allocator's high-water mark), the resident set; then 1,000 more sessions
  run at once and end; after a full collection, the growth of the resident set divided by 1,000. That is
  what the manager (and the store, the journal's numbering) keeps of a session with no run. Beside it:
  `rss_kb_per_running_session`, the peak over the same baseline during the warm-up batch, over 1,000.
- `idle_runs_cpu_pct` (no target): the process's CPU, in percent of one core, while 1,000 runs all wait
  on a slow model (`--wait-s`): what holding 1,000 runs costs when none of them is doing anything (their
  lease watchers).

    python bench/manager.py [--sessions N] [--steps N] [--latency-ms MS] [--subscribers N] [--only SECTIONS]
                            [--quick] [--dir DIR]

Last line: JSON with every figure, the machine (cpus, load average at the start and end of each section).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchError, Report, Target, filesystem_of, median, percentile, run_json_child, scratch_dir

from tether import Message, ToolCallPart
from tether.config import Config
from tether.events import Done, Event
from tether.providers.base import ModelRequest, StreamEvent
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime.launch import RunRequest
from tether.runtime.lease import LeaseTerms, RunLease
from tether.runtime.manager import SessionManager
from tether.runtime.manager_base import _Session
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry, function_tool

SECTIONS = ("steps", "fanout", "lease", "idle", "memory")
FIGURES = {
    "steps": (
        "step_cpu_us_single",
        "step_cpu_us_concurrent",
        "manager_step_overhead_ratio",
        "concurrent_wall_s",
        "concurrent_steps_per_s",
    ),
    "fanout": ("fanout_p50_ms", "fanout_p99_ms", "fanout_max_ms", "fanout_p99_ms_busy", "loop_lag_p99_ms_busy"),
    "lease": ("lease_us", "lease_store_us", "lease_floor_us", "lease_vs_floor"),
    "idle": ("idle_runs_cpu_pct",),
    "memory": ("rss_kb_per_idle_session", "rss_kb_per_running_session"),
}
"""Each section's figures: those of a section left out by --only are null in the JSON, not absent."""
TARGETS = (
    Target("manager_step_overhead_ratio", "<=", 1.5),
    Target("fanout_p99_ms", "<=", 10),
    Target("lease_vs_floor", "<=", 3),
    Target("rss_kb_per_idle_session", "<=", 200),
)


@function_tool(read_only=True)
async def noop(n: int) -> str:
    """Does nothing."""
    return "ok"


def script(steps: int) -> Any:
    """A model that calls `noop` until the prompt has `steps - 1` results, then answers: `steps` model calls."""

    def respond(request: ModelRequest) -> Message:
        since = 0
        for message in reversed(request.messages):
            if message.role == "user" and message.text:
                break
            since += message.role == "tool"
        if since >= steps - 1:
            return Message.assistant(f"done after {since} calls")
        n = len(request.messages)
        return Message.assistant(tool_calls=[ToolCallPart(id=f"c{n}", name="noop", arguments={"n": n})])

    return respond


class SlowModel:
    """The scripted model behind a latency: `latency` seconds of sleep (the model's own time), then the
    scripted answer, streamed. The CPU time spent inside that stream (the script, chunking, the usage
    estimate) is added up in `cpu_ns`, to be taken off tether's; `calls` counts the model calls."""

    def __init__(self, steps: int, latency: float) -> None:
        self.inner = ScriptedProvider(script(steps))
        self.name = self.inner.name
        self.latency = latency
        self.cpu_ns = 0
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self.latency:
            await asyncio.sleep(self.latency)
        self.calls += 1
        clock = time.thread_time_ns  # the stream never suspends: its time on this thread is its own
        t0 = clock()
        it = self.inner.stream(request).__aiter__()
        self.inner.requests.clear()  # the script keeps every request; 10,000 of them are not tether's memory
        self.cpu_ns += clock() - t0
        while True:
            t0 = clock()
            try:
                event = await it.__anext__()
            except StopAsyncIteration:
                self.cpu_ns += clock() - t0
                return
            self.cpu_ns += clock() - t0
            yield event


class StampedManager(SessionManager):
    """The manager, with the moment each event of the `followed` session is published kept (for the
    fan-out latency)."""

    followed: str | None = None
    stamps: dict[int, int]

    def _publish(self, entry: _Session, event: Event) -> None:
        if entry.session_id == self.followed:
            self.stamps[event.n] = time.perf_counter_ns()
        super()._publish(entry, event)


def new_manager(store: SqliteStore, directory: Path, models: dict[str | None, SlowModel]) -> StampedManager:
    """A manager over `store` whose model names resolve to `models` (None: the default)."""

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(models[model], "bench", unknown_model("scripted", "bench"))

    defaults = RunRequest(None, directory=directory, registry=ToolRegistry([noop]))
    manager = StampedManager(store, config=Config(), defaults=defaults, resolve=resolve)
    manager.stamps = {}
    return manager


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def run_batch(manager: SessionManager, model: SlowModel, sessions: int, steps: int) -> tuple[float, float]:
    """`sessions` new sessions started at once, each one prompt, run to the end. Returns (tether's CPU µs per
    model call, wall seconds)."""
    gc.collect()
    model.cpu_ns = model.calls = 0
    c0, w0 = time.process_time_ns(), time.perf_counter_ns()
    handles = [await manager.start(None, f"task {i}") for i in range(sessions)]
    results = await asyncio.gather(*(h.result() for h in handles))
    cpu, wall = time.process_time_ns() - c0, time.perf_counter_ns() - w0
    for result in results:
        if not isinstance(result, Done) or result.steps != steps:
            raise BenchError(f"a run did not end after {steps} steps: {result}")
    if model.calls != sessions * steps:
        raise BenchError(f"{model.calls} model calls, not {sessions * steps}")
    return (cpu - model.cpu_ns) / model.calls / 1e3, wall / 1e9


# --- the sections ----------------------------------------------------------------------------------------


async def steps_section(report: Report, args: argparse.Namespace, manager: StampedManager, model: SlowModel) -> None:
    n = args.sessions
    report.section(
        f"per-step cost: {n:,} concurrent sessions against one ({args.steps} steps each, {args.latency_ms:g} ms "
        "of model latency), tether's CPU per model call"
    )
    report.note(f"load average at start: {load()}")
    await run_batch(manager, model, 1, args.steps)  # warm-up: imports, statement caches
    await run_batch(manager, model, min(n, 100), args.steps)
    singles: list[float] = []
    concurrent: list[float] = []
    walls: list[float] = []
    for r in range(args.rounds):
        for _ in range(args.single_runs):
            singles.append((await run_batch(manager, model, 1, args.steps))[0])
        per_step, wall = await run_batch(manager, model, n, args.steps)
        concurrent.append(per_step)
        walls.append(wall)
        report.note(
            f"round {r + 1}: one session {median(singles[-args.single_runs :]):.0f} µs/step; {n:,} sessions "
            f"{per_step:.0f} µs/step, {wall:.1f} s wall ({n * args.steps / wall:,.0f} steps/s); load {load()}"
        )
    single, many = median(singles), median(concurrent)
    report.row("one session: tether CPU per step", "step_cpu_us_single", single, "µs", digits=0)
    report.row(f"{n:,} concurrent sessions: tether CPU per step", "step_cpu_us_concurrent", many, "µs", digits=0)
    report.row(f"ratio, {n:,} sessions over one", "manager_step_overhead_ratio", many / single, "x", digits=2)
    report.row(f"{n:,} sessions: wall time of a batch", "concurrent_wall_s", median(walls), "s", digits=2)
    report.row(
        f"{n:,} sessions: throughput", "concurrent_steps_per_s", n * args.steps / median(walls), "steps/s", digits=0
    )
    report.set("step_cpu_us_single_runs", [round(x, 1) for x in singles])
    report.set("step_cpu_us_concurrent_rounds", [round(x, 1) for x in concurrent])
    report.set("load_steps", load())


async def fanout_section(report: Report, args: argparse.Namespace, manager: StampedManager, model: SlowModel) -> None:
    report.section(f"fan-out: {args.subscribers} subscribers of one session, publish to receipt")
    report.note(f"load average at start: {load()}")
    first = await manager.start(None, "followed")
    await first.result()
    sid = manager.followed = first.session_id
    idle, idle_events = await follow(manager, sid, args, busy=None)
    report.note(
        f"{idle_events} events a run, {args.fanout_runs} runs; the manager holds {len(manager._sessions):,} sessions"
    )
    report.row(
        f"p50, {args.subscribers} subscribers, other sessions idle",
        "fanout_p50_ms",
        percentile(idle, 50),
        "ms",
        digits=3,
    )
    report.row(
        f"p99, {args.subscribers} subscribers, other sessions idle",
        "fanout_p99_ms",
        percentile(idle, 99),
        "ms",
        digits=3,
    )
    report.row("max", "fanout_max_ms", max(idle), "ms", digits=3)

    # The same while the other sessions run: the loop is saturated, and every wake-up waits its turn.
    background = [await manager.start(None, f"background {i}") for i in range(args.sessions)]
    lag: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            t0 = time.perf_counter_ns()
            await asyncio.sleep(0.001)
            lag.append((time.perf_counter_ns() - t0) / 1e6 - 1.0)

    prober = asyncio.create_task(probe())
    busy, _ = await follow(manager, sid, args, busy=background)
    done.set()
    await prober
    await asyncio.gather(*(h.result() for h in background))
    if busy:
        report.row(
            f"p99 while {args.sessions:,} other sessions run",
            "fanout_p99_ms_busy",
            percentile(busy, 99),
            "ms",
            digits=1,
        )
        report.row(
            "  a 1 ms timer's lateness in that window, p99", "loop_lag_p99_ms_busy", percentile(lag, 99), "ms", digits=1
        )
    else:
        report.note("the background sessions ended before a followed run did: no busy figures")
        report.set("fanout_p99_ms_busy", None)
        report.set("loop_lag_p99_ms_busy", None)
    report.set("load_fanout", load())


async def subscriber(manager: SessionManager, sid: str, into: list[tuple[int, int]]) -> None:
    """Follows `sid` until a run ends, noting when each event came."""
    async with contextlib.aclosing(manager.subscribe(sid)) as events:
        async for event in events:
            into.append((event.n, time.perf_counter_ns()))
            if isinstance(event, Done):
                return


async def follow(
    manager: StampedManager, sid: str, args: argparse.Namespace, busy: list[Any] | None
) -> tuple[list[float], int]:
    """Runs of `sid` with `args.subscribers` subscribers: the latency (ms) of every event to every subscriber,
    and the events of one run. With `busy` (the handles of other runs): runs go on while any of those is
    unfinished, and only the events published before the last of them ended count."""
    latencies: list[float] = []
    events = 0
    runs = 0
    ended: list[int] = []
    if busy is not None:

        async def watch_busy() -> None:
            await asyncio.gather(*(h.result() for h in busy))
            ended.append(time.perf_counter_ns())

        watcher = asyncio.create_task(watch_busy())
    while True:
        received: list[list[tuple[int, int]]] = [[] for _ in range(args.subscribers)]
        tasks = [asyncio.create_task(subscriber(manager, sid, r)) for r in received]
        while (entry := manager._sessions.get(sid)) is None or len(entry.subscribers) < args.subscribers:
            await asyncio.sleep(0)  # each subscription is in place once its task first ran
        handle = await manager.start(sid, "again")
        await handle.result()
        await asyncio.gather(*tasks)
        until = ended[0] if ended else None
        for got in received:
            latencies.extend(
                (t - manager.stamps[n]) / 1e6 for n, t in got if until is None or manager.stamps[n] < until
            )
        events = len(received[0])
        manager.stamps.clear()
        runs += 1
        if busy is None and runs >= args.fanout_runs:
            return latencies, events
        if busy is not None and ended:
            await watcher
            return latencies, events


async def lease_section(report: Report, args: argparse.Namespace, store: SqliteStore, directory: Path) -> None:
    report.section("a run's lease: acquire + release, against a bare SQLite write transaction on the same file")
    report.note(f"load average at start: {load()}; {args.lease_repeat:,} of each, interleaved")
    sid = (await store.create_session(directory=str(directory))).id
    conn = store.conn
    conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (k TEXT PRIMARY KEY, v REAL) WITHOUT ROWID")
    terms = LeaseTerms()
    run_ns: list[int] = []
    store_ns: list[int] = []
    floor_ns: list[int] = []
    clock = time.perf_counter_ns
    for i in range(args.lease_repeat + 200):
        t0 = clock()
        lease = RunLease(store, sid, f"run_{i}", terms)
        await lease.acquire()
        await lease.release()
        t1 = clock()
        await store.acquire_lease(sid, "holder", ttl=terms.ttl)
        await store.release_lease(sid, "holder")
        t2 = clock()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT OR REPLACE INTO bench_floor VALUES (?, ?)", (sid, time.time()))
        conn.execute("COMMIT")
        t3 = clock()
        if i >= 200:  # warm-up
            run_ns.append(t1 - t0)
            store_ns.append(t2 - t1)
            floor_ns.append(t3 - t2)
    conn.execute("DROP TABLE bench_floor")
    lease_us, floor_us = median(run_ns) / 1e3, median(floor_ns) / 1e3
    report.row("RunLease acquire + release", "lease_us", lease_us, "µs")
    report.row("  the store's acquire_lease + release_lease", "lease_store_us", median(store_ns) / 1e3, "µs")
    report.row("bare write transaction (BEGIN IMMEDIATE, INSERT, COMMIT)", "lease_floor_us", floor_us, "µs")
    report.row(
        "lease over the floor (two transactions: 2 is the least)", "lease_vs_floor", lease_us / floor_us, "x", digits=2
    )
    report.set("load_lease", load())


async def idle_runs_section(report: Report, args: argparse.Namespace, store: SqliteStore, directory: Path) -> None:
    report.section(f"{args.sessions:,} runs all waiting on their model ({args.wait_s:g} s a call): the CPU they cost")
    report.note(f"load average at start: {load()}")
    slow = SlowModel(2, args.wait_s)
    manager = new_manager(store, directory, {None: slow})
    handles = [await manager.start(None, f"waiting {i}") for i in range(args.sessions)]
    await asyncio.sleep(min(1.0, args.wait_s / 4))  # every run started and is in its model call
    window = args.wait_s / 2
    c0, w0 = time.process_time_ns(), time.perf_counter_ns()
    await asyncio.sleep(window)
    cpu, wall = time.process_time_ns() - c0, time.perf_counter_ns() - w0
    unfinished = sum(not h.finished for h in handles)
    await asyncio.gather(*(h.result() for h in handles))
    report.note(f"{unfinished:,} runs in progress over a {wall / 1e9:.2f} s window")
    report.row(
        f"CPU while {args.sessions:,} runs wait, % of a core", "idle_runs_cpu_pct", 100 * cpu / wall, "%", digits=2
    )
    report.set("load_idle_runs", load())


async def memory_child(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """In a fresh process: the resident set a session costs once its run ended (see the module docstring)."""
    model = SlowModel(args.steps, args.latency_ms / 1000)
    async with SqliteStore(directory / "memory.db") as store:
        manager = new_manager(store, directory, {None: model})
        await run_batch(manager, model, 1, args.steps)
        gc.collect()
        before_warm = rss_kb()
        await run_batch(manager, model, args.sessions, args.steps)  # warm-up, and the peak of N running
        peak = hwm_kb()
        gc.collect()
        baseline = rss_kb()
        await run_batch(manager, model, args.sessions, args.steps)
        gc.collect()
        after = rss_kb()
        held = len(manager._sessions) + len(manager._recent)  # in use, and remembered (at most RECENT_SESSIONS)
    return {
        "rss_kb_per_idle_session": (after - baseline) / args.sessions,
        "rss_kb_per_running_session": (peak - before_warm) / args.sessions,
        "rss_mb_baseline": baseline / 1024,
        "rss_mb_after": after / 1024,
        "sessions_held": held,
    }


def rss_kb() -> int:
    return status_kb("VmRSS")


def hwm_kb() -> int:
    return status_kb("VmHWM")


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise BenchError(f"no {field} in /proc/self/status (Linux only)")


def memory_section(report: Report, args: argparse.Namespace, scratch: Path) -> None:
    report.section(
        f"memory: a session the manager holds, once its run ended ({args.sessions:,} at a time, fresh process)"
    )
    report.note(f"load average at start: {load()}")
    child = run_json_child(
        [
            str(Path(__file__).resolve()),
            "--memory-child",
            "--sessions",
            str(args.sessions),
            "--steps",
            str(args.steps),
            "--latency-ms",
            str(args.latency_ms),
            "--dir",
            str(scratch),
        ],
        timeout=900,
    )
    report.note(
        f"resident set {child['rss_mb_baseline']:.1f} MB after the warm-up batch, {child['rss_mb_after']:.1f} MB "
        f"after {args.sessions:,} more sessions ran; the manager holds {child['sessions_held']:,} sessions"
    )
    report.row("resident set per idle session", "rss_kb_per_idle_session", child["rss_kb_per_idle_session"], "KiB")
    report.row(
        "  per running session (peak of the warm-up batch)",
        "rss_kb_per_running_session",
        child["rss_kb_per_running_session"],
        "KiB",
    )
    report.set("rss_mb_baseline", round(child["rss_mb_baseline"], 1))
    report.set("load_memory", load())


# --- the run ---------------------------------------------------------------------------------------------


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000, help="concurrent sessions")
    parser.add_argument("--steps", type=int, default=10, help="model calls per run (the last one answers)")
    parser.add_argument("--latency-ms", type=float, default=5.0, help="the scripted model's latency per call")
    parser.add_argument("--rounds", type=int, default=3, help="concurrent batches (each after --single-runs singles)")
    parser.add_argument("--single-runs", type=int, default=20, help="one-session runs per round")
    parser.add_argument("--subscribers", type=int, default=100, help="subscribers of the followed session")
    parser.add_argument("--fanout-runs", type=int, default=10, help="runs of the followed session")
    parser.add_argument("--lease-repeat", type=int, default=3000, help="lease and floor transactions, each")
    parser.add_argument("--wait-s", type=float, default=4.0, help="the model call the waiting runs are in")
    parser.add_argument("--only", help=f"comma-separated sections to run (default: all of {','.join(SECTIONS)})")
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds (what the test runs)")
    parser.add_argument("--dir", help="scratch directory (default: under .bench-out/)")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.rounds, args.single_runs = 100, 1, 5
        args.subscribers, args.fanout_runs, args.lease_repeat, args.wait_s = 100, 2, 300, 1.0
    if args.steps < 2 or args.sessions < 1 or args.subscribers < 1:
        parser.error("--steps must be at least 2, --sessions and --subscribers at least 1")
    only = SECTIONS if args.only is None else tuple(x.strip() for x in args.only.split(","))
    if unknown := set(only) - set(SECTIONS):
        parser.error(f"--only: no section {', '.join(sorted(unknown))}; the sections are {', '.join(SECTIONS)}")
    if args.memory_child:
        print(json.dumps(await memory_child(args, Path(args.dir))))
        return

    report = Report(targets=TARGETS)
    report.set("quick", args.quick)
    report.set("sections", list(only))
    report.set(
        "sizes",
        {
            k: getattr(args, k)
            for k in (
                "sessions",
                "steps",
                "latency_ms",
                "rounds",
                "single_runs",
                "subscribers",
                "fanout_runs",
                "lease_repeat",
                "wait_s",
            )
        },
    )
    report.set("cpus", os.cpu_count())
    report.set("python", sys.version.split()[0])
    report.set("sqlite", sqlite3.sqlite_version)
    report.set("loadavg_start", load())
    with scratch_dir(args.dir) as scratch:
        report.set("filesystem", filesystem_of(scratch))
        model = SlowModel(args.steps, args.latency_ms / 1000)
        async with SqliteStore(scratch / "manager.db") as store:
            manager = new_manager(store, scratch, {None: model})
            if "steps" in only:
                await steps_section(report, args, manager, model)
            if "fanout" in only:
                await fanout_section(report, args, manager, model)
            if "lease" in only:
                await lease_section(report, args, store, scratch)
            if "idle" in only:
                await idle_runs_section(report, args, store, scratch)
        if "memory" in only:
            memory_section(report, args, scratch)
    for section in SECTIONS:
        if section not in only:
            for key in FIGURES[section]:
                report.set(key, None)
    report.set("loadavg_end", load())
    report.finish()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except BenchError as e:
        print(f"bench/manager.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None
