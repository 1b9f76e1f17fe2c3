"""opencode's stores, as opencode itself wrote them (tests/fixtures/opencode, see its README): the SQLite
database of 1.18.33 and the JSON folder of 1.1.65. Text, reasoning, tool calls mapped to tether's tools,
a failing tool as an error, a sub-agent as a child session linked to its task call, compaction, files and
images, usage and cost, reverts (seen, made final, undone, and missed between two imports), importing
again, appending what opencode added, a message still being written, bad records and unknown versions."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tether.importers.jsonl import source_session_id
from tether.importers.opencode import import_opencode
from tether.messages import (
    ERROR_MARKER,
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
)
from tether.store import MemoryStore, Store
from tether.store.records import IMPORTED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "opencode"
DB = FIXTURES / "opencode-1.18.33.db"
CONTINUED = FIXTURES / "opencode-1.18.33-continued.db"
STORAGE = FIXTURES / "storage-1.1.65"
EXPORT = FIXTURES / "export-1.18.33.json"

# sessions of the database fixture (opencode's ids)
BASH = "ses_deaaeb8aaffebwED2D2W0egrdC"
TWO_TOOLS = "ses_deaae939cffecPDDivAqvfQRoU"
TASK = "ses_deaae6289ffeTQ16vf6C06CfXQ"
CHILD = "ses_deaae4a49ffevTIH9rhMz59Kq8"
COMPACTED = "ses_deaabe59affe8DTwVln9Nk9mb1"
FILES = "ses_deaabad1affeWR9X2oyEVsFAfH"


def tid(opencode_id: str) -> str:
    return source_session_id("opencode", opencode_id)


def copy(src: Path, tmp_path: Path, name: str | None = None) -> Path:
    dest = tmp_path / (name or src.name)
    if src.is_dir():
        shutil.copytree(src, dest)
    else:
        shutil.copy(src, dest)
    return dest


def bodies(entries: list[Entry]) -> list[Any]:
    return [e.body for e in entries]


def kinds(entries: list[Entry]) -> list[str]:
    return [b.role if isinstance(b, Message) else type(b).__name__ for b in bodies(entries)]


async def test_the_database_becomes_sessions(store: Store, tmp_path: Path) -> None:
    results = await import_opencode(store, copy(DB, tmp_path))
    assert [r.outcome for r in results] == ["imported"] * 7
    assert all(r.problems == [] for r in results)
    assert results[-1].session_id == tid(CHILD)  # children after their parents
    info = await store.get_session(tid(BASH))
    assert info.directory == "/tmp/oc/proj" and info.title == "Sample session title" and info.model == "m1"
    assert info.metadata[IMPORTED]["source_id"] == BASH and info.metadata[IMPORTED]["tool"] == "opencode"
    assert info.metadata["opencode"]["slug"] == "cosmic-tiger" and info.metadata["opencode"]["version"] == "1.18.33"
    assert info.created_at == 1795653977.941
    entries = await store.read(info.id)
    assert kinds(entries) == ["user", "assistant", "tool", "assistant"]
    user, call, result, answer = bodies(entries)
    assert user.parts == [TextPart(text='"BASH please run a command"')]
    assert call.parts == [
        ToolCallPart(
            id="call_81844", name="bash", arguments={"command": "echo hello from bash", "description": "say hello"}
        )
    ]
    assert call.usage.input_tokens == 100 and call.usage.cache_read_tokens == 20 and call.usage.output_tokens == 15
    assert call.usage.cost == Decimal("0.00013") and call.finish_reason == "tool-calls"
    assert call.model == "m1" and call.provider == "stub"
    assert call.metadata["opencode"]["tool_names"] == {"call_81844": "bash"}
    assert call.metadata["opencode"]["tools"]["call_81844"]["metadata"]["exit"] == 0
    assert result.parts == [ToolResultPart(call_id="call_81844", content="hello from bash\n", name="bash")]
    assert answer.parts == [
        ThinkingPart(text="The tool finished; summarise."),
        TextPart(text="All done after 1 tool result(s)."),
    ]
    times = [e.created_at for e in entries]  # opencode's own times: the tool's end, then the next step
    assert times[0] < times[1] < times[2] < times[3] and times[2] == 1795653982.118


async def test_a_failing_tool_is_an_error_with_mapped_arguments(store: Store, tmp_path: Path) -> None:
    await import_opencode(store, copy(DB, tmp_path))
    got = bodies(await store.read(tid(TWO_TOOLS)))
    assert [b.role for b in got] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    read = got[3].parts[0]
    assert read.name == "read" and read.arguments == {"path": "/tmp/oc/proj/missing.txt"}
    failed = got[4].parts[0]
    assert failed.is_error and failed.content == "File not found: /tmp/oc/proj/missing.txt"
    assert got[3].metadata["opencode"]["tools"][read.id]["status"] == "error"


async def test_a_sub_agent_is_a_child_session_linked_to_its_task_call(store: Store, tmp_path: Path) -> None:
    await import_opencode(store, copy(DB, tmp_path))
    child = await store.get_session(tid(CHILD))
    assert child.parent_id == tid(TASK) and child.title == "count files (@general subagent)"
    parent = bodies(await store.read(tid(TASK)))
    task = parent[1].parts[0]
    assert task.name == "task" and task.arguments["agent"] == "general" and "subagent_type" not in task.arguments
    assert child.metadata["task"] == {"agent": "general", "call_id": task.id}
    assert kinds(await store.read(child.id)) == ["user", "assistant", "tool", "assistant"]


async def test_compaction_and_a_revert(store: Store, tmp_path: Path) -> None:
    await import_opencode(store, copy(DB, tmp_path))
    entries = await store.read(tid(COMPACTED))
    assert kinds(entries) == ["user", "assistant", "Compaction", "user", "assistant", "user", "assistant", "Revert"]
    compaction = entries[2].body
    assert isinstance(compaction, Compaction) and compaction.strategy == "opencode"
    assert compaction.summary == "Summary: the user ran a command and asked for a compaction."
    assert compaction.first_kept_seq == 3 and compaction.metadata["opencode"]["part"]["auto"] is True
    assert entries[5].body.parts == [TextPart(text='"Say more"')]
    revert = entries[7].body
    assert isinstance(revert, Revert) and revert.to_seq == 5  # "Say more" and its answer are undone
    spans = await store.reverted_spans(tid(COMPACTED))
    assert [(s.after, s.revert) for s in spans] == [(5, 8)]  # the store's own view of what is hidden


async def test_files_and_images(store: Store, tmp_path: Path) -> None:
    await import_opencode(store, copy(DB, tmp_path))
    user = bodies(await store.read(tid(FILES)))[0]
    files = [p for p in user.parts if isinstance(p, FilePart | ImagePart)]
    assert files[0] == FilePart(media_type="text/plain", uri="file:///tmp/oc/proj/README.md", name="README.md")
    assert isinstance(files[1], ImagePart) and files[1].data is not None and files[1].data.startswith(b"\x89PNG")
    assert user.parts[-1] == TextPart(text='"Look at these files"')
    assert user.metadata["opencode"]["synthetic"]  # the Read tool's text opencode added for the model


async def test_importing_again_writes_nothing(store: Store, tmp_path: Path) -> None:
    path = copy(DB, tmp_path)
    await import_opencode(store, path)
    again = await import_opencode(store, path)
    assert {r.outcome for r in again} == {"unchanged"} and sum(r.entries for r in again) == 0


async def test_a_revert_made_final_stays_and_new_messages_follow(store: Store, tmp_path: Path) -> None:
    db = copy(DB, tmp_path)
    await import_opencode(store, db)
    shutil.copy(CONTINUED, db)  # opencode ran once more: the reverted messages deleted, a bash turn added
    results = {r.session_id: r for r in await import_opencode(store, db)}
    assert results[tid(COMPACTED)].outcome == "grown" and results[tid(COMPACTED)].entries == 4
    assert {r.outcome for sid, r in results.items() if sid != tid(COMPACTED)} == {"unchanged"}
    got = bodies(await store.read(tid(COMPACTED)))
    assert isinstance(got[7], Revert) and got[7].to_seq == 5
    assert got[8].parts == [TextPart(text='"BASH once more"')]
    assert not any(isinstance(b, Revert) for b in got[8:])  # not undone: opencode deleted what it reverted


async def test_a_revert_missed_between_imports_is_found(store: Store, tmp_path: Path) -> None:
    db = copy(DB, tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session SET revert = NULL")  # as it was before the revert
    await import_opencode(store, db)
    assert not any(isinstance(b, Revert) for b in bodies(await store.read(tid(COMPACTED))))
    shutil.copy(CONTINUED, db)
    await import_opencode(store, db)
    got = bodies(await store.read(tid(COMPACTED)))
    assert isinstance(got[7], Revert) and got[7].to_seq == 5 and "removed" in (got[7].reason or "")
    assert got[8].parts == [TextPart(text='"BASH once more"')]


async def test_an_undone_revert_is_undone(store: Store, tmp_path: Path) -> None:
    db = copy(DB, tmp_path)
    await import_opencode(store, db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session SET revert = NULL, time_updated = time_updated + 1")  # opencode's unrevert
    await import_opencode(store, db)
    got = bodies(await store.read(tid(COMPACTED)))
    assert isinstance(got[-1], Revert) and got[-1].to_seq == 7  # back to the history before seq 8
    assert (await import_opencode(store, db))[0].outcome == "unchanged"


async def test_an_interrupted_import_resumes_without_duplicates(store: Store, tmp_path: Path) -> None:
    db = copy(DB, tmp_path)
    await import_opencode(store, db)
    info = await store.get_session(tid(BASH))
    mark = {**info.metadata[IMPORTED], "entries": 0, "updated": 0}
    del mark["last"]  # as if the import stopped after its append, before it wrote its mark
    await store.update_session(info.id, metadata={**info.metadata, IMPORTED: mark})
    results = {r.session_id: r for r in await import_opencode(store, db)}
    assert results[tid(BASH)].entries == 0
    assert (await store.get_session(tid(BASH))).entry_count == 4


async def test_the_json_folder_becomes_sessions(store: Store, tmp_path: Path) -> None:
    results = await import_opencode(store, copy(STORAGE, tmp_path))
    assert [r.outcome for r in results] == ["imported"] * 6 and all(not r.problems for r in results)
    child = await store.get_session(tid("ses_deaac776fffemihB6MSmQ8zAq8"))
    assert child.parent_id == tid("ses_deaac7894ffeE52ytaXgzmynW2")
    assert child.model == "m1" and child.directory == "/tmp/oc-old/proj"  # 1.1's session record names no model
    call = bodies(await store.read(child.parent_id or ""))[1].parts[0]
    assert child.metadata["task"]["call_id"] == call.id
    compacted = await store.read(tid("ses_deaac12fcffeaQ2GQaLbiS8xqL"))
    assert kinds(compacted)[:3] == ["user", "assistant", "Compaction"]
    again = await import_opencode(store, tmp_path / STORAGE.name)
    assert {r.outcome for r in again} == {"unchanged"}


async def test_opencodes_data_folder_reads_the_database_then_the_json_folder(store: Store, tmp_path: Path) -> None:
    data = tmp_path / "opencode"
    data.mkdir()
    shutil.copy(DB, data / "opencode.db")
    shutil.copytree(STORAGE, data / "storage")
    results = await import_opencode(store, data)
    assert len(results) == 13 and {r.outcome for r in results} == {"imported"}


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def one_session(root: Path, *, updated: float | None = None) -> dict[str, Any]:
    """A JSON folder with one session of a user message and a finished answer (records as opencode 1.1
    writes them); returns the session record."""
    now = int((updated or time.time()) * 1000)
    session = {
        "id": "ses_a1", "slug": "s", "version": "1.1.65", "projectID": "p1", "directory": "/w", "title": "t",
        "time": {"created": now - 5000, "updated": now},
    }  # fmt: skip
    write_json(root / "session" / "p1" / "ses_a1.json", session)
    add_turn(root, 1, now - 4000)
    return session


def add_turn(root: Path, n: int, at: int, *, completed: bool = True) -> None:
    user, answer = f"msg_{n:04d}a", f"msg_{n:04d}b"
    write_json(
        root / "message" / "ses_a1" / f"{user}.json",
        {"id": user, "sessionID": "ses_a1", "role": "user", "time": {"created": at}, "agent": "build",
         "model": {"providerID": "p", "modelID": "m"}},
    )  # fmt: skip
    write_json(
        root / "part" / user / "prt_1.json",
        {"id": "prt_1", "sessionID": "ses_a1", "messageID": user, "type": "text", "text": f"question {n}"},
    )
    times: dict[str, int] = {"created": at + 1}
    if completed:
        times["completed"] = at + 2
    write_json(
        root / "message" / "ses_a1" / f"{answer}.json",
        {"id": answer, "sessionID": "ses_a1", "role": "assistant", "time": times, "parentID": user,
         "modelID": "m", "providerID": "p", "mode": "build", "agent": "build", "path": {"cwd": "/w", "root": "/w"},
         "cost": 0, "tokens": {"input": 1, "output": 2, "reasoning": 0, "cache": {"read": 0, "write": 0}}},
    )  # fmt: skip
    write_json(
        root / "part" / answer / "prt_1.json",
        {"id": "prt_1", "sessionID": "ses_a1", "messageID": answer, "type": "text", "text": f"answer {n}"},
    )


def touch(root: Path, session: dict[str, Any], at: float) -> None:
    session["time"]["updated"] = int(at * 1000)
    write_json(root / "session" / "p1" / "ses_a1.json", session)


async def test_messages_that_arrive_are_appended(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "storage"
    session = one_session(root)
    first = await import_opencode(store, root)
    assert first[0].outcome == "imported" and first[0].entries == 2
    now = time.time()
    add_turn(root, 2, int(now * 1000), completed=False)  # opencode is still answering
    touch(root, session, now)
    waiting = await import_opencode(store, root)
    assert waiting[0].entries == 1  # the question, not the unfinished answer
    answer = root / "message" / "ses_a1" / "msg_0002b.json"
    record = json.loads(answer.read_text())
    record["time"]["completed"] = record["time"]["created"] + 5
    answer.write_text(json.dumps(record))
    done = await import_opencode(store, root)
    assert done[0].outcome == "grown" and done[0].entries == 1
    texts = [b.parts[0].text for b in bodies(await store.read(tid("ses_a1")))]
    assert texts == ["question 1", "answer 1", "question 2", "answer 2"]
    assert (await import_opencode(store, root))[0].outcome == "unchanged"


async def test_a_prompt_waits_until_its_answer_begins(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "storage"
    session = one_session(root)
    await import_opencode(store, root)
    now = int(time.time() * 1000)
    add_turn(root, 2, now)
    answer = root / "message" / "ses_a1" / "msg_0002b.json"
    kept = answer.read_bytes()
    answer.unlink()  # opencode has written the prompt (and perhaps not all its parts): no answer yet
    touch(root, session, time.time())
    assert (await import_opencode(store, root))[0].entries == 0
    answer.write_bytes(kept)
    result = (await import_opencode(store, root))[0]
    assert result.entries == 2
    texts = [b.parts[0].text for b in bodies(await store.read(tid("ses_a1")))]
    assert texts == ["question 1", "answer 1", "question 2", "answer 2"]


async def test_an_answer_left_unfinished_long_ago_is_imported_as_it_is(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "storage"
    one_session(root, updated=time.time() - 86400)
    add_turn(root, 2, int((time.time() - 86400) * 1000), completed=False)
    result = (await import_opencode(store, root))[0]
    assert result.entries == 4  # opencode was killed mid-answer: it never completes


async def test_a_record_being_written_is_left_for_the_next_import(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "storage"
    session = one_session(root)
    add_turn(root, 2, int(time.time() * 1000))
    cut = root / "message" / "ses_a1" / "msg_0002b.json"
    whole = cut.read_text()
    cut.write_text(whole[:40])
    touch(root, session, time.time())
    first = (await import_opencode(store, root))[0]
    assert first.entries == 3 and any("msg_0002b.json" in p.path for p in first.problems)
    cut.write_text(whole)
    second = (await import_opencode(store, root))[0]
    assert second.entries == 1 and second.problems == []


async def test_a_corrupt_file_is_skipped_and_reported_with_its_path(store: Store, tmp_path: Path) -> None:
    root = copy(STORAGE, tmp_path)
    part = next((root / "part").glob("*/*.json"))
    part.write_text("{not json")
    bad_session = root / "session" / "59bcda331ee44befab003ca099ae353ee6ee6b38" / "ses_zzz.json"
    bad_session.write_text('{"id": ')
    results = await import_opencode(store, root)
    problems = [p for r in results for p in r.problems]
    assert {p.path for p in problems} == {str(part), str(bad_session)}
    assert all("not JSON" in p.reason for p in problems)
    assert sum(r.outcome == "imported" for r in results) == 6  # every session, the bad part left out


async def test_a_part_of_an_unknown_type_is_kept_as_a_marker(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "storage"
    one_session(root)
    write_json(root / "part" / "msg_0001b" / "prt_2.json", {"id": "prt_2", "type": "hologram", "beam": 3})
    write_json(root / "part" / "msg_0001a" / "prt_2.json", {"id": "prt_2", "type": "sketch", "lines": 2})
    result = (await import_opencode(store, root))[0]
    got = bodies(await store.read(tid("ses_a1")))
    assert [type(b).__name__ for b in got] == ["Message", "Marker", "Message", "Marker"]  # each after its message
    assert got[1].name == "opencode.part" and got[1].data["raw"]["lines"] == 2 and got[1].data["message"] == "msg_0001a"
    assert got[3].name == "opencode.part" and got[3].data["raw"]["beam"] == 3
    assert ["'sketch'" in p.reason for p in result.problems] == [True, False]


async def test_unknown_versions_say_what_they_saw(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "storage"
    one_session(root)
    (root / "migration").write_text("7")
    result = (await import_opencode(store, root))[0]
    assert result.outcome == "imported" and "storage migration 7" in result.problems[0].reason
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE session (id TEXT, directory TEXT, title TEXT)")
        conn.execute("CREATE TABLE conversation (id TEXT)")
    failed = await import_opencode(store, other)
    assert failed[0].outcome == "failed"
    assert "no table message, part (tables: conversation, session)" in failed[0].problems[0].reason
    newer = copy(DB, tmp_path, "newer.db")
    with sqlite3.connect(newer) as conn:
        conn.execute("ALTER TABLE part RENAME COLUMN data TO payload")
    failed = await import_opencode(store, newer)
    assert "part table has no column data" in failed[0].problems[0].reason


async def test_dir_and_since_choose_sessions(store: Store, tmp_path: Path) -> None:
    db = copy(DB, tmp_path)
    assert await import_opencode(store, db, directory="/elsewhere") == []
    assert await import_opencode(store, db, since=time.time() + 10**9) == []
    dry = await import_opencode(store, db, dry_run=True, directory="/tmp/oc/proj/")
    assert len(dry) == 7 and {r.outcome for r in dry} == {"would import"}
    assert (await store.list_sessions()).items == []


async def test_an_export_is_the_session_the_database_holds(store: Store, tmp_path: Path) -> None:
    (result,) = await import_opencode(store, copy(EXPORT, tmp_path))
    memory_store = MemoryStore()
    assert result.outcome == "imported" and result.session_id == tid(TWO_TOOLS) and result.problems == []
    await import_opencode(memory_store, copy(DB, tmp_path))
    from_export = [e.body for e in await store.read(tid(TWO_TOOLS))]
    from_db = [e.body for e in await memory_store.read(tid(TWO_TOOLS))]
    assert from_export == from_db
    again = {r.session_id: r.outcome for r in await import_opencode(store, tmp_path / DB.name)}
    assert again[tid(TWO_TOOLS)] == "unchanged"  # the same session, whichever way it came


async def test_a_json_file_that_is_not_an_export_says_what_it_has(store: Store, tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"info": {"id": "ses_1"}, "msgs": []}')
    (failed,) = await import_opencode(store, bad)
    assert failed.outcome == "failed" and "not an opencode export (info and messages); it has: info, msgs" in (
        failed.problems[0].reason
    )


async def test_states_and_errors_written_from_opencodes_schema(store: Store, tmp_path: Path) -> None:
    """Cases the scripted runs did not produce, written to message-v2.ts: a signed reasoning part, a tool
    left running by a killed opencode, an answer that failed with an API error, an edit mapped to tether's."""
    root = tmp_path / "storage"
    old = time.time() - 86400
    one_session(root, updated=old)
    at = int(old * 1000)
    answer = "msg_0002b"
    write_json(
        root / "message" / "ses_a1" / f"{answer}.json",
        {"id": answer, "sessionID": "ses_a1", "role": "assistant", "time": {"created": at}, "parentID": "msg_0001a",
         "modelID": "claude-sonnet-4", "providerID": "anthropic", "mode": "build", "agent": "build",
         "path": {"cwd": "/w", "root": "/w"}, "cost": 0.5,
         "tokens": {"input": 10, "output": 20, "reasoning": 5, "cache": {"read": 1, "write": 2}}},
    )  # fmt: skip
    parts = [
        {"type": "step-start"},
        {"type": "reasoning", "text": "Let me edit.", "metadata": {"anthropic": {"signature": "sig=="}},
         "time": {"start": at, "end": at + 1}},
        {"type": "tool", "callID": "toolu_1", "tool": "edit",
         "state": {"status": "completed", "input": {"filePath": "/w/a.py", "oldString": "x", "newString": "y"},
                   "output": "Edit applied.", "title": "a.py", "metadata": {"diff": "-x\n+y"},
                   "time": {"start": at + 2, "end": at + 3}}},
        {"type": "tool", "callID": "toolu_2", "tool": "bash",
         "state": {"status": "running", "input": {"command": "sleep 100", "timeout": 120000},
                   "time": {"start": at + 4}}},
    ]  # fmt: skip
    for i, part in enumerate(parts):
        write_json(root / "part" / answer / f"prt_{i}.json", {"id": f"prt_{i}", **part})
    failed = "msg_0003b"
    write_json(
        root / "message" / "ses_a1" / f"{failed}.json",
        {"id": failed, "sessionID": "ses_a1", "role": "assistant", "time": {"created": at + 10},
         "parentID": "msg_0001a", "modelID": "claude-sonnet-4", "providerID": "anthropic", "mode": "build",
         "agent": "build", "path": {"cwd": "/w", "root": "/w"}, "cost": 0,
         "tokens": {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}},
         "error": {"name": "APIError", "data": {"message": "overloaded", "statusCode": 529, "isRetryable": True}}},
    )  # fmt: skip
    result = (await import_opencode(store, root))[0]
    assert result.problems == []
    got = bodies(await store.read(tid("ses_a1")))
    assert [type(b).__name__ if not isinstance(b, Message) else b.role for b in got] == [
        "user", "assistant", "assistant", "tool", "Marker"
    ]  # fmt: skip
    step = got[2]
    assert step.parts[0] == ThinkingPart(text="Let me edit.", signature="sig==", provider="anthropic")
    edit, bash = step.parts[1], step.parts[2]
    assert edit.name == "edit" and edit.arguments == {"path": "/w/a.py", "old_string": "x", "new_string": "y"}
    assert bash.arguments == {"command": "sleep 100", "timeout_ms": 120000}
    assert step.metadata["opencode"]["tool_names"] == {"toolu_1": "edit", "toolu_2": "bash"}
    assert step.usage.cost == Decimal("0.5") and step.usage.cache_write_tokens == 2  # the message's own tokens
    done, interrupted = got[3].parts
    assert done.content == "Edit applied." and not done.is_error
    assert interrupted.is_error and "running" in interrupted.content and interrupted.metadata == {"status": "running"}
    assert got[4].name == ERROR_MARKER and got[4].data["error"]["data"]["statusCode"] == 529
    assert got[4].data["message"] == "APIError: overloaded"  # its text, to be shown


