"""Serving the app with uvicorn: bind, serve until told to stop (SIGINT, SIGTERM, or `should_exit`), then stop
gracefully through the manager: no more prompts, the runs in progress get `shutdown_grace` seconds and are
then cancelled (each keeps what it did and gives its lease back), the event streams end after the runs' last
events went out, and the store is closed."""

from __future__ import annotations

import gc
import logging
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI

from .app import create_app
from .settings import ServerSettings
from .state import ServerState
from .workers import load_shared, serve_workers

log = logging.getLogger("tether.server")


class TetherServer(uvicorn.Server):
    """uvicorn's server, which stops the runs before it waits for the connections to close (an event stream
    would otherwise hold it open until its own timeout)."""

    def __init__(
        self, app: FastAPI, settings: ServerSettings, *, ready: Callable[[], None] | None = None, **options: Any
    ) -> None:
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=int(max(settings.shutdown_grace * 2, 5)),
            **{"log_level": "warning", **options},
        )
        super().__init__(config)
        self.app = app
        self.ready = ready
        """Called once the server listens (not when it could not bind: it exits then)."""

    async def startup(self, sockets: Any = None) -> None:
        load_shared()  # before it listens (a worker has it from its supervisor already)
        await super().startup(sockets)
        # What the process holds once it is up (its modules, the app, the store's caches) lives as long as
        # it does: out of the collector's sight. Every full collection walked all of it with the whole server
        # stopped: 60-80 ms each, five in five seconds of fifty runs (bench/server.py); 20-50 ms without it.
        gc.collect()
        gc.freeze()
        if self.ready is not None:
            self.ready()

    async def shutdown(self, sockets: Any = None) -> None:
        state: ServerState | None = getattr(self.app.state, "tether", None)
        if state is not None:
            await state.stop()
        await super().shutdown(sockets)

    @property
    def port(self) -> int:
        """The port bound (the one the system chose, for port 0)."""
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self.config.port


def serve(
    settings: ServerSettings,
    *,
    store_url: str | None = None,
    workers: int = 1,
    make_app: Callable[[], FastAPI] | None = None,
    ready: Callable[[], None] | None = None,
    **options: Any,
) -> int:
    """Run the server until it is told to stop: in this thread, or with `workers` processes
    (`workers.Supervisor`; each builds its app with `make_app`, by default `create_app` over `store_url`).
    `ready` is called once it listens. Returns the exit status."""

    def app() -> FastAPI:
        return make_app() if make_app is not None else create_app(settings, store_url=store_url)

    if workers <= 1:
        TetherServer(app(), settings, ready=ready, **options).run()
        return 0

    def serve_one(sock: socket.socket) -> None:
        TetherServer(app(), settings, **options).run(sockets=[sock])

    return serve_workers(workers, settings.host, settings.port, serve_one, grace=settings.shutdown_grace, ready=ready)
