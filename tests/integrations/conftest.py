"""The loopback OpenAI-compatible server the integration tests run real agents against: bench/_openai_stub.py
(stdlib only), in a thread of the test process. It answers every even-numbered user turn with a call to the
first tool the request offers, and with a short text otherwise."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

import tether

ROOT = Path(__file__).resolve().parents[2]


def _stub_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_openai_stub", ROOT / "bench" / "_openai_stub.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a stub server that lives for the module's tests."""
    stub = _stub_module()
    server = stub.make_server(stub.Answers())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


Cli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def cli() -> Cli:
    """``cli(*args, store=PATH)``: `tether ARGS` in a fresh process on the store file PATH, as a user runs it."""

    def run(*args: str, store: Path) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "TETHER_STORE": f"sqlite:///{store}",
            "PYTHONPATH": str(Path(tether.__file__).resolve().parents[1]),
        }
        return subprocess.run(
            [sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=120, env=env, check=False
        )

    return run
