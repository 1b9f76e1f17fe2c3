"""Importing as the tools write (`tether import --watch`): rounds of the same import, each one cheap when
nothing changed. A transcript file is imported again only when its size or modification time moved since the
round before (a stat per file); an opencode store is asked every round (it answers from one query per
database, or one listing per session folder). A line or message still being written is left by the importers
for a later round, so a round may run while the tools write."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..store.protocols import Journal
from .jsonl import FileResult, Problem
from .sources import import_path

__all__ = ["Watcher"]

Signature = tuple[int, int]


def _signature(path: Path) -> Signature | None:
    """What tells a file changed: (size, mtime in ns); for opencode's database, its write-ahead log's too."""
    try:
        st = path.stat()
    except OSError:
        return None
    size, mtime = st.st_size, st.st_mtime_ns
    if path.suffix == ".db":
        try:
            wal = os.stat(f"{path}-wal")
            size, mtime = size + wal.st_size, max(mtime, wal.st_mtime_ns)
        except OSError:
            pass
    return size, mtime


@dataclass
class Watcher:
    """Imports what `sources` lists (called anew each round: new files appear) whenever it changed.
    `sources` gives (path, format or None); `directory` and `since` are passed on to the import."""

    sources: Callable[[], Iterable[tuple[Path, str | None]]]
    directory: str | None = None
    since: float | None = None
    seen: dict[Path, Signature] = field(default_factory=dict)
    reported: set[tuple[str, int | None, str]] = field(default_factory=set)
    listed: int = 0  # how many sources the last round found

    async def round(self, store: Journal, stop: Callable[[], bool] = lambda: False) -> list[FileResult]:
        """One pass: the results of the files that changed (every file, the first time), until `stop` says
        so between two files. A file whose import failed is tried again next round; a problem already
        reported is left out of later results. opencode's stores are asked every round: a message left
        unfinished is imported once its session has been idle long enough, which no file change announces."""
        results: list[FileResult] = []
        sources = list(self.sources())
        self.listed = len(sources)
        for path, fmt in sources:
            if stop():
                break
            signature = _signature(path) if path.is_file() and fmt != "opencode" else None
            if signature is not None and self.seen.get(path) == signature:
                continue
            found = await import_path(store, str(path), fmt, directory=self.directory, since=self.since)
            failed = any(r.outcome == "failed" for r in found)
            if signature is not None and not failed:
                self.seen[path] = signature
            for result in found:
                result.problems = [p for p in result.problems if self._new(p)]
            results += found
        return results

    def _new(self, problem: Problem) -> bool:
        key = (problem.path, problem.line, problem.reason)
        if key in self.reported:
            return False
        self.reported.add(key)
        return True
