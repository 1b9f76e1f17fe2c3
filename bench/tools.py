"""The `bash` tool under a flood of output: a whole run (scripted model, real bash, a SQLite store) whose
command prints 2 GB, in a fresh process. Reports how far resident memory rose above the process's steady
state (tether imported, the store open, one small run done), how long the flood took, and what was kept:
the result the model sees and the artifact the store holds.

    python bench/tools.py [--bytes N] [--quick] [--dir DIR] [--keep]

Last line: JSON with flood_bytes, rss_baseline_mb, rss_peak_mb, rss_growth_mb (target: <= 100), flood_s,
flood_mb_per_s, result_chars, artifact_bytes, store_mb, and the machine (cpus, loadavg).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BenchError, Report, Target, filesystem_of, run_json_child, scratch_dir

TARGETS = (Target("rss_growth_mb", "<=", 100),)
FULL_BYTES = 2_000_000_000
QUICK_BYTES = 100_000_000


def rss_mb() -> float:
    """This process's resident set now, in MB (Linux /proc; elsewhere psutil)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        import psutil

        return float(psutil.Process().memory_info().rss) / 1e6


class PeakSampler:
    """This process's resident set sampled every few milliseconds from a thread: the peak of one operation,
    which VmHWM (the peak since exec) cannot give after the start-up."""

    def __init__(self, every: float = 0.002) -> None:
        self.peak = rss_mb()
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb())
            time.sleep(self._every)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())


async def child(flood_bytes: int, directory: Path) -> dict[str, object]:
    """One process's measurement: what the parent prints."""
    from tether import Message, Session, ToolCallPart
    from tether.events import Done
    from tether.providers.scripted import ScriptedProvider
    from tether.store import SqliteStore
    from tether.tools.output import open_artifact

    def bash(command: str) -> list[Message | str]:
        call = ToolCallPart(id="c1", name="bash", arguments={"command": command, "timeout": 600})
        return [Message.assistant("", tool_calls=[call]), "done"]

    db = directory / "tools.db"
    store = SqliteStore(db)
    try:
        session = await Session.create(store, directory=directory)
        # the steady state: everything a run loads (and the process watcher) is loaded before the flood
        warm = [e async for e in session.stream("warm up", provider=ScriptedProvider(bash("echo hi")), model="m")]
        assert isinstance(warm[-1], Done), warm[-1]
        baseline = rss_mb()
        lines, rest = divmod(flood_bytes, 100)
        command = f"head -c {lines * 99 + rest} /dev/zero | tr '\\0' x | fold -w 99; echo"
        started = time.perf_counter()
        with PeakSampler() as peak:
            events = [e async for e in session.stream("flood", provider=ScriptedProvider(bash(command)), model="m")]
        elapsed = time.perf_counter() - started
        if not isinstance(events[-1], Done):
            raise BenchError(f"the run ended with {events[-1]!r}")
        result = [r for m in await session.messages() for r in m.tool_results][-1]
        artifact = result.metadata.get("artifact")
        artifact_bytes = (await open_artifact(store, artifact)).size if isinstance(artifact, str) else 0
    finally:
        await store.close()
    return {
        "flood_bytes": result.metadata.get("original_bytes"),
        "exit_code": result.metadata.get("exit_code"),
        "rss_baseline_mb": baseline,
        "rss_peak_mb": peak.peak,
        "rss_growth_mb": peak.peak - baseline,
        "flood_s": elapsed,
        "result_chars": len(result.content),
        "artifact_bytes": artifact_bytes,
        "store_mb": sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=int, help=f"bytes the command prints (default {FULL_BYTES:,})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_BYTES:,} bytes, for tests")
    parser.add_argument("--dir", help="where the store goes (default: the repository's .bench-out/)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    flood = args.bytes or (QUICK_BYTES if args.quick else FULL_BYTES)
    if flood < 100:
        raise SystemExit("--bytes must be at least 100")
    if args.child:
        print(json.dumps(asyncio.run(child(flood, Path(args.child)))), flush=True)
        return

    report = Report(TARGETS)
    report.set("cpus", os.cpu_count())
    report.set("loadavg_start", list(os.getloadavg()))
    report.set("python", platform.python_version())
    report.set("quick", args.quick)
    with scratch_dir(args.dir, keep=args.keep) as scratch:
        report.set("filesystem", filesystem_of(scratch))
        report.section(f"bash printing {flood:,} bytes in a run, in a fresh process ({filesystem_of(scratch)})")
        try:
            got = run_json_child([__file__, "--child", str(scratch), "--bytes", str(flood)], timeout=1800)
        except BenchError as e:
            raise SystemExit(str(e)) from None
    report.set("flood_bytes", got["flood_bytes"])
    report.set("exit_code", got["exit_code"])
    report.row("resident memory before the flood (steady state)", "rss_baseline_mb", got["rss_baseline_mb"], "MB")
    report.row("resident memory at the flood's peak", "rss_peak_mb", got["rss_peak_mb"], "MB")
    report.row("peak above the steady state", "rss_growth_mb", got["rss_growth_mb"], "MB")
    report.row("the whole run (the command, saving, journaling)", "flood_s", got["flood_s"], "s", digits=2)
    report.row("output drained", "flood_mb_per_s", got["flood_bytes"] / 1e6 / got["flood_s"], "MB/s")
    report.row("result the model sees", "result_chars", got["result_chars"], "chars", digits=0)
    report.row("artifact saved for read", "artifact_bytes", got["artifact_bytes"] / 1e6, "MB")
    report.set("artifact_bytes", got["artifact_bytes"])
    report.row("store on disk (database and WAL)", "store_mb", got["store_mb"], "MB")
    report.set("loadavg_end", list(os.getloadavg()))
    report.finish()


if __name__ == "__main__":
    main()
