"""Reading opencode's stores (tests/fixtures/opencode, written by opencode itself): what each kind of path
is, the same records from the database, the JSON folder and an export, messages after a given one in id
order with their parts, and what an unreadable store says."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tether.importers.opencode_sources import (
    ExportFile,
    JsonStorage,
    SourceError,
    SqliteStore,
    looks_like_opencode,
    open_source,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "opencode"
DB = FIXTURES / "opencode-1.18.33.db"
STORAGE = FIXTURES / "storage-1.1.65"
EXPORT = FIXTURES / "export-1.18.33.json"
TWO_TOOLS = "ses_deaae939cffecPDDivAqvfQRoU"


def test_what_is_opencodes(tmp_path: Path) -> None:
    data = tmp_path / "opencode"
    data.mkdir()
    shutil.copy(DB, data / "opencode.db")
    assert looks_like_opencode(data) and looks_like_opencode(DB) and looks_like_opencode(STORAGE)
    assert looks_like_opencode(EXPORT)
    other = tmp_path / "notes.json"
    other.write_text('{"title": "x"}')
    assert not looks_like_opencode(other) and not looks_like_opencode(tmp_path / "missing.db")
    assert not looks_like_opencode(FIXTURES.parent / "codex")
    kinds = [type(s) for s in open_source(data)]
    assert kinds == [SqliteStore]
    shutil.copytree(STORAGE, data / "storage")
    assert [type(s) for s in open_source(data)] == [SqliteStore, JsonStorage]
    assert [type(s) for s in open_source(EXPORT)] == [ExportFile]
    with pytest.raises(SourceError, match=r"holds neither opencode\.db nor opencode's storage folder"):
        open_source(tmp_path)


def test_the_database_and_an_export_give_the_same_records(tmp_path: Path) -> None:
    db = SqliteStore(DB)
    export = ExportFile(EXPORT)
    try:
        (from_export,) = export.sessions()
        from_db = next(s for s in db.sessions() if s.id == TWO_TOOLS)
        assert (from_db.directory, from_db.title, from_db.parent) == ("/tmp/oc/proj", "Sample session title", None)
        assert (from_export.directory, from_export.title, from_export.created) == (
            from_db.directory, from_db.title, from_db.created
        )  # fmt: skip
        a = list(db.messages(TWO_TOOLS, None))
        b = list(export.messages(TWO_TOOLS, None))
        assert [m.id for m in a] == [m.id for m in b] == sorted(m.id for m in a)
        assert [[p["id"] for p in m.parts] for m in a] == [[p["id"] for p in m.parts] for m in b]
        assert a[0].parts[0]["text"] == b[0].parts[0]["text"]
        after = list(db.messages(TWO_TOOLS, a[1].id))
        assert [m.id for m in after] == [m.id for m in a[2:]]
        assert db.last_message(TWO_TOOLS) == a[-1].id == export.last_message(TWO_TOOLS)
        assert db.has_message(TWO_TOOLS, a[0].id) and not db.has_message(TWO_TOOLS, "msg_none")
        reverted = next(s for s in db.sessions() if s.revert)
        assert reverted.revert is not None and reverted.revert["messageID"].startswith("msg_")
        child = next(s for s in db.sessions() if s.parent)
        assert child.parent == "ses_deaae6289ffeTQ16vf6C06CfXQ"
    finally:
        db.close()


def test_the_json_folder(tmp_path: Path) -> None:
    storage = JsonStorage(STORAGE)
    sessions = storage.sessions()
    assert len(sessions) == 6 and storage.migration == 2 and storage.problems == []
    child = next(s for s in sessions if s.parent)
    messages = list(storage.messages(child.id, None))
    assert [m.info["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert all("sessionID" not in p and "messageID" not in p for m in messages for p in m.parts)
    assert messages[0].size > 0 and not messages[0].cut


def test_a_database_of_another_kind_says_what_it_has(tmp_path: Path) -> None:
    other = tmp_path / "x.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE session (id TEXT, directory TEXT, title TEXT)")
        conn.execute("CREATE TABLE message (id TEXT, session_id TEXT, body TEXT)")
        conn.execute("CREATE TABLE part (id TEXT, message_id TEXT, data TEXT)")
    with pytest.raises(SourceError, match=r"message table has no column data \(columns: body, id, session_id\)"):
        SqliteStore(other)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    with pytest.raises(SourceError, match="cannot open"):
        SqliteStore(garbage)
