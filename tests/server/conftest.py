"""A real tether server on loopback for the tests: uvicorn on an ephemeral port, in a thread of its own (its
own event loop, as in production), over a SQLite store, with a scripted model (`model`: a function of the
request) and test tools, so that runs are real runs. `served` starts one with the settings a test gives."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tether import Message, ToolCallPart
from tether.config import Config
from tether.providers.base import ModelRequest
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime.launch import RunRequest
from tether.runtime.manager import SessionManager
from tether.server import ServerSettings, TetherServer, create_app
from tether.server.state import ServerState
from tether.store import Store
from tether.tools.base import ToolRegistry, function_tool

GATES: dict[str, threading.Event] = {}
"""Gates a test opens to let a `wait_for` call finish (a run held mid-way, with no timing)."""


@function_tool(read_only=True)
async def look(what: str) -> str:
    """Look at something."""
    return f"{what} looks fine"


@function_tool(read_only=True)
async def wait_for(gate: str) -> str:
    """Wait until the test opens the gate."""
    event = GATES.setdefault(gate, threading.Event())
    while not event.is_set():
        await asyncio.sleep(0.01)
    return f"gate {gate} opened"


@function_tool
async def change(what: str) -> str:
    """Change something (not read-only: the default permission mode asks first)."""
    return f"changed {what}"


def asks(what: str) -> Callable[[ModelRequest], Message | str]:
    """A model that calls `change` once (which asks first), then says how it went."""

    def respond(request: ModelRequest) -> Message | str:
        last = request.messages[-1]
        if last.role == "user":
            return Message.assistant(tool_calls=[ToolCallPart(id="ch1", name="change", arguments={"what": what})])
        return f"result: {last.tool_results[0].content}"

    return respond


def tool_steps(n: int) -> Callable[[ModelRequest], Message | str]:
    """A model that calls `look` until it has `n` results since the last prompt, then answers."""

    def respond(request: ModelRequest) -> Message | str:
        since = 0
        for message in reversed(request.messages):
            if message.role == "user" and message.text:
                break
            since += message.role == "tool"
        if since >= n:
            return f"done after {since} looks: {request.messages[-1].text[:40]}"
        call = ToolCallPart(id=f"c{len(request.messages)}", name="look", arguments={"what": f"#{since}"})
        return Message.assistant(tool_calls=[call])

    return respond


def gated(gate: str) -> Callable[[ModelRequest], Message | str]:
    """A model that first waits at `gate` (a tool call), then answers what the last prompt said."""

    def respond(request: ModelRequest) -> Message | str:
        last = request.messages[-1]
        if last.role == "user":
            return Message.assistant(tool_calls=[ToolCallPart(id="g1", name="wait_for", arguments={"gate": gate})])
        prompts = [m.text for m in request.messages if m.role == "user"]
        return f"answered {prompts[-1]}"

    return respond


@dataclass
class Served:
    url: str
    settings: ServerSettings
    server: TetherServer
    workspace: Path
    provider: ScriptedProvider

    @property
    def state(self) -> ServerState:
        state: ServerState = self.server.app.state.tether
        return state

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    def call(self, coro: Any) -> Any:
        """Run a coroutine in the server's own event loop (to look at its store as it is)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]


@contextmanager
def serve(
    tmp_path: Path,
    model: Callable[[ModelRequest], Message | str] | None = None,
    settings: ServerSettings | None = None,
    config: Config | None = None,
) -> Iterator[Served]:
    provider = ScriptedProvider(model or (lambda r: f"answer to {r.messages[-1].text}"))
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)

    def resolve(name: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider, "test", unknown_model("scripted", "test"))

    def make_manager(opened: Store, config: Config) -> SessionManager:
        defaults = RunRequest(None, registry=ToolRegistry([look, wait_for, change]))
        return SessionManager(opened, config=config, defaults=defaults, resolve=resolve)

    settings = replace(settings or ServerSettings(), port=0)
    app = create_app(
        settings, config=config or Config(), make_manager=make_manager, store_url=str(tmp_path / "server.db")
    )
    server = TetherServer(app, settings)
    loop_box: list[asyncio.AbstractEventLoop] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop_box.append(loop)
        loop.run_until_complete(server.serve())
        left = asyncio.all_tasks(loop)  # sse-starlette's shutdown watcher outlives the server
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, name="tether-test-server", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the test server did not start")
        threading.Event().wait(0.01)
    served = Served(f"http://127.0.0.1:{server.port}", settings, server, workspace, provider)
    served.loop = loop_box[0]
    try:
        yield served
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        assert not thread.is_alive(), "the server did not stop"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    with serve(tmp_path) as served:
        yield served
