"""Two `tether serve` nodes, each with its own tether home, sharing one store (a real PostgreSQL the tests
start, and a SQLite file), behave as one service: a client of node B watches a run of node A live (the same
frames as A's own client, text deltas too), cancels it, answers its approval; node A, run as another machine
(its own host name, so that B cannot see its process), is killed with SIGKILL mid-run, and B resumes the
session once A's lease expired: the answer A was streaming is journaled once, its tool call not run again."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import MODEL, LoopbackModel, Node, Stream, call, home_with_config, start_node, subscribed, until

pytestmark = pytest.mark.slow

LEASE_TTL = 3.0


@pytest.fixture(params=["postgres", "sqlite"])
def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Node, Node, Path]]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("the node tests run node A as another host: they need unshare(1) and root")
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else f"sqlite:///{tmp_path / 't.db'}"
    if request.param == "postgres":
        from tether.store.postgres import PostgresStore

        if not hasattr(PostgresStore, "reserve_numbers"):  # runs number their live events from the store
            pytest.fail("PostgresStore does not implement the EventNumbers role (reserve_numbers) yet")
    workspace = tmp_path / "work"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("a\n")
    model = LoopbackModel(workspace)
    started: list[Node] = []
    try:
        for name in ("a", "b"):
            home = home_with_config(tmp_path / f"home-{name}", lease_ttl=LEASE_TTL)
            started.append(start_node(home, url, model.url, workers=1, hostname=f"node-{name}"))
        yield started[0], started[1], workspace
    finally:
        for node in started:
            node.stop()
        model.close()


async def watch(*nodes: Node, sid: str) -> list[Stream]:
    return await subscribed([n.url for n in nodes], sid)


async def test_two_nodes_on_one_store_behave_as_one_service(nodes: tuple[Node, Node, Path]) -> None:
    a, b, workspace = nodes
    sid = call(a.url, "POST", "/sessions", json={"directory": str(workspace)}).json()["session"]["id"]

    # B's client watches A's run live: the same frames as A's own client
    streams = await watch(a, b, sid=sid)
    r = call(a.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "say 30", "model": MODEL})
    assert r.status_code == 202, r.text
    await asyncio.wait_for(asyncio.gather(*(s.task for s in streams if s.task)), 60)
    here, there = streams
    assert there.frames == here.frames and there.types()[0] == "run_started" and there.types()[-1] == "done"
    assert there.types().count("text_delta") == 30

    # B answers the approval A's run waits on
    streams = await watch(a, b, sid=sid)
    r = call(a.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "edit it", "model": MODEL})
    assert r.status_code == 202, r.text
    await until(lambda: call(b.url, "GET", "/approvals").json()["approvals"], 60, "the request on node B")
    (waiting,) = call(b.url, "GET", "/approvals").json()["approvals"]
    assert waiting["call_id"] == "call_edit" and waiting["session_id"] == sid
    answer = {"approved": True, "scope": "once", "message": ""}
    assert call(b.url, "POST", f"/sessions/{sid}/approvals/call_edit", json=answer).status_code == 200
    await asyncio.wait_for(asyncio.gather(*(s.task for s in streams if s.task)), 60)
    assert streams[1].frames == streams[0].frames and streams[1].types()[-1] == "done", (
        streams[1].frames,
        streams[0].types(),
    )
    assert (workspace / "notes.txt").read_text() == "b\n"

    # B cancels A's run
    streams = await watch(a, b, sid=sid)
    r = call(a.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "hold on", "model": MODEL})
    assert r.status_code == 202, r.text
    await until(lambda: streams[1].types().count("text_delta") >= 3, 60, "A's answer streaming to B's client")
    assert call(b.url, "POST", f"/sessions/{sid}/cancel").json()["done"] is True
    await asyncio.wait_for(asyncio.gather(*(s.task for s in streams if s.task)), 60)
    for stream in streams:
        assert stream.frames[-1][1]["type"] == "error" and stream.frames[-1][1]["code"] == "cancelled"
    assert streams[1].frames == streams[0].frames, (streams[0].warmup, streams[1].warmup, streams[1].types()[:3])

    # A dies mid-run; B resumes the session once A's lease expired
    (workspace / "held.txt").unlink()
    streams = await watch(b, sid=sid)
    # the stream ends with the end of B's resumption (A's run, cut off, has none)
    r = call(a.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": "hold it", "model": MODEL})
    assert r.status_code == 202, r.text
    await until(lambda: streams[0].types().count("text_delta") >= 5, 60, "A's answer streaming")
    await asyncio.sleep(0.6)  # some of it saved in the stream record
    assert call(b.url, "GET", f"/sessions/{sid}").json()["lease"]["host"] == "node-a"
    os.kill(a.process.pid, signal.SIGKILL)
    killed = time.monotonic()
    a.process.wait(10)

    def resumed() -> bool:
        view = call(b.url, "GET", f"/sessions/{sid}").json()
        return (
            view["status"] == "idle"
            and view["lease"] is None
            and streams[0].task is not None
            and streams[0].task.done()
        )

    await until(resumed, 90, "node B to resume the session")
    assert time.monotonic() - killed >= LEASE_TTL * 0.5  # waited for the lease (not taken at once)
    starts = [e for _, e in streams[0].frames if e["type"] == "run_started"]
    assert [s.get("resumed", False) for s in starts] == [False, True] and streams[0].types()[-1] == "done", [
        (n, e["type"]) for n, e in streams[0].frames if e["type"] != "text_delta"
    ]
    entries = call(b.url, "GET", f"/sessions/{sid}/entries").json()["entries"]
    messages = [e["body"] for e in entries if e["body"].get("type", "message") == "message"]
    # the answer A was streaming, journaled as cut, then B's run going on with it (as `--continue` does)
    assert [m["role"] for m in messages[-5:]] == ["user", "assistant", "tool", "assistant", "assistant"]
    cut, went_on = messages[-2], messages[-1]
    assert cut["metadata"].get("interrupted") and cut["parts"][0]["text"].startswith("h0 h1")
    assert not went_on["metadata"].get("interrupted") and went_on.get("finish_reason") != "cancelled"
    assert (workspace / "held.txt").read_text() == "written once\n"
