"""tether's own export and import: exact round trips on every backend, streaming, and files that are cut,
foreign or inconsistent, which must be refused with a clear message and write nothing."""

from __future__ import annotations

import gzip
import io
import json
import random
import sqlite3
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tether import (
    Checkpoint,
    Compaction,
    CorruptEntry,
    FilePart,
    ImagePart,
    ImportFormatError,
    InvalidInput,
    Marker,
    MemoryStore,
    Message,
    Session,
    SqliteStore,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from tether.errors import SessionNotFound, StoreError
from tether.importers.tether_json import export_json, import_file, import_json, parse_export
from tether.messages import Entry
from tether.store import Store, active_entries
from tether.store.records import SessionInfo


async def rich_session(store: Store, **kwargs: Any) -> Session:
    """A session that uses every kind of entry and part, lineage fields and metadata."""
    session = await Session.create(
        store,
        directory="/work/project",
        model="gpt-4o-mini",
        agent="build",
        system_prompt="be careful",
        metadata={"ticket": 42, "labels": ["a", "b"]},
        **kwargs,
    )
    await session.append(
        Message.system("system text"),
        Message(role="user", parts=[TextPart(text="look at this"), ImagePart(media_type="image/png", data=b"\x89PNG")]),
        Message(
            role="assistant",
            parts=[
                ThinkingPart(text="hmm", signature="sig=="),
                ThinkingPart(redacted="opaque", provider="anthropic"),
                TextPart(text="reading"),
                ToolCallPart(id="c1", name="read", arguments={"path": "src/a.py"}),
                ToolCallPart.from_raw("c2", "bash", '{"command": "ls'),
            ],
            model="gpt-4o-mini",
            usage=Usage(input_tokens=120, output_tokens=30, cost=Decimal("0.00012")),
            finish_reason="tool_calls",
        ),
        Message.tool(
            ToolResultPart(call_id="c1", content="x = 1\n", name="read", metadata={"lines": 1}),
            ToolResultPart(call_id="c2", content="bad arguments", is_error=True),
        ),
    )
    await session.revert(3, reason="try again")
    await session.append(
        Message(role="user", parts=[FilePart(media_type="text/csv", uri="file:///d.csv", name="d.csv")]),
        Compaction(summary="earlier: read a.py", first_kept_seq=6, tokens_before=900, tokens_after=40),
        Checkpoint(objective="fix it", done="read", next_action="edit", steps=3),
        Marker(name="approval", data={"tool": "bash", "granted": True}),
        TitleChange(title="A rich session"),
    )
    return session


async def export_bytes(store: Store, session_id: str) -> bytes:
    out = io.BytesIO()
    await export_json(store, session_id, out)
    return out.getvalue()


async def no_sessions(store: Store) -> bool:
    return not (await store.list_sessions()).items


# --- round trips -------------------------------------------------------------------------------------------


async def test_export_is_one_valid_json_document_with_one_entry_per_line(store: Store) -> None:
    session = await rich_session(store)
    data = await export_bytes(store, session.id)
    doc = json.loads(data)
    assert doc["format"] == "tether.session" and doc["version"] == 1
    assert doc["session"]["id"] == session.id
    assert doc["session"]["title"] == "A rich session"
    assert [e["seq"] for e in doc["entries"]] == list(range(1, session.info.entry_count + 1))
    assert len(data.splitlines()) == 2 + session.info.entry_count + 1  # header, "entries":[, entries, ]}


@pytest.mark.parametrize("target", ["memory", "sqlite"])
async def test_export_import_export_is_identical_across_stores(store: Store, target: str, tmp_path: Path) -> None:
    session = await rich_session(store)
    first = await export_bytes(store, session.id)
    other: Store = MemoryStore() if target == "memory" else SqliteStore(tmp_path / "other.db")
    try:
        info = await import_json(other, first)
        assert info.id == session.id
        assert await export_bytes(other, session.id) == first
        assert await active_entries(other, session.id) == await active_entries(store, session.id)
    finally:
        await other.close()


async def test_import_after_delete_restores_the_same_session(store: Store) -> None:
    session = await rich_session(store)
    before = await store.get_session(session.id)
    first = await export_bytes(store, session.id)
    await store.delete_session(session.id)
    with pytest.raises(SessionNotFound):
        await store.get_session(session.id)
    info = await import_json(store, first)
    assert (info.created_at, info.updated_at, info.title, info.directory) == (
        before.created_at,
        before.updated_at,
        before.title,
        before.directory,
    )
    assert (info.entry_count, info.message_count, info.input_tokens, info.output_tokens, info.cost) == (
        before.entry_count,
        before.message_count,
        before.input_tokens,
        before.output_tokens,
        before.cost,
    )
    assert [e.created_at for e in await store.read(session.id)] == [
        json.loads(line.rstrip(b","))["created_at"] for line in first.splitlines()[2:-1]
    ]
    assert await export_bytes(store, session.id) == first


async def test_imported_session_takes_new_appends(store: Store) -> None:
    session = await rich_session(store)
    data = await export_bytes(store, session.id)
    await store.delete_session(session.id)
    await import_json(store, data)
    reopened = await Session.open(store, session.id)
    (entry,) = await reopened.append(Message.user("and now?"))
    assert entry.seq == session.info.entry_count + 1
    assert reopened.info.message_count == session.info.message_count + 1


async def test_empty_session_round_trips(store: Store) -> None:
    info = await store.create_session(directory="/w")
    data = await export_bytes(store, info.id)
    assert json.loads(data)["entries"] == []
    await store.delete_session(info.id)
    await import_json(store, data)
    assert await export_bytes(store, info.id) == data


async def test_import_of_an_existing_id_is_refused_unless_new_id(store: Store) -> None:
    session = await rich_session(store)
    data = await export_bytes(store, session.id)
    with pytest.raises(InvalidInput, match=r"already exists.*--new-id"):
        await import_json(store, data)
    copy = await import_json(store, data, new_id=True)
    assert copy.id != session.id
    assert copy.metadata["imported"]["source"] == "input" and copy.metadata["imported"]["format"] == "tether.session"
    assert {k: v for k, v in copy.metadata.items() if k != "imported"} == {
        **session.info.metadata,
        "imported_from": session.id,
    }
    assert [e.body for e in await store.read(copy.id)] == [e.body for e in await store.read(session.id)]
    assert (await store.get_session(session.id)).entry_count == session.info.entry_count


async def test_child_session_keeps_its_parent_only_where_the_parent_exists(store: Store) -> None:
    parent = await store.create_session(directory="/w")
    child = await Session.create(store, directory="/w", parent_id=parent.id)
    await child.append(Message.user("sub-task"))
    data = await export_bytes(store, child.id)

    await store.delete_session(child.id)
    assert (await import_json(store, data)).parent_id == parent.id

    elsewhere = MemoryStore()
    info = await import_json(elsewhere, data)
    assert info.parent_id is None
    assert info.metadata["imported_parent_id"] == parent.id


async def test_fork_lineage_survives_a_round_trip(store: Store) -> None:
    session = await rich_session(store)
    fork = await store.fork(session.id, 4)
    data = await export_bytes(store, fork.id)
    await store.delete_session(fork.id)
    info = await import_json(store, data)
    assert (info.forked_from, info.forked_at, info.entry_count) == (session.id, 4, 4)


async def test_import_file_reads_a_file(store: Store, tmp_path: Path) -> None:
    session = await rich_session(store)
    path = tmp_path / "s.json"
    path.write_bytes(await export_bytes(store, session.id))
    await store.delete_session(session.id)
    assert (await import_file(store, path)).id == session.id
    with pytest.raises(ImportFormatError, match=r"cannot import .*missing\.json"):
        await import_file(store, tmp_path / "missing.json")
    with pytest.raises(ImportFormatError, match="cannot import"):
        await import_file(store, tmp_path)  # a directory


# --- streaming and snapshots -------------------------------------------------------------------------------


class Spy:
    """A store that records which reads an exporter makes, and can append behind its back."""

    def __init__(self, inner: Store, *, append_during_iteration: bool = False) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.append_during_iteration = append_during_iteration

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.inner, name)

    async def iter_entries(self, session_id: str, start: int = 1, *, batch: int = 500) -> AsyncIterator[Entry]:
        self.calls.append("iter_entries")
        async for entry in self.inner.iter_entries(session_id, start, batch=batch):
            yield entry
            if self.append_during_iteration and entry.seq == 1:
                await self.inner.append(session_id, [Message.user("late")])


