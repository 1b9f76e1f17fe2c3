"""Small files read at every run's start (a workspace's ``.tether/config.toml`` and ``.mcp.json``), parsed
once per version of the file: a `os.stat` tells whether it changed (its inode, size and modification time in
nanoseconds, as `linecache` and most build tools judge it), and only then is it read and parsed again. A
file that is missing costs the stat alone. What a parse raises is not kept: the next read tries again."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

MAX_FILES = 256
"""Versions kept at most (one per file and parser); past it the oldest is forgotten."""

_kept: dict[tuple[str, Callable[..., Any]], tuple[tuple[int, int, int], Any]] = {}


def parsed(path: Path, parse: Callable[[Path, bytes], T]) -> T | None:
    """`parse(path, its bytes)`, or the value it gave for this version of the file; None when there is no
    file there. An `OSError` other than a missing file (or a directory in the way) is raised, as reading
    would raise it."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    key = (os.fspath(path), parse)
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    kept = _kept.get(key)
    if kept is not None and kept[0] == stamp:
        return kept[1]  # type: ignore[no-any-return]
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None  # removed since the stat
    value = parse(path, raw)
    if len(_kept) >= MAX_FILES:
        del _kept[next(iter(_kept))]
    _kept[key] = (stamp, value)  # a change between the stat and the read shows at the next stat
    return value


def forget() -> None:
    """Drop every kept version (tests that rewrite a file within the clock's resolution)."""
    _kept.clear()
