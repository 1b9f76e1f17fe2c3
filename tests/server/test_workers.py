"""`tether serve --workers 2`, for real: the CLI's supervisor forks two workers on one port over one SQLite
store, the model is a loopback OpenAI-compatible server, the clients real HTTP and SSE. Connections spread
over both workers (checked in /proc); every stream of a session, whichever worker holds it, gets every
event of its run, text deltas too, the same frames in the same order; `/approvals` on either lists the
request the other's run waits on, and either's answer reaches it; so does a cancel; `/events` on both says
the approval waits; a worker killed with SIGKILL mid-answer is replaced, its run taken over by the other
(the cut answer journaled once, the tool call not run again), and the session goes on; the runs of one
client's single connection are spread over both workers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tether.runtime.mesh import PLACE_MARGIN
from tether.server.workers import bind

from .cluster import (
    MODEL,
    LoopbackModel,
    Node,
    Stream,
    call,
    connections_of,
    home_with_config,
    start_node,
    subscribed,
    until,
)

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def two_workers(tmp_path: Path, store_url: str) -> Iterator[tuple[Node, LoopbackModel, Path]]:
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("a\n")
    model = LoopbackModel(workspace)
    home = home_with_config(tmp_path / "home")
    node = start_node(home, store_url, model.url, workers=2)
    try:
        yield node, model, workspace
    finally:
        node.stop()
        model.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Node, LoopbackModel, Path]]:
    with two_workers(tmp_path, f"sqlite:///{tmp_path / 't.db'}") as node:
        yield node


@pytest.fixture(params=["sqlite", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Node, LoopbackModel, Path]]:
    """Two workers over a SQLite file, or over a PostgreSQL database (its relay is tables of the database)."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else f"sqlite:///{tmp_path / 't.db'}"
    with two_workers(tmp_path, url) as node:
        yield node


async def streams_of(url: str, sid: str, count: int) -> list[Stream]:
    return await subscribed([url] * count, sid)


async def test_two_workers_serve_every_run_to_every_client(cluster: tuple[Node, LoopbackModel, Path]) -> None:
    node, _, workspace = cluster
    port = int(node.url.rsplit(":", 1)[1])
    workers = node.workers()
    assert len(workers) == 2
    sid = call(node.url, "POST", "/sessions", json={"directory": str(workspace)}).json()["session"]["id"]

    # --- every event to every stream, whichever worker holds it ----------------------------------------
    streams = await streams_of(node.url, sid, 12)
    held = {pid: connections_of(pid, port) for pid in workers}
    assert all(n >= 1 for n in held.values()), f"the streams did not spread over the workers: {held}"
    r = call(node.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "say 40", "model": MODEL})
    assert r.status_code == 202, r.text
    await asyncio.wait_for(asyncio.gather(*(s.task for s in streams if s.task)), 60)
    first = streams[0].frames
    assert first[0][1]["type"] == "run_started" and first[-1][1]["type"] == "done"
    assert sum(e["type"] == "text_delta" for _, e in first) == 40
    for stream in streams[1:]:
        assert stream.frames == first  # the same frames, numbers and order, on both workers

    # --- an approval the run waits on: listed, announced and answered on either worker ----------------
    feeds = [await _feed(node.url) for _ in range(6)]
    streams = await streams_of(node.url, sid, 6)
    r = call(node.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "edit it", "model": MODEL})
    assert r.status_code == 202, r.text

    def listed_everywhere() -> bool:
        return all(
            [a["call_id"] for a in call(node.url, "GET", "/approvals").json()["approvals"]] == ["call_edit"]
            for _ in range(6)
        )

    await until(listed_everywhere, 60, "the request listed by both workers")
    assert all(call(node.url, "GET", f"/sessions/{sid}").json()["status"] == "waiting_for_approval" for _ in range(6))
    answer = {"approved": True, "scope": "once", "message": ""}
    r = call(node.url, "POST", f"/sessions/{sid}/approvals/call_edit", json=answer)
    assert r.status_code == 200, r.text
    await asyncio.wait_for(asyncio.gather(*(s.task for s in streams if s.task)), 60)
    for stream in streams:
        assert stream.frames == streams[0].frames and stream.types()[-1] == "done"
    assert "approval_resolved" in streams[0].types()
    for feed in feeds:
        await until(lambda f=feed: "approval_pending" in f.types, 30, "the approval on /events")  # type: ignore[misc]
        feed.stop()
    assert (workspace / "notes.txt").read_text() == "b\n"

    # --- a cancel from any connection stops the run wherever it is ------------------------------------
    streams = await streams_of(node.url, sid, 6)
    r = call(node.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "hold on", "model": MODEL})
    assert r.status_code == 202, r.text
    await until(lambda: sum(t == "text_delta" for t in streams[0].types()) >= 3, 60, "the answer to stream")
    started = time.monotonic()
    assert call(node.url, "POST", f"/sessions/{sid}/cancel").json()["done"] is True
    await asyncio.wait_for(asyncio.gather(*(s.task for s in streams if s.task)), 60)
    assert time.monotonic() - started < 5
    for stream in streams:
        assert stream.frames[-1][1]["type"] == "error" and stream.frames[-1][1]["code"] == "cancelled"


