"""Event sinks, with real parts: JSON-lines files (rotated), a webhook (an HTTP server on loopback), and the
S3 service of the tests (Ceph's RADOS Gateway): every durable event of every session delivered at least
once and in order per session, positions kept in the store so that a new runner (or a process killed with
SIGKILL and started again) resumes with no gap, a failing sink that catches up once it works again while
appends go on."""

from __future__ import annotations

import asyncio
import gzip
import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tether.config import Config, SinkConfig
from tether.events import durable_events
from tether.messages import Message, ToolCallPart, ToolResultPart
from tether.runtime.sinks import FileSink, S3Sink, SinkRunner, WebhookSink, lag
from tether.store import SqliteStore, Store
from tether.store.objects import Bucket


async def grow(store: Store, sid: str, turns: int) -> None:
    for i in range(turns):
        call = ToolCallPart(id=f"c{time.monotonic_ns()}", name="bash", arguments={"command": f"echo {i}"})
        await store.append(sid, [Message.user(f"q{i}"), Message.assistant(f"a{i}", tool_calls=[call])])
        await store.append(sid, [Message.tool(ToolResultPart(call_id=call.id, content=str(i)))])


async def expected(store: Store, sid: str) -> list[int]:
    return [e.n for entry in await store.read(sid) for e in durable_events(entry, sid)]


