"""Real servers on loopback for the provider tests: a small scripted HTTP server (canned statuses, error
bodies, SSE streams, hangs) that records every request it gets, and llama.cpp's OpenAI-compatible server
running SmolLM2 for the `local_model` tests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(autouse=True)
async def _providers_closed(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """Every OpenAI or Anthropic provider a test makes is closed after it, on the test's own event loop. One
    left open kept its SDK client until a garbage collection in some later test, whose `__del__` then closed it
    on that test's loop: "Task exception was never retrieved ... Event loop is closed", in whatever test
    happened to collect it."""
    from tether.providers.anthropic import AnthropicProvider
    from tether.providers.openai import OpenAIProvider

    made: list[OpenAIProvider | AnthropicProvider] = []
    for cls in (OpenAIProvider, AnthropicProvider):
        init = cls.__init__

        def recording(self: Any, *args: Any, _init: Any = init, **kwargs: Any) -> None:
            _init(self, *args, **kwargs)
            made.append(self)

        monkeypatch.setattr(cls, "__init__", recording)
    yield
    for provider in made:
        await provider.aclose()


@dataclass
class Reply:
    """One canned answer. `chunks` are written one by one (SSE), `chunk_delay` apart; `hang` holds the
    connection open without answering until the server closes (for timeouts)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: list[bytes] | None = None
    chunk_delay: float = 0.0
    hang: bool = False
    keep_alive: bool = False
    """For `chunks`: announce their length and keep the connection for the next request, as hosted APIs do
    (by default a stream ends by closing its connection)."""

    @classmethod
    def json(cls, status: int, data: Any, headers: dict[str, str] | None = None) -> Reply:
        return cls(status, {"content-type": "application/json", **(headers or {})}, json.dumps(data).encode())

    @classmethod
    def sse(cls, text: str, *, chunk_delay: float = 0.0, keep_alive: bool = False) -> Reply:
        """An SSE stream, one event (blank-line separated block) per write."""
        events = [block.strip("\n") + "\n\n" for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()]
        chunks = [e.encode() for e in events]
        return cls(
            200, {"content-type": "text/event-stream"}, chunks=chunks, chunk_delay=chunk_delay, keep_alive=keep_alive
        )


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: tuple[str, int] = ("", 0)
    """The client's address: one per connection (requests on one connection share it)."""

    def json(self) -> Any:
        return json.loads(self.body)


class LoopbackServer:
    """Answers requests with the queued replies, in order; records each request. After the queue runs out
    it answers 500, so a test that sends one request too many fails loudly."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Received] = []
        self.disconnected = threading.Event()
        self.closing = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                owner.requests.append(
                    Received(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        (str(self.client_address[0]), int(self.client_address[1])),
                    )
                )
                reply = owner.replies.pop(0) if owner.replies else Reply.json(500, {"error": "no reply queued"})
                if reply.hang:
                    owner.closing.wait(30)
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.chunks is None:
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                if reply.keep_alive:
                    self.send_header("content-length", str(sum(len(c) for c in reply.chunks)))
                else:
                    self.send_header("connection", "close")
                    self.close_connection = True
                self.end_headers()
                try:
                    for chunk in reply.chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        if reply.chunk_delay and owner.closing.wait(reply.chunk_delay):
                            return
                except (BrokenPipeError, ConnectionResetError):
                    owner.disconnected.set()

            do_GET = _serve
            do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    # Test modules cannot import from conftest (importlib import mode), so replies are queued through these.

    def answer_json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self.queue(Reply.json(status, data, headers))

    def answer_sse(self, text: str, *, chunk_delay: float = 0.0, keep_alive: bool = False) -> None:
        self.queue(Reply.sse(text, chunk_delay=chunk_delay, keep_alive=keep_alive))

    def answer_chunks(self, chunks: list[str], *, chunk_delay: float = 0.0) -> None:
        """A 200 event stream written as exactly these pieces, `chunk_delay` apart."""
        self.queue(
            Reply(
                200, {"content-type": "text/event-stream"}, chunks=[c.encode() for c in chunks], chunk_delay=chunk_delay
            )
        )

    def answer_hang(self) -> None:
        self.queue(Reply(hang=True))

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    s = LoopbackServer().start()
    try:
        yield s
    finally:
        s.close()


# --- llama.cpp's OpenAI-compatible server -------------------------------------------------------------


def smollm2_path() -> Path:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra: pip install 'tether[local]'")
    from tether.providers.local import find_model_path

    return find_model_path()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m llama_cpp.server`` with SmolLM2 on a free loopback port; yields its /v1 base URL."""
    model = smollm2_path()
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "smollm2-135m"),
                *("--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--verbose", "false"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not come up:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
