"""Real faults under a store, for the store's, doctor's and the CLI's tests (loaded by path, as `workers.py`
is): a database cut in half, garbage bytes, pages damaged in the middle of a table, a directory nothing can
be written to (root included), a file system that is full.

Tests run as root here, where chmod stops nothing. `read_only` makes a directory immutable (`chattr +i`)
when root and falls back to a read-only bind mount; others get chmod. `small_disk` runs a command in its
own user and mount namespace (`unshare -rm`) on a tmpfs of a few hundred kB, so the disk really fills and
no mount outlives the command."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import shutil
import sqlite3
import stat
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tether.messages import Message, Revert, ToolCallPart
from tether.store import SqliteStore
from tether.store.faults import unwritable


def build_database(path: Path, *, sessions: int = 12, messages: int = 40) -> list[str]:
    """A real tether database at `path`, closed (its WAL checkpointed into the file): `sessions` sessions of
    `messages` messages each, a tool call and a revert among them. Returns the session ids. Works from a
    test that runs in an event loop too (the store runs on its own thread's loop)."""

    async def fill() -> list[str]:
        ids = []
        async with SqliteStore(path) as store:
            for i in range(sessions):
                info = await store.create_session(directory=str(path.parent), title=f"session {i}")
                bodies = [
                    Message.user(f"question {i}.{j} about lighthouses " + "words " * 120) for j in range(messages - 2)
                ]
                bodies.append(Message.assistant("looking", tool_calls=[ToolCallPart(id="c1", name="read")]))
                bodies.append(Revert(to_seq=messages - 3))
                await store.append(info.id, bodies)
                ids.append(info.id)
            await store.search("lighthouses")  # the index holds them all
        return ids

    result: list[list[str]] = []
    thread = threading.Thread(target=lambda: result.append(asyncio.run(fill())))
    thread.start()
    thread.join()
    assert result, "building the database failed"
    return result[0]


def truncate(path: Path) -> None:
    """Cut the file to half its size, as a copy interrupted midway would leave it."""
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def garbage(path: Path, size: int = 64 * 1024) -> None:
    path.write_bytes(random.Random(7).randbytes(size))


def damage_pages(path: Path, table: str = "entries", count: int = 4) -> list[int]:
    """Overwrite `count` leaf pages from the middle of `table`'s b-tree with random bytes, leaving the header,
    the schema and every other table as they were: the file opens, and a query that reads those pages
    fails. Returns the page numbers."""
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = [
        n
        for (n,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (table,)
        )
    ]
    conn.close()
    assert len(pages) > count, f"{table} has too few pages to damage"
    middle = len(pages) // 2
    chosen = pages[middle : middle + count]
    rng = random.Random(11)
    with open(path, "r+b") as f:
        for n in chosen:
            f.seek((n - 1) * page_size)
            f.write(rng.randbytes(page_size))
    return chosen


INDEX_DAMAGE = ("garbled", "deleted", "pages", "bookkeeping")
"""The ways `damage_search_index` damages a store's search index, its journal left as it was."""


def damage_search_index(path: Path, how: str) -> None:
    """Damage the search index of the closed database at `path`, and nothing else: its FTS data blocks
    overwritten with random bytes (``garbled``) or half of them deleted (``deleted``), pages of its FTS data
    table overwritten (``pages``: the file then fails its integrity check), or its bookkeeping rows deleted
    (``bookkeeping``: sessions indexed without their rows)."""
    if how == "pages":
        damage_pages(path, table="search_fts_data", count=2)
        return
    conn = sqlite3.connect(path)
    with conn:
        if how == "garbled":
            conn.execute("UPDATE search_fts_data SET block = randomblob(length(block)) WHERE id > 10")
        elif how == "deleted":
            conn.execute("DELETE FROM search_fts_data WHERE id > 10 AND id % 2 = 0")
        elif how == "bookkeeping":
            conn.execute("DELETE FROM search_sessions WHERE num % 2 = 0")
        else:
            raise ValueError(how)
    conn.close()


def journal_rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the journal's own tables (everything but the search index), in order: what a rebuild of
    the index must leave exactly as it was."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'search%'"
                " AND name NOT LIKE 'sqlite%' ORDER BY name"
            )
        ]
        return {t: conn.execute(f'SELECT * FROM "{t}" ORDER BY 1, 2').fetchall() for t in tables}
    finally:
        conn.close()


def fingerprint(path: Path) -> tuple[bytes, int]:
    """The file's bytes and modification time: what a test compares to show nothing was written."""
    return path.read_bytes(), path.stat().st_mtime_ns


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[str]:
    """`directory` (or a file) made so that nothing can create, remove or write files in it, even as root;
    yields how. Skips the test, naming why, only when no way works here."""
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(stat.S_IRUSR | stat.S_IXUSR)
        try:
            yield "chmod 500"
        finally:
            directory.chmod(mode)
        return
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0:
        try:
            if directory.is_dir():
                assert unwritable(directory) is not None, "chattr +i did not stop root"
            yield "chattr +i"
        finally:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        return
    bind = ["mount", "--bind", str(directory), str(directory)]
    if subprocess.run(bind, capture_output=True).returncode == 0:
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], check=True)
            yield "a read-only bind mount"
        finally:
            subprocess.run(["umount", str(directory)], check=True)
        return
    pytest.skip("no way to make a directory read-only for root here (chattr +i and bind mounts both refused)")


@functools.cache
def can_use_small_disk() -> bool:
    """Whether `small_disk` works here: unprivileged user and mount namespaces with tmpfs."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d"],
        capture_output=True,
    )
    return probe.returncode == 0


def small_disk(directory: Path, size_kb: int, argv: Sequence[str], *, setup: str = "") -> list[str]:
    """`argv`, run with `directory` on a tmpfs of `size_kb` kB of its own (empty; `setup`, a shell line, runs
    first, in `directory`, e.g. to copy a database in and fill what is left)."""
    script = (
        f'mount -t tmpfs -o size={size_kb}k tmpfs "$0" && cd "$0" && {setup or "true"} && cd - >/dev/null && exec "$@"'
    )
    return ["unshare", "-rm", "sh", "-c", script, str(directory), *argv]


def needs_small_disk() -> None:
    if not can_use_small_disk():
        pytest.skip("no user and mount namespaces here (unshare -rm): a full disk cannot be made")
