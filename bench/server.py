"""`tether serve` under load, on loopback, beside opencode's server on the same kind of work.

The tether server is a process of its own (bench/_scripted_server.py: `tether serve`'s app and server with
the scripted model, `--latency-ms` per model call) over a SQLite store in a scratch directory, prefilled
with `--list-sessions` sessions (for the listing) and one session of `--tail-entries` entries (for the tail).
This process is every client: raw asyncio HTTP/1.1 connections for the event streams and the prompts (cheap
to parse, so that the clients' own cost stays small beside the server's), httpx for the rest of REST.

Figures:

- `sse_p50_ms`, `sse_p95_ms`, `sse_p99_ms` (target p99 <= 50): `--sessions` sessions (50) each followed
  by `--clients / --sessions` event streams (`GET /sessions/{id}/events`: 4 each, 200 in all); every
  session runs `--rounds` prompts one after the other (`steps=10`: 9 tool calls and an answer, with text),
  so about `--sessions` runs are in progress at once. For every durable event (those that come from a
  journal entry) and every client: its arrival at the client (`time.time()` when the bytes were read)
  less the entry's `created_at`, which the store stamps with `time.time()` inside the write transaction,
  just before COMMIT. Server and clients are on one machine, so the clocks are the same clock. Live events
  (text deltas, run start/end) are delivered too but have no commit time, so they are not in the sample.
- `prompt_first_event_p50_ms`, `_p95_ms` (target p50 <= 20): from just before `POST
  /sessions/{id}/prompt` is sent (on a raw keep-alive connection per session: with httpx, the time from there
  to the server reading the request was 12 ms p50, httpx's own awaits in this process busy with 200 streams
  and the server's wait for its next poll together; a new connection is used once, `GET /health`, before
  the clock starts, so that the server has accepted it, as a pool's connection would be) to the first frame
  of that run at each of the session's clients, under the load above. The first round's prompts are sent
  together (the runs start together), and so, nearly, are the second's (those runs end together). `prompt_first_event_idle_p50_ms`: the same, one session, one client, nothing else running.
- `unpaced_*`, `pacing_ratio_*`: the main load again, on a server whose runs do not take turns
  (`SessionManager(pace=False)`; `--no-baseline` skips it), and the ratios paced / unpaced of the
  first-event p50, the commit -> client p99 and the time the runs took (below 1: pacing helps).
- `http_prompt_store_reads` (target <= 4): the store's reads of the prompted session (`get_session`,
  `get_lease`, `read`) for one `POST /sessions/{id}/prompt` on an idle session with a history, from the
  request to the run's end, counted by a store that counts every call made on it (the app in this
  process, over ASGI, the scripted model). `http_prompt_store_reads_all`: every read of the store by name
  (`READS`, of any session: also the streamed answer's record and the memory notes' sessions), and beside
  them `http_prompt_store_calls`, every call by name.
- `list_rps`, `tail_rps`: `--http-clients` (4) concurrent httpx clients with keep-alive for
  `--http-seconds`: the first page of `GET /sessions` (50 of `--list-sessions`, most recent first) and
  `GET /sessions/{id}/entries?tail=100`. Beside each: the server's CPU per request (from /proc), which
  does not depend on how fast this client is.
- `server_rss_mb`: the server's resident set after the runs. Then the same large work (`--stall-rounds`
  prompts of big answers per session) twice, on fresh sessions each time, one reading client per session:
  first alone (`server_rss_mb_control`), then with `--clients` more streams that connect and never read (a
  4 KiB receive buffer), whose RSS with them still connected is `server_rss_mb_stalled`;
  `stall_growth_ratio` is stalled over control. Each stalled stream is sent `unread_mb_per_stream` MB (what
  the reading client got) that it never reads; held in memory that is `unread_mb_total`.

opencode (`--opencode PATH` to its binary, e.g. from `npm install opencode-ai`): `opencode serve` on
loopback with bench/_openai_stub.py as its model (an OpenAI-compatible provider in its config), home,
config and data in the scratch directory. The same figures as far as its API allows, and the ratios
tether/opencode (below 1: tether is faster or smaller). Its events carry no commit time; the event id
encodes the millisecond it was created (its ids are time-ordered), which stands in for it (so its
latencies are up to 1 ms high). It has no per-session stream: each session gets a directory of its own
and its clients follow `/event?directory=...`, which carries that directory's events only. Its work per
prompt is the stub's (one model call answering text), not tether's ten steps. See the rows it prints.

`--workers N`: only the main load (CPU-bound: the model answers at once), on `tether serve --workers 1` and
then `--workers N`, in `--repeats` pairs (3): `workers_throughput_ratio` (the time on 1 over the time on N,
the median of the pairs' ratios: this machine's speed drifts within a minute, and a pair's two loads run back
to back) and the N workers' first event (every pair's samples together), with each load's server CPU seconds
and this process's (the clients'). Both servers run on `--cores` CPUs (N by default: "N workers on N cores")
and the clients on the machine's others; on a machine with no others (2 CPUs for 2 workers) the clients share
the servers' cores. `workers_throughput_bound` is the most the ratio can be at the costs measured: the
1-worker time over the N workers' CPU (and the clients', where they share) spread over those cores.

    python bench/server.py [--sessions 50] [--clients 200] [--rounds 3] [--opencode PATH] [--quick] [--dir DIR]
    python bench/server.py --workers 2 [--repeats 3] [--cores K]

Last line: JSON with every figure, the load average at the start and end, and the sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx2 as httpx
from _common import BenchError, Report, Target, filesystem_of, median, percentile, scratch_dir

from tether import Message
from tether.events import EVENT_SPAN, LIVE_OFFSET
from tether.store import SqliteStore

HERE = Path(__file__).resolve().parent
TARGETS = (
    Target("sse_p99_ms", "<=", 50),
    Target("prompt_first_event_p50_ms", "<=", 20),
    Target("http_prompt_store_reads", "<=", 4),
)
WORKERS_TARGETS = (
    Target("workers_throughput_ratio", ">=", 1.6),
    Target("workers2_prompt_first_event_p50_ms", "<=", 20),
)
"""The targets of `--workers 2` (the only figures measured then)."""
READS = ("get_session", "get_lease", "read", "tail", "iter_entries", "get_stream", "list_sessions")
"""The store's reads of a session, as `http_prompt_store_reads` counts them."""
WORK = "steps=10 size=200"
"""A prompt of the main load: ten model calls (nine tool calls), 200 characters of text each."""
STALL_WORK = "steps=30 size=8000 chunk=1000"
"""A prompt of the stalled-clients phase: large answers, so that the unread bytes add up."""
OPENCODE_STALL_WORK = "pad=8000"
"""opencode's: the stub answers with 8,000 more characters, in pieces of 1,000."""
OPENCODE_WAIT = 600.0
"""Seconds an opencode prompt may take to end (its first prompt in a directory starts an instance)."""
OPENCODE_STALL_PROMPTS = 2
"""opencode's prompts per stall round (one model call each, against tether's 30 steps: its prompts take far longer)."""


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- the processes ------------------------------------------------------------------------------------