async def test_export_streams_the_journal_instead_of_reading_it_whole(store: Store) -> None:
    session = await Session.create(store, directory="/w")
    await session.append(*[Message.user(f"m{i}") for i in range(1200)])
    spy = Spy(store)
    out = io.BytesIO()
    await export_json(spy, session.id, out)  # type: ignore[arg-type]
    assert "iter_entries" in spy.calls
    assert "read" not in spy.calls and "tail" not in spy.calls
    assert len(json.loads(out.getvalue())["entries"]) == 1200


async def test_export_is_a_snapshot_of_the_session_when_it_started(store: Store) -> None:
    session = await Session.create(store, directory="/w")
    await session.append(Message.user("one"), Message.assistant("two"))
    out = io.BytesIO()
    await export_json(Spy(store, append_during_iteration=True), session.id, out)  # type: ignore[arg-type]
    doc = json.loads(out.getvalue())
    assert doc["session"]["entry_count"] == 2 and len(doc["entries"]) == 2
    assert (await store.get_session(session.id)).entry_count == 3
    parse_export(out.getvalue())  # and it is importable as it stands


async def test_export_refuses_to_leave_out_a_corrupt_entry(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with SqliteStore(path) as store:
        session = await Session.create(store, directory="/w")
        await session.append(Message.user("a"), Message.user("b"), Message.user("c"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET payload = '{not json' WHERE seq = 2")
    async with SqliteStore(path, on_corrupt=lambda e: None) as store:
        with pytest.raises(CorruptEntry, match="entry 2"):
            await export_json(store, session.id, io.BytesIO())


# --- bad files ---------------------------------------------------------------------------------------------


def _doc(**changes: Any) -> dict[str, Any]:
    entries = [
        {
            "seq": 1,
            "created_at": 1.5,
            "body": {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "hi"}]},
        },
        {"seq": 2, "created_at": 2.5, "body": {"kind": "message", "role": "assistant", "parts": []}},
    ]
    session = {"id": "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "created_at": 1.0, "updated_at": 3.0, "entry_count": 2}
    doc: dict[str, Any] = {"format": "tether.session", "version": 1, "session": session, "entries": entries}
    doc.update(changes)
    return doc


def _with_session(**fields: Any) -> bytes:
    doc = _doc()
    doc["session"] = {**doc["session"], **fields}
    return json.dumps(doc).encode()


def _with_entries(entries: list[dict[str, Any]], count: int | None = None) -> bytes:
    doc = _doc(entries=entries)
    doc["session"]["entry_count"] = len(entries) if count is None else count
    return json.dumps(doc).encode()


_E1, _E2 = _doc()["entries"]
CLAUDE_CODE_JSONL = (
    b'{"type":"user","sessionId":"9f1c","message":{"role":"user","content":"fix the test"},"uuid":"a1"}\n'
    b'{"type":"assistant","sessionId":"9f1c","message":{"role":"assistant","content":[{"type":"text","text":"ok"}]},'
    b'"uuid":"a2","parentUuid":"a1"}\n'
)

BAD_FILES: list[tuple[str, bytes, str]] = [
    ("empty", b"", "is empty"),
    ("whitespace", b"  \n\t\n", "is empty"),
    ("truncated", json.dumps(_doc()).encode()[:-40], "truncated"),
    ("claude code jsonl", CLAUDE_CODE_JSONL, "JSON Lines"),
    ("random object", b'{"name": "x", "items": [1, 2]}', "no 'format' field .*items, name"),
    ("array", b"[1, 2, 3]", "top level is a JSON array"),
    ("string", b'"hello"', "top level is a JSON string"),
    ("not json", b"hello world", "not valid JSON"),
    ("binary", bytes(range(256)) * 4, "binary"),
    ("latin-1 text", '{"format": "caf\xe9"}'.encode("latin-1"), r"not UTF-8 text \(byte 15\)"),
    ("gzip", gzip.compress(json.dumps(_doc()).encode()), "gzip"),
    ("other format", json.dumps(_doc(format="opencode.session")).encode(), "format is 'opencode.session'"),
    ("newer version", json.dumps(_doc(version=2)).encode(), "newer tether .*version 2"),
    ("version as string", json.dumps(_doc(version="1")).encode(), "'version' must be a positive integer"),
    ("no version", json.dumps({k: v for k, v in _doc().items() if k != "version"}).encode(), "'version'"),
    (
        "no entries",
        json.dumps({k: v for k, v in _doc().items() if k != "entries"}).encode(),
        "'entries' field is missing",
    ),
    ("path in id", _with_session(id="../x"), "invalid session id '../x'"),
    ("slash in id", _with_session(id="a/b"), "invalid session id 'a/b'"),
    ("bad parent id", _with_session(parent_id="../../etc"), "invalid parent_id"),
    ("id of wrong type", _with_session(id=7), r"Expected `str`, got `int` - at `\$.session.id`"),
    ("bad state", _with_session(state="zombie"), r"\$.session.state"),
    ("gap in seqs", _with_entries([_E1, {**_E2, "seq": 3}]), "entry 2 has seq 3"),
    ("repeated seq", _with_entries([_E1, {**_E2, "seq": 1}]), "entry 2 has seq 1"),
    ("seq from zero", _with_entries([{**_E1, "seq": 0}, {**_E2, "seq": 1}]), "entry 1 has seq 0"),
    ("fewer entries than said", _with_entries([_E1], count=2), "says 2 entries but the file holds 1"),
    (
        "unknown body kind",
        _with_entries([_E1, {**_E2, "body": {"kind": "teleport"}}]),
        "entry 2: the body does not decode",
    ),
    (
        "bad part",
        _with_entries([_E1, {**_E2, "body": {"kind": "message", "role": "robot"}}]),
        r"entries\[1\].body.role",
    ),
    ("entry without body", _with_entries([_E1, {"seq": 2, "created_at": 1.0}]), "missing required field `body`"),
    (
        "revert forward",
        _with_entries([_E1, {**_E2, "body": {"kind": "revert", "to_seq": 5}}]),
        "must point before itself",
    ),
]


@pytest.mark.parametrize(("data", "message"), [(d, m) for _, d, m in BAD_FILES], ids=[n for n, _, _ in BAD_FILES])
async def test_bad_files_are_refused_with_a_reason_and_write_nothing(store: Store, data: bytes, message: str) -> None:
    with pytest.raises(ImportFormatError, match=message) as caught:
        await import_json(store, data, source="bad.json")
    assert str(caught.value).startswith("cannot import bad.json: ")
    assert await no_sessions(store)


async def test_the_good_twin_of_the_bad_files_imports(store: Store) -> None:
    """The bad files above are one change away from this one, so each refusal is about that change."""
    info = await import_json(store, json.dumps(_doc()).encode())
    assert (info.entry_count, info.message_count, info.title) == (2, 2, None)
    entries = await store.read(info.id)
    assert [(e.seq, e.created_at) for e in entries] == [(1, 1.5), (2, 2.5)]


async def test_a_byte_order_mark_is_tolerated(store: Store) -> None:
    info = await import_json(store, b"\xef\xbb\xbf" + json.dumps(_doc()).encode())
    assert info.entry_count == 2


async def test_every_truncation_of_a_real_export_is_refused(store: Store) -> None:
    session = await rich_session(store)
    data = await export_bytes(store, session.id)
    await store.delete_session(session.id)
    rng = random.Random(7)
    for cut in [*sorted(rng.sample(range(1, len(data) - 2), 60)), len(data) - 3]:
        with pytest.raises(ImportFormatError):
            await import_json(store, data[:cut])
    assert await no_sessions(store)


async def test_store_import_is_all_or_nothing_when_the_write_fails(tmp_path: Path) -> None:
    """Validation catches bad files before the store is touched; this checks the store's own transaction
    when the database itself refuses a row halfway through the entries."""
    path = tmp_path / "t.db"
    data = json.dumps(_doc()).encode()
    export = parse_export(data)
    async with SqliteStore(path):
        pass  # creates the schema
    with sqlite3.connect(path) as conn:  # a leftover row that collides with the second entry
        conn.execute(
            "INSERT INTO entries (session_id, seq, kind, created_at, payload) VALUES (?, 2, 'message', 0, '{}')",
            (export.session.id,),
        )
    async with SqliteStore(path) as store:
        with pytest.raises(StoreError):
            await import_json(store, export)
        assert await no_sessions(store)


async def test_store_import_session_checks_its_input(store: Store) -> None:
    info = SessionInfo(id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", created_at=1.0, updated_at=1.0)
    with pytest.raises(InvalidInput, match=r"seqs 1\.\.n"):
        await store.import_session(info, [Entry(2, 1.0, Message.user("x"))])
    with pytest.raises(SessionNotFound):
        await store.import_session(
            SessionInfo(id=info.id, created_at=1.0, updated_at=1.0, parent_id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YC"), []
        )
    assert await no_sessions(store)
    await store.import_session(info, [Entry(1, 1.0, Message.user("x"))])
    with pytest.raises(InvalidInput, match="already exists"):
        await store.import_session(info, [])
    assert (await store.get_session(info.id)).entry_count == 1
