"""Share links in the store, on every backend (the `store` fixture): made by a token's hash, found by it,
listed, revoked for good, and gone with their session. And a schema-5 file that gains the table."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from tether.errors import InvalidId, InvalidInput, NotFound, SessionNotFound
from tether.messages import Message
from tether.store import SqliteStore, Store
from tether.store.sqlite import SCHEMA_VERSION


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def test_a_share_is_found_by_its_tokens_hash_and_by_nothing_else(store: Store) -> None:
    sid = (await store.create_session(title="shared")).id
    share = await store.create_share(sid, digest("secret-a"), expires_at=time.time() + 60)
    assert share.session_id == sid and share.id.startswith("shr_") and share.revoked_at is None
    assert share.live(time.time()) and not share.live(time.time() + 61)
    assert await store.share_by_token(digest("secret-a")) == share
    assert await store.share_by_token(digest("secret-b")) is None
    assert await store.list_shares(sid) == [share]
    assert await store.list_shares() == [share]


async def test_shares_are_listed_per_session_oldest_first(store: Store) -> None:
    a, b = (await store.create_session()).id, (await store.create_session()).id
    first = await store.create_share(a, digest("1"))
    other = await store.create_share(b, digest("2"))
    second = await store.create_share(a, digest("3"))
    assert [s.id for s in await store.list_shares(a)] == [first.id, second.id]
    assert [s.id for s in await store.list_shares(b)] == [other.id]
    assert {s.id for s in await store.list_shares()} == {first.id, second.id, other.id}


async def test_a_revoked_share_stays_revoked_and_keeps_its_first_time(store: Store) -> None:
    sid = (await store.create_session()).id
    share = await store.create_share(sid, digest("t"))
    revoked = await store.revoke_share(share.id)
    assert revoked.revoked_at is not None and not revoked.live(time.time())
    again = await store.revoke_share(share.id)
    assert again.revoked_at == revoked.revoked_at
    found = await store.share_by_token(digest("t"))
    assert found is not None and found.revoked_at == revoked.revoked_at


async def test_deleting_a_session_deletes_its_shares_and_its_childrens(store: Store) -> None:
    parent = (await store.create_session()).id
    child = (await store.create_session(parent_id=parent)).id
    kept = (await store.create_session()).id
    await store.create_share(parent, digest("p"))
    await store.create_share(child, digest("c"))
    other = await store.create_share(kept, digest("k"))
    await store.delete_session(parent)
    assert await store.share_by_token(digest("p")) is None
    assert await store.share_by_token(digest("c")) is None
    assert await store.list_shares() == [other]
    with pytest.raises(SessionNotFound):
        await store.list_shares(parent)


async def test_bad_shares_are_refused_and_write_nothing(store: Store) -> None:
    sid = (await store.create_session()).id
    with pytest.raises(SessionNotFound):
        await store.create_share("ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", digest("x"))
    with pytest.raises(InvalidId):
        await store.create_share("../etc", digest("x"))
    for bad_hash in (b"short", "a" * 32, digest("x") + b"!"):
        with pytest.raises(InvalidInput):
            await store.create_share(sid, bad_hash)  # type: ignore[arg-type]
    for bad_time in (float("nan"), float("inf"), -1.0, True, "tomorrow"):
        with pytest.raises(InvalidInput):
            await store.create_share(sid, digest("x"), expires_at=bad_time)  # type: ignore[arg-type]
    made = await store.create_share(sid, digest("x"))
    with pytest.raises(InvalidInput):
        await store.create_share(sid, digest("x"))  # the same token twice
    with pytest.raises(InvalidInput):
        await store.create_share(sid, digest("y"), id=made.id)
    with pytest.raises(NotFound):
        await store.revoke_share("shr_01JD8X3Q5T9N2C7KZ6W4M0R1YB")
    with pytest.raises(InvalidId):
        await store.revoke_share("shr_../../x")
    with pytest.raises(InvalidInput):
        await store.share_by_token(b"")
    assert await store.list_shares() == [made]


async def test_a_schema_5_file_gains_the_shares_table_and_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    store = SqliteStore(path)
    sid = (await store.create_session(title="old")).id
    await store.append(sid, [Message.user("kept")])
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE shares")  # what schema 5 had: no shares table
    conn.execute("PRAGMA user_version = 5")
    conn.close()
    store = SqliteStore(path)
    try:
        assert [e.body.text for e in await store.read(sid) if isinstance(e.body, Message)] == ["kept"]
        share = await store.create_share(sid, digest("after-migration"))
        assert await store.share_by_token(digest("after-migration")) == share
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    columns = [row[1] for row in conn.execute("PRAGMA table_info(shares)")]
    assert columns == ["id", "session_id", "token_hash", "created_at", "expires_at", "revoked_at"]
    assert conn.execute("SELECT token_hash FROM shares").fetchone()[0] == digest("after-migration")
    conn.close()