async def test_an_aborted_answer_keeps_what_it_had_then_says_why(store: Store, tmp_path: Path) -> None:
    """Esc while the answer streams: opencode keeps its parts and sets ``MessageAbortedError`` on it."""
    root = tmp_path / "storage"
    one_session(root, updated=time.time() - 86400)
    at = int((time.time() - 86400) * 1000)
    answer = "msg_0009b"
    write_json(
        root / "message" / "ses_a1" / f"{answer}.json",
        {"id": answer, "sessionID": "ses_a1", "role": "assistant", "time": {"created": at + 20},
         "parentID": "msg_0001a", "modelID": "m1", "providerID": "stub", "mode": "build", "agent": "build",
         "path": {"cwd": "/w", "root": "/w"}, "cost": 0,
         "tokens": {"input": 5, "output": 3, "reasoning": 0, "cache": {"read": 0, "write": 0}},
         "error": {"name": "MessageAbortedError", "data": {"message": "The operation was aborted."}}},
    )  # fmt: skip
    write_json(root / "part" / answer / "prt_0.json", {"id": "prt_0", "type": "text", "text": "Half an ans"})
    (result,) = await import_opencode(store, root)
    assert result.problems == []
    got = bodies(await store.read(tid("ses_a1")))
    partial, error = got[-2:]
    assert isinstance(partial, Message) and partial.text == "Half an ans" and partial.finish_reason == "error"
    assert isinstance(error, Marker) and error.name == ERROR_MARKER
    assert error.data["message"] == "MessageAbortedError: The operation was aborted."
    assert (await import_opencode(store, root))[0].outcome == "unchanged"  # and nothing twice


