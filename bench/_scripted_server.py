"""`tether serve` with the scripted model, for bench/server.py: the same app (`tether.server.create_app`) and
the same server (`TetherServer`: uvicorn, graceful stop through the manager) that `tether serve` runs, in a
process of its own, on a loopback port, over a SQLite store; only the model differs. `tether serve` resolves
its model from the configuration, and no configuration selects the scripted provider (it is a test double,
not something a user serves), so this script builds the manager as tests/server/conftest.py does.

    python bench/_scripted_server.py --store PATH --workspace DIR [--port 0] [--latency-ms 2] [--no-pacing]
                                     [--workers N]

Prints ``listening http://127.0.0.1:PORT pid PID`` once it accepts connections; SIGINT or SIGTERM stop it.

The model answers a prompt that says ``steps=N size=S chunk=C`` (defaults 10, 0 and `--chunk`) with N model
calls: N - 1 calls of the read-only tool `noop`, each beside S bytes of text, then a final answer of S bytes
(at least a short sentence); text streams in deltas of C characters. Each model call first waits
`--latency-ms` (the model's own time, an `asyncio.sleep`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

from tether import Message, ToolCallPart
from tether.config import Config
from tether.providers.base import ModelRequest, StreamEvent
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime.launch import RunRequest
from tether.runtime.manager import SessionManager
from tether.server import ServerSettings, TetherServer, create_app
from tether.store import Store
from tether.tools.base import ToolRegistry, function_tool

_ASK = re.compile(r"steps=(\d+)(?:\s+size=(\d+))?(?:\s+chunk=(\d+))?")
_FILLER = "the quick brown fox jumps over the lazy dog; "


@function_tool(read_only=True)
async def noop(n: int) -> str:
    """Does nothing."""
    return "ok"


def _asked(request: ModelRequest) -> re.Match[str] | None:
    prompt = next((m.text for m in reversed(request.messages) if m.role == "user" and m.text), "")
    return _ASK.search(prompt)


def respond(request: ModelRequest) -> Message:
    asked = _asked(request)
    steps = int(asked.group(1)) if asked else 10
    size = int(asked.group(2) or 0) if asked else 0
    since = 0
    for message in reversed(request.messages):
        if message.role == "user" and message.text:
            break
        since += message.role == "tool"
    text = (_FILLER * (size // len(_FILLER) + 1))[:size]
    if since >= steps - 1:
        return Message.assistant(text or f"done after {since} calls")
    n = len(request.messages)
    call = ToolCallPart(id=f"c{n}", name="noop", arguments={"n": n})
    return Message.assistant(text, tool_calls=[call]) if text else Message.assistant(tool_calls=[call])


class SlowModel:
    """The scripted model behind a fixed latency (the model's own time)."""

    def __init__(self, latency: float, chunk: int) -> None:
        self.chunk = chunk
        self.by_chunk: dict[int, ScriptedProvider] = {}
        self.name = "scripted"
        self.latency = latency

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self.latency:
            await asyncio.sleep(self.latency)
        asked = _asked(request)
        chunk = int(asked.group(3)) if asked and asked.group(3) else self.chunk
        inner = self.by_chunk.setdefault(chunk, ScriptedProvider(respond, chunk_size=max(1, chunk)))
        events = inner.stream(request)
        inner.requests.clear()  # the script keeps every request: not the server's memory
        async for event in events:
            yield event


class Server(TetherServer):
    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        print(f"listening http://127.0.0.1:{self.port} pid {os.getpid()}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the SQLite file")
    parser.add_argument("--workspace", required=True, help="the runs' directory")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--no-pacing", action="store_true", help="runs do not take turns (the pacing's baseline)")
    parser.add_argument("--chunk", type=int, default=32, help="characters per text delta (default 32)")
    parser.add_argument("--workers", type=int, default=1, help="server processes, as `tether serve --workers`")
    args = parser.parse_args(argv)
    model = SlowModel(args.latency_ms / 1000, args.chunk)

    def resolve(name: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(model, "bench", unknown_model("scripted", "bench"))

    def make_manager(opened: Store, config: Config) -> SessionManager:
        defaults = RunRequest(None, directory=args.workspace, registry=ToolRegistry([noop]))
        return SessionManager(opened, config=config, defaults=defaults, resolve=resolve, pace=not args.no_pacing)

    if args.workers > 1:  # tether serve's supervisor: a process per worker, each with its app and server
        from tether.server.workers import Supervisor, bind

        port = args.port or bind("127.0.0.1", 0, listen=False).getsockname()[1]
        settings = ServerSettings(port=port)

        def serve_one(sock: Any) -> None:
            app = create_app(settings, config=Config(), make_manager=make_manager, store_url=args.store)
            Server(app, settings).run(sockets=[sock])

        supervisor = Supervisor("127.0.0.1", port, args.workers, serve_one)
        print(f"supervisor of {args.workers} workers on http://127.0.0.1:{port} pid {os.getpid()}", flush=True)
        sys.exit(supervisor.run(grace=settings.shutdown_grace))
    settings = ServerSettings(port=args.port, relay=not os.environ.get("NORELAY"))
    app = create_app(settings, config=Config(), make_manager=make_manager, store_url=args.store)
    Server(app, settings).run()
    sys.exit(0)


if __name__ == "__main__":
    main()
