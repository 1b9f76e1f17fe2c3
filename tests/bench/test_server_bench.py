"""Keeps bench/server.py from rotting: a --quick run (a real tether server process on loopback, SSE clients,
stalled clients) finishes and its last line is the JSON with every figure issue 14 names. Speed is never
asserted here, only that each figure was measured and is in range; opencode is measured only when its binary
is named (TETHER_BENCH_OPENCODE), else its figures are null and a row says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPT = BENCH / "server.py"

FIGURES = (
    "sse_p50_ms",
    "sse_p95_ms",
    "sse_p99_ms",
    "prompt_first_event_p50_ms",
    "prompt_first_event_p95_ms",
    "prompt_first_event_idle_p50_ms",
    "list_rps",
    "tail_rps",
    "list_server_cpu_us",
    "tail_server_cpu_us",
    "server_rss_mb",
    "server_rss_mb_stalled",
    "server_rss_mb_control",
    "stall_growth_ratio",
    "unread_mb_per_stream",
    "client_loop_lag_p99_ms",
)


def test_quick_run_reports_every_figure(tmp_path: Path) -> None:
    """One quick run, with an opencode binary that is not there: the peer is skipped with a row saying so,
    and every tether figure comes."""
    env = dict(os.environ)
    env.pop("TETHER_BENCH_OPENCODE", None)
    scratch = tmp_path / "scratch"
    argv = [sys.executable, str(SCRIPT), "--quick", "--dir", str(scratch), "--opencode", str(tmp_path / "nope")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in FIGURES:
        value = figures.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool) and value > 0, (key, value)
    assert figures["sse_p50_ms"] <= figures["sse_p95_ms"] <= figures["sse_p99_ms"] <= figures["sse_max_ms"]
    assert figures["prompt_first_event_p50_ms"] <= figures["prompt_first_event_p95_ms"]
    # the stalled clients were really sent something they did not read, and the server is a real process
    assert figures["unread_mb_per_stream"] > 0.05 and figures["server_rss_mb"] > 20
    assert set(figures["targets"]) == {"sse_p99_ms", "prompt_first_event_p50_ms", "http_prompt_store_reads"}
    # counted by the store, not written down: the session's reads, and every read and call by name beside them
    reads, every = figures["http_prompt_store_reads"], figures["http_prompt_store_reads_all"]
    assert isinstance(reads, int | float) and 1 <= reads <= sum(every.values())
    assert every["get_session"] >= 1 and figures["http_prompt_store_calls"]["append"] == 2
    assert figures["quick"] is True and figures["sizes"]["sessions"] == 5 and figures["sizes"]["clients"] == 20
    assert figures["opencode"] is None and "is not a file" in proc.stdout
    assert "journal commit -> client" in proc.stdout and "never read" in proc.stdout
    assert "load average" in proc.stdout
    assert list(scratch.iterdir()) == []  # the scratch files are gone


def test_bad_options_are_refused() -> None:
    for argv in (["--clients", "3", "--sessions", "5"], ["--list-sessions", "10"], ["--rounds", "0"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "error:" in proc.stderr, (argv, proc.stderr)


def test_a_stream_counts_run_ends_and_splits_frames_whatever_the_reads() -> None:
    """The bench's SSE client keeps raw reads and counts the run-end marks with `bytes.count`: a mark split
    between two reads (or between chunks of the transfer encoding) is counted once, and the frames split out
    afterwards are those sent, each with the arrival of the read that completed it."""
    import asyncio
    import random

    sys.path.insert(0, str(BENCH))
    try:
        from server import Stream  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCH))

    frames = [
        '{"type":"done","n":1}'
        if i % 7 == 6
        else '{"type":"error","n":2}'
        if i % 11 == 10
        else f'{{"type":"text","i":{i}}}'
        for i in range(60)
    ]
    body = "".join(f"data: {f}\n\n" if i % 5 else f": ping\n\ndata: {f}\n\n" for i, f in enumerate(frames)).encode()
    rng = random.Random(7)

    async def main() -> Stream:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            i = 0
            while i < len(body):  # chunks of 1 to 20 bytes, each its own write after a pause: many reads
                piece = body[i : i + rng.randint(1, 20)]
                i += len(piece)
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await asyncio.sleep(0.001)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        stream = Stream("127.0.0.1", port, "/events")
        stream.start()
        await stream.until_ends(sum('"done"' in f or '"error"' in f for f in frames), 20)
        assert stream.task is not None
        await asyncio.wait_for(stream.task, 20)
        server.close()
        return stream

    stream = asyncio.run(main())
    assert stream.error is None
    assert stream.ends == 8 + 5
    assert [data for _, data in stream.frames] == frames
    assert stream.count == len(frames)
    arrivals = [t for t, _ in stream.frames]
    assert arrivals == sorted(arrivals) and arrivals[0] < arrivals[-1]


def test_workers_run_on_their_own_cores_where_the_machine_has_more(tmp_path: Path) -> None:
    """`--workers 2 --cores 1` on a machine of 2 CPUs or more: both servers on the first CPU, the clients on
    the others (the servers' CPU seconds then fit that one core), and the bound leaves the clients out."""
    mine = sorted(os.sched_getaffinity(0))
    sys.path.insert(0, str(BENCH))
    try:
        from server import split_cpus  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCH))
    assert split_cpus(len(mine)) == (mine, mine)  # nothing left for the clients: they share
    assert split_cpus(len(mine) + 1) == (mine, mine)
    if len(mine) < 2:
        return  # one CPU: the run below could not separate them (the split above is what is checked)
    assert split_cpus(1) == (mine[:1], mine[1:])
    argv = [sys.executable, str(SCRIPT), "--workers", "2", "--cores", "1", "--quick", "--dir", str(tmp_path / "s")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a target failed (speed is not asserted here)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["workers_server_cpus"] == mine[:1] and figures["workers_client_cpus"] == mine[1:]
    for load in (*figures["workers1_repeats"], *figures["workers2_repeats"]):
        # on one core: a load's servers cannot have used much more than its wall time of CPU
        assert load["runs_server_cpu_s"] <= load["runs_s"] * 1.1 + 0.05, load
        assert load["prompt_idle_p50_ms"] > 0, load  # each load's idle prompts, before it
    assert figures["workers1_prompt_idle_p50_ms"] > 0 and figures["workers2_prompt_idle_p50_ms"] > 0
    assert "the clients take nothing from the servers' cores" in proc.stdout
    assert "2 workers' CPU on 1 cores" in proc.stdout


def test_cores_goes_with_workers() -> None:
    for argv in (["--cores", "1"], ["--workers", "2", "--cores", "0"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "--cores goes with --workers" in proc.stderr, (argv, proc.stderr)
