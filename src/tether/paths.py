"""Where tether keeps things: its home (`TETHER_HOME`, else the user data directory), the configuration file
and the default store inside it, and the canonical form of a workspace path. Reads the environment only."""

from __future__ import annotations

import functools
import os
from pathlib import Path


def tether_home() -> Path:
    """Where tether keeps its data: `TETHER_HOME`, else the user data directory (platformdirs)."""
    env = os.environ.get("TETHER_HOME")
    if env:
        return Path(env).expanduser()
    return _user_data_dir(os.environ.get("XDG_DATA_HOME"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _user_data_dir(xdg_data_home: str | None, home: str | None) -> Path:
    """platformdirs' answer for the variables it reads (asked at every run's start: a tenth of a millisecond
    each time)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("tether", appauthor=False))


def config_path() -> Path:
    """`TETHER_CONFIG` if set, else `config.toml` under `tether_home()`."""
    env = os.environ.get("TETHER_CONFIG")
    return Path(env) if env else tether_home() / "config.toml"


def default_store_url() -> str:
    """`TETHER_STORE` if set, else the SQLite file `tether.db` under `tether_home()`."""
    return os.environ.get("TETHER_STORE") or f"sqlite:///{tether_home() / 'tether.db'}"


def canonical_directory(directory: str | os.PathLike[str] | None = None) -> str:
    """The canonical workspace path (absolute, symlinks resolved) that sessions are filed under; None is the
    current directory."""
    return os.path.realpath(os.path.expanduser(os.fspath(directory if directory is not None else os.getcwd())))
