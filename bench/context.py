"""The context engine's speed: deriving a step's context from sessions of 1,000 and 100,000 messages with
compactions in them, and counting tokens.

Sessions are realistic messages (tau-bench airline trajectories when the file is there, generated ones of
the same shape otherwise), compacted the way a run would: whenever the context since the last compaction
passes 90% of a 128k-window model's usable budget, a compaction entry keeps the newest fifth and stands for
the rest. Derivation is timed warm (the per-entry count cache filled, as from one step to the next) and cold
(a new process's first step), on the in-memory history and, for 100,000 messages, from SQLite through
`ContextEngine` (bounded read from the latest compaction, then incremental).

    python bench/context.py [--data PATH] [--generated] [--quick] [--runs N]

Last line: JSON with derive_ms_1k, derive_ms_100k, tokens_mb_per_s (targets: derive_ms_100k <= 20,
tokens_mb_per_s >= 10), and more.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchError, Report, Target, load_chat_data, long_conversation, median, ms, scratch_dir, to_message

from tether.context import ContextEngine, ContextPolicy, compute_budget, derive_context
from tether.context.derive import unit_starts
from tether.context.tokens import HEURISTIC, TokenCache, bpe_counter, count_message
from tether.messages import Compaction, Entry, EntryBody, Message
from tether.store import SqliteStore

TARGETS = (Target("derive_ms_100k", "<=", 20), Target("tokens_mb_per_s", ">=", 10))
BUDGET = compute_budget(128_000, 16_384)
SUMMARY = "## Goal\n" + "The user wants their reservation changed and refunded. " * 60


def compacted_session(messages: list[Message]) -> tuple[list[Entry], int]:
    """The messages as a journal, with a compaction entry wherever a run would have compacted."""
    counter = bpe_counter()
    threshold = BUDGET.threshold()
    keep = BUDGET.usable // 5
    entries: list[Entry] = []
    window: list[tuple[int, int]] = []  # (seq, tokens) of messages since the last compaction's kept start
    tokens = 0
    compactions = 0
    now = 1_700_000_000.0
    for message in messages:
        seq = len(entries) + 1
        entries.append(Entry(seq, now + seq, message))
        n = count_message(message, counter)
        window.append((seq, n))
        tokens += n
        if tokens > threshold:
            # keep the newest fifth, cut at a unit start
            kept, cut = 0, len(window)
            msgs = [entries[s - 1] for s, _ in window]
            starts = set(unit_starts(msgs))
            for i in range(len(window) - 1, 0, -1):
                kept += window[i][1]
                if kept > keep:
                    break
                if i in starts:
                    cut = i
            if cut >= len(window):
                cut = max(starts)
            first_kept = window[cut][0]
            body: EntryBody = Compaction(summary=SUMMARY, first_kept_seq=first_kept, strategy="model")
            entries.append(Entry(len(entries) + 1, now + len(entries) + 1, body))
            compactions += 1
            window = window[cut:]
            tokens = sum(t for _, t in window) + counter.count(SUMMARY)
    return entries, compactions


def time_derive(history: list[Entry], runs: int, cache: TokenCache) -> tuple[list[int], list[int]]:
    """Wall and CPU nanoseconds of each of `runs` derivations (CPU time is the steadier figure on a
    machine that other work shares)."""
    policy = ContextPolicy(budget=BUDGET.usable)
    counter = bpe_counter()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        derive_context(history, policy, session_id="ses_bench", counter=counter, cache=cache)
        wall.append(time.perf_counter_ns() - t0)
        cpu.append(time.process_time_ns() - c0)
    return wall, cpu


async def sqlite_figures(report: Report, directory: Path, history: list[Entry], runs: int) -> None:
    store = SqliteStore(directory / "context.db")
    try:
        info = await store.create_session(directory="/bench")
        bodies = [e.body for e in history]
        for i in range(0, len(bodies), 2_000):
            await store.append(info.id, bodies[i : i + 2_000])
        cache = TokenCache()
        engine = ContextEngine(store, cache=cache, counter=bpe_counter())
        await engine.derive(info.id, budget=BUDGET)  # fills the token cache

        fresh = []
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            await ContextEngine(store, cache=cache, counter=bpe_counter()).derive(info.id, budget=BUDGET)
            fresh.append(time.perf_counter_ns() - t0)
        report.row(
            "100k from SQLite, fresh engine (bounded read + derive)",
            "load_derive_ms_100k",
            ms(median(fresh)),
            "ms",
            digits=2,
        )
        steps = []
        for i in range(runs):
            await store.append(info.id, [Message.user(f"one more question {i}")])
            t0 = time.perf_counter_ns()
            await engine.derive(info.id, budget=BUDGET)
            steps.append(time.perf_counter_ns() - t0)
        label = "100k from SQLite, next step (incremental read + derive)"
        report.row(label, "step_derive_ms_100k", ms(median(steps)), "ms", digits=2)
    finally:
        await store.close()


def counting_figures(report: Report, messages: list[Message]) -> None:
    texts = []
    for m in messages:
        for p in m.parts:
            text = getattr(p, "text", None) or getattr(p, "content", None)
            if isinstance(text, str):
                texts.append(text)
    size = sum(len(t.encode()) for t in texts)
    report.note(f"corpus: {len(texts):,} texts, {size / 1e6:.1f} MB")
    exact = bpe_counter()
    for label, key, counter in (
        (f"exact counting ({exact.source}, {exact.engine}), per part", "tokens_mb_per_s", exact),
        ("heuristic counting, per part", "heuristic_mb_per_s", HEURISTIC),
    ):
        walls, cpus, total = [], [], 0
        for _ in range(3):
            t0, c0 = time.perf_counter(), time.process_time()
            total = sum(counter.count(t) for t in texts)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        report.row(label, key, size / median(walls) / 1e6, "MB/s")
        report.row("   the same, by CPU time", key.replace("_mb", "_cpu_mb"), size / median(cpus) / 1e6, "MB/s")
        report.set(key.replace("_mb_per_s", "_tokens"), total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="tau-bench trajectory file (default: ../shared/data)")
    parser.add_argument("--generated", action="store_true", help="use generated messages")
    parser.add_argument("--quick", action="store_true", help="10,000 messages instead of 100,000")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--dir", help="scratch directory (default: .bench-out/)")
    args = parser.parse_args()
    report = Report(TARGETS)
    try:
        data = load_chat_data(args.data, force_generated=args.generated)
    except BenchError as exc:
        parser.exit(2, f"error: {exc}\n")
    big = 10_000 if args.quick else 100_000
    report.set("data_source", data.source)
    report.set("sizes", {"small": 1_000, "large": big})
    report.set("load_average", round(os.getloadavg()[0], 2))
    report.note(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: wall-clock figures suffer on a busy machine"
    )
    report.note(f"messages: {data.source}; budget: {BUDGET.usable:,} usable of a 128k window")

    chat = long_conversation(data.trajectories, big)
    messages = [to_message(m) for m in chat]

    report.section("token counting")
    counting_figures(report, messages)

    report.section("derivation")
    for n, key in ((1_000, "1k"), (big, "100k")):
        history, compactions = compacted_session(messages[:n])
        last = max((i for i, e in enumerate(history) if isinstance(e.body, Compaction)), default=None)
        tail = len(history) - last if last is not None else len(history)
        report.note(f"{n:,} messages: {compactions} compactions, {tail} entries after the last one")
        report.set(f"compactions_{key}", compactions)
        cache = TokenCache()
        cold, _ = time_derive(history, 1, cache)
        report.row(f"{n:,} messages, cold (first derivation in a process)", f"derive_ms_{key}_cold", ms(cold[0]), "ms")
        wall, cpu = time_derive(history, args.runs, cache)
        report.row(f"{n:,} messages, warm (as at every step)", f"derive_ms_{key}", ms(median(wall)), "ms", digits=2)
        report.row("   the same, by CPU time", f"derive_cpu_ms_{key}", ms(median(cpu)), "ms", digits=2)
        if n == big:
            full = ContextPolicy(mode="full", budget=BUDGET.usable)
            derive_context(history, full, session_id="ses_bench", counter=bpe_counter(), cache=cache)
            t0 = time.perf_counter_ns()
            derive_context(history, full, session_id="ses_bench", counter=bpe_counter(), cache=cache)
            label = f"{n:,} messages, mode=full (whole history, for contrast)"
            report.row(label, f"derive_ms_{key}_full", ms(time.perf_counter_ns() - t0), "ms")
            with scratch_dir(args.dir) as directory:
                asyncio.run(sqlite_figures(report, directory, history, min(args.runs, 20)))
    report.finish()


if __name__ == "__main__":
    main()
