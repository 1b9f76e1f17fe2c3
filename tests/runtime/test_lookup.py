"""Finding a session from a full id or a unique piece of one, as the CLI and a server do."""

from __future__ import annotations

import pytest

from tether import InvalidId, InvalidInput, MemoryStore, SessionNotFound
from tether.runtime.lookup import find_session
from tether.store import Store


async def test_find_session(store: Store) -> None:
    a = await store.create_session(id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB")
    b = await store.create_session(id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YC")
    assert (await find_session(store, a.id)).id == a.id
    assert (await find_session(store, "m0r1yb")).id == a.id
    assert (await find_session(store, f"  {b.id[-7:]} ")).id == b.id
    with pytest.raises(InvalidInput, match="matches 2 sessions"):
        await find_session(store, "ses_01JD8X")
    with pytest.raises(SessionNotFound):
        await find_session(store, "QQQQQQ")
    for bad in ("R1YB", "../x", "a/b", "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB_EXTRA", ""):
        with pytest.raises(InvalidId):
            await find_session(store, bad)


async def test_find_session_pages_through_many_sessions() -> None:
    store = MemoryStore()
    ids = [(await store.create_session()).id for _ in range(2100)]
    target = ids[17]
    assert (await find_session(store, target[-10:])).id == target
