"""Framework overhead of one agent-loop step: everything but the model's own time.

A scripted provider answers every step with one call to a no-op tool, so a step is: derive the context,
build the request, stream the answer, journal the assistant message, run the tool, journal its result.
The time spent inside the provider's stream is measured and subtracted. Histories of 10 and 10,000
messages (realistic ones, from tau-bench when it is there), on the real SQLite store at normal durability.
The model's window is the catalog's guess for an unknown model (32k tokens), so 10,000 messages do not
fit: the first step compacts them once (reported apart, as first_step_ms), and the steady steps that
follow are the per-step figure, as in any long session. Each step adds two entries, so runs are short
(10 steps) for the history to stay near its nominal size; many runs make the median.

    python bench/loop.py [--data PATH] [--steps N] [--runs N] [--quick]

Last line: JSON with step_ms_10 and step_ms_10000 (medians over runs). Targets: <= 1 and <= 5.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchError, Report, Target, load_chat_data, long_conversation, median, scratch_dir, to_message

from tether import Message, Session, ToolCallPart
from tether.events import Done, RunStarted
from tether.providers.base import ModelRequest, StreamEvent
from tether.providers.scripted import ScriptedProvider
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry, function_tool


@function_tool(read_only=True)
async def noop(n: int) -> str:
    """Does nothing."""
    return "ok"


class TimedProvider:
    """Wraps a provider and adds up the time spent waiting on its stream: the model's own time."""

    def __init__(self, inner: ScriptedProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.ns = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        t0 = time.perf_counter_ns()
        it = self.inner.stream(request).__aiter__()
        self.ns += time.perf_counter_ns() - t0
        while True:
            t0 = time.perf_counter_ns()
            try:
                event = await it.__anext__()
            except StopAsyncIteration:
                self.ns += time.perf_counter_ns() - t0
                return
            self.ns += time.perf_counter_ns() - t0
            yield event


def respond(request: ModelRequest) -> Message:
    # A different argument each step, so the loop's repeated-call guard never fires.
    return Message.assistant(
        tool_calls=[ToolCallPart(id=f"c{len(request.messages)}", name="noop", arguments={"n": len(request.messages)})]
    )


async def run_once(session: Session, steps: int) -> tuple[float, float, float]:
    """(framework ms per step, start-up ms, total ms) of one run of `steps` steps."""
    provider = TimedProvider(ScriptedProvider(respond))
    t0 = time.perf_counter_ns()
    started = 0
    async for event in session.stream(
        "keep going", provider=provider, model="bench", tools=ToolRegistry([noop]), max_steps=steps
    ):
        if isinstance(event, RunStarted):
            started = time.perf_counter_ns() - t0
        elif isinstance(event, Done):
            assert event.reason == "step_limit" and event.steps == steps, event
    total = time.perf_counter_ns() - t0
    framework = total - started - provider.ns
    return framework / steps / 1e6, started / 1e6, (total - provider.ns) / 1e6


async def measure(
    store: SqliteStore, history: list[Message], steps: int, directory: Path
) -> tuple[float, float, float]:
    """A session holding `history`, then: one first step (where a history larger than the model's window
    is compacted, once, as any long session has been), then a steady run of `steps` steps.
    Returns (steady framework ms per step, steady start-up ms, first step framework ms)."""
    session = await Session.create(store, directory=directory)
    for i in range(0, len(history), 500):
        await session.append(*history[i : i + 500])
    _, _, first_ms = await run_once(session, 1)
    per_step, startup, _ = await run_once(session, steps)
    return per_step, startup, first_ms


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="tau-bench trajectories JSON (default: ../shared/data/...)")
    parser.add_argument("--steps", type=int, default=10, help="steps per run (each adds two entries)")
    parser.add_argument("--runs", type=int, default=20, help="runs per history size")
    parser.add_argument("--quick", action="store_true", help="a small run, for tests")
    parser.add_argument("--generated", action="store_true", help="generated messages even if the data file exists")
    parser.add_argument("--dir", help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.runs = 10, 1
    report = Report(targets=[Target("step_ms_10", "<=", 1), Target("step_ms_10000", "<=", 5)])
    try:
        data = load_chat_data(args.data, force_generated=args.generated)
    except BenchError as e:
        print(f"bench/loop.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    report.section("agent loop: framework overhead per step (scripted model, no-op tool, SQLite normal)")
    report.note(f"messages: {data.source}; {args.steps} steps a run, {args.runs} runs per history size")
    sizes = [10, 10_000] if not args.quick else [10, 1_000]
    with scratch_dir(args.dir) as scratch:
        store = SqliteStore(scratch / "loop.db")
        try:
            for size in sizes:
                history = [to_message(m) for m in long_conversation(data.trajectories, size)]
                per_step: list[float] = []
                startup: list[float] = []
                first: list[float] = []
                for _ in range(args.runs):
                    step_ms, start_ms, first_ms = await measure(store, history, args.steps, scratch)
                    per_step.append(step_ms)
                    startup.append(start_ms)
                    first.append(first_ms)
                key = f"step_ms_{size}"
                report.row(f"per step, history of {size:,} messages", key, median(per_step), "ms", digits=3)
                report.row(f"run start-up (resume), {size:,} messages", f"startup_ms_{size}", median(startup), "ms")
                report.row(
                    f"first step on the raw history (compacts if over the window), {size:,}",
                    f"first_step_ms_{size}",
                    median(first),
                    "ms",
                )
        finally:
            await store.close()
    if args.quick:
        report.set("step_ms_10000", None)  # --quick measures 1,000 messages: no figure for the target
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
