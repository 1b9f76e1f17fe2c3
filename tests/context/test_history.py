"""load_context_history: reads from the latest active compaction's kept start to the end, with the active
history's rules (reverted spans hidden), on every backend; and reads no more than that."""

from __future__ import annotations

from tether.context.history import load_context_history
from tether.messages import Compaction, Entry, Message
from tether.session import Session
from tether.store import Store, active_entries


async def _session(store: Store, n: int) -> Session:
    session = await Session.create(store, directory="/tmp/w")
    await session.append(*[Message.user(f"m{i}") for i in range(1, n + 1)])
    return session


def _seqs(entries: list[Entry]) -> list[int]:
    return [e.seq for e in entries]


async def test_without_compaction_it_is_the_active_history(store: Store) -> None:
    session = await _session(store, 10)
    await session.revert(6)  # 11 hides 7-10
    await session.append(Message.user("after"))  # 12
    loaded = await load_context_history(store, session.id, chunk=3)
    assert _seqs(loaded) == _seqs(await active_entries(store, session.id)) == [1, 2, 3, 4, 5, 6, 12]


async def test_it_starts_at_the_kept_start_of_the_latest_compaction(store: Store) -> None:
    session = await _session(store, 600)
    await session.append(Compaction(summary="S1", first_kept_seq=200))  # 601
    await session.append(*[Message.user(f"n{i}") for i in range(100)])  # 602-701
    await session.append(Compaction(summary="S2", first_kept_seq=650))  # 702
    await session.append(Message.user("last"))  # 703
    loaded = await load_context_history(store, session.id, chunk=16)
    assert _seqs(loaded) == list(range(650, 704))
    assert isinstance(loaded[-2].body, Compaction) and loaded[-2].body.summary == "S2"


async def test_an_undone_compaction_is_not_met(store: Store) -> None:
    session = await _session(store, 20)
    await session.append(Compaction(summary="S1", first_kept_seq=5))  # 21
    await session.append(Message.user("x"))  # 22
    await session.append(Compaction(summary="S2", first_kept_seq=18))  # 23
    await session.revert(22)  # 24: undo S2
    loaded = await load_context_history(store, session.id, chunk=4)
    assert _seqs(loaded) == [*range(5, 23)]
    assert isinstance(loaded[-2].body, Compaction) and loaded[-2].body.summary == "S1"


async def test_reads_are_bounded_by_the_tail(store: Store) -> None:
    session = await _session(store, 5_000)
    await session.append(Compaction(summary="S", first_kept_seq=4_990))  # 5001
    await session.append(Message.user("y"))  # 5002

    reads: list[tuple[int, int | None]] = []
    original = store.read

    async def counting_read(session_id: str, start: int = 1, end: int | None = None) -> list[Entry]:
        reads.append((start, end))
        return await original(session_id, start, end)

    store.read = counting_read  # type: ignore[method-assign]
    try:
        loaded = await load_context_history(store, session.id, chunk=8)
    finally:
        del store.read  # type: ignore[method-assign]
    assert _seqs(loaded) == list(range(4_990, 5_003))
    assert min(start for start, _ in reads) >= 4_990
