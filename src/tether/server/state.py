"""What the routes of a running server share (`ServerState`: the store, the manager, the settings, the
configuration, and whether it is stopping), kept apart from the app that makes it so that the routes do not
import the app."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from ..config import Config
from ..runtime.manager import SessionManager
from ..store import Store
from .settings import ServerSettings

IMPORT_PATH = "/sessions/import"


@dataclass
class ServerState:
    """What the routes share: the store, the manager, the settings and configuration, and `stopping`, set
    when the server begins to stop (event streams end then)."""

    store: Store
    manager: SessionManager
    settings: ServerSettings
    config: Config
    stopping: anyio.Event = field(default_factory=anyio.Event)

    async def stop(self) -> None:
        """Stop gracefully: no more prompts, the runs in progress get the grace period and are then cancelled
        (each keeps what it did), and the event streams end once the runs' last events went out."""
        await self.manager.shutdown(wait=self.settings.shutdown_grace)
        self.stopping.set()
