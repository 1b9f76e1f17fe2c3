"""What the worker and node tests share: a loopback OpenAI-compatible model (a script of what a model would do,
over HTTP and SSE as OpenAI's API, its text streamed one word a delta at a pace the prompt sets), real `tether
serve` processes (`python -m tether serve`, each with its tether home), and event streams read over HTTP.

What the model answers, by the last user message:
- ``say N``: N words, a delta each, quickly;
- ``edit``: a call of the `edit` tool (which asks a person first), then, after its result, "edited";
- ``hold``: a call of `write` (allowed by the homes' config), then, after its result, 400 words at 20 a
  second (a run that is mid-answer for a long while); once an answer follows that result (a resumed run),
  "resumed"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2

SRC = Path(__file__).resolve().parents[2] / "src"
MODEL = "openai/gpt-4.1"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(body).encode() + b"\n\n"


_USAGE = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1", "choices": [],
          "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}  # fmt: skip


class LoopbackModel:
    """See the module docstring. `requests` are the request bodies it was sent, in order."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with model.lock:
                    model.requests.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                with contextlib.suppress(OSError):  # a killed worker hangs up mid-answer
                    for piece, pause in model.answer(body):
                        self.wfile.write(piece)
                        self.wfile.flush()
                        if pause:
                            time.sleep(pause)
                    self.wfile.write(_chunk({}, "stop") + b"data: " + json.dumps(_USAGE).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict[str, Any]) -> Iterator[tuple[bytes, float]]:
        messages = body["messages"]
        start = max(i for i, m in enumerate(messages) if m["role"] == "user")
        asked = str(messages[start]["content"])
        after = messages[start + 1 :]
        yield _chunk({"role": "assistant", "content": ""}), 0.0
        if asked.startswith("say "):
            for i in range(int(asked.split()[1])):
                yield _chunk({"content": f"w{i} "}), 0.002
            return
        if asked.startswith("edit"):
            if not any(m["role"] == "tool" for m in after):
                call = {
                    "name": "edit",
                    "arguments": json.dumps(
                        {"path": str(self.workspace / "notes.txt"), "old_string": "a", "new_string": "b"}
                    ),
                }
                yield _chunk({"tool_calls": [{"index": 0, "id": "call_edit", "type": "function", "function": call}]}), 0
                return
            yield _chunk({"content": "edited"}), 0.0
            return
        if asked.startswith("hold"):
            results = [i for i, m in enumerate(after) if m["role"] == "tool"]
            if not results:
                path = str(self.workspace / "held.txt")
                call = {"name": "write", "arguments": json.dumps({"path": path, "content": "written once\n"})}
                yield (
                    _chunk({"tool_calls": [{"index": 0, "id": "call_write", "type": "function", "function": call}]}),
                    0,
                )
                return
            if any(m["role"] == "assistant" for m in after[results[-1] + 1 :]):
                yield _chunk({"content": "resumed"}), 0.0
                return
            for i in range(400):
                yield _chunk({"content": f"h{i} "}), 0.05
            return
        yield _chunk({"content": "ok"}), 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def home_with_config(home: Path, *, lease_ttl: float | None = None) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    runtime = f"\n[runtime]\nlease_ttl = {lease_ttl}\n" if lease_ttl else ""
    (home / "config.toml").write_text(f'[permissions]\nallow = ["write"]\n{runtime}')
    return home


