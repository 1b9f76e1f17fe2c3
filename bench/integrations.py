"""tether as the OpenAI Agents SDK's session store: `TetherSession` against the SDK's own `SQLiteSession` on the
SDK's usage pattern, in the same run, on the same disk.

What the SDK's `Runner.run` does with a session (0.24, observed through a recording session): `get_items()`
once (the whole history, to build the model's input), `add_items([user message])`, then one `add_items` per
model step: the function calls with their outputs, or the assistant's answer (items shaped as the Runner
writes them: the output message with its id, status and annotations). The conversation is tau-bench's airline
trajectories cycled (or generated messages of the same shape), `--turns` turns (1,000) of one session.

Contenders, interleaved turn by turn (the order rotates every turn), each in a file of its own in one
scratch directory:
- `tether`: `TetherSession` on a `SqliteStore`, durability ``normal`` (tether's default);
- `tether_full`: the same at durability ``full`` (an fsync per commit, as SQLiteSession does);
- `sqlitesession`: `agents.SQLiteSession(session_id, db_path)`, file-backed, its defaults (WAL, SQLite's
  default synchronous=FULL).

A turn is timed from the `get_items` call to the end of its last `add_items` (`perf_counter_ns`). Figures:
`sdk_turn_ratio` = SQLiteSession's total time over the turns / tether's (target >= 3), and the same against
`tether_full` (`sdk_turn_ratio_full`, like for like on durability); `*_turn_ms_last` is the median of the
last 10 turns (turn 1,000: the per-turn latency at that size), `*_turn_ms_first` of the first 10; the medians
of each tenth are printed. At the end every contender's `get_items()` must equal the others' (else the run
fails: a fast wrong answer is not a result).

    python bench/integrations.py [--turns 1000] [--quick] [--data PATH | --generated] [--dir DIR] [--keep]

Last line: JSON with every figure, the sizes, and the machine (cpus, load average at start and end).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BenchError,
    ChatMessage,
    Report,
    Target,
    filesystem_of,
    load_chat_data,
    long_conversation,
    median,
    ms,
    scratch_dir,
    tenths,
)

from tether.integrations.openai_agents import TetherSession
from tether.store import SqliteStore

Item = dict[str, Any]
TARGETS = [Target("sdk_turn_ratio", ">=", 3.0)]


def turns_of(conversation: list[ChatMessage], n: int) -> list[list[list[Item]]]:
    """`n` turns, each the `add_items` calls a `Runner.run` makes: the user's message alone, then per model
    step its items (function calls with their outputs, or the answer). Each user message starts a turn; the
    assistant messages and tool results that follow belong to it. Items are shaped as `Runner` writes them."""
    turns: list[list[list[Item]]] = []
    current: list[list[Item]] | None = None
    for i, chat in enumerate(conversation):
        role = chat.get("role")
        if role == "user":
            if current is not None:
                turns.append(current)
                if len(turns) == n:
                    return turns
            current = [[{"role": "user", "content": chat.get("content") or ""}]]
            continue
        if current is None:
            continue  # the system prompt: the agent's instructions, not a session item
        if role == "assistant":
            step: list[Item] = []
            if chat.get("content"):
                step.append(
                    {
                        "id": f"msg_{i}",
                        "content": [
                            {"annotations": [], "text": chat["content"], "type": "output_text", "logprobs": []}
                        ],
                        "role": "assistant",
                        "status": "completed",
                        "type": "message",
                    }
                )
            for call in chat.get("tool_calls") or []:
                fn = call.get("function") or {}
                step.append(
                    {
                        "arguments": fn.get("arguments") or "{}",
                        "call_id": call.get("id") or f"call_{i}",
                        "name": fn.get("name") or "tool",
                        "type": "function_call",
                        "id": f"fc_{i}",
                        "status": "completed",
                    }
                )
            if step:
                current.append(step)
        elif role == "tool":
            output = {
                "type": "function_call_output",
                "call_id": chat.get("tool_call_id") or "",
                "output": chat.get("content") or "",
            }
            current[-1].append(output)  # saved with the step whose calls it answers
    if current is not None:
        turns.append(current)
    return turns


class Contender:
    def __init__(
        self, key: str, label: str, open_: Callable[[], Awaitable[Any]], close: Callable[[Any], Awaitable[None]]
    ):
        self.key, self.label, self._open, self._close = key, label, open_, close
        self.session: Any = None
        self.samples: list[int] = []
        self.items_seen = 0

    async def open(self) -> None:
        self.session = await self._open()

    async def turn(self, batches: list[list[Item]]) -> None:
        t0 = time.perf_counter_ns()
        history = await self.session.get_items()
        for items in batches:
            await self.session.add_items(items)
        self.samples.append(time.perf_counter_ns() - t0)
        self.items_seen = len(history)

    async def close(self) -> None:
        await self._close(self.session)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def run(args: argparse.Namespace, report: Report) -> None:
    data = load_chat_data(args.data, force_generated=args.generated)
    # enough messages for the turns: a turn is a user message and what follows it (~3 messages on tau-bench)
    conversation = long_conversation(data.trajectories, args.turns * 8 + 1)
    turns = turns_of(conversation, args.turns)
    if len(turns) < args.turns:
        raise BenchError(f"the data gave {len(turns)} turns, not {args.turns}")
    items_total = sum(len(b) for t in turns for b in t)
    calls_total = sum(len(t) for t in turns)
    report.set("data_source", data.source)
    report.set("sizes", {"turns": args.turns, "items": items_total, "add_items_calls": calls_total})
    report.set("quick", args.quick)

    import agents
    from agents import SQLiteSession

    with scratch_dir(args.dir, keep=args.keep) as scratch:
        report.set("filesystem", filesystem_of(scratch))
        report.note(f"scratch {scratch} on {report.figures['filesystem']}; data {data.source}")
        report.note(
            f"{args.turns:,} turns, {items_total:,} items ({items_total / args.turns:.2f} a turn) in "
            f"{calls_total:,} add_items calls ({calls_total / args.turns:.2f} a turn)"
        )

        stores: dict[str, SqliteStore] = {}

        def tether_opener(key: str, durability: Any) -> Callable[[], Awaitable[Any]]:
            async def open_() -> Any:
                stores[key] = SqliteStore(scratch / f"{key}.db", durability=durability)
                return TetherSession("bench-conversation", store=stores[key], directory=str(scratch))

            return open_

        async def close_tether(session: Any) -> None:
            await session.store.close()

        async def open_sdk() -> Any:
            return SQLiteSession("bench-conversation", scratch / "sqlitesession.db")

        async def close_sdk(session: Any) -> None:
            session.close()

        contenders = [
            Contender("tether", "TetherSession (durability normal)", tether_opener("tether", "normal"), close_tether),
            Contender(
                "tether_full", "TetherSession (durability full)", tether_opener("tether_full", "full"), close_tether
            ),
            Contender("sqlitesession", f"SQLiteSession (openai-agents {agents.__version__})", open_sdk, close_sdk),
        ]
        for c in contenders:
            await c.open()
        report.set("openai_agents_version", agents.__version__)
        report.set("loadavg_start", load())
        try:
            for i, batches in enumerate(turns):
                k = i % len(contenders)
                for c in contenders[k:] + contenders[:k]:
                    await c.turn(batches)
            finals = [await c.session.get_items() for c in contenders]
        finally:
            for c in contenders:
                await c.close()
        report.set("loadavg_end", load())
        if any(f != finals[0] for f in finals[1:]):
            raise BenchError("the sessions disagree on the history: the comparison would mean nothing")
        if len(finals[0]) != items_total:
            raise BenchError(f"the sessions hold {len(finals[0])} items, not the {items_total} added")
        report.note(f"every session holds the same {items_total:,} items at the end")

    report.section(f"per turn: get_items(), then add_items() per step, {args.turns:,} turns, interleaved")
    last = max(1, min(10, args.turns // 10))
    totals: dict[str, float] = {}
    for c in contenders:
        totals[c.key] = sum(c.samples)
        report.row(f"{c.label}: total", f"{c.key}_total_s", totals[c.key] / 1e9, "s", digits=2)
        report.row(f"{c.label}: median turn", f"{c.key}_turn_ms", ms(median(c.samples)), "ms", digits=3)
        report.row(
            f"{c.label}: first {last} turns", f"{c.key}_turn_ms_first", ms(median(c.samples[:last])), "ms", digits=3
        )
        report.row(
            f"{c.label}: last {last} turns (turn {args.turns:,})",
            f"{c.key}_turn_ms_last",
            ms(median(c.samples[-last:])),
            "ms",
            digits=3,
        )
        by_tenth = [round(ms(x), 3) for x in tenths(c.samples)]
        report.set(f"{c.key}_turn_ms_by_tenth", by_tenth)
        report.note(f"medians by tenth (ms): {', '.join(f'{x:g}' for x in by_tenth)}")

    report.section("ratios (SQLiteSession time / tether time, same turns, same run)")
    report.row(
        "sdk_turn_ratio (vs tether, durability normal)",
        "sdk_turn_ratio",
        totals["sqlitesession"] / totals["tether"],
        "x",
        digits=2,
    )
    report.row(
        "sdk_turn_ratio_full (vs tether, durability full)",
        "sdk_turn_ratio_full",
        totals["sqlitesession"] / totals["tether_full"],
        "x",
        digits=2,
    )
    by = {c.key: c for c in contenders}
    report.row(
        f"at turn {args.turns:,}: SQLiteSession / tether",
        "sdk_turn_ratio_last",
        median(by["sqlitesession"].samples[-last:]) / median(by["tether"].samples[-last:]),
        "x",
        digits=2,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns of the one conversation (default 1,000)")
    parser.add_argument("--quick", action="store_true", help="100 turns: seconds (what the test runs)")
    parser.add_argument("--data", help="tau-bench trajectories (default: $TETHER_BENCH_DATA, else ../shared/data)")
    parser.add_argument("--generated", action="store_true", help="generated messages instead of tau-bench's")
    parser.add_argument("--dir", help="scratch directory (default: under .bench-out/)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch files")
    args = parser.parse_args()
    if args.quick:
        args.turns = 100
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    report = Report(TARGETS)
    report.set("cpus", os.cpu_count())
    report.set("python", sys.version.split()[0])
    try:
        asyncio.run(run(args, report))
    except BenchError as e:
        print(f"integrations bench: {e}", file=sys.stderr)
        sys.exit(1)
    report.finish()


if __name__ == "__main__":
    main()
