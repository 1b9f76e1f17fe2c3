"""MCP: what tether costs around a call to an MCP tool, how long a server takes to start, and what tool search
saves with 200 tools. The server is the SDK-written test server (`tests/mcp/sdk_server.py`) over stdio.

- `mcp_overhead_ratio` (target <= 1.2): wall time of one call to its no-op tool as a run makes it
  (`tether.tools.run_tool_call` on the `mcp__b__noop` tool: argument checks, tether's client connection,
  the result rendered and fitted) over the same call made by the bare SDK client (`mcp.Client.call_tool`) on
  a server of its own, in the same process and run. Both clients stay connected; calls alternate in
  batches (bare, tether, bare, ...) so load from elsewhere falls on both; medians of every call.
- `mcp_cold_start_ms` (no target): from `McpManager.start` to a server ready (process spawned, protocol
  negotiated, tools listed); median of `--starts` fresh starts. Beside it, the bare SDK client's own
  spawn + initialize + list for the same server (`mcp_cold_start_bare_ms`).
- `tool_search_tokens_saved` (no target): the 200-tool server (`--tools 200`, 212 tools with its own): tokens
  of every definition (o200k) less the tokens of what a run sends instead (`tool_search` alone), as
  `runtime.mcp` counts them.

    python bench/mcp_client.py [--calls N] [--starts N] [--quick]

(Not `bench/mcp.py`: a file of that name in this folder, which is on the path of every script here, would
be imported as the SDK's `mcp` package by the others, openai-agents' included.)

Last line: JSON with every figure and the machine (cpus, load average at the start and the end).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import Report, Target, median  # noqa: E402

REPO = HERE.parent
SERVER = REPO / "tests" / "mcp" / "sdk_server.py"
TARGETS = (Target("mcp_overhead_ratio", "<=", 1.2),)


async def overhead(calls: int, batch: int) -> tuple[float, float]:
    """Median wall time (µs) of a no-op call: the bare SDK client, and tether's run_tool_call."""
    from mcp import Client, StdioServerParameters
    from tether.mcp.manager import McpManager
    from tether.mcp.servers import ServerSpec
    from tether.messages import ToolCallPart
    from tether.store import MemoryStore
    from tether.tools import ToolContext, ToolRegistry, run_tool_call

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
    spec = ServerSpec(
        name="b", transport="stdio", command=sys.executable, args=(str(SERVER), "stdio"), startup_timeout=60
    )
    manager = McpManager([spec])
    bare_times: list[float] = []
    tether_times: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        ctx = ToolContext(workspace=Path(scratch), session_id="ses_bench", store=MemoryStore())
        try:
            registry = ToolRegistry((await manager.tools()).tools)
            call = ToolCallPart(id="c", name="mcp__b__noop", arguments={})
            async with Client(params) as client:
                for _ in range(20):  # warm both: imports, caches, the servers' first calls
                    await client.call_tool("noop", {})
                    await run_tool_call(registry, call, ctx)
                done = 0
                while done < calls:
                    for _ in range(batch):
                        t = time.perf_counter_ns()
                        result = await client.call_tool("noop", {})
                        bare_times.append((time.perf_counter_ns() - t) / 1000)
                        assert not result.is_error
                    for _ in range(batch):
                        t = time.perf_counter_ns()
                        part = await run_tool_call(registry, call, ctx)
                        tether_times.append((time.perf_counter_ns() - t) / 1000)
                        assert not part.is_error, part.content
                    done += batch
        finally:
            await manager.close()
    return median(bare_times), median(tether_times)


async def cold_starts(starts: int) -> tuple[float, float]:
    """Median ms to a ready server: tether's McpManager, and the bare SDK client (spawn, initialize, list)."""
    from mcp import Client, StdioServerParameters
    from tether.mcp.manager import McpManager
    from tether.mcp.servers import ServerSpec

    spec = ServerSpec(
        name="c", transport="stdio", command=sys.executable, args=(str(SERVER), "stdio"), startup_timeout=60
    )
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
    ours: list[float] = []
    bare: list[float] = []
    for _ in range(starts):
        manager = McpManager([spec])
        t = time.perf_counter()
        problems = await manager.start()
        ours.append((time.perf_counter() - t) * 1000)
        assert problems == {"c": None}, problems
        await manager.close()
        t = time.perf_counter()
        async with Client(params) as client:
            await client.list_tools()
            bare.append((time.perf_counter() - t) * 1000)
    return median(ours), median(bare)


async def tokens_saved() -> tuple[int, int, int]:
    """(tokens of every definition of the 200-tool server, tokens sent instead, tools)."""
    from tether.context.tokens import count_tools, get_counter
    from tether.mcp.manager import McpManager
    from tether.mcp.servers import ServerSpec
    from tether.messages import ToolSpec
    from tether.tools.deferred import ToolSearchTool

    spec = ServerSpec(
        name="many",
        transport="stdio",
        command=sys.executable,
        args=(str(SERVER), "stdio", "--tools", "200"),
        startup_timeout=60,
    )
    manager = McpManager([spec])
    try:
        tools = (await manager.tools()).tools
    finally:
        await manager.close()
    counter = get_counter()
    specs = [ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in tools]
    finder = ToolSearchTool(specs, lambda names: None)
    sent = count_tools(
        [ToolSpec(name=finder.name, description=finder.description, parameters=finder.parameters)], counter
    )
    return count_tools(specs, counter), sent, len(specs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="no-op calls per client (default 2,000)")
    parser.add_argument("--starts", type=int, default=10, help="cold starts (default 10)")
    parser.add_argument("--quick", action="store_true", help="200 calls, 3 starts: for tests")
    args = parser.parse_args()
    calls, starts = (200, 3) if args.quick else (args.calls, args.starts)
    report = Report(TARGETS)
    report.set("cpus", os.cpu_count())
    report.set("loadavg_start", list(os.getloadavg()))
    report.set("python", platform.python_version())
    report.set("quick", args.quick)

    report.section(f"a no-op stdio tool, {calls:,} calls each, alternating batches of 50")
    bare, ours = asyncio.run(overhead(calls, 50))
    report.row("bare SDK client, per call (median)", "mcp_call_bare_us", bare, "µs")
    report.row("tether's run_tool_call, per call (median)", "mcp_call_tether_us", ours, "µs")
    report.row("tether / bare", "mcp_overhead_ratio", ours / bare, "x", digits=3)

    report.section(f"cold start of the stdio server, {starts} times")
    cold, cold_bare = asyncio.run(cold_starts(starts))
    report.row("McpManager.start to ready (median)", "mcp_cold_start_ms", cold, "ms")
    report.row("bare SDK client: spawn, initialize, list (median)", "mcp_cold_start_bare_ms", cold_bare, "ms")

    report.section("tool search with the 200-tool server")
    every, sent, count = asyncio.run(tokens_saved())
    report.set("tool_search_tools", count)
    report.row(f"tokens of all {count} definitions", "tool_search_tokens_all", every, "tokens", digits=0)
    report.row("tokens sent instead (tool_search alone)", "tool_search_tokens_sent", sent, "tokens", digits=0)
    report.row("saved", "tool_search_tokens_saved", every - sent, "tokens", digits=0)
    report.set("loadavg_end", list(os.getloadavg()))
    report.finish()


if __name__ == "__main__":
    main()