async def test_a_worker_killed_mid_answer_is_replaced_and_its_run_taken_over(
    cluster: tuple[Node, LoopbackModel, Path],
) -> None:
    node, model, workspace = cluster
    before = set(node.workers())
    body = {"directory": str(workspace), "prompt": "hold this", "model": MODEL}
    sid = call(node.url, "POST", "/sessions", json=body).json()["session"]["id"]

    def streaming() -> bool:
        record = call(node.url, "GET", f"/sessions/{sid}/entries").json()
        return len(record["entries"]) >= 3 and any(len(r["messages"]) >= 3 for r in model.requests[-1:])

    await until(streaming, 60, "the run to stream its second answer")
    await asyncio.sleep(0.6)  # some of it saved (the stream record is written at least every half second)
    lease = call(node.url, "GET", f"/sessions/{sid}").json()["lease"]
    victim = int(lease["pid"])
    assert victim in before
    os.kill(victim, signal.SIGKILL)

    def settled() -> bool:
        view = call(node.url, "GET", f"/sessions/{sid}").json()
        return view["status"] == "idle" and view["lease"] is None and view["session"]["entry_count"] >= 4

    await until(settled, 60, "the answer the run had streamed to be journaled")
    # a reader's look journals the cut answer as soon as the dead worker's lease is free; the other worker
    # takes the run over at its next heartbeat, and the session goes on only after that run's end (a stream
    # that came between would see it)
    feed = await _feed(node.url, after=0)
    await until(lambda: feed.statuses(sid)[-2:] == ["running", "idle"] and len(feed.statuses(sid)) >= 3, 60,
                "the other worker to take the run over")  # fmt: skip
    feed.stop()
    entries = call(node.url, "GET", f"/sessions/{sid}/entries").json()["entries"]
    messages = [e["body"] for e in entries if e["body"].get("type", "message") == "message"]
    # the cut answer, then the run that took over going on with it (as `--continue` does)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "assistant"]
    assert messages[3]["metadata"].get("interrupted") and messages[3]["parts"][0]["text"].startswith("h0 h1")
    assert not messages[4]["metadata"].get("interrupted")
    assert (workspace / "held.txt").read_text() == "written once\n"  # the tool ran once
    await until(lambda: len(node.workers()) == 2 and victim not in node.workers(), 30, "a new worker")

    streams = await streams_of(node.url, sid, 4)
    r = call(node.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "say 5", "model": MODEL})
    assert r.status_code == 202, r.text
    await asyncio.wait_for(asyncio.gather(*(s.task for s in streams if s.task)), 60)
    for s in streams:
        assert s.types()[-1:] == ["done"] and s.frames == streams[0].frames, (s.warmup, s.frames, streams[0].frames)


class _Feed:
    """`GET /events` (from `after` when given), followed in a task of its own."""

    def __init__(self, url: str, after: int | None = None) -> None:
        self.url = url
        self.after = after
        self.types: list[str] = []
        self.items: list[dict[str, object]] = []
        self.connected = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        import json

        timeout = httpx2.Timeout(120, connect=10)
        params = {} if self.after is None else {"after": self.after}
        async with (
            httpx2.AsyncClient(base_url=self.url, timeout=timeout) as client,
            client.stream("GET", "/events", params=params) as r,
        ):
            self.connected.set()
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    item = json.loads(line[5:])
                    self.items.append(item)
                    self.types.append(item["type"])

    def statuses(self, session_id: str) -> list[str]:
        return [str(i["status"]) for i in self.items if i["type"] == "status_changed" and i["session_id"] == session_id]

    def stop(self) -> None:
        self.task.cancel()


async def _feed(url: str, after: int | None = None) -> _Feed:
    feed = _Feed(url, after)
    await asyncio.wait_for(feed.connected.wait(), 30)
    return feed


def test_workers_die_with_a_supervisor_killed_with_sigkill(cluster: tuple[Node, LoopbackModel, Path]) -> None:
    """`kill -9` of `tether serve --workers 2` ends its workers too (the kernel's parent-death signal): none
    goes on serving the port or running sessions behind a service its user saw die (a restart's test on one
    port found the dead service's worker still finishing its run)."""
    node, _, _ = cluster
    workers = node.workers()
    assert len(workers) == 2 and node.process.pid not in workers
    node.process.send_signal(signal.SIGKILL)
    node.process.wait(30)

    def alive(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"

    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)]


