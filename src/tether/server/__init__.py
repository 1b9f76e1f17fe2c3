"""The HTTP face of tether: REST and Server-Sent Events over the runtime (`SessionManager`, the operations,
the store), with an OpenAPI document; `tether serve` runs it. Needs the `server` extra (FastAPI, uvicorn,
sse-starlette), imported only when a name below is used; `settings` imports none of it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import MissingExtra

if TYPE_CHECKING:
    from .app import create_app
    from .serving import TetherServer, serve
    from .settings import ServerSettings
    from .state import ServerState

_EXPORTS = {
    "create_app": "app",
    "ServerState": "state",
    "serve": "serving",
    "TetherServer": "serving",
    "ServerSettings": "settings",
}
__all__ = ["ServerSettings", "ServerState", "TetherServer", "create_app", "serve"]

_NEEDED = ("fastapi", "uvicorn", "sse_starlette")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module != "settings":
        for needed in _NEEDED:
            try:
                importlib.import_module(needed)
            except ImportError:
                raise MissingExtra("server", needed) from None
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
