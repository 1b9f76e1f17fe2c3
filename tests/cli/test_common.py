"""The small shared pieces of the CLI: relative times, counts, and finding a session from a piece of its id."""

from __future__ import annotations

import time

import pytest

from tether import InvalidId, InvalidInput, MemoryStore, SessionNotFound
from tether.cli.common import ago, human_count, resolve_session
from tether.store import Store


def test_ago() -> None:
    now = 1_700_000_000.0
    assert ago(now - 1, now) == "just now"
    assert ago(now + 30, now) == "just now"  # a clock a little ahead of ours
    assert ago(now - 45, now) == "45s ago"
    assert ago(now - 3 * 60 - 5, now) == "3m ago"
    assert ago(now - 2 * 3600, now) == "2h ago"
    assert ago(now - 5 * 86400, now) == "5d ago"
    assert ago(now - 90 * 86400, now) == time.strftime("%Y-%m-%d", time.localtime(now - 90 * 86400))


def test_human_count() -> None:
    assert [human_count(n) for n in (0, 999, 1000, 1234, 999_999, 1_000_000, 1_250_000)] == [
        "0",
        "999",
        "1k",
        "1.2k",
        "1M",
        "1M",
        "1.2M",
    ]


async def test_resolve_session(store: Store) -> None:
    a = await store.create_session(id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB")
    b = await store.create_session(id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YC")
    assert (await resolve_session(store, a.id)).id == a.id
    assert (await resolve_session(store, "m0r1yb")).id == a.id
    assert (await resolve_session(store, f"  {b.id[-7:]} ")).id == b.id
    with pytest.raises(InvalidInput, match="matches 2 sessions"):
        await resolve_session(store, "ses_01JD8X")
    with pytest.raises(SessionNotFound):
        await resolve_session(store, "QQQQQQ")
    for bad in ("R1YB", "../x", "a/b", "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB_EXTRA", ""):
        with pytest.raises(InvalidId):
            await resolve_session(store, bad)


async def test_resolve_session_pages_through_many_sessions() -> None:
    store = MemoryStore()
    ids = [(await store.create_session()).id for _ in range(2100)]
    target = ids[17]
    assert (await resolve_session(store, target[-10:])).id == target
