"""Revert semantics, in their one place: the spans that reverts hide, and the active history read backwards
through them, on random journals against the store's own index of reverts."""

from __future__ import annotations

import random

from tether import MemoryStore, Message, Session
from tether.messages import Revert
from tether.store.records import RevertSpan
from tether.store.reverts import effective_reverts, hidden_spans, is_hidden


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
