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


async def changes_since(store: Store, position: int) -> tuple[list[SessionInfo], list[str], int]:
    """The sessions written and the ids of those deleted since `position` (0: every session), read page by
    page from the store's change cursor (`SessionChanges`), and the position to ask from next time: what a
    side index of recall brings up to date, at the cost of what changed. A session written again while the
    pages were read comes once, as its latest row."""
    written: dict[str, SessionInfo] = {}
    deleted: dict[str, None] = {}
    while True:
        page = await store.changed_sessions(position, limit=1000)
        for info in page.sessions:
            written[info.id] = info
            deleted.pop(info.id, None)
        for sid in page.deleted:
            written.pop(sid, None)
            deleted[sid] = None
        position = page.position
        if not page.more:
            return list(written.values()), list(deleted), position


def side_path(store: Store, suffix: str) -> str:
    """Where a side file of recall (``.keys``, ``.vectors``, ``.facts``) lives for `store`: beside its SQLite
    file; in memory for other stores (a PostgreSQL store keeps these in its own tables: `pgkeys.py`,
    `pgvectors.py`, `pgfacts.py`)."""
    path = getattr(store, "path", None)
    if isinstance(path, str) and path != ":memory:":
        return path + suffix
    return ":memory:"
