"""Child processes for the crash and concurrency tests, run as `python workers.py <role> ...` on a store named
by a file path (SQLite) or a ``postgresql://`` URL.

Every line a worker writes to stdout is one whole `os.write` (atomic on a pipe), so a parent that kills it
with SIGKILL reads only lines that were finished: each one an acknowledgement of a committed append. The
entries' content is a pure function of (session, seq, batch), so a parent can check every stored byte."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from decimal import Decimal

from tether.errors import InvalidInput, SeqConflict
from tether.messages import EntryBody, Marker, Message, TextPart, Usage
from tether.store import open_store
from tether.store.records import Durability


def emit(line: str) -> None:
    os.write(1, (line + "\n").encode())


def crash_body(sid: str, seq: int, first: int, last: int) -> EntryBody:
    """The entry that the crash writer puts at `seq` of `sid`, in the batch `first..last`."""
    tag = f"{sid}:{seq}:{first}-{last}"
    if seq % 7 == 0:
        return Marker(name="tick", data={"tag": tag, "pad": "p" * (seq % 13)})
    return Message(
        role="user" if seq % 2 else "assistant",
        parts=[TextPart(text=tag + " " + "x" * (seq % 40 * 25))],
        usage=Usage(input_tokens=seq, output_tokens=2 * seq, cost=Decimal(seq) / 1_000_000),
    )


async def crash_writer(db: str, durability: Durability, seed: int) -> None:
    """Append forever to a handful of sessions (sometimes starting a new one), reporting each commit."""
    rng = random.Random(seed)
    store = open_store(db, durability=durability)  # a file path, or a postgresql:// URL
    next_seq: dict[str, int] = {}
    cursor = None
    while True:  # pick up where the previous (killed) writer left off
        page = await store.list_sessions(limit=500, cursor=cursor)
        next_seq.update((s.id, s.entry_count + 1) for s in page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    emit("ready")
    while True:
        if not next_seq or rng.random() < 0.02:
            info = await store.create_session(directory="/crash", metadata={"seed": seed})
            emit(f"S {info.id}")
            next_seq[info.id] = 1
        sid = rng.choice(sorted(next_seq))
        first = next_seq[sid]
        last = first + rng.choice([1, 1, 1, 2, 3, 6]) - 1
        bodies = [crash_body(sid, seq, first, last) for seq in range(first, last + 1)]
        await store.append(sid, bodies, expect_seq=first)
        next_seq[sid] = last + 1
        emit(f"A {sid} {first} {last}")


async def concurrent_writer(db: str, sid: str, tag: str, count: int, shared: bool) -> None:
    """Append `count` batches to `sid`. Shared writers race another process for the same session: they
    state the seq they expect and, on `SeqConflict`, re-read the tail and try again."""
    rng = random.Random(tag)
    store = open_store(db)
    emit("ready")
    sys.stdin.readline()  # the start signal: every writer begins at once
    try:
        await store.create_session(id=sid, directory="/concurrency")
    except InvalidInput as e:
        if not shared or "already exists" not in str(e):
            raise
    acked: list[list[int]] = []
    conflicts = 0
    for i in range(count):
        bodies: list[EntryBody] = [Message.user(f"{tag}:{i}:{j}") for j in range(rng.choice([1, 1, 2]))]
        if not shared:
            entries = await store.append(sid, bodies)
        else:
            while True:
                tail = await store.tail(sid, 1)
                expect = tail[-1].seq + 1 if tail else 1
                await asyncio.sleep(rng.random() * 0.002)  # the work between reading and writing (a model call)
                try:
                    entries = await store.append(sid, bodies, expect_seq=expect)
                    break
                except SeqConflict as e:
                    assert e.expected == expect and e.actual > expect, e
                    conflicts += 1
        acked.append([entries[0].seq, entries[-1].seq])
    await store.close()
    emit(json.dumps({"tag": tag, "acked": acked, "conflicts": conflicts}))


def main(argv: list[str]) -> None:
    role, *args = argv
    if role == "crash":
        db, durability, seed = args
        asyncio.run(crash_writer(db, durability, int(seed)))  # type: ignore[arg-type]
    elif role == "concurrent":
        db, sid, tag, count, mode = args
        asyncio.run(concurrent_writer(db, sid, tag, int(count), mode == "shared"))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
