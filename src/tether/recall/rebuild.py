"""Rebuilding what search and recall derive from the journal, which is the truth: the store's own search
index (a SQLite store's `reset_search`, then the backfill) and recall's turn keys beside it (`keys.py`). For a
damaged index over a sound journal (`tether doctor --repair`, `tether recall --rebuild`); nothing of the
journal is written. The semantic vectors and the model-written facts are left alone: the first is made
again by the next `--semantic` recall once its file is gone, the second costs model calls."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable

import msgspec

from ..store.protocols import Store
from .backfill import ProgressFn, backfill
from .engine import forget_default_keys
from .keys import KeyIndex, TurnKeys, default_key_path
from .pgkeys import PgKeyIndex, is_postgres


class Rebuilt(msgspec.Struct, kw_only=True):
    """What a rebuild did: entries indexed again by the store's search index (0 for a store that keeps none
    apart from its journal), and entries read into the turn keys, which were made anew when their file
    could not be reset in place (`keys_remade`)."""

    entries_indexed: int
    keys_read: int
    keys_remade: bool


async def rebuild_indexes(
    store: Store, *, progress: ProgressFn | None = None, keys_progress: Callable[[int], None] | None = None
) -> Rebuilt:
    """The search index and the turn keys of `store` made again from its journal, with progress for each.
    A journal that is itself damaged is `StoreCorrupt`, and nothing is changed."""
    reset = getattr(store, "reset_search", None)  # a store with a derived index of its own (SQLite)
    if reset is not None:
        await reset()
    done = await backfill(store, progress=progress)
    read, remade = await rebuild_keys(store, progress=keys_progress)
    return Rebuilt(entries_indexed=done.entries_indexed, keys_read=read, keys_remade=remade)


async def rebuild_keys(store: Store, *, progress: Callable[[int], None] | None = None) -> tuple[int, bool]:
    """Recall's turn keys made again from the journal: emptied in place (another process that has the file
    open goes on with it), or, when the file cannot be read or emptied, deleted and made anew (a PostgreSQL
    store's tables: emptied). Returns the entries read and whether the file was made anew."""
    forget_default_keys(store)
    if is_postgres(store):
        tables = PgKeyIndex(store)
        await tables.reset()
        return await _read_keys(store, tables, progress), False
    path = default_key_path(store)
    remade = False
    try:
        index = KeyIndex(path)
        try:
            index.reset()
        except BaseException:
            index.close()
            raise
    except sqlite3.Error:
        if path == ":memory:":
            raise
        for name in (path, path + "-wal", path + "-shm"):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
        index = KeyIndex(path)
        remade = True
    try:
        return await _read_keys(store, index, progress), remade
    finally:
        index.close()


async def _read_keys(store: Store, index: TurnKeys, progress: Callable[[int], None] | None) -> int:
    """Every entry of `store` read into `index`; returns how many."""
    read = 0

    def counted(n: int) -> None:
        nonlocal read
        read = n
        if progress is not None:
            progress(n)

    await index.sync(store, limit=1 << 62, progress=counted)
    return read
