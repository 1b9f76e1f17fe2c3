"""Two `tether serve` nodes over one store: how long an event takes from its commit on node A to a client of
node B (`cross_node_p99_ms`, target <= 100), beside the same client on node A (`same_node_p99_ms`).

Each node is bench/_scripted_server.py (`tether serve`'s app and server, the scripted model, `--latency-ms` per
model call) over the store: a PostgreSQL database on a throwaway local cluster this script starts (initdb +
pg_ctl, as the `postgres` user when run as root), or `--store URL` (a SQLite file too). `--sessions` sessions
run `--rounds` prompts each on node A (`steps=10 size=200`: nine tool calls and an answer, text streamed),
each session followed by one SSE client on node A and one on node B. For every durable event and client: its
arrival (`time.time()` when the bytes were read) less the entry's `created_at`, which the store stamps inside
the write transaction: both nodes and the clients are on one machine, one clock. Node B hears of A's events
through the store's relay (`tether/store/relay.py`; on PostgreSQL, a NOTIFY per post as the wake-up).

    python bench/nodes.py [--sessions 20] [--rounds 3] [--store URL] [--quick]

Last line: JSON with every figure and the load average at the start and end."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx2 as httpx
from _common import BenchError, Report, Target, percentile, scratch_dir

from server import EVENT_SPAN, HERE, LIVE_OFFSET, Stream, child_env, host_port, load, start_process, tether_number

TARGETS = (Target("cross_node_p99_ms", "<=", 100),)
WORK = "steps=10 size=200"


@contextlib.contextmanager
def local_postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on a loopback port (durable defaults); the URL of a fresh database."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    bin_dir = (
        Path(shutil.which("initdb") or found[-1] if found else "").parent if (found or shutil.which("initdb")) else None
    )
    if bin_dir is None:
        raise BenchError("no PostgreSQL here (initdb): install Debian's postgresql, or give --store URL")
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-nodes-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        import pwd

        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"
    try:
        done = subprocess.run(
            [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"initdb failed: {done.stderr[-1500:]}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        options = f"-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={folder}"
        done = subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-o", options, "-w", "start"],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        if done.returncode != 0:
            raise BenchError(f"pg_ctl start failed: {done.stderr[-1500:]}")
        try:
            import psycopg

            server = f"postgresql://postgres@127.0.0.1:{port}/postgres"
            name = f"bench_nodes_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            parts = urlsplit(server)
            yield urlunsplit((parts.scheme, parts.netloc, "/" + name, "", ""))
        finally:
            subprocess.run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                           capture_output=True, timeout=180)  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start_node(store: str, workspace: Path, log: Path, latency_ms: float) -> object:
    argv = [sys.executable, str(HERE / "_scripted_server.py"), "--store", store, "--workspace", str(workspace)]
    return start_process(
        [*argv, "--latency-ms", str(latency_ms)], log, r"listening (http://\S+) pid (\d+)", env=child_env()
    )


async def measure(report: Report, args: argparse.Namespace, store: str, scratch: Path) -> None:
    workspace = scratch / "work"
    workspace.mkdir()
    a = start_node(store, workspace, scratch / "node-a.log", args.latency_ms)
    b = start_node(store, workspace, scratch / "node-b.log", args.latency_ms)
    try:
        await asyncio.sleep(1.5)  # each node's first heartbeat has seen the other
        async with httpx.AsyncClient(base_url=a.url, timeout=60) as client:  # type: ignore[attr-defined]
            sessions = []
            for _ in range(args.sessions):
                r = await client.post("/sessions", json={"directory": str(workspace)})
                if r.status_code != 201:
                    raise BenchError(f"POST /sessions: {r.status_code} {r.text[:300]}")
                sessions.append(str(r.json()["session"]["id"]))
            streams: dict[str, dict[str, Stream]] = {}
            for s in sessions:
                streams[s] = {}
                for name, node in (("a", a), ("b", b)):
                    host, port = host_port(node.url)  # type: ignore[attr-defined]
                    stream = Stream(host, port, f"/sessions/{s}/events")
                    stream.start()
                    streams[s][name] = stream
            for group in streams.values():
                for stream in group.values():
                    await stream.connected.wait()
            await asyncio.sleep(1.0)
            load0 = load()
            t0 = time.perf_counter()

            async def work(s: str) -> None:
                for _ in range(args.rounds):
                    ends = {k: st.ends for k, st in streams[s].items()}
                    r = await client.post(f"/sessions/{s}/prompt", json={"prompt": WORK})
                    if r.status_code != 202:
                        raise BenchError(f"POST prompt: {r.status_code} {r.text[:300]}")
                    for k, st in streams[s].items():
                        await st.wait(lambda st=st, e=ends[k]: st.ends > e, 120)

            await asyncio.gather(*(work(s) for s in sessions))
            wall = time.perf_counter() - t0
            report.note(
                f"{args.sessions} sessions x {args.rounds} prompts on node A in {wall:.1f} s; load {load0} -> {load()}"
            )
            latencies: dict[str, list[float]] = {"a": [], "b": []}
            for s in sessions:
                r = await client.get(f"/sessions/{s}/entries", params={"start": 1, "limit": 1000})
                committed = {e["seq"]: float(e["created_at"]) for e in r.json()["entries"]}
                for name, stream in streams[s].items():
                    for arrival, data in stream.frames:
                        n = tether_number(data)
                        if n is None or n % EVENT_SPAN >= LIVE_OFFSET:
                            continue
                        latencies[name].append((arrival - committed[n // EVENT_SPAN]) * 1000)
            if not latencies["b"]:
                raise BenchError("no durable event reached node B's clients")
            counts = {k: sum(st.count for g in streams.values() for kk, st in g.items() if kk == k) for k in "ab"}
            if counts["a"] != counts["b"]:
                report.note(f"frames: node A's clients {counts['a']:,}, node B's {counts['b']:,} (they differ)")
            else:
                report.note(f"{counts['b']:,} frames at node B's clients, as many as at node A's")
            for q in (50, 95, 99):
                report.row(
                    f"commit on A -> client of B p{q}",
                    f"cross_node_p{q}_ms",
                    percentile(latencies["b"], q),
                    "ms",
                    digits=2,
                )
            report.row("   max", "cross_node_max_ms", max(latencies["b"]), "ms", digits=2)
            report.row(
                "commit on A -> client of A p99 (the same node)",
                "same_node_p99_ms",
                percentile(latencies["a"], 99),
                "ms",
                digits=2,
            )
            report.set("cross_node_frames_equal", counts["a"] == counts["b"])
            for group in streams.values():
                for stream in group.values():
                    await stream.close()
    finally:
        a.stop()  # type: ignore[attr-defined]
        b.stop()  # type: ignore[attr-defined]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--sessions", type=int, default=20, help="sessions run on node A at once (20)")
    parser.add_argument("--rounds", type=int, default=3, help="prompts per session, one after another (3)")
    parser.add_argument("--latency-ms", type=float, default=2.0, help="the scripted model's time per call (2)")
    parser.add_argument("--store", help="a store URL both nodes share (default: a PostgreSQL cluster started here)")
    parser.add_argument("--quick", action="store_true", help="small sizes (what a test runs)")
    parser.add_argument("--dir", help="scratch directory (default: under .bench-out/)")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.rounds = 3, 1
    report = Report(targets=TARGETS)
    report.set("sizes", {"sessions": args.sessions, "rounds": args.rounds, "latency_ms": args.latency_ms})
    report.set("cpus", os.cpu_count())
    report.set("loadavg_start", load())
    print(f"load average at the start: {load()} on {os.cpu_count()} cpus", flush=True)
    with scratch_dir(args.dir, keep=bool(os.environ.get("TETHER_BENCH_KEEP"))) as scratch:
        if args.store:
            report.set("store", args.store.split(":", 1)[0])
            report.section(f"two nodes over {args.store}")
            await measure(report, args, args.store, scratch)
        else:
            with local_postgres() as url:
                report.set("store", "postgresql")
                report.section("two nodes over a local PostgreSQL")
                await measure(report, args, url, scratch)
    report.set("loadavg_end", load())
    report.finish()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except BenchError as e:
        print(f"bench/nodes.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None