async def test_one_client_connection_s_runs_spread_over_the_workers(
    any_store: tuple[Node, LoopbackModel, Path],
) -> None:
    """The kernel spreads connections, not runs: a client that keeps one connection (a program's HTTP client,
    a page) brings every prompt to one worker. A prompt for an idle session goes to the worker with fewer runs
    when the one that got it has PLACE_MARGIN more; each run's lease says which process runs it, and a stream
    on either worker sees a placed run's events."""
    node, _, workspace = any_store
    workers = node.workers()
    runs = PLACE_MARGIN * 2
    with httpx2.Client(base_url=node.url, timeout=30, limits=httpx2.Limits(max_connections=1)) as client:
        sids = [
            client.post("/sessions", json={"directory": str(workspace)}).json()["session"]["id"] for _ in range(runs)
        ]
        holders: list[int] = []
        for sid in sids:  # each a run mid-answer for a long while ("hold"), one after another
            r = client.post(f"/sessions/{sid}/prompt", json={"prompt": "hold on", "model": MODEL})
            assert r.status_code == 202 and not r.json()["queued"], r.text
            deadline = time.monotonic() + 30
            while (lease := client.get(f"/sessions/{sid}").json()["lease"]) is None:
                assert time.monotonic() < deadline, f"session {sid} did not start"
                time.sleep(0.02)
            holders.append(int(lease["pid"]))
        got = Counter(holders)
        assert set(got) == set(workers), (got, workers)
        assert max(got.values()) - min(got.values()) <= PLACE_MARGIN, got
        # a placed run (the first runs stay where the connection is: a worker with fewer than PLACE_MARGIN
        # runs places none): its live events reach streams on both workers, and a cancel reaches it
        placed = next(sid for sid, pid in zip(sids, holders, strict=True) if pid != holders[0])
        streams = [Stream(node.url, placed).start() for _ in range(12)]
        await asyncio.wait_for(asyncio.gather(*(s.connected.wait() for s in streams)), 60)
        port = int(node.url.rsplit(":", 1)[1])
        assert all(connections_of(pid, port) >= 1 for pid in workers)
        await until(lambda: all(s.types().count("text_delta") >= 2 for s in streams), 60, "the placed run's deltas")
        assert client.post(f"/sessions/{placed}/cancel").json()["done"] is True
        await until(lambda: all("error" in s.types() for s in streams), 30, "the cancel on every stream")
        for stream in streams:
            assert stream.frames[-1][1]["type"] == "error" and stream.frames[-1][1]["code"] == "cancelled"
            if stream.task is not None:
                stream.task.cancel()
        sids.remove(placed)
        for sid in sids:
            assert client.post(f"/sessions/{sid}/cancel").json()["done"] is True


SUPERVISED = """
import gc, os, signal, sys
from tether.context import tokens
from tether.server.workers import Supervisor
from tether.tools import sandbox

def serve_one(sock):
    # what the worker has as it starts, before anything of its own loads it
    with open(sys.argv[1], "w") as f:
        loaded = tokens._bpe_counter.cache_info().currsize, sandbox.bwrap_support.cache_info().currsize
        f.write(f"{loaded[0]} {loaded[1]} {int(gc.get_freeze_count() > 0)}")
    os.kill(os.getppid(), signal.SIGTERM)

sys.exit(Supervisor("127.0.0.1", 0, 1, serve_one).run(grace=1))
"""


def test_the_workers_have_what_their_supervisor_loaded_before_forking(tmp_path: Path) -> None:
    # The token counter, loaded once before the fork (~65 MiB, 0.1-0.3 s), and the sandbox's probe (a child
    # process): not again in each worker, by its first prompt; and all it has, frozen out of the workers'
    # collections (which would copy every page they walk).
    said = tmp_path / "said"
    done = subprocess.run(
        [sys.executable, "-c", SUPERVISED, str(said)], capture_output=True, text=True, timeout=60, check=False
    )
    assert said.read_text() == "1 1 1", done.stderr


async def test_a_worker_s_connections_send_at_once() -> None:
    # Nagle's algorithm off (as on asyncio's own sockets): a response written in two sends (uvicorn's head,
    # then its body) does not wait ~40 ms for the client's delayed ACK.
    sock = bind("127.0.0.1", 0, listen=True)
    nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nodelay.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        assert await asyncio.wait_for(nodelay, 10) != 0
        writer.close()
