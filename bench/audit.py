"""What the audit trail, the archive and the event sinks cost.

audit_overhead_ratio: a run's steps with the trail on against off, in the same process, runs interleaved
(on, off, on, off...). A scripted model answers every step with one call to a no-op tool on the real SQLite
store at normal durability, so a step is: derive, stream, journal the answer, decide and run the call, journal
its result, and (on) append the call's audit record. "Off" leaves out the runtime's records (tool calls,
approvals: what a step writes); the store's own records of a session's creation stay, once per run. The
ratio is the median step time on over off.

archive_mb_per_s / restore_mb_per_s: `archive_session` and `restore_session` of N sessions (of realistic
messages) to and from a real S3 service (--endpoint, default the RADOS Gateway of s3-server-up.sh on
127.0.0.1:7480, keys TESTACCESSKEY/TESTSECRETKEY123 unless AWS_* are set), 4 at a time, counted in the
uncompressed JSON-lines megabytes of the sessions (what leaves and re-enters the database).

sink_lag_p99_ms: a file sink's follower (default interval) while a writer appends entries to 20 sessions at a
steady pace: from an entry's commit to the fsync of the batch holding it, p50 and p99.

    python bench/audit.py [--runs N] [--steps N] [--sessions N] [--endpoint URL] [--quick]

Last line: JSON with audit_overhead_ratio (target <= 1.1), step_ms_on, step_ms_off, archive_mb_per_s,
restore_mb_per_s, archive_mb, sink_lag_p50_ms, sink_lag_p99_ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Report, Target, median, percentile, scratch_dir

from tether import Message, Session, ToolCallPart
from tether.messages import ToolResultPart
from tether.providers.base import ModelRequest
from tether.providers.scripted import ScriptedProvider
from tether.runtime import audit
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry, function_tool


@function_tool(read_only=True)
async def noop(x: int) -> str:
    """Do nothing."""
    return "ok"


def stepper(steps: int) -> Any:
    def respond(request: ModelRequest) -> Message | str:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done >= steps:
            return "done"
        return Message.assistant(tool_calls=[ToolCallPart(id=f"c{done}", name="noop", arguments={"x": done})])

    return respond


async def one_run(store: SqliteStore, directory: Path, steps: int) -> float:
    """Seconds per step of one run (its first model call to its last)."""
    session = await Session.create(store, directory=directory)
    marks: list[float] = []
    respond = stepper(steps)

    def model(request: ModelRequest) -> Message | str:
        marks.append(time.perf_counter())
        return respond(request)

    async for _ in session.stream("go", provider=ScriptedProvider(model), model="m", tools=ToolRegistry([noop])):
        pass
    return (marks[-1] - marks[1]) / (len(marks) - 2)


async def overhead(report: Report, folder: Path, runs: int, steps: int) -> None:
    report.section(f"audit trail: {runs} runs of {steps} steps each way, interleaved (SQLite, normal durability)")
    real = audit.tool_call

    def off(*args: Any, **kwargs: Any) -> None:
        return None

    on_times: list[float] = []
    off_times: list[float] = []
    async with SqliteStore(folder / "overhead.db") as store:
        await one_run(store, folder, steps)  # warm up
        for i in range(runs * 2):
            trail = i % 2 == 0
            audit.tool_call = real if trail else off  # type: ignore[assignment]
            (on_times if trail else off_times).append(await one_run(store, folder, steps))
        audit.tool_call = real  # type: ignore[assignment]
        records = len(await store.list_audit(kind="tool.call", limit=10_000))
    on, off_ = median(on_times) * 1000, median(off_times) * 1000
    report.note(f"tool.call records written (trail on): {records}")
    report.row("step with the trail on (median)", "step_ms_on", on, "ms", digits=3)
    report.row("step with the trail off (median)", "step_ms_off", off_, "ms", digits=3)
    report.row("on / off", "audit_overhead_ratio", on / off_, "x", digits=3)


async def archive_speed(report: Report, folder: Path, sessions: int, endpoint: str) -> None:
    from tether.runtime.archive import archive_session, encode_tree, restore_session
    from tether.store.objects import Bucket, BucketConfig

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "TESTACCESSKEY")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "TESTSECRETKEY123")
    report.section(f"archive: {sessions} sessions to and from {endpoint}, 4 at a time")
    bucket = Bucket(BucketConfig(f"bench-{uuid.uuid4().hex[:10]}", "tether/", endpoint))
    bucket.create()
    async with SqliteStore(folder / "archive.db") as store:
        ids = []
        raw = 0
        for i in range(sessions):
            info = await store.create_session(directory="/bench", title=f"bench {i}")
            bodies: list[Any] = []
            for j in range(20):
                call = ToolCallPart(id=f"c{j}", name="read", arguments={"path": f"src/module_{j}.py"})
                bodies += [
                    Message.user(f"please look at module {j} and explain what it does " * 3),
                    Message.assistant(f"reading module {j} " + "lorem ipsum dolor sit amet " * 20, tool_calls=[call]),
                    Message.tool(ToolResultPart(call_id=f"c{j}", content="def f():\n    pass\n" * 40)),
                ]
            await store.append(info.id, bodies)
            raw += len(encode_tree([(await store.get_session(info.id), await store.read(info.id))]))
            ids.append(info.id)
        gate = asyncio.Semaphore(4)

        async def out(sid: str) -> None:
            async with gate:
                await archive_session(store, bucket, sid)

        async def back(sid: str) -> None:
            async with gate:
                await restore_session(store, sid)

        started = time.perf_counter()
        await asyncio.gather(*(out(s) for s in ids))
        archived = time.perf_counter() - started
        started = time.perf_counter()
        await asyncio.gather(*(back(s) for s in ids))
        restored = time.perf_counter() - started
    mb = raw / 1e6
    report.row("sessions' JSON lines (uncompressed)", "archive_mb", mb, "MB", digits=2)
    report.row("archive (written, read back, verified, swapped)", "archive_mb_per_s", mb / archived, "MB/s", digits=2)
    report.row("restore (read, verified, swapped back)", "restore_mb_per_s", mb / restored, "MB/s", digits=2)


async def sink_lag(report: Report, folder: Path, seconds: float) -> None:
    from tether.runtime.sinks import FileSink, SinkRunner

    report.section(f"file sink: commit to fsync, appends to 20 sessions for {seconds:g} s")
    async with SqliteStore(folder / "sink.db") as store:
        sids = [(await store.create_session()).id for _ in range(20)]
        runner = SinkRunner(store, [FileSink("bench", folder / "events")], keep_latencies=True)
        runner.start()
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            await store.append(sids[i % 20], [Message.assistant(f"answer {i}")])
            i += 1
            await asyncio.sleep(0.005)
        state = runner.states["bench"]
        state.caught_up.clear()
        runner.poke()
        await asyncio.wait_for(state.caught_up.wait(), 60)
        await runner.stop()
    samples = [x * 1000 for x in state.latencies]
    report.note(f"{i} entries appended, {len(samples)} events delivered; poll interval {runner.interval:g} s")
    report.row("commit to delivered, p50", "sink_lag_p50_ms", percentile(samples, 50), "ms")
    report.row("commit to delivered, p99", "sink_lag_p99_ms", percentile(samples, 99), "ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--sink-seconds", type=float, default=10.0)
    parser.add_argument("--endpoint", default=os.environ.get("TETHER_TEST_S3_ENDPOINT", "http://127.0.0.1:7480"))
    parser.add_argument("--no-s3", action="store_true", help="Leave out the archive (no S3 service here).")
    parser.add_argument("--quick", action="store_true", help="Few runs, for a check that it works.")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.steps, args.sessions, args.sink_seconds = 3, 5, 10, 1.0
    report = Report(targets=[Target("audit_overhead_ratio", "<=", 1.1)])
    with scratch_dir(args.dir) as folder:
        await overhead(report, folder, args.runs, args.steps)
        if not args.no_s3:
            await archive_speed(report, folder, args.sessions, args.endpoint)
        await sink_lag(report, folder, args.sink_seconds)
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
