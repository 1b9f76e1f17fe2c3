"""Storage: the `Store` protocol and its backends, and `open_store`, which picks one from a URL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from .base import UNSET, Durability, Page, SessionInfo, Store, active_entries, active_tail
from .memory import MemoryStore
from .sqlite import SqliteStore

__all__ = [
    "UNSET",
    "MemoryStore",
    "Page",
    "SessionInfo",
    "SqliteStore",
    "Store",
    "active_entries",
    "active_tail",
    "default_store_url",
    "open_store",
    "tether_home",
]


def tether_home() -> Path:
    """Where tether keeps its data: `TETHER_HOME`, else the user data directory (platformdirs)."""
    env = os.environ.get("TETHER_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("tether", appauthor=False))


def default_store_url() -> str:
    """`TETHER_STORE` if set, else the SQLite file `tether.db` under `tether_home()`."""
    return os.environ.get("TETHER_STORE") or f"sqlite:///{tether_home() / 'tether.db'}"


def open_store(url: str | None = None, *, durability: Durability | None = None, **options: Any) -> Store:
    """Open a store from a URL: ``sqlite:///path/to.db`` (the default, see `default_store_url`),
    ``memory://``, or a plain file path. Use it as ``async with open_store() as store:`` or close it."""
    url = url or default_store_url()
    dur: Durability = durability or os.environ.get("TETHER_DURABILITY", "normal")  # type: ignore[assignment]
    if url.startswith("memory:"):
        return MemoryStore()
    if url.startswith("sqlite:"):
        path = url[len("sqlite:") :]
        if path.startswith("///"):
            path = "/" + path.lstrip("/")  # sqlite:////abs/x.db (what default_store_url makes) is /abs/x.db
        elif path.startswith("//"):
            raise InvalidInput(f"sqlite URLs look like sqlite:///path/to.db, not {url!r}")
        if not path or path == "/":
            raise InvalidInput(f"no file path in {url!r}")
        return SqliteStore(os.path.expanduser(path), durability=dur, **options)
    if url.startswith(("postgres://", "postgresql://")):
        raise InvalidInput("PostgreSQL is not supported yet; use sqlite:///path or memory://")
    if "://" in url:
        raise InvalidInput(f"unknown store URL scheme in {url!r}; use sqlite:///path or memory://")
    return SqliteStore(os.path.expanduser(url), durability=dur, **options)
