"""The HTML transcript (`tether sessions export --format html`, the server's export and share view) of long
sessions: time to write it, beside the Markdown export of the same session in the same run, and the memory
it holds, which must not grow with the session (it is written as the journal is read).

    python bench/transcript.py            # sessions of 1,000 and 10,000 messages
    python bench/transcript.py --quick    # 200 and 2,000

A session is turns of four entries: a user prompt with Markdown, an assistant message with a code block and
a tool call, the tool's output (40 lines), and a short answer. Memory is the peak of Python's allocations
(tracemalloc) while the export runs, measured in a pass of its own (tracing slows it), writing to a sink
that keeps nothing. The last line is one JSON object with the figures."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.messages import Message, TextPart, ToolCallPart, ToolResultPart
from tether.store import SqliteStore, Store
from tether.transcript import export_markdown
from tether.transcript_html import export_html


class Sink(io.TextIOBase):
    """Counts what is written and keeps none of it."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, text: str) -> int:
        self.size += len(text)
        return len(text)


def turn(i: int) -> list[Message]:
    output = "\n".join(f"tests/test_mod{i}.py::test_case_{j} PASSED [{j * 2}%]" for j in range(40))
    return [
        Message.user(f"Turn {i}: please **fix** `module_{i}.py`, the test fails:\n\n- one\n- two\n"),
        Message(
            role="assistant",
            parts=[
                TextPart(text=f"Looking at it.\n\n```python\ndef f_{i}(x):\n    return x * {i}\n```\n"),
                ToolCallPart(id=f"c{i}", name="bash", arguments={"command": f"pytest tests/test_mod{i}.py -q"}),
            ],
            model="bench/model",
        ),
        Message.tool(ToolResultPart(call_id=f"c{i}", content=output, name="bash")),
        Message.assistant(f"Fixed turn {i}: the *off-by-one* is gone."),
    ]


async def build(store: Store, messages: int) -> str:
    sid = (await store.create_session(title=f"{messages} messages", directory="/bench")).id
    batch: list[Message] = []
    for i in range(messages // 4):
        batch += turn(i)
        if len(batch) >= 400:
            await store.append(sid, batch)
            batch = []
    if batch:
        await store.append(sid, batch)
    return sid


async def timed(fn: Callable[[], Awaitable[object]], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


async def peak_mb(fn: Callable[[], Awaitable[object]]) -> float:
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    await fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak / 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sessions (seconds)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per export; the best is kept")
    args = parser.parse_args()
    small, large = (200, 2000) if args.quick else (1000, 10_000)
    figures: dict[str, float | int] = {"small_messages": small, "large_messages": large}
    with tempfile.TemporaryDirectory(prefix="tether-bench-transcript-") as tmp:
        async with SqliteStore(Path(tmp) / "bench.db") as store:
            print(f"{'session':>16} {'html ms':>10} {'markdown ms':>12} {'ratio':>7} {'html MB':>9} {'peak MB':>9}")
            for label, n in (("small", small), ("large", large)):
                sid = await build(store, n)
                sink = Sink()
                await export_html(store, sid, sink)
                html_ms = await timed(lambda sid=sid: export_html(store, sid, Sink()), args.repeat)
                md_ms = await timed(lambda sid=sid: export_markdown(store, sid, Sink()), args.repeat)
                peak = await peak_mb(lambda sid=sid: export_html(store, sid, Sink()))
                figures[f"html_ms_{label}"] = round(html_ms, 1)
                figures[f"markdown_ms_{label}"] = round(md_ms, 1)
                figures[f"html_vs_markdown_{label}"] = round(html_ms / md_ms, 2)
                figures[f"html_mb_{label}"] = round(sink.size / 1e6, 2)
                figures[f"html_peak_mb_{label}"] = round(peak, 2)
                print(
                    f"{n:>7,} messages {html_ms:>10.0f} {md_ms:>12.0f} {html_ms / md_ms:>7.2f} "
                    f"{sink.size / 1e6:>9.1f} {peak:>9.2f}"
                )
    figures["peak_growth_large_over_small"] = round(
        float(figures["html_peak_mb_large"]) / float(figures["html_peak_mb_small"]), 2
    )
    print(
        f"peak memory of the {large:,}-message export over the {small:,}-message one: "
        f"{figures['peak_growth_large_over_small']}x (the session is {large // small}x longer)"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