@dataclass
class Process:
    proc: subprocess.Popen[str]
    url: str
    log: Path
    server_pid: int | None = None
    """The server's own process when it runs under a wrapper (a profiler), else `proc`'s."""

    @property
    def pid(self) -> int:
        return self.server_pid or self.proc.pid

    def rss_mb(self) -> float:
        return _status_kb(self.pid, "VmRSS") / 1024

    def hwm_mb(self) -> float:
        return _status_kb(self.pid, "VmHWM") / 1024

    def cpu_s(self) -> float:
        """User + system CPU seconds of the process (every thread) and of its child processes that live (a
        supervisor's workers)."""
        return _cpu_of(self.pid) + sum(self.children_cpu_s().values())

    def children_cpu_s(self) -> dict[int, float]:
        """User + system CPU seconds of each child process that lives (a supervisor's workers)."""
        try:
            children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        except OSError:
            children = []
        return {pid: _cpu_of(pid) for pid in map(int, children)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise BenchError(f"no {key} in /proc/{pid}/status")


def start_process(
    argv: list[str],
    log: Path,
    pattern: str,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    cpus: Sequence[int] | None = None,
) -> Process:
    """Start `argv` with stdout and stderr to `log` (on `cpus` only, and so its children, when given); wait
    (60 s at most) for a line matching `pattern`, whose first group is the URL."""
    out = log.open("w")
    pin = None if cpus is None else functools.partial(os.sched_setaffinity, 0, list(cpus))
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd, preexec_fn=pin)
    out.close()
    found = re.compile(pattern)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = found.search(log.read_text(errors="replace"))
        if match:
            pid = int(match.group(2)) if (match.lastindex or 0) >= 2 and match.group(2) else None
            return Process(proc, match.group(1).rstrip("/"), log, pid)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise BenchError(f"{argv[0]} did not start: {log.read_text(errors='replace')[-2000:]}")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE.parent / "src"), env.get("PYTHONPATH")) if p)
    return env


# --- event streams ------------------------------------------------------------------------------------


@dataclass
class Stream:
    """One SSE client on a raw connection. While the runs go, it only keeps what it reads (the arrival
    `time.time()` and the bytes of each read) and counts the frames that end a run with `bytes.count`:
    the clients share the machine with the server, so their cost per event is kept to a few C calls. The
    frames (arrival of the read that completed each, and its data) are split out when `frames` is first
    read after that (`keep`), or only counted (bytes, the ends)."""

    host: str
    port: int
    path: str
    keep: bool = True
    nbytes: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    error: BaseException | None = None
    ends: int = 0
    """Frames that end a run (tether: done/error; opencode: the session going idle), counted as they come."""
    end_marks: tuple[str, ...] = ('"type":"done"', '"type":"error"')
    _reads: list[tuple[float, bytes]] = field(default_factory=list)
    _frames: list[tuple[float, str]] = field(default_factory=list)
    _count: int = 0
    _text: str = ""
    _waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    @property
    def frames(self) -> list[tuple[float, str]]:
        """The frames read so far: (arrival of the read that completed the frame, its data)."""
        reads, self._reads = self._reads, []
        for now, data in reads:
            self._text += data.decode()
            if "\r" in self._text:
                self._text = self._text.replace("\r\n", "\n")
            *complete, self._text = self._text.split("\n\n")
            for frame in complete:
                if not frame or frame.startswith(":"):
                    continue
                self._count += 1
                self._frames.append(
                    (now, "\n".join(x[5:].lstrip() for x in frame.split("\n") if x.startswith("data:")))
                )
        return self._frames

    @frames.setter
    def frames(self, kept: list[tuple[float, str]]) -> None:
        _ = self.frames  # what was read is split first, so that none of it comes back later
        self._frames = kept

    @property
    def count(self) -> int:
        """Frames delivered (of those kept)."""
        _ = self.frames
        return self._count

    async def _run(self) -> None:
        writer = None
        marks = tuple(m.encode() for m in self.end_marks)
        overlap = max(map(len, marks)) - 1
        tail = b""
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            writer.write(
                f"GET {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAccept: text/event-stream\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1]
            if status != b"200":
                raise BenchError(f"GET {self.path}: HTTP {status.decode()}: {head[:300]!r}")
            chunked = b"transfer-encoding: chunked" in head.lower()
            self.connected.set()
            pending = b""  # undecoded transfer bytes
            while True:
                data = await reader.read(262144)
                if not data:
                    return
                now = time.time()
                if chunked:
                    pending += data
                    body = []
                    while True:
                        eol = pending.find(b"\r\n")
                        if eol < 0:
                            break
                        size = int(pending[:eol].split(b";")[0], 16)
                        if size == 0:
                            return
                        if len(pending) < eol + 2 + size + 2:
                            break
                        body.append(pending[eol + 2 : eol + 2 + size])
                        pending = pending[eol + 4 + size :]
                    data = b"".join(body)
                self.nbytes += len(data)
                if self.keep:
                    self._reads.append((now, data))
                # a mark split between two reads is in (the last len-1 bytes before, the first len-1 of this)
                hits = sum(data.count(m) + (tail[1 - len(m) :] + data[: len(m) - 1]).count(m) for m in marks)
                tail = (tail + data[-overlap:])[-overlap:]
                if hits:
                    self.ends += hits
                    self._wake()
                self._changed.set()
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self.error = e
            self.connected.set()
            self._wake()
            self._changed.set()
        finally:
            if writer is not None:
                writer.close()

    def _wake(self) -> None:
        still = []
        for target, future in self._waiters:
            if future.done():
                continue
            if self.error is not None:
                future.set_exception(BenchError(f"stream {self.path} failed: {self.error!r}"))
            elif self.ends >= target:
                future.set_result(None)
            else:
                still.append((target, future))
        self._waiters = still

    async def until_ends(self, target: int, timeout: float) -> None:
        """Wait until `target` runs have ended on this stream: one future, resolved by the reader."""
        if self.error is not None:
            raise BenchError(f"stream {self.path} failed: {self.error!r}")
        if self.ends >= target:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, future))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise BenchError(
                f"stream {self.path}: timed out waiting for run end {target} ({self.count} frames)"
            ) from None

    async def wait(self, predicate: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.error is not None:
                raise BenchError(f"stream {self.path} failed: {self.error!r}")
            if self.task is not None and self.task.done():
                raise BenchError(f"stream {self.path} ended early")
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"stream {self.path}: timed out waiting ({self.count} frames)")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


async def close_streams(streams: dict[str, list[Stream]]) -> None:
    for group in streams.values():
        for stream in group:
            await stream.close()


def stalled_socket(host: str, port: int, path: str) -> socket.socket:
    """A client that asks for an event stream and never reads: a 4 KiB receive buffer, so that what the
    server sends piles up on the server's side of the connection."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n".encode())
    return sock


def host_port(url: str) -> tuple[str, int]:
    hp = url.removeprefix("http://").split("/")[0]
    host, port = hp.rsplit(":", 1)
    return host, int(port)


class LoopLag:
    """How late a 1 ms timer fires in this (the clients') event loop: the clients' own delay, included in
    every latency measured here."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            self.samples.append((time.perf_counter() - t0 - 0.001) * 1000)

    def __enter__(self) -> LoopLag:
        self.task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()

    def p99(self) -> float | None:
        return percentile(self.samples, 99) if self.samples else None


# --- tether -------------------------------------------------------------------------------------------


async def prefill(path: Path, workspace: Path, sessions: int, tail_entries: int) -> str:
    """`sessions` sessions (their listing) and one long session of `tail_entries` messages; its id."""
    async with SqliteStore(path) as store:
        for i in range(sessions):
            await store.create_session(directory=str(workspace / f"d{i % 10}"), title=f"listed session {i}")
        long = await store.create_session(directory=str(workspace), title="long session")
        bodies = [
            Message.user(f"question {i}: where is the flight?")
            if i % 2 == 0
            else Message.assistant(f"answer {i}: " + "the flight leaves at nine from gate four. " * 8)
            for i in range(tail_entries)
        ]
        for start in range(0, len(bodies), 500):
            await store.append(long.id, bodies[start : start + 500])
        return long.id


async def throughput(
    client: httpx.AsyncClient, server: Process, path: str, clients: int, seconds: float, check: Callable[[Any], bool]
) -> tuple[float, float]:
    """(requests per second, server CPU µs per request) of `clients` loops of GET `path` for `seconds`."""
    response = await client.get(path)
    if response.status_code != 200 or not check(response.json()):
        raise BenchError(f"GET {path}: {response.status_code} {response.text[:300]}")
    done = 0
    stop = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal done
        while time.monotonic() < stop:
            r = await client.get(path)
            if r.status_code != 200:
                raise BenchError(f"GET {path}: {r.status_code} {r.text[:300]}")
            done += 1

    c0, t0 = server.cpu_s(), time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(clients)))
    wall, cpu = time.perf_counter() - t0, server.cpu_s() - c0
    return done / wall, cpu / done * 1e6


