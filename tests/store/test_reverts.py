"""Revert semantics, in their one place: the spans that reverts hide, and the active history read backwards
through them, on random journals against the store's own index of reverts."""

from __future__ import annotations

import random

import pytest

from tether import MemoryStore, Message, Session
from tether.errors import SessionNotFound
from tether.messages import Revert
from tether.store.records import RevertSpan
from tether.store.reverts import active_tail, effective_reverts, hidden_spans, is_hidden


def test_hidden_spans_follow_the_rules_of_active_history() -> None:
    assert hidden_spans([]) == []
    assert hidden_spans([(4, 1)]) == [RevertSpan(1, 4)]
    assert hidden_spans([(4, 1)])[0].entries == range(2, 4)
    assert hidden_spans([(3, 2)])[0].entries == range(3, 3)  # a revert to just before itself hides no entry
    assert hidden_spans([(3, 1), (5, 3)]) == [RevertSpan(1, 3), RevertSpan(3, 5)]
    assert hidden_spans([(3, 1), (5, 0)]) == [RevertSpan(0, 5)]  # the inner revert is itself hidden
    spans = hidden_spans([(3, 1), (5, 0)])
    assert is_hidden(3, spans) and is_hidden(5, spans) and not is_hidden(6, spans)
    assert effective_reverts(spans) == {5}


async def test_hidden_spans_agree_with_active_entries_on_random_journals() -> None:
    rng = random.Random(11)
    for _ in range(60):
        store = MemoryStore()
        session = await Session.create(store, directory="/w")
        for _ in range(rng.randint(1, 25)):
            count = session.info.entry_count
            if count and rng.random() < 0.3:
                await session.revert(rng.randint(0, count))
            else:
                await session.append(Message.user("x"))
        entries = await session.read()
        spans = hidden_spans([(e.seq, e.body.to_seq) for e in entries if isinstance(e.body, Revert)])
        visible = [e.seq for e in entries if not is_hidden(e.seq, spans) and not isinstance(e.body, Revert)]
        assert visible == [e.seq for e in await session.entries()]
        assert spans == await store.reverted_spans(session.id)


class CountingJournal(MemoryStore):
    """A memory store that counts the journal queries a reader makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def get_session(self, session_id: str):  # type: ignore[no-untyped-def]
        self.calls.append("get_session")
        return await super().get_session(session_id)

    async def read(self, session_id: str, start: int = 1, end: int | None = None):  # type: ignore[no-untyped-def]
        self.calls.append("read")
        return await super().read(session_id, start, end)

    async def tail(self, session_id: str, n: int):  # type: ignore[no-untyped-def]
        self.calls.append("tail")
        count = len(self.calls)
        got = await super().tail(session_id, n)
        del self.calls[count:]  # the memory store's tail is its read: one query all the same
        return got


async def test_active_tail_from_a_raw_tail_agrees_with_the_walk_from_the_entry_count() -> None:
    rng = random.Random(5)
    for _ in range(60):
        store = CountingJournal()
        session = await Session.create(store, directory="/w")
        for _ in range(rng.randint(0, 40)):
            count = session.info.entry_count
            if count and rng.random() < 0.25:
                await session.revert(rng.randint(max(0, count - 12), count))
            else:
                await session.append(Message.user("x"))
        last = session.info.entry_count
        for n in (0, 1, 3, 10, 50):
            for chunk in (1, 2, 5, None):
                known = await active_tail(store, session.id, n, last_seq=last, chunk=chunk)
                found = await active_tail(store, session.id, n, chunk=chunk)
                assert [e.seq for e in found] == [e.seq for e in known], (n, chunk)


async def test_resuming_a_session_reads_its_tail_in_one_query() -> None:
    store = CountingJournal()
    session = await Session.create(store, directory="/w")
    for i in range(300):
        await session.append(Message.user(f"m{i}"))
    store.calls.clear()
    got = await active_tail(store, session.id, 200)
    assert [e.seq for e in got] == list(range(101, 301))
    assert store.calls == ["tail"]  # not the session's row and then a read
    store.calls.clear()
    assert await active_tail(store, (await Session.create(store, directory="/w")).id, 5) == []
    assert store.calls == ["tail", "get_session"]  # an empty tail asks the row: empty, or undecodable


async def test_active_tail_of_a_missing_session_says_so() -> None:
    store = MemoryStore()
    for n in (0, 5):
        with pytest.raises(SessionNotFound):
            await active_tail(store, "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", n)
