"""Backfill: index the entries of a store written before the search index existed (the migration marks
them as backlog). Runs batch by batch, one transaction each, so memory stays bounded, appends go on
meanwhile, and an interrupted backfill resumes where it stopped."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..store.protocols import Store
from ..store.records import BackfillProgress, SessionInfo

ProgressFn = Callable[[BackfillProgress, float], None]
"""Called after each batch with the progress and the seconds since the start."""


async def backfill(store: Store, *, batch: int = 500, progress: ProgressFn | None = None) -> BackfillProgress:
    """Index the whole backlog; returns the final progress (entries_indexed 0: nothing was waiting)."""
    started = time.monotonic()
    last = BackfillProgress(sessions_done=0, sessions_left=0, entries_indexed=0, backlog=0)
    async for step in store.backfill_search(batch=batch):
        last = step
        if progress is not None:
            progress(step, time.monotonic() - started)
    return last


async def all_sessions(store: Store, directory: str | None = None) -> list[SessionInfo]:
    """Every session of the store (of one directory), page by page: what a side index of recall (turn keys,
    embeddings, facts) brings up to date."""
    infos: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(directory=directory, limit=1000, cursor=cursor)
        infos.extend(page.items)
        if page.next_cursor is None:
            return infos
        cursor = page.next_cursor
