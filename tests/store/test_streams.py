"""The streamed-answer records of the store (`Streams`), on every backend (the `store` fixture): one record
per session, replaced in place, read back whole, dropped, gone with its session; bad input refused before
any write; the journal untouched by all of it. And a schema-6 file that gains the table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tether.errors import InvalidId, InvalidInput, SessionNotFound
from tether.messages import Message, TextPart, ThinkingPart, ToolCallPart
from tether.store import SqliteStore, Store
from tether.store.sqlite import SCHEMA_VERSION


def partial(text: str) -> Message:
    return Message(
        role="assistant",
        parts=[ThinkingPart(text="hmm"), TextPart(text=text), ToolCallPart(id="c1", name="read", arguments={"p": 1})],
        model="m",
        metadata={"partial": True, "cut_calls": [{"id": "c2", "name": "write", "arguments": '{"pa'}]},
    )


async def test_a_record_is_replaced_in_place_and_the_journal_is_untouched(store: Store) -> None:
    sid = (await store.create_session()).id
    await store.append(sid, [Message.user("hi")])
    assert await store.get_stream(sid) is None
    await store.save_stream(sid, 1, partial("Hel"))
    await store.save_stream(sid, 1, partial("Hello, wor"))
    record = await store.get_stream(sid)
    assert record is not None and record.session_id == sid and record.after_seq == 1
    assert record.message == partial("Hello, wor") and record.updated_at > 0
    info = await store.get_session(sid)
    assert info.entry_count == 1 and info.message_count == 1  # no entry, no counter moved
    assert [e.body for e in await store.read(sid)] == [Message.user("hi")]
    assert await store.drop_stream(sid) is True
    assert await store.get_stream(sid) is None
    assert await store.drop_stream(sid) is False


async def test_records_are_per_session_and_go_with_their_session(store: Store) -> None:
    a, b = (await store.create_session()).id, (await store.create_session()).id
    await store.save_stream(a, 0, partial("a"))
    await store.save_stream(b, 0, partial("b"))
    await store.delete_session(a)
    with pytest.raises(SessionNotFound):
        await store.get_stream(a)
    record = await store.get_stream(b)
    assert record is not None and record.message.text == "b"


async def test_bad_input_is_refused_before_any_write(store: Store) -> None:
    sid = (await store.create_session()).id
    with pytest.raises(SessionNotFound):
        await store.save_stream("ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", 0, partial("x"))
    with pytest.raises(InvalidId):
        await store.save_stream("nope", 0, partial("x"))
    with pytest.raises(InvalidInput):
        await store.save_stream(sid, -1, partial("x"))
    with pytest.raises(InvalidInput):
        await store.save_stream(sid, 0, Message.user("not an answer"))
    with pytest.raises(InvalidInput):
        await store.save_stream(sid, 0, partial("lone \ud800 surrogate"))
    assert await store.get_stream(sid) is None


async def test_a_record_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with SqliteStore(path) as store:
        sid = (await store.create_session()).id
        await store.save_stream(sid, 0, partial("kept across processes"))
    async with SqliteStore(path) as store:
        record = await store.get_stream(sid)
        assert record is not None and record.message == partial("kept across processes")


async def test_a_schema_6_file_gains_the_table(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with SqliteStore(path) as store:
        sid = (await store.create_session()).id
        await store.append(sid, [Message.user("kept")])
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DROP TABLE streams")  # what schema 6 had: no streams table
    conn.execute("PRAGMA user_version = 6")
    conn.close()
    async with SqliteStore(path) as store:
        assert [e.body for e in await store.read(sid)] == [Message.user("kept")]
        await store.save_stream(sid, 1, partial("after the migration"))
        record = await store.get_stream(sid)
        assert record is not None and record.after_seq == 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
