"""Storage: the store's protocols by role (`protocols`), its records, shared validation, revert semantics,
the backends (`sqlite`, `memory`, `postgres`), and `open_store`, which picks a backend from a URL and
imports only that one."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, MissingExtra
from ..paths import default_store_url
from .protocols import Artifacts, Journal, Leases, SearchIndex, Shares, Store, Streams
from .records import (
    UNSET,
    Durability,
    Lease,
    Page,
    RevertSpan,
    SearchHit,
    SessionInfo,
    SessionState,
    Share,
    StreamRecord,
)
from .reverts import active_entries, active_tail, hidden_spans, is_hidden

if TYPE_CHECKING:
    from .memory import MemoryStore
    from .relay import Relay
    from .sqlite import SqliteStore

__all__ = [
    "UNSET",
    "Artifacts",
    "Durability",
    "Journal",
    "Lease",
    "Leases",
    "MemoryStore",
    "Page",
    "RevertSpan",
    "SearchHit",
    "SearchIndex",
    "SessionInfo",
    "SessionState",
    "Share",
    "Shares",
    "SqliteStore",
    "Store",
    "StreamRecord",
    "Streams",
    "active_entries",
    "active_tail",
    "hidden_spans",
    "is_hidden",
    "open_relay",
    "open_store",
    "store_path",
]

BACKENDS: dict[str, tuple[str, str, str | None]] = {
    # URL scheme: (module, class, the extra that installs what it needs; None: nothing beyond tether)
    "sqlite": ("tether.store.sqlite", "SqliteStore", None),
    "memory": ("tether.store.memory", "MemoryStore", None),
    "postgresql": ("tether.store.postgres", "PostgresStore", "postgres"),
    "postgres": ("tether.store.postgres", "PostgresStore", "postgres"),
}
"""Where each backend lives. A backend is imported only when a URL names it."""

_LAZY = {"SqliteStore": "tether.store.sqlite", "MemoryStore": "tether.store.memory"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _backend(scheme: str) -> Any:
    module_name, class_name, extra = BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InvalidInput(
                f"the {scheme} backend is not part of this version of tether (it will come as the extra "
                f"tether[{extra}]); use sqlite:///path or memory://"
            ) from None
        if extra is not None and exc.name is not None and not exc.name.startswith("tether"):
            raise MissingExtra(extra, exc.name) from exc
        raise
    return getattr(module, class_name)


def store_path(url: str | None = None) -> str | None:
    """The database file a store URL names (``sqlite:///path/to.db`` or a plain path; the default URL when
    None), or None for a store that is not a file (``memory://``, ``postgresql://``...)."""
    url = url or default_store_url()
    if url.startswith("memory:"):
        return None
    if url.startswith("sqlite:"):
        path = url[len("sqlite:") :]
        if path.startswith("///"):
            path = "/" + path.lstrip("/")  # sqlite:////abs/x.db (what default_store_url makes) is /abs/x.db
        elif path.startswith("//"):
            raise InvalidInput(f"sqlite URLs look like sqlite:///path/to.db, not {url!r}")
        if not path or path == "/":
            raise InvalidInput(f"no file path in {url!r}")
        return os.path.expanduser(path)
    if "://" in url:
        return None
    return os.path.expanduser(url)


def open_store(url: str | None = None, *, durability: Durability | None = None, **options: Any) -> Store:
    """Open a store from a URL: ``sqlite:///path/to.db`` (the default, see `tether.paths.default_store_url`),
    ``memory://``, or a plain file path. Use it as ``async with open_store() as store:`` or close it."""
    url = url or default_store_url()
    dur: Durability = durability or os.environ.get("TETHER_DURABILITY", "normal")  # type: ignore[assignment]
    if url.startswith("memory:"):
        return _backend("memory")()  # type: ignore[no-any-return]
    path = store_path(url)
    if path is not None:
        return _backend("sqlite")(path, durability=dur, **options)  # type: ignore[no-any-return]
    scheme = url.partition("://")[0]
    if scheme in BACKENDS:
        return _backend(scheme)(url, durability=dur, **options)  # type: ignore[no-any-return]
    raise InvalidInput(f"unknown store URL scheme in {url!r}; use sqlite:///path or memory://")


def open_relay(store: object) -> Relay | None:
    """The relay of `store`'s backend: a SQLite file's side file, a PostgreSQL database's tables; None for a
    store no other process can reach (memory)."""
    path = getattr(store, "path", None)
    if isinstance(path, str) and path and path != ":memory:" and type(store).__name__ == "SqliteStore":
        from .relay import SqliteRelay, relay_path

        return SqliteRelay(relay_path(path))
    url = getattr(store, "url", None) or getattr(store, "dsn", None)
    if isinstance(url, str) and url.startswith(("postgresql:", "postgres:")):
        from .pgrelay import PgRelay

        return PgRelay(url)
    return None
