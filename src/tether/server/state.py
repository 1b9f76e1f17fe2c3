"""What the routes of a running server share (`ServerState`: the store, the manager, the settings, the
configuration, and whether it is stopping), kept apart from the app that makes it so that the routes do not
import the app."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..runtime.manager import SessionManager
from ..runtime.mesh import Mesh
from ..runtime.sinks import SinkRunner
from ..store import Store
from .settings import ServerSettings

IMPORT_PATH = "/sessions/import"


@dataclass
class ServerState:
    """What the routes share: the store, the manager, the settings and configuration; `stopped` once
    `stop` ran."""

    store: Store
    manager: SessionManager
    settings: ServerSettings
    config: Config
    stopped: bool = False
    sinks: SinkRunner | None = None
    """The event sinks' followers, when `[[sinks]]` are configured."""
    mesh: Mesh | None = None
    """The other processes over the same store (workers, nodes), through its relay (`runtime/mesh.py`)."""

    async def stop(self) -> None:
        """Stop gracefully (once): no more prompts, the runs in progress get the grace period and are then
        cancelled (each keeps what it did), and the event streams end once the runs' last events went out
        (the manager's shutdown ends every subscription)."""
        if not self.stopped:
            self.stopped = True
            await self.manager.shutdown(wait=self.settings.shutdown_grace)
            if self.sinks is not None:
                await self.sinks.stop()
            if self.mesh is not None:
                await self.mesh.stop()