async def test_the_layout_before_storage_migration_1(store: Store, tmp_path: Path) -> None:
    """Each project's own storage/session/{info,message,part} (what opencode's first storage migration
    copied into the shared folder), made here from the 1.1.65 folder's records."""
    old = tmp_path / "project" / "p" / "storage"
    for info_file in (STORAGE / "session").glob("*/*.json"):
        sid = info_file.stem
        (old / "session" / "info").mkdir(parents=True, exist_ok=True)
        shutil.copy(info_file, old / "session" / "info" / info_file.name)
        for message in (STORAGE / "message" / sid).glob("*.json"):
            dest = old / "session" / "message" / sid
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(message, dest / message.name)
            for part in (STORAGE / "part" / message.stem).glob("*.json"):
                pdest = old / "session" / "part" / sid / message.stem
                pdest.mkdir(parents=True, exist_ok=True)
                shutil.copy(part, pdest / part.name)
    results = await import_opencode(store, old)
    assert len(results) == 6 and {r.outcome for r in results} == {"imported"}
    assert sum(r.entries for r in results) == 29  # as from the shared folder


async def test_messages_written_while_a_session_is_read(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """opencode writes on while tether reads: what arrives after a session's reading began is left for the
    next import (the JSON folder's listing, the database's read transaction), never half-taken or doubled."""
    from tether.importers import opencode_sources as opencode

    root = tmp_path / "storage"
    session = one_session(root, updated=time.time() - 86400)
    read = opencode.JsonStorage._read
    arrived: list[int] = []

    def reading(self: opencode.JsonStorage, path: Path, what: str) -> dict[str, Any] | None:
        if what == "message" and not arrived:
            arrived.append(1)
            add_turn(root, 2, int(time.time() * 1000) - 86_400_000)  # a whole turn lands mid-read
            touch(root, session, time.time() - 86400)
        return read(self, path, what)

    monkeypatch.setattr(opencode.JsonStorage, "_read", reading)
    assert (await import_opencode(store, root))[0].entries == 2
    assert (await import_opencode(store, root))[0].entries == 2
    assert len(await store.read(tid("ses_a1"))) == 4

    db = copy(DB, tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode = WAL")  # as opencode keeps it
    decode = opencode.SqliteStore._decode
    written: list[int] = []

    def decoding(self: opencode.SqliteStore, data: object, where: str, what: str) -> dict[str, Any] | None:
        if not written and BASH in where:
            written.append(1)
            with sqlite3.connect(db) as conn:  # another process's commit while tether's read is open
                conn.execute(
                    "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
                    ("msg_zzzzzzzzzzzz", BASH, 1, 1, json.dumps({"role": "user", "time": {"created": 1}})),
                )
                conn.execute(
                    "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                    ("prt_z", "msg_zzzzzzzzzzzz", BASH, 1, 1, json.dumps({"type": "text", "text": "late"})),
                )
                conn.execute("UPDATE session SET time_updated = 1 WHERE id = ?", (BASH,))
        return decode(self, data, where, what)

    monkeypatch.setattr(opencode.SqliteStore, "_decode", decoding)
    first = {r.session_id: r for r in await import_opencode(store, db)}
    assert written and first[tid(BASH)].entries == 4  # the session as it was when its reading began
    second = {r.session_id: r for r in await import_opencode(store, db)}
    assert second[tid(BASH)].entries == 1
    last = (await store.read(tid(BASH)))[-1].body
    assert last.parts == [TextPart(text="late")]


async def test_a_title_opencode_gives_later_is_a_title_change(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "storage"
    session = one_session(root, updated=time.time() - 86400)
    session["title"] = "New session - 2025-11-02T09:00:00.000Z"  # before opencode's title request answers
    write_json(root / "session" / "p1" / "ses_a1.json", session)
    await import_opencode(store, root)
    session["title"] = "Fix the flaky test"
    touch(root, session, time.time() - 86000)
    result = (await import_opencode(store, root))[0]
    assert result.outcome == "grown" and result.entries == 1
    last = (await store.read(tid("ses_a1")))[-1].body
    assert isinstance(last, TitleChange) and last.title == "Fix the flaky test"
    assert (await store.get_session(tid("ses_a1"))).title == "Fix the flaky test"
    assert (await import_opencode(store, root))[0].outcome == "unchanged"