@dataclass
class Node:
    """A `tether serve` process."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path
    home: Path

    def workers(self) -> list[int]:
        """The worker processes (children of the supervisor), or the server itself with --workers 1."""
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            return []
        return [int(c) for c in children] or [self.process.pid]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for pid in self.workers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_node(
    home: Path, store_url: str, model_url: str, *, workers: int, port: int | None = None, hostname: str | None = None
) -> Node:
    """`tether serve` with this home, store and model; `hostname`: in a UTS namespace of its own with that host
    name (`unshare --uts`, as root), so that the other processes of this machine take it for another machine's
    (a lease it holds is waited out, not taken over because its process is seen gone)."""
    port = port or free_port()
    log = home / f"serve-{port}.log"
    env = {
        **{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TETHER_")},
        "TETHER_HOME": str(home),
        "PYTHONPATH": str(SRC),
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "sk-loopback-dummy-key",
    }
    command = [sys.executable, "-m", "tether", "--store", store_url, "serve", "--port", str(port)]
    command = [*command, "--workers", str(workers), "--grace", "1"]
    if hostname is not None:
        command = ["unshare", "--uts", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh", *command]
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    node = Node(f"http://127.0.0.1:{port}", process, log, home)
    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            raise AssertionError(f"tether serve ended: {log.read_text()[-3000:]}")
        up = 0
        with contextlib.suppress(httpx2.HTTPError):
            for _ in range(8):  # every worker answers (new connections spread over them)
                with httpx2.Client(base_url=node.url, timeout=5) as client:
                    up += client.get("/health").status_code == 200
        if up == 8 and len(node.workers()) == workers:
            return node
        if time.monotonic() > deadline:
            node.stop()
            raise AssertionError(f"tether serve did not start: {log.read_text()[-3000:]}")
        time.sleep(0.1)


def connections_of(pid: int, port: int) -> int:
    """Established TCP connections on local `port` that process `pid` holds (its sockets' inodes, found in
    /proc/net/tcp)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                parts = line.split()
                local_port = int(parts[1].rsplit(":", 1)[1], 16)
                if local_port == port and parts[3] == "01" and parts[9] in inodes:
                    count += 1
    return count


@dataclass
class Stream:
    """One event stream of a session, read over HTTP in a task: its frames as (id, event)."""

    url: str
    session_id: str
    after: int | None = None
    frames: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    warmup: list[tuple[int, str]] = field(default_factory=list)
    ends: int = 1
    """How many ends (done, error) of the session's own runs to read before it stops."""

    def start(self) -> Stream:
        self.task = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        headers = {} if self.after is None else {"Last-Event-ID": str(self.after)}
        ended = 0
        timeout = httpx2.Timeout(120, connect=10)
        async with (
            httpx2.AsyncClient(base_url=self.url, timeout=timeout) as client,
            client.stream("GET", f"/sessions/{self.session_id}/events", headers=headers) as r,
        ):
            assert r.status_code == 200
            self.connected.set()
            event_id: int | None = None
            began = False  # the end of a run that began before this stream came is not one it waits for
            async for line in r.aiter_lines():
                if line.startswith("id:"):
                    event_id = int(line[3:].strip())
                elif line.startswith("data:") and event_id is not None:
                    event = json.loads(line[5:])
                    self.frames.append((event_id, event))
                    began = began or event["type"] == "run_started"
                    if began and event["type"] in ("done", "error") and event["session_id"] == self.session_id:
                        ended += 1
                        if ended >= self.ends:
                            return

    def types(self) -> list[str]:
        return [e["type"] for _, e in self.frames]


def call(url: str, method: str, path: str, **kwargs: object) -> httpx2.Response:
    """One request on a connection of its own (which the kernel gives to any worker of a node)."""
    with httpx2.Client(base_url=url, timeout=30) as client:
        return client.request(method, path, **kwargs)  # type: ignore[arg-type]


async def until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):  # type: ignore[arg-type]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def subscribed(urls: list[str], sid: str) -> list[Stream]:
    """A stream of the session on each of `urls`, each one subscribed for sure: a short run first (on the
    first URL), which they all see end; its frames are then dropped. Each stream stops at the end of the
    next run of the session."""
    streams = [Stream(url, sid, ends=2).start() for url in urls]
    await asyncio.wait_for(asyncio.gather(*(s.connected.wait() for s in streams)), 60)
    r = call(urls[0], "POST", f"/sessions/{sid}/prompt", json={"prompt": "say 1", "model": MODEL})
    assert r.status_code == 202, r.text
    await until(lambda: all("done" in s.types() for s in streams), 90, "the streams to be subscribed")
    for stream in streams:
        stream.warmup = [(n, e["type"]) for n, e in stream.frames]
        stream.frames.clear()
    return streams
