"""For the terminal tests at 80 columns: a real terminal (a tmux server of the test's own, 80 columns wide)
running `tether` in a home of the test's own, and a small OpenAI-compatible model on loopback that answers
every request with one streamed answer (no usage, as llama.cpp's server streams)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


class Terminal80:
    """An 80-column terminal. `run(*args)` runs `tether ARGS` in it (the home and store of the test) and
    returns the screen, its lines as the terminal shows them: a line longer than 80 columns is two."""

    def __init__(self, where: Path, home: Path) -> None:
        self.where = where
        self.home = home
        self.socket = str(where / "tmux80.sock")
        self._tmux("-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "200", "-s", "t", "sh")
        self._runs = 0

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def script(self, *lines: str) -> str:
        """Run shell `lines` in a fresh window and return its screen once they are done."""
        self._runs += 1
        done = f"__DONE{self._runs}__"
        script = self.where / f"t{self._runs}.sh"
        env = f"export TETHER_HOME='{self.home}' PYTHONPATH='{os.pathsep.join(sys.path)}'; unset COLUMNS LINES"
        script.write_text(f"{env}\ncd '{self.where}'\n" + "\n".join(lines) + f"\necho {done}\nexec sleep 600\n")
        window = f"t:{self._runs}"
        self._tmux("new-window", "-d", "-t", window, f"sh {script}")
        deadline = time.monotonic() + 120
        while True:
            screen = self._tmux("capture-pane", "-p", "-S", "-", "-t", window)
            if done in screen:
                return screen.split(done)[0]
            assert time.monotonic() < deadline, f"never done:\n{screen}"
            time.sleep(0.1)

    def run(self, *args: str) -> str:
        return self.script(" ".join([sys.executable, "-m", "tether", *(f"'{a}'" for a in args)]))

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def terminal80(tmp_path: Path) -> Iterator[Terminal80]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for the real-terminal tests: install it (apt-get install -y tmux)")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    term = Terminal80(tmp_path, home)
    try:
        yield term
    finally:
        term.close()


class OneAnswer:
    """An OpenAI-compatible chat-completions server on loopback: every request gets `text` streamed in words,
    ending with `finish` (``stop``; ``length`` for an answer cut by the output limit), and no usage."""

    def __init__(self, text: str, finish: str = "stop") -> None:
        self.text = text
        self.finish = finish
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                for chunk in owner.chunks():
                    self.wfile.write(chunk)
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def chunks(self) -> Iterator[bytes]:
        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            data["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
            return f"data: {json.dumps(data)}\n\n".encode()

        yield event({"role": "assistant", "content": ""})
        for word in self.text.split(" "):
            yield event({"content": word + " "})
        yield event({}, self.finish)
        yield b"data: [DONE]\n\n"

    def configure(self, home: Path) -> None:
        (home / "config.toml").write_text(
            f'default_model = "lab/m"\n[providers.lab]\nkind = "openai"\nbase_url = "{self.url}"\n'
        )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def cut_model() -> Iterator[OneAnswer]:
    """A model whose answer the output limit cuts."""
    server = OneAnswer("The parser drops the last line because the slice ends one short of", finish="length")
    try:
        yield server
    finally:
        server.close()