def delivered(lines: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in lines:
        out.setdefault(line["session_id"], []).append(line["n"])
    return out


def at_least_once_in_order(got: list[int], want: list[int]) -> None:
    """Every wanted number, in order; a repeat only re-delivers what came before (at least once)."""
    first: list[int] = []
    for n in got:
        if n not in first:
            assert not first or n > first[-1], f"{n} out of order after {first[-1]}"
            first.append(n)
    assert first == want


def read_files(folder: Path) -> list[dict[str, Any]]:
    files = [*sorted(folder.glob("events-*.jsonl")), folder / "events.jsonl"]
    return [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines()]


async def until_caught_up(runner: SinkRunner, name: str) -> None:
    state = runner.states[name]
    state.caught_up.clear()
    runner.poke()
    await asyncio.wait_for(state.caught_up.wait(), 60)


async def test_file_sink_delivers_everything_rotates_and_resumes(store: Store, tmp_path: Path) -> None:
    sids = [(await store.create_session(directory="/w")).id for _ in range(3)]
    for sid in sids:
        await grow(store, sid, 5)
    sink = FileSink("files", tmp_path / "out", max_bytes=4096)
    runner = SinkRunner(store, [sink], interval=0.05, batch=7)
    runner.start()
    await until_caught_up(runner, "files")
    await grow(store, sids[0], 3)
    await until_caught_up(runner, "files")
    await runner.stop()
    assert await store.sink_positions("files") == {sid: (await store.get_session(sid)).entry_count for sid in sids}
    # a new runner (a restart) goes on from the positions in the store: no gap, nothing twice
    for sid in sids:
        await grow(store, sid, 2)
    again = SinkRunner(store, [FileSink("files", tmp_path / "out", max_bytes=4096)], interval=0.05)
    again.start()
    await until_caught_up(again, "files")
    await again.stop()
    got = delivered(read_files(tmp_path / "out"))
    for sid in sids:
        want = await expected(store, sid)
        assert got[sid] == want  # a clean stop and start: exactly once
    assert len(list((tmp_path / "out").glob("events-*.jsonl"))) >= 2  # rotated
    line = read_files(tmp_path / "out")[0]
    assert set(line) == {"session_id", "seq", "at", "n", "event"} and line["event"]["type"]


class Hook(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []
    failing = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.failing.is_set():
            self.send_response(503)
        else:
            type(self).bodies.append(body)
            self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    Hook.bodies = []
    Hook.failing.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/events"
    server.shutdown()


async def test_a_failing_webhook_falls_behind_without_holding_appends_and_catches_up(store: Store, hook: str) -> None:
    sid = (await store.create_session()).id
    Hook.failing.set()
    runner = SinkRunner(store, [WebhookSink("hook", hook)], interval=0.02)
    runner.start()
    started = time.monotonic()
    await grow(store, sid, 20)  # appends go on at their own pace while the sink fails
    appending = time.monotonic() - started
    await asyncio.sleep(0.2)
    state = runner.states["hook"]
    assert state.error is not None and "503" in state.error and state.delivered == 0
    assert await store.sink_positions("hook") == {}
    assert appending < 30
    Hook.failing.clear()
    runner.poke()
    deadline = time.monotonic() + 60
    while state.delivered < len(await expected(store, sid)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await runner.stop()
    lines = [json.loads(x) for body in Hook.bodies for x in body.splitlines()]
    at_least_once_in_order(delivered(lines)[sid], await expected(store, sid))
    assert state.error is None


async def test_lag_is_reported_per_sink(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "t.db") as store:
        sid = (await store.create_session()).id
        await grow(store, sid, 2)
        config = Config(sinks=[SinkConfig(name="files", type="file", path=str(tmp_path / "o"))])
        before = await lag(store, config)
        assert before["files"]["entries_behind"] == 6 and before["files"]["sessions_behind"] == 1
        runner = SinkRunner(store, [FileSink("files", tmp_path / "o")], interval=0.05)
        runner.start()
        await until_caught_up(runner, "files")
        await runner.stop()
        after = await lag(store, config)
        assert after["files"] == {"type": "file", "entries_behind": 0, "sessions_behind": 0, "lag_seconds": 0.0}


async def test_positions_never_move_back(store: Store) -> None:
    await store.save_sink_positions("s", {"ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB": 5})
    await store.save_sink_positions("s", {"ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB": 3})
    assert await store.sink_positions("s") == {"ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB": 5}
    assert await store.sink_positions("other") == {}


# --- the S3 sink, killed with SIGKILL and started again --------------------------------------------------------

FOLLOWER = textwrap.dedent(
    """
    import asyncio, sys
    from tether.store import SqliteStore
    from tether.store.objects import Bucket, BucketConfig
    from tether.runtime.sinks import S3Sink, SinkRunner

    async def main(db, bucket, endpoint):
        async with SqliteStore(db) as store:
            runner = SinkRunner(store, [S3Sink("s3", Bucket(BucketConfig(bucket, "tether/", endpoint)))], interval=0.05, batch=50)
            runner.start()
            await asyncio.Event().wait()

    asyncio.run(main(*sys.argv[1:4]))
    """
)


def s3_lines(bucket: Bucket) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for key in bucket.list("tether/events/")
        for line in gzip.decompress(bucket.get(key)).splitlines()
    ]


async def test_the_s3_sink_resumes_after_kill_9_with_every_event_at_least_once_in_order(
    tmp_path: Path, s3: Bucket
) -> None:
    db = tmp_path / "t.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [sys.executable, "-c", FOLLOWER, str(db), s3.config.bucket, str(s3.config.endpoint_url)]
    async with SqliteStore(db) as store:
        sids = [(await store.create_session()).id for _ in range(4)]
        for sid in sids:
            await grow(store, sid, 10)
        follower = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not s3.list("tether/events/") and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            # appends go on while it delivers; then kill -9 in the middle of it
            for sid in sids:
                await grow(store, sid, 5)
            follower.send_signal(signal.SIGKILL)
            follower.wait(timeout=30)
            assert follower.returncode == -signal.SIGKILL
            for sid in sids:
                await grow(store, sid, 5)
            follower = subprocess.Popen(args, env=env, stderr=subprocess.PIPE)
            want = {sid: await expected(store, sid) for sid in sids}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                positions = await store.sink_positions("s3")
                counts = {sid: (await store.get_session(sid)).entry_count for sid in sids}
                if all(positions.get(sid) == counts[sid] for sid in sids):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the sink did not catch up: {await store.sink_positions('s3')}")
        finally:
            follower.kill()
            follower.wait(timeout=30)
    got = delivered(s3_lines(s3))
    for sid in sids:
        at_least_once_in_order(got[sid], want[sid])


def test_an_s3_sink_batch_is_one_gzip_object(s3: Bucket) -> None:
    from tether.runtime.sinks import Line

    S3Sink("s3", s3).write([Line("ses_x", 1, 1.0, b'{"a":1}'), Line("ses_x", 2, 2.0, b'{"a":2}')])
    (key,) = s3.list("tether/events/")
    assert key.endswith(".jsonl.gz") and gzip.decompress(s3.get(key)) == b'{"a":1}\n{"a":2}\n'
