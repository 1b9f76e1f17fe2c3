"""What the sandbox costs a command: `true` run through the `bash` tool, as a run would run it, unsandboxed,
under bubblewrap and under Landlock (and under bubblewrap with a host allow-list, which adds the proxy's
Landlock network rules), interleaved round by round (A B C D, A B C D, ...) so that the machine's load
falls on each alike. Reports each mechanism's median and p95 milliseconds per command and its ratio to the
unsandboxed command of the same rounds.

    python bench/sandbox.py [--rounds N] [--quick]

Last line: JSON with sandbox_ms_per_command and sandbox_overhead_ratio (the mechanism `auto` picks here),
and per mechanism {mechanism}_ms_per_command, {mechanism}_overhead_ratio, unsandboxed_ms_per_command, and
the machine (cpus, loadavg).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Report

from tether.store import SqliteStore
from tether.tools import ToolContext
from tether.tools.builtin.shell import BashTool
from tether.tools.sandbox import Sandbox, SandboxPolicy, support


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


async def measure(rounds: int) -> dict[str, list[float]]:
    kinds: dict[str, Sandbox | None] = {"unsandboxed": None}
    for mechanism in ("bwrap", "landlock"):
        if support(mechanism).mechanism is not None:  # type: ignore[arg-type]
            kinds[mechanism] = Sandbox(SandboxPolicy(mechanism=mechanism))  # type: ignore[arg-type]
    if "bwrap" in kinds:
        kinds["bwrap_allowlist"] = Sandbox(SandboxPolicy(mechanism="bwrap", network=("pypi.org",)))
    times: dict[str, list[float]] = {k: [] for k in kinds}
    tool = BashTool()
    with tempfile.TemporaryDirectory() as scratch:
        ws = Path(scratch) / "ws"
        ws.mkdir()
        async with SqliteStore(Path(scratch) / "t.db") as store:
            contexts = {
                k: ToolContext(workspace=ws, session_id="ses_bench", store=store, sandbox=s) for k, s in kinds.items()
            }
            for ctx in contexts.values():  # warm: the first bwrap probe, the proxy's start, page cache
                for _ in range(3):
                    await tool.run({"command": "true"}, ctx)
            for _ in range(rounds):
                for name, ctx in contexts.items():
                    start = time.perf_counter()
                    out = await tool.run({"command": "true"}, ctx)
                    times[name].append((time.perf_counter() - start) * 1000)
                    if out.metadata.get("exit_code") != 0:
                        raise SystemExit(f"{name}: `true` failed: {out.content}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="60 rounds")
    args = parser.parse_args()
    rounds = 60 if args.quick else args.rounds
    report = Report(())
    report.set("cpus", os.cpu_count())
    report.set("loadavg_start", list(os.getloadavg()))
    report.set("python", platform.python_version())
    report.set("rounds", rounds)
    chosen = support("auto")
    report.set("auto_mechanism", chosen.mechanism)
    for mechanism in ("bwrap", "landlock"):
        report.set(f"{mechanism}_detail", support(mechanism).detail)  # type: ignore[arg-type]
    report.section(f"`true` through the bash tool, {rounds} interleaved rounds (auto picks {chosen.mechanism})")
    times = asyncio.run(measure(rounds))
    base = statistics.median(times["unsandboxed"])
    report.row("unsandboxed, median", "unsandboxed_ms_per_command", base, "ms", digits=2)
    report.row("unsandboxed, p95", "unsandboxed_p95_ms", p95(times["unsandboxed"]), "ms", digits=2)
    for name in [k for k in times if k != "unsandboxed"]:
        median = statistics.median(times[name])
        # the ratio of the medians, and (below) the median of the per-round ratios, which the load touches less
        per_round = statistics.median(t / u for t, u in zip(times[name], times["unsandboxed"], strict=True))
        report.row(f"{name}, median", f"{name}_ms_per_command", median, "ms", digits=2)
        report.row(f"{name}, p95", f"{name}_p95_ms", p95(times[name]), "ms", digits=2)
        report.row(
            f"{name} / unsandboxed (median of per-round ratios)", f"{name}_overhead_ratio", per_round, "x", digits=2
        )
    if chosen.mechanism is not None:
        report.set("sandbox_ms_per_command", report.figures[f"{chosen.mechanism}_ms_per_command"])
        report.set("sandbox_overhead_ratio", report.figures[f"{chosen.mechanism}_overhead_ratio"])
    report.set("loadavg_end", list(os.getloadavg()))
    report.finish()


if __name__ == "__main__":
    main()