@dataclass
class Prompted:
    session: str
    t0: float
    after: int
    streams: list[Stream]


class Poster:
    """`POST /sessions/{id}/prompt` on a raw keep-alive connection per session, as the event streams read
    theirs (see the module docstring: httpx's own awaits in this busy process were part of the figure)."""

    IDLE = 4.0
    """Seconds a connection is kept unused before a new one is opened instead (uvicorn closes one idle for 5)."""

    def __init__(self, base_url: str) -> None:
        self.host, self.port = host_port(base_url)
        self.conns: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = {}

    async def ready(self, session: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The session's connection, opened now if it has none (or none it may still use): before the
        prompt's clock starts, as a client's pool would hold one. A new one is used once first (`GET
        /health`), so that the server has accepted it: the kernel completes a connection before the server
        takes it, and taking fifty at once (the first round) is the server's work of opening connections,
        not of answering a prompt."""
        conn = self.conns.pop(session, None)
        if conn is not None and time.monotonic() - conn[2] <= self.IDLE:
            return conn[0], conn[1]
        if conn is not None:
            conn[1].close()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        status, _ = await self.exchange((reader, writer), "GET", "/health")
        if status != 200:
            raise BenchError(f"GET /health on a new connection: {status}")
        return reader, writer

    async def open(self, session: str) -> None:
        """Have the session's connection ready (opened and used once) before its prompts."""
        reader, writer = await self.ready(session)
        self.conns[session] = (reader, writer, time.monotonic())

    async def post(
        self, session: str, text: str, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    ) -> tuple[int, dict[str, Any]]:
        status, answer = await self.exchange(conn, "POST", f"/sessions/{session}/prompt", {"prompt": text})
        self.conns[session] = (conn[0], conn[1], time.monotonic())
        return status, answer

    async def exchange(
        self,
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        method: str,
        path: str,
        payload: dict[str, Any] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """One request on the connection and its JSON answer (read to its Content-Length)."""
        reader, writer = conn
        body = json.dumps(payload).encode() if payload is not None else b""
        kind = "Content-Type: application/json\r\n" if payload is not None else ""
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"{kind}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            None,
        )
        if length is None:
            raise BenchError(f"{method} {path}: no Content-Length in {head[:300]!r}")
        answer = await reader.readexactly(length)
        return status, json.loads(answer)


_POSTERS: dict[str, Poster] = {}


async def tether_prompt(client: httpx.AsyncClient, session: str, text: str, streams: list[Stream]) -> Prompted:
    """POST the prompt (on the `Poster` of `client`'s server) and wait for its run's end at every stream."""
    poster = _POSTERS.setdefault(str(client.base_url), Poster(str(client.base_url)))
    ends = [s.ends for s in streams]
    conn = await poster.ready(session)
    t0 = time.time()
    status, answer = await poster.post(session, text, conn)
    if status != 202:
        raise BenchError(f"POST prompt: {status} {str(answer)[:300]}")
    prompted = Prompted(session, t0, int(answer["after"]), streams)
    for stream, before in zip(streams, ends, strict=True):
        await stream.until_ends(before + 1, 120)
    return prompted


def first_events(prompts: list[Prompted], number: Callable[[str], int | None]) -> list[float]:
    """ms from each prompt to its first frame at each of its clients (a frame numbered after `after`)."""
    out: list[float] = []
    for p in prompts:
        for stream in p.streams:
            first = next(
                (t for t, data in stream.frames if t >= p.t0 and (n := number(data)) is not None and n > p.after),
                None,
            )
            if first is None:
                raise BenchError(f"a client of {p.session} saw nothing of the run after {p.after}")
            out.append((first - p.t0) * 1000)
    return out


_LAST_N = re.compile(r'"n":(\d+)\}$')


def tether_number(data: str) -> int | None:
    """The event's number: the last member of tether's event JSON (a tool's arguments may hold an "n" too)."""
    m = _LAST_N.search(data)
    return int(m.group(1)) if m else None


def start_tether(
    args: argparse.Namespace,
    db: Path,
    workspace: Path,
    log: Path,
    *,
    pacing: bool = True,
    workers: int = 1,
    latency_ms: float | None = None,
    cpus: Sequence[int] | None = None,
) -> Process:
    server = start_process(
        [
            *shlex.split(args.server_wrapper or ""),
            sys.executable,
            str(HERE / "_scripted_server.py"),
            "--store",
            str(db),
            "--workspace",
            str(workspace),
            "--latency-ms",
            str(args.latency_ms if latency_ms is None else latency_ms),
            *([] if pacing else ["--no-pacing"]),
            *(["--workers", str(workers)] if workers > 1 else []),
        ],
        log,
        r"(?:listening|supervisor of \d+ workers on) (http://\S+) pid (\d+)",
        env=child_env(),
        cpus=cpus,
    )
    # The supervisor says its address before it forks; the workers each say when they listen.
    deadline = time.monotonic() + 60
    while log.read_text(errors="replace").count("listening http") < (workers if workers > 1 else 0):
        if time.monotonic() > deadline or server.proc.poll() is not None:
            server.stop()
            raise BenchError(f"the {workers} workers did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.05)
    return server


def split_cpus(want: int) -> tuple[list[int], list[int]]:
    """(the servers' CPUs, the clients'): the first `want` of this process's CPUs for the servers and the rest
    for the clients where any are left; where none are, both get them all (they share)."""
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) <= want:
        return mine, mine
    return mine[:want], mine[want:]


def session_maker(client: httpx.AsyncClient, workspace: Path) -> Callable[[], Awaitable[str]]:
    """A function that makes a tether session in `workspace` over HTTP and gives its id."""

    async def new_session() -> str:
        r = await client.post("/sessions", json={"directory": str(workspace)})
        if r.status_code != 201:
            raise BenchError(f"POST /sessions: {r.status_code} {r.text[:300]}")
        return str(r.json()["session"]["id"])

    return new_session


async def unpaced_section(report: Report, args: argparse.Namespace, scratch: Path) -> None:
    """The main load again on a server whose runs do not take turns (`SessionManager(pace=False)`): the
    baseline of the pacing, measured in the same run; ratios are paced / unpaced (below 1: pacing helps)."""
    workspace = scratch / "work-unpaced"
    workspace.mkdir()
    db = scratch / "tether-unpaced.db"
    await prefill(db, workspace, 50, 100)
    server = start_tether(args, db, workspace, scratch / "tether-unpaced-server.log", pacing=False)
    host, port = host_port(server.url)
    limits = httpx.Limits(max_connections=args.sessions + 16, max_keepalive_connections=args.sessions + 16)
    try:
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
            new_session = session_maker(client, workspace)
            title = "tether, runs not paced (the baseline)"
            streams = await load_phase(report, args, client, server, host, port, new_session, title, "unpaced_")
            await close_streams(streams)
    finally:
        server.stop()
    f = report.figures
    for key, label in (
        ("prompt_first_event_p50_ms", "POST prompt -> first event p50, paced / not"),
        ("sse_p99_ms", "journal commit -> client p99, paced / not"),
        ("runs_s", "time the runs took, paced / not"),
    ):
        report.row(label, f"pacing_ratio_{key.removesuffix('_ms')}", f[key] / f[f"unpaced_{key}"], "x", digits=3)


async def idle_prompts(
    args: argparse.Namespace,
    client: httpx.AsyncClient,
    host: str,
    port: int,
    new_session: Callable[[], Awaitable[str]],
) -> tuple[list[Prompted], list[float]]:
    """`--idle-prompts` prompts of one step one after another in a new session with one client, on a server
    with nothing else running: the prompts, and the ms from each `POST /sessions/{id}/prompt` to its run's end
    at the client (what a prompt costs where nothing queues; with several workers, the prompt's connection and
    the stream's may be on different ones)."""
    sid = await new_session()
    stream = Stream(host, port, f"/sessions/{sid}/events")
    stream.start()
    await stream.connected.wait()
    await asyncio.sleep(0.2)
    prompts, took = [], []
    for _ in range(args.idle_prompts):
        t0 = time.perf_counter()
        prompts.append(await tether_prompt(client, sid, "steps=1", [stream]))
        took.append((time.perf_counter() - t0) * 1000)
    await stream.close()
    return prompts, took


async def workers_section(report: Report, args: argparse.Namespace, scratch: Path) -> None:
    """The main load, CPU-bound (the scripted model answers at once), on `tether serve --workers 1` and then on
    `--workers N` (N = `--workers`), each over a fresh SQLite store, in `--repeats` pairs (1, N, 1, N, ...):
    this machine's speed drifts by tens of percent within a minute, so each pair's ratio is of two loads run
    back to back, and `workers_throughput_ratio` is the median of the pairs' ratios (the time the runs took on
    one worker over the time on N). The N workers' first event is the p50 of every pair's samples together;
    each load's own figures are in `workers1_repeats` / `workersN_repeats`. Clients connect to any worker (the
    kernel spreads them), so about (N-1)/N of them follow runs of another worker: their events come through
    the store's relay."""
    n = args.workers
    runs: dict[int, list[float]] = {1: [], n: []}
    firsts: list[float] = []
    idle: dict[int, list[float]] = {1: [], n: []}
    bounds: list[float] = []
    repeats: dict[int, list[dict[str, Any]]] = {1: [], n: []}
    server_cpus, client_cpus = split_cpus(args.cores or n)
    cpus = len(server_cpus)
    report.set("workers_server_cpus", server_cpus)
    report.set("workers_client_cpus", client_cpus)
    if client_cpus != server_cpus:
        report.note(
            f"the servers (1 worker, then {n}) on CPUs {server_cpus}, the clients on {client_cpus}: "
            "the clients take nothing from the servers' cores"
        )
        os.sched_setaffinity(0, client_cpus)
    else:
        report.note(
            f"{cpus} CPUs, {args.cores or n} asked for the servers: the clients share them "
            "(on a machine with more, the servers get their own)"
        )
    for pair in range(args.repeats):
        for workers in (1, n):
            prefix = f"workers{workers}_"
            name = f"workers{workers}-{pair + 1}"
            workspace = scratch / f"work-{name}"
            workspace.mkdir()
            db = scratch / f"tether-{name}.db"
            await prefill(db, workspace, 50, 100)
            server = start_tether(
                args,
                db,
                workspace,
                scratch / f"tether-{name}-server.log",
                workers=workers,
                latency_ms=0,
                cpus=server_cpus if client_cpus != server_cpus else None,
            )
            host, port = host_port(server.url)
            limits = httpx.Limits(max_connections=args.sessions + 16, max_keepalive_connections=args.sessions + 16)
            samples: list[float] = []
            try:
                async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
                    report.section(f"pair {pair + 1}/{args.repeats}: tether serve --workers {workers}, idle")
                    _, took = await idle_prompts(args, client, host, port, session_maker(client, workspace))
                    idle[workers] += took
                    report.row(
                        "POST prompt -> its end (1 session, 1 client, one step) p50",
                        f"{prefix}prompt_idle_p50_ms", percentile(took, 50), "ms", digits=2,
                    )  # fmt: skip
                    title = f"pair {pair + 1}/{args.repeats}: tether serve --workers {workers}, CPU-bound runs (the model answers at once)"
                    streams = await load_phase(
                        report,
                        args,
                        client,
                        server,
                        host,
                        port,
                        session_maker(client, workspace),
                        title,
                        prefix,
                        first_samples=samples,
                    )
                    await close_streams(streams)
            finally:
                server.stop()
            f = report.figures
            repeats[workers].append({k[len(prefix) :]: v for k, v in f.items() if k.startswith(prefix)})
            runs[workers].append(f[f"{prefix}runs_s"])
            if workers == n:
                firsts += samples
                # The N workers' load cannot take less time than its CPU spread over the servers' cores (with
                # the clients' when they share them): the most the ratio can be here, at these costs.
                need = f[f"{prefix}runs_server_cpu_s"]
                if client_cpus == server_cpus:
                    need += f[f"{prefix}runs_client_cpu_s"]
                bounds.append(runs[1][-1] / (need / cpus))
        report.note(f"pair {pair + 1}: {n} workers / 1 = {runs[1][-1] / runs[n][-1]:.2f}x")
    f = report.figures
    report.set("workers1_repeats", repeats[1])
    report.set(f"workers{n}_repeats", repeats[n])
    report.section(f"{args.repeats} pairs (1 worker, then {n}), medians")
    report.row("the runs took, 1 worker (median)", "workers1_runs_s", median(runs[1]), "s", digits=2)
    report.row(f"the runs took, {n} workers (median)", f"workers{n}_runs_s", median(runs[n]), "s", digits=2)
    for q in (50, 95):
        report.row(
            f"{n} workers: POST prompt -> first event p{q}, every pair's",
            f"workers{n}_prompt_first_event_p{q}_ms",
            percentile(firsts, q),
            "ms",
            digits=2,
        )
    for workers in (1, n):
        report.row(
            f"{workers} worker{'s' if workers > 1 else ''}: POST prompt -> its end, idle, p50 of every pair's",
            f"workers{workers}_prompt_idle_p50_ms", percentile(idle[workers], 50), "ms", digits=2,
        )  # fmt: skip
    shares = [r["busiest_worker_share"] for r in repeats[n] if "busiest_worker_share" in r]
    if shares:
        report.row(
            f"{n} workers: the busiest one's share of their CPU (median; even: {1 / n:.2f})",
            f"workers{n}_busiest_worker_share", median(shares), "", digits=2,
        )  # fmt: skip
    ratios = [a / b for a, b in zip(runs[1], runs[n], strict=True)]
    report.note(f"each pair's {n} workers / 1: {', '.join(f'{r:.2f}' for r in ratios)}")
    report.row(
        f"runs' throughput, {n} workers / 1 (median of the pairs)",
        "workers_throughput_ratio",
        median(ratios),
        "x",
        digits=2,
    )
    spent = f"{n} workers' CPU" + (" + the clients'" if client_cpus == server_cpus else "")
    report.row(
        f"   the most these costs allow: 1 worker's time / ({spent} on {cpus} cores)",
        "workers_throughput_bound", median(bounds), "x", digits=2,
    )  # fmt: skip


async def tether_section(report: Report, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    workspace = scratch / "work"
    workspace.mkdir()
    db = scratch / "tether.db"
    report.section(f"tether: prefill {args.list_sessions:,} sessions and one of {args.tail_entries:,} entries")
    t0 = time.perf_counter()
    long_id = await prefill(db, workspace, args.list_sessions, args.tail_entries)
    report.note(f"prefilled in {time.perf_counter() - t0:.1f} s")
    server = start_tether(args, db, workspace, scratch / "tether-server.log")
    host, port = host_port(server.url)
    out: dict[str, Any] = {}
    limits = httpx.Limits(max_connections=args.sessions + 16, max_keepalive_connections=args.sessions + 16)
    try:
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
            out.update(await tether_runs(report, args, client, server, host, port, workspace))
            report.section(
                f"tether: REST throughput ({args.http_clients} concurrent clients, {args.http_seconds:g} s each)"
            )
            rps, cpu = await throughput(
                client,
                server,
                "/sessions?limit=50",
                args.http_clients,
                args.http_seconds,
                lambda b: len(b["items"]) == 50,
            )
            report.row(f"GET /sessions first page (of {args.list_sessions:,})", "list_rps", rps, "req/s")
            report.row("   server CPU per request", "list_server_cpu_us", cpu, "µs")
            rps, cpu = await throughput(
                client,
                server,
                f"/sessions/{long_id}/entries?tail=100",
                args.http_clients,
                args.http_seconds,
                lambda b: len(b["entries"]) == 100,
            )
            report.row("GET entries?tail=100", "tail_rps", rps, "req/s")
            report.row("   server CPU per request", "tail_server_cpu_us", cpu, "µs")
            out["list_rps"] = report.figures["list_rps"]
            out["tail_rps"] = report.figures["tail_rps"]
    finally:
        server.stop()
    return out


async def load_phase(
    report: Report,
    args: argparse.Namespace,
    client: httpx.AsyncClient,
    server: Process,
    host: str,
    port: int,
    new_session: Callable[[], Awaitable[str]],
    title: str,
    prefix: str = "",
    *,
    first_samples: list[float] | None = None,
) -> dict[str, list[Stream]]:
    """The main load: `--sessions` sessions, each followed by its share of `--clients` streams, each running
    `--rounds` prompts of `WORK` one after another; the figures under `prefix`. Returns the open streams."""
    per = max(1, args.clients // args.sessions)
    report.section(
        f"{title}: {args.sessions} concurrent runs, {per * args.sessions} SSE clients ({per} per session), "
        f"{args.rounds} prompts per session one after another ({WORK})"
    )
    sessions = [await new_session() for _ in range(args.sessions)]
    streams = {s: [Stream(host, port, f"/sessions/{s}/events") for _ in range(per)] for s in sessions}
    for group in streams.values():
        for stream in group:
            stream.start()
    for group in streams.values():
        for stream in group:
            await stream.connected.wait()
            if stream.error is not None:
                raise BenchError(f"an event stream failed: {stream.error!r}")
    poster = _POSTERS.setdefault(str(client.base_url), Poster(str(client.base_url)))
    await asyncio.gather(*(poster.open(s) for s in sessions))  # as a client's pool would hold them
    await asyncio.sleep(0.5)
    load0 = load()
    prompts: list[Prompted] = []

    async def session_work(s: str) -> None:
        await asyncio.sleep(random.random() * 0.2)  # the sessions start spread over 200 ms, not in one burst
        for _ in range(args.rounds):
            prompts.append(await tether_prompt(client, s, WORK, streams[s]))

    each0 = server.children_cpu_s()
    c0, w0, m0 = server.cpu_s(), time.perf_counter(), time.process_time()
    with LoopLag() as lag:
        await asyncio.gather(*(session_work(s) for s in sessions))
    wall, cpu, mine = time.perf_counter() - w0, server.cpu_s() - c0, time.process_time() - m0
    each = {pid: t - each0[pid] for pid, t in server.children_cpu_s().items() if pid in each0}
    frames = sum(st.count for g in streams.values() for st in g)
    report.row("the runs took", f"{prefix}runs_s", wall, "s", digits=2)
    report.note(
        f"{frames:,} frames delivered in {wall:.1f} s; server CPU {cpu / wall * 100:.0f}% of a core; load {load0} -> {load()}"
    )

    # commit times of every entry the runs wrote
    latencies: list[float] = []
    for s in sessions:
        r = await client.get(f"/sessions/{s}/entries", params={"start": 1, "limit": 1000})
        committed = {e["seq"]: float(e["created_at"]) for e in r.json()["entries"]}
        for stream in streams[s]:
            for arrival, data in stream.frames:
                n = tether_number(data)
                if n is None or n % EVENT_SPAN >= LIVE_OFFSET:
                    continue
                seq = n // EVENT_SPAN
                if seq not in committed:
                    raise BenchError(f"event {n} of {s} has no entry {seq}")
                latencies.append((arrival - committed[seq]) * 1000)
    if not latencies:
        raise BenchError("no durable event reached a client")
    report.note(f"{len(latencies):,} (durable event, client) pairs")
    for q in (50, 95, 99):
        report.row(f"journal commit -> client p{q}", f"{prefix}sse_p{q}_ms", percentile(latencies, q), "ms", digits=2)
    report.row("   max", f"{prefix}sse_max_ms", max(latencies), "ms", digits=2)
    samples = first_events(prompts, tether_number)
    if first_samples is not None:
        first_samples += samples
    report.row(
        "POST prompt -> first event p50 (under load)",
        f"{prefix}prompt_first_event_p50_ms",
        percentile(samples, 50),
        "ms",
        digits=2,
    )
    report.row(
        "POST prompt -> first event p95 (under load)",
        f"{prefix}prompt_first_event_p95_ms",
        percentile(samples, 95),
        "ms",
        digits=2,
    )
    report.row(
        "the clients' loop lag p99 (in every figure above)",
        f"{prefix}client_loop_lag_p99_ms",
        lag.p99(),
        "ms",
        digits=2,
    )
    report.row("server CPU during the runs", f"{prefix}runs_server_cpu_pct", cpu / wall * 100, "% core")
    report.row("server CPU seconds for the runs", f"{prefix}runs_server_cpu_s", cpu, "s", digits=2)
    if len(each) > 1 and sum(each.values()) > 0:  # a supervisor's workers: how evenly the runs' work spread
        report.row(
            "   the busiest worker's share of it", f"{prefix}busiest_worker_share", max(each.values()) / sum(each.values()), "", digits=2
        )  # fmt: skip
    report.row("the clients' CPU seconds (this process)", f"{prefix}runs_client_cpu_s", mine, "s", digits=2)
    report.row("frames delivered per second", f"{prefix}frames_per_s", frames / wall, "/s", digits=0)
    return streams


async def tether_runs(
    report: Report,
    args: argparse.Namespace,
    client: httpx.AsyncClient,
    server: Process,
    host: str,
    port: int,
    workspace: Path,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    new_session = session_maker(client, workspace)

    # idle: one session, one client, nothing else running
    report.section("tether: POST prompt -> first event, idle (1 session, 1 client)")
    idle, _ = await idle_prompts(args, client, host, port, new_session)
    samples = first_events(idle, tether_number)
    report.row("prompt -> first event p50", "prompt_first_event_idle_p50_ms", percentile(samples, 50), "ms", digits=2)
    report.row("prompt -> first event p95", "prompt_first_event_idle_p95_ms", percentile(samples, 95), "ms", digits=2)

    per = max(1, args.clients // args.sessions)
    streams = await load_phase(report, args, client, server, host, port, new_session, "tether")
    for group in streams.values():
        for stream in group:
            stream.frames.clear()
    rss = server.rss_mb()
    report.row("server RSS after the runs", "server_rss_mb", rss, "MB")
    out["sse_p99_ms"] = report.figures["sse_p99_ms"]
    out["prompt_first_event_p50_ms"] = report.figures["prompt_first_event_p50_ms"]
    out["prompt_first_event_idle_p50_ms"] = report.figures["prompt_first_event_idle_p50_ms"]

    # stalled clients: the same large work twice, on fresh sessions each time: first with one reading client
    # per session (the control: what the runs themselves leave in memory), then with `per` clients per
    # session more that connect and never read. The difference is what the stalled clients cost.
    await close_streams(streams)
    report.section(
        f"tether: {args.stall_rounds} prompt(s) per session ({STALL_WORK}) on {args.sessions} fresh sessions, "
        f"one reading client each; then again with {per * args.sessions} more clients that never read"
    )
    control = await stall_phase(report, args, client, server, host, port, new_session, 0)
    stalled_rss, per_stream = await stall_phase(report, args, client, server, host, port, new_session, per)
    control_rss = control[0]
    report.row(
        "bytes each stalled client was sent and did not read", "unread_mb_per_stream", per_stream, "MB", digits=2
    )
    report.row("   all stalled clients together", "unread_mb_total", per_stream * per * args.sessions, "MB")
    report.row("server RSS after the control (no stalled client)", "server_rss_mb_control", control_rss, "MB")
    report.row("server RSS with the stalled clients connected", "server_rss_mb_stalled", stalled_rss, "MB")
    report.row("   over the control", "stall_growth_ratio", stalled_rss / control_rss, "x", digits=2)
    report.row("server peak RSS (whole run)", "server_peak_rss_mb", server.hwm_mb(), "MB")
    out["server_rss_mb"] = rss
    out["server_rss_mb_stalled"] = stalled_rss
    return out


async def stall_phase(
    report: Report,
    args: argparse.Namespace,
    client: httpx.AsyncClient,
    server: Process,
    host: str,
    port: int,
    new_session: Callable[[], Any],
    per: int,
) -> tuple[float, float]:
    """Fresh sessions, one reading client each and `per` that never read, each session `--stall-rounds`
    prompts of STALL_WORK. Returns (the server's RSS MB with the stalled clients still connected, MB sent
    to each stream)."""
    sessions = [await new_session() for _ in range(args.sessions)]
    readers = {s: Stream(host, port, f"/sessions/{s}/events", keep=False) for s in sessions}
    for r in readers.values():
        r.start()
    for r in readers.values():
        await r.connected.wait()
    stalled = [stalled_socket(host, port, f"/sessions/{s}/events") for s in sessions for _ in range(per)]
    try:
        await asyncio.sleep(0.5)

        async def stall_work(s: str) -> None:
            for _ in range(args.stall_rounds):
                await tether_prompt(client, s, STALL_WORK, [readers[s]])

        t0 = time.perf_counter()
        await asyncio.gather(*(stall_work(s) for s in sessions))
        report.note(f"{len(stalled)} stalled clients: the runs took {time.perf_counter() - t0:.1f} s")
        sent = [r.nbytes for r in readers.values()]
        return server.rss_mb(), sum(sent) / len(sent) / 1e6
    finally:
        for sock in stalled:
            sock.close()
        for r in readers.values():
            await r.close()


# --- opencode -----------------------------------------------------------------------------------------


def opencode_time(data: str, arrival: float) -> float | None:
    """When opencode created the event, from its id (``evt_`` + 12 hex digits: the low 48 bits of
    milliseconds * 4096 + a counter), placed in the 2**36 ms window nearest its arrival."""
    m = re.search(r'"id":"evt_([0-9a-f]{12})', data)
    if m is None:
        return None
    ms = int(m.group(1), 16) >> 12
    span = 1 << 36
    now = int(arrival * 1000)
    base = now - now % span
    best = min((base + ms + k * span for k in (-1, 0, 1)), key=lambda t: abs(t - now))
    return best / 1000


def opencode_session(data: str) -> str | None:
    m = re.search(r'"sessionID":"([^"]+)"', data)
    return m.group(1) if m else None


async def opencode_section(report: Report, args: argparse.Namespace, scratch: Path, tether: dict[str, Any]) -> None:
    binary = args.opencode
    if not binary or not Path(binary).is_file():
        report.section("opencode")
        why = "no --opencode given" if not binary else f"{binary} is not a file"
        report.note(f"skipped: {why} (npm install opencode-ai in a directory of your choice, then")
        report.note("--opencode DIR/node_modules/.bin/opencode)")
        report.set("opencode", None)
        return
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    report.set("opencode_version", version)
    home = scratch / "oc-home"
    work = scratch / "oc-work"
    for d in (home, work):
        d.mkdir()
    stub = start_process(
        [sys.executable, str(HERE / "_openai_stub.py"), "--port", "0"], scratch / "stub.log", r"(http://\S+)"
    )
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "stub": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "bench stub",
                "options": {"baseURL": stub.url, "apiKey": "bench"},
                "models": {"bench": {"name": "bench", "tool_call": True}},
            }
        },
        "model": "stub/bench",
        "small_model": "stub/bench",
        "autoupdate": False,
        "share": "disabled",
    }
    (home / "opencode.json").write_text(json.dumps(config))
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local/state"),
        OPENCODE_CONFIG=str(home / "opencode.json"),
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_SHARE="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
        OPENCODE_DISABLE_CLAUDE_CODE="1",
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        oc_port = s.getsockname()[1]
    server = start_process(
        [binary, "serve", "--hostname", "127.0.0.1", "--port", str(oc_port), "--pure"],
        scratch / "opencode.log",
        r"(http://127\.0\.0\.1:\d+)",
        env=env,
        cwd=work,
    )
    report.section(f"opencode {version} (opencode serve --pure, model: bench/_openai_stub.py)")
    host, port = host_port(server.url)
    limits = httpx.Limits(max_connections=args.sessions + 16, max_keepalive_connections=args.sessions + 16)
    figures: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=120) as client:
            figures = await opencode_measure(report, args, client, server, host, port, scratch)
    finally:
        server.stop()
        stub.stop()
    report.section("tether / opencode (below 1: tether faster or smaller; above 1 for rates: tether faster)")
    for key, label in (
        ("prompt_first_event_idle_p50_ms", "prompt -> first event p50, idle"),
        ("prompt_first_event_p50_ms", "prompt -> first event p50, under load"),
        ("sse_p99_ms", "stamp -> client p99 (see the note on what is stamped)"),
        ("server_rss_mb", "server RSS after the runs"),
        ("server_rss_mb_stalled", "server RSS with stalled clients"),
        ("list_rps", "list sessions, requests/s"),
    ):
        a, b = tether.get(key), figures.get(key)
        ratio = a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None
        report.row(label, f"ratio_{key}", ratio, "x", digits=2)


async def opencode_measure(
    report: Report,
    args: argparse.Namespace,
    client: httpx.AsyncClient,
    server: Process,
    host: str,
    port: int,
    scratch: Path,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    end_marks = ('"type":"session.idle"', '"type":"session.error"')

    async def new_session(directory: Path) -> str:
        r = await client.post("/session", params={"directory": str(directory)}, json={})
        if r.status_code != 200:
            raise BenchError(f"opencode POST /session: {r.status_code} {r.text[:300]}")
        return str(r.json()["id"])

    async def prompt(session: str, directory: Path, text: str, streams: list[Stream]) -> Prompted:
        ends = [s.ends for s in streams]
        t0 = time.time()
        r = await client.post(
            f"/session/{session}/prompt_async",
            params={"directory": str(directory)},
            json={"parts": [{"type": "text", "text": text}]},
        )
        if r.status_code not in (200, 204):
            raise BenchError(f"opencode prompt_async: {r.status_code} {r.text[:300]}")
        for stream, before in zip(streams, ends, strict=True):
            await stream.until_ends(before + 1, OPENCODE_WAIT)
        return Prompted(session, t0, 0, streams)

    def first_of(prompts: list[Prompted]) -> list[float]:
        samples: list[float] = []
        for p in prompts:
            for stream in p.streams:
                first = next((t for t, d in stream.frames if t >= p.t0 and opencode_session(d) == p.session), None)
                if first is None:
                    raise BenchError(f"an opencode client saw nothing of {p.session}")
                samples.append((first - p.t0) * 1000)
        return samples

    def stream_for(directory: Path) -> Stream:
        st = Stream(host, port, f"/event?directory={directory}", end_marks=end_marks)
        st.start()
        return st

    async def ready(stream: Stream) -> None:
        await stream.wait(lambda: any("server.connected" in d for _, d in stream.frames), 30)

    # idle
    idle_dir = scratch / "oc-work" / "idle"
    idle_dir.mkdir()
    sid = await new_session(idle_dir)
    stream = stream_for(idle_dir)
    await ready(stream)
    idle = [await prompt(sid, idle_dir, f"hello {i}", [stream]) for i in range(args.idle_prompts)]
    samples = first_of(idle[1:] or idle)  # the first prompt of an instance also loads its plugins
    report.row(
        "prompt -> first event p50, idle",
        "opencode_prompt_first_event_idle_p50_ms",
        percentile(samples, 50),
        "ms",
        digits=2,
    )
    out["prompt_first_event_idle_p50_ms"] = report.figures["opencode_prompt_first_event_idle_p50_ms"]
    await stream.close()

    # concurrent runs, each session in a directory of its own so that its clients get its events only
    per = max(1, args.clients // args.sessions)
    dirs = [scratch / "oc-work" / f"s{i}" for i in range(args.sessions)]
    sessions: list[tuple[str, Path]] = []
    for d in dirs:
        d.mkdir()
        sessions.append((await new_session(d), d))
    streams = {s: [stream_for(d) for _ in range(per)] for s, d in sessions}
    for group in streams.values():
        for st in group:
            await ready(st)
    # warm each instance (its first prompt loads plugins and makes a title), a few at a time
    t0 = time.perf_counter()
    for i in range(0, len(sessions), 5):
        await asyncio.gather(*(prompt(s, d, "warm up", streams[s]) for s, d in sessions[i : i + 5]))
    report.note(f"{len(sessions)} instances warmed (a first prompt each) in {time.perf_counter() - t0:.1f} s")
    for group in streams.values():
        for st in group:
            st.frames = [f for f in st.frames if "server.connected" in f[1]]
    await asyncio.sleep(0.5)
    prompts: list[Prompted] = []

    async def session_work(s: str, d: Path) -> None:
        await asyncio.sleep(random.random() * 0.2)
        for i in range(args.rounds):
            prompts.append(await prompt(s, d, f"round {i}", streams[s]))

    c0, w0 = server.cpu_s(), time.perf_counter()
    with LoopLag() as lag:
        await asyncio.gather(*(session_work(s, d) for s, d in sessions))
    wall, cpu = time.perf_counter() - w0, server.cpu_s() - c0
    frames = sum(st.count for g in streams.values() for st in g)
    report.note(
        f"{frames:,} frames in {wall:.1f} s; server CPU {cpu / wall * 100:.0f}% of a core; clients {per} per session"
    )
    latencies: list[float] = []
    undated = errors = 0
    for group in streams.values():
        for st in group:
            for arrival, data in st.frames:
                errors += '"type":"session.error"' in data
                stamp = opencode_time(data, arrival)
                if stamp is None:
                    undated += 1
                    continue
                latencies.append((arrival - stamp) * 1000)
    if not latencies:
        raise BenchError("no opencode event carried a dated id")
    if min(latencies) < -5 or max(latencies) > 120_000:
        raise BenchError(
            f"opencode's event ids do not decode to times near their arrival: {min(latencies)}..{max(latencies)} ms"
        )
    report.note(f"{len(latencies):,} (event, client) pairs; {undated} frames without a dated id")
    report.row("session.error frames (a failed run; should be 0)", "opencode_error_frames", errors, "", digits=0)
    for q in (50, 95, 99):
        report.row(f"event id time -> client p{q}", f"opencode_sse_p{q}_ms", percentile(latencies, q), "ms", digits=2)
    samples = first_of(prompts)
    report.row(
        "POST prompt_async -> first event p50 (under load)",
        "opencode_prompt_first_event_p50_ms",
        percentile(samples, 50),
        "ms",
        digits=2,
    )
    report.row(
        "POST prompt_async -> first event p95 (under load)",
        "opencode_prompt_first_event_p95_ms",
        percentile(samples, 95),
        "ms",
        digits=2,
    )
    report.row("the clients' loop lag p99", "opencode_client_loop_lag_p99_ms", lag.p99(), "ms", digits=2)
    report.row("server CPU during the runs", "opencode_runs_server_cpu_pct", cpu / wall * 100, "% core")
    report.row("frames delivered per second", "opencode_frames_per_s", frames / wall, "/s", digits=0)
    rss = server.rss_mb()
    report.row("server RSS after the runs", "opencode_server_rss_mb", rss, "MB")
    out["sse_p99_ms"] = report.figures["opencode_sse_p99_ms"]
    out["prompt_first_event_p50_ms"] = report.figures["opencode_prompt_first_event_p50_ms"]
    out["server_rss_mb"] = rss
    for group in streams.values():
        for st in group:
            await st.close()

    # stalled clients: its bus has no bound of its own; see what the same unread load costs it
    report.section(
        f"opencode: {per * args.sessions} clients that never read, {args.stall_rounds * OPENCODE_STALL_PROMPTS} "
        f"prompt(s) per session ({OPENCODE_STALL_WORK}: one model call each); one reading client per session"
    )
    readers = {s: stream_for(d) for s, d in sessions}
    for r in readers.values():
        r.keep = True
        await ready(r)
        r.keep = False
    stalled = [stalled_socket(host, port, f"/event?directory={d}") for _, d in sessions for _ in range(per)]
    try:
        await asyncio.sleep(0.5)
        before = {s: r.nbytes for s, r in readers.items()}

        async def stall_work(s: str, d: Path) -> None:
            for i in range(args.stall_rounds * OPENCODE_STALL_PROMPTS):
                await prompt(s, d, f"{OPENCODE_STALL_WORK} round {i}", [readers[s]])

        await asyncio.gather(*(stall_work(s, d) for s, d in sessions))
        sent = [r.nbytes - before[s] for s, r in readers.items()]
        stalled_rss = server.rss_mb()
        report.row(
            "bytes each stalled client was sent and did not read",
            "opencode_unread_mb_per_stream",
            sum(sent) / len(sent) / 1e6,
            "MB",
            digits=2,
        )
        report.row(
            "   all stalled clients together",
            "opencode_unread_mb_total",
            sum(sent) / len(sent) / 1e6 * len(stalled),
            "MB",
        )
        report.row("server RSS with the stalled clients connected", "opencode_server_rss_mb_stalled", stalled_rss, "MB")
        report.row(
            "   growth over the RSS after the runs", "opencode_stall_growth_ratio", stalled_rss / rss, "x", digits=2
        )
        out["server_rss_mb_stalled"] = stalled_rss
    finally:
        for sock in stalled:
            sock.close()
        for r in readers.values():
            await r.close()

    # listing
    report.section(f"opencode: list sessions ({args.list_sessions:,} made first, {args.http_clients} clients)")
    list_dir = scratch / "oc-work" / "listed"
    list_dir.mkdir()
    sem = asyncio.Semaphore(8)
    t0 = time.perf_counter()

    async def make() -> None:
        async with sem:
            await new_session(list_dir)

    await asyncio.gather(*(make() for _ in range(args.list_sessions)))
    report.note(f"{args.list_sessions:,} sessions made in {time.perf_counter() - t0:.1f} s")
    path = f"/session?directory={list_dir}&limit=50"
    rps, cpu = await throughput(client, server, path, args.http_clients, args.http_seconds, lambda b: len(b) == 50)
    report.row("GET /session?limit=50", "opencode_list_rps", rps, "req/s")
    report.row("   server CPU per request", "opencode_list_server_cpu_us", cpu, "µs")
    report.note(
        "tail: not compared (its sessions would need 100 messages from real runs; GET /session/{id}/message?limit=100)"
    )
    out["list_rps"] = report.figures["opencode_list_rps"]
    return out


# --- main ---------------------------------------------------------------------------------------------


class CountingStore:
    """A store that counts every call made on it, by method name and first argument, and passes it on."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner
        self.calls: list[tuple[str, object]] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        def counted(*a: Any, **k: Any) -> Any:
            self.calls.append((name, a[0] if a else None))
            return value(*a, **k)

        return counted


async def prompt_reads_section(report: Report, scratch: Path) -> None:
    """`http_prompt_store_reads`: one prompt over HTTP on an idle session that has a history (see the
    module docstring)."""
    from tether.config import Config
    from tether.providers.catalog import unknown_model
    from tether.providers.registry import ResolvedModel
    from tether.providers.scripted import ScriptedProvider
    from tether.runtime.launch import RunRequest
    from tether.runtime.manager import SessionManager
    from tether.server import ServerSettings, create_app
    from tether.tools.base import ToolRegistry

    report.section("store reads of one prompt over HTTP (an idle session, SQLite)")
    work = scratch / "reads"
    work.mkdir()
    store = CountingStore(SqliteStore(work / "reads.db"))
    provider = ScriptedProvider(lambda request: "ok")

    def resolve(name: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider, "test", unknown_model("scripted", "test"))

    def make(opened: Any, config: Config) -> SessionManager:
        return SessionManager(
            opened, config=config, defaults=RunRequest(None, registry=ToolRegistry([])), resolve=resolve
        )

    app = create_app(ServerSettings(), store=store, config=Config(), make_manager=make)  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        manager = app.state.tether.manager
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            made = (await client.post("/sessions", json={"directory": str(work)})).json()
            sid = made["session"]["id"]

            async def prompt(text: str) -> dict[str, Any]:
                answer = await client.post(f"/sessions/{sid}/prompt", json={"prompt": text})
                if answer.status_code != 202:
                    raise BenchError(f"the prompt was refused: {answer.status_code} {answer.text}")
                deadline = time.monotonic() + 60
                while manager.running() or (manager._sessions.get(sid) is not None and manager._sessions[sid].waiting):
                    if time.monotonic() > deadline:
                        raise BenchError("the prompt's run did not end in 60 s")
                    await asyncio.sleep(0.01)
                return dict(answer.json())

            await prompt("a first exchange, so that the session has a history")
            await asyncio.sleep(0.1)
            store.calls.clear()
            await prompt("hello again")
            await asyncio.sleep(0.1)  # the activity feed's last word after the run
    await store.inner.close()
    own = [name for name, first in store.calls if first == sid and name in ("get_session", "get_lease", "read")]
    every_read: dict[str, int] = {}
    every_call: dict[str, int] = {}
    for name, _ in store.calls:
        every_call[name] = every_call.get(name, 0) + 1
        if name in READS:
            every_read[name] = every_read.get(name, 0) + 1
    report.row(
        "reads of the session (get_session, get_lease, read)", "http_prompt_store_reads", len(own), "reads", digits=0
    )
    report.set("http_prompt_store_reads_all", every_read)
    report.set("http_prompt_store_calls", every_call)
    report.note(f"every read: {every_read}; every call: {every_call}")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--sessions", type=int, default=50, help="concurrent runs (default 50)")
    parser.add_argument("--clients", type=int, default=200, help="event-stream clients, spread evenly (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="prompts per session, one after another (default 3)")
    parser.add_argument("--stall-rounds", type=int, default=2, help="prompts per session with stalled clients (2)")
    parser.add_argument("--idle-prompts", type=int, default=30, help="prompts of the idle first-event figure (30)")
    parser.add_argument("--latency-ms", type=float, default=2.0, help="the scripted model's time per call (2)")
    parser.add_argument("--list-sessions", type=int, default=10_000, help="sessions in the store (10,000)")
    parser.add_argument("--tail-entries", type=int, default=1000, help="entries of the session whose tail is read")
    parser.add_argument("--http-clients", type=int, default=4, help="concurrent REST clients (default 4)")
    parser.add_argument("--http-seconds", type=float, default=3.0, help="seconds of each REST figure (3)")
    parser.add_argument(
        "--opencode",
        default=os.environ.get("TETHER_BENCH_OPENCODE"),
        help="opencode's binary (npm install opencode-ai), measured beside tether [env: TETHER_BENCH_OPENCODE]",
    )
    parser.add_argument(
        "--server-wrapper",
        metavar="CMD",
        help="run the tether server under this command, e.g. 'py-spy record -o prof.txt -f raw --' (a profile)",
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the main load on a server whose runs are not paced"
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="measure only `tether serve --workers N` beside --workers 1 under CPU-bound runs (workers_*)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        metavar="K",
        help="with --workers: pairs of loads (1 worker, then N) whose ratios' median is the figure (default 3)",
    )
    parser.add_argument(
        "--cores",
        type=int,
        metavar="K",
        help="with --workers: the CPUs both servers run on (default N); the clients get the others, where the "
        "machine has more (else they share)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute (what the test runs)")
    parser.add_argument("--dir", help="scratch directory (default: under .bench-out/)")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.clients, args.rounds, args.stall_rounds = 5, 20, 1, 1
        args.idle_prompts, args.list_sessions, args.tail_entries, args.http_seconds = 5, 500, 200, 0.5
        args.repeats = 1
    if args.sessions < 1 or args.clients < args.sessions or args.rounds < 1 or args.tail_entries < 100:
        parser.error("--sessions and --rounds at least 1, --clients at least --sessions, --tail-entries at least 100")
    if args.repeats < 1:
        parser.error("--repeats at least 1")
    if args.cores is not None and (args.workers is None or args.cores < 1):
        parser.error("--cores goes with --workers, and is at least 1")
    if args.list_sessions < 50:
        parser.error("--list-sessions at least 50 (a full first page)")

    report = Report(targets=WORKERS_TARGETS if args.workers else TARGETS)
    report.set("quick", args.quick)
    sizes = ("sessions", "clients", "rounds", "stall_rounds", "idle_prompts", "latency_ms", "list_sessions")
    report.set("sizes", {k: getattr(args, k) for k in (*sizes, "tail_entries", "http_clients", "http_seconds")})
    report.set("cpus", os.cpu_count())
    report.set("python", sys.version.split()[0])
    report.set("loadavg_start", load())
    print(f"load average at the start: {load()} on {os.cpu_count()} cpus", flush=True)
    with scratch_dir(args.dir, keep=bool(os.environ.get("TETHER_BENCH_KEEP"))) as scratch:
        report.set("filesystem", filesystem_of(scratch))
        if args.workers:
            await workers_section(report, args, scratch)
            report.set("loadavg_end", load())
            report.finish()
            return
        await prompt_reads_section(report, scratch)
        tether = await tether_section(report, args, scratch)
        if not args.no_baseline:
            await unpaced_section(report, args, scratch)
        await opencode_section(report, args, scratch, tether)
    report.set("loadavg_end", load())
    print(f"\nload average at the end: {load()}", flush=True)
    report.finish()


@contextlib.contextmanager
def _quiet_keyboard() -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    try:
        with _quiet_keyboard():
            asyncio.run(main())
    except BenchError as e:
        print(f"bench/server.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None
