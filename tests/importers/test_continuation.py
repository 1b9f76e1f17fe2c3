"""tether's own Claude Code and Codex exports coming back through the importers: an export with nothing new adds
nothing; the lines the tool appended (the session continued there) land in the original session, or in a fork
of it at the export point when it was continued in tether too; an export from another store is a copy. Lines
are appended the way each tool writes them (Claude Code: chained by ``parentUuid`` to the last line; Codex:
response items closed by a token count)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tether.importers.claude_code import import_claude_code
from tether.importers.codex import import_codex
from tether.importers.continuation import CONTINUED
from tether.importers.jsonl import FileResult
from tether.messages import Message, TextPart
from tether.store import Store
from tether.store.memory import MemoryStore

FORMATS = ["claude-code", "codex"]
TURN = {"claude-code": 2, "codex": 3}
"""Entries a turn of `append_turn` makes: the prompt and the answer, and in Codex its turn context (a marker)."""


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]  # U+2028 is no break


def append_turn(path: Path, fmt: str, prompt: str, answer: str, *, parent: str | None = None) -> None:
    """One user turn and the model's answer, written after the file's lines as the tool writes them
    (`TURN` entries in tether). Claude Code: `parent` is the line the turn follows (default: the last one
    with an id)."""
    lines = lines_of(path)
    with path.open("a", encoding="utf-8") as f:
        if fmt == "claude-code":
            last = [ln for ln in lines if "uuid" in ln][-1]
            user, assistant = str(uuid.uuid4()), str(uuid.uuid4())
            common = {"isSidechain": False, "userType": "external", "cwd": last.get("cwd", "/w"),
                      "sessionId": last["sessionId"], "version": "2.0.30"}  # fmt: skip
            f.write(json.dumps({"parentUuid": parent or last["uuid"], **common, "type": "user",
                                "message": {"role": "user", "content": prompt}, "uuid": user,
                                "timestamp": "2030-01-01T00:00:00.000Z"}) + "\n")  # fmt: skip
            message = {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
                       "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": answer}],
                       "stop_reason": "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip
            f.write(json.dumps({"parentUuid": user, **common, "type": "assistant", "message": message,
                                "requestId": f"req_{uuid.uuid4().hex[:12]}", "uuid": assistant,
                                "timestamp": "2030-01-01T00:00:01.000Z"}) + "\n")  # fmt: skip
            return
        at = "2030-01-01T00:00:00.000Z"
        usage = {"input_tokens": 10, "output_tokens": 5}
        said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}
        asked = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}
        for kind, payload in [
            ("turn_context", {"cwd": "/w", "model": "gpt-5-codex", "approval_policy": "never"}),
            ("response_item", asked),
            ("event_msg", {"type": "user_message", "message": prompt, "images": []}),
            ("response_item", said),
            ("event_msg", {"type": "agent_message", "message": answer}),
            ("event_msg", {"type": "token_count", "info": {"last_token_usage": usage}}),
        ]:
            f.write(json.dumps({"timestamp": at, "type": kind, "payload": payload}) + "\n")


async def import_file(store: Store, path: Path, fmt: str, *, dry_run: bool = False) -> FileResult:
    importer = import_claude_code if fmt == "claude-code" else import_codex
    result = await importer(store, path, dry_run=dry_run)
    assert not result.problems, result.problems
    return result


async def texts(store: Store, session_id: str) -> list[tuple[str, str]]:
    return [
        (e.body.role, "".join(p.text for p in e.body.parts if isinstance(p, TextPart)))
        for e in await store.read(session_id)
        if isinstance(e.body, Message)
    ]


async def session_count(store: Store) -> int:
    return len((await store.list_sessions(limit=1000)).items)


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_an_export_with_nothing_new_adds_nothing(
    store: Store, tmp_path: Path, folder: Path, rt: Any, fmt: str
) -> None:
    sid = await rt.loop_session(store, tmp_path)
    before = await store.get_session(sid)
    path, _ = await rt.export_to(store, sid, fmt, folder)
    for _ in range(2):
        result = await import_file(store, path, fmt)
        assert result.outcome == "unchanged" and result.entries == 0 and result.session_id == sid
        assert result.note == f"exported from tether session {sid}, unchanged"
    assert await session_count(store) == 1
    after = await store.get_session(sid)
    assert after.entry_count == before.entry_count and after.updated_at == before.updated_at  # not even touched


async def test_what_the_tool_added_is_appended_to_the_original(
    store: Store, tmp_path: Path, folder: Path, rt: Any, fmt: str
) -> None:
    sid = await rt.loop_session(store, tmp_path)  # reverts and a compaction: the export's lines are not its entries
    exported = await store.get_session(sid)
    path, _ = await rt.export_to(store, sid, fmt, folder)
    append_turn(path, fmt, "continue in the tool", "continued")

    preview = await import_file(store, path, fmt, dry_run=True)
    n = TURN[fmt]
    assert preview.outcome == "would append" and preview.entries == n and preview.session_id == sid
    assert (
        preview.note
        == f"exported from tether session {sid}, continued in {tool(fmt)}: {n} entries would append to {sid}"
    )
    assert (await store.get_session(sid)).entry_count == exported.entry_count  # a dry run writes nothing

    result = await import_file(store, path, fmt)
    assert result.outcome == "grown" and result.entries == n and result.sessions == [sid]
    assert result.note == f"exported from tether session {sid}, continued in {tool(fmt)}: {n} entries appended to {sid}"
    assert await session_count(store) == 1  # no copy
    got = await texts(store, sid)
    assert got[-2:] == [("user", "continue in the tool"), ("assistant", "continued")]
    assert (await store.get_session(sid)).entry_count == exported.entry_count + n

    again = await import_file(store, path, fmt)  # idempotent
    assert again.outcome == "unchanged" and again.entries == 0
    assert (await store.get_session(sid)).entry_count == exported.entry_count + n

    append_turn(path, fmt, "and more", "more")  # only what is new, the next time
    more = await import_file(store, path, fmt)
    assert more.outcome == "grown" and more.entries == n
    assert (await texts(store, sid))[-4:] == [
        ("user", "continue in the tool"), ("assistant", "continued"), ("user", "and more"), ("assistant", "more"),
    ]  # fmt: skip
    record = (await store.get_session(sid)).metadata[CONTINUED]
    assert len(record) == 1 and next(iter(record.values()))["into"] == sid


async def test_continued_in_tether_too_the_tools_continuation_is_a_fork(
    store: Store, tmp_path: Path, folder: Path, rt: Any, fmt: str
) -> None:
    sid = await rt.loop_session(store, tmp_path, compact=False)
    exported = await store.get_session(sid)
    path, _ = await rt.export_to(store, sid, fmt, folder)
    append_turn(path, fmt, "in the tool", "tool's answer")
    await store.append(sid, [Message.user("in tether"), Message.assistant("tether's answer")])  # diverged

    n = TURN[fmt]
    preview = await import_file(store, path, fmt, dry_run=True)
    assert preview.outcome == "would import" and preview.entries == n and await session_count(store) == 1
    assert preview.note is not None and f"would fork {sid} at entry {exported.entry_count} as " in preview.note
    result = await import_file(store, path, fmt)
    assert result.outcome == "imported" and result.entries == n
    fork = result.session_id
    assert fork is not None and fork != sid and result.sessions == [fork]
    assert result.note == (
        f"exported from tether session {sid}, continued in {tool(fmt)} and in tether since the export: forked "
        f"{sid} at entry {exported.entry_count} as {fork} for {tool(fmt)}'s {n} entries"
    )
    info = await store.get_session(fork)
    assert info.forked_from == sid and info.forked_at == exported.entry_count
    assert info.entry_count == exported.entry_count + n
    assert info.title == f"{exported.title} (continued in {tool(fmt)})"
    assert (await texts(store, fork))[-2:] == [("user", "in the tool"), ("assistant", "tool's answer")]
    assert (await texts(store, sid))[-2:] == [("user", "in tether"), ("assistant", "tether's answer")]  # untouched

    assert (await import_file(store, path, fmt)).outcome == "unchanged"  # idempotent: no second fork
    append_turn(path, fmt, "still in the tool", "yes")
    more = await import_file(store, path, fmt)
    assert more.outcome == "grown" and more.session_id == fork and more.entries == n  # the fork goes on
    assert await session_count(store) == 2
    assert (await store.get_session(sid)).entry_count == exported.entry_count + 2


async def test_an_export_from_another_store_is_a_copy(tmp_path: Path, folder: Path, rt: Any, fmt: str) -> None:
    mine, theirs = MemoryStore(), MemoryStore()
    sid = await rt.loop_session(mine, tmp_path, compact=False)
    path, _ = await rt.export_to(mine, sid, fmt, folder)
    append_turn(path, fmt, "continued elsewhere", "ok")
    result = await import_file(theirs, path, fmt)
    assert result.outcome == "imported" and result.session_id != sid
    assert result.note == f"exported from tether session {sid}, which is not in this store: a copy"
    assert result.session_id is not None
    copy = await theirs.get_session(result.session_id)
    assert copy.metadata["imported"]["exported_from"] == sid
    assert (await texts(theirs, copy.id))[-2:] == [("user", "continued elsewhere"), ("assistant", "ok")]
    assert (await import_file(theirs, path, fmt)).outcome == "unchanged"


async def test_a_deleted_fork_sends_the_tools_lines_back_to_the_original(
    store: Store, tmp_path: Path, folder: Path, rt: Any, fmt: str
) -> None:
    sid = await rt.loop_session(store, tmp_path, compact=False)
    exported = await store.get_session(sid)
    path, _ = await rt.export_to(store, sid, fmt, folder)
    append_turn(path, fmt, "in the tool", "tool's answer")
    await store.append(sid, [Message.user("in tether")])
    fork = (await import_file(store, path, fmt)).session_id
    assert fork is not None and fork != sid
    await store.delete_session(fork)
    append_turn(path, fmt, "more", "more")
    again = await import_file(store, path, fmt)  # the original moved on: a fork again, with every tool line
    assert again.outcome == "imported" and again.entries == 2 * TURN[fmt] and again.session_id not in (sid, None)
    assert again.session_id is not None
    assert (await store.get_session(again.session_id)).entry_count == exported.entry_count + 2 * TURN[fmt]


async def test_a_rewritten_export_is_refused(store: Store, tmp_path: Path, folder: Path, rt: Any, fmt: str) -> None:
    sid = await rt.loop_session(store, tmp_path, compact=False)
    path, _ = await rt.export_to(store, sid, fmt, folder)
    append_turn(path, fmt, "in the tool", "tool's answer")
    assert (await import_file(store, path, fmt)).outcome == "grown"
    exported = path.read_bytes().split(b"\n")[: len(lines_of(path)) - (2 if fmt == "claude-code" else 6)]
    path.write_bytes(b"\n".join(exported) + b"\n")  # the tool's lines replaced by a shorter turn
    append_turn(path, fmt, "x", "y")
    importer = import_claude_code if fmt == "claude-code" else import_codex
    result = await importer(store, path)
    assert result.outcome == "failed"
    assert "rewritten since it was imported back" in result.problems[-1].reason


async def test_a_claude_code_branch_from_an_exported_line_forks_at_its_entry(
    store: Store, tmp_path: Path, folder: Path
) -> None:
    from tether.importers.claude_code_export import export_claude_code

    info = await store.create_session(directory=str(tmp_path))
    await store.append(info.id, [Message.user("one"), Message.assistant("1"), Message.user("two"),
                                 Message.assistant("2")])  # fmt: skip
    path = folder / "x.jsonl"
    with path.open("wb") as f:
        report = await export_claude_code(store, info.id, f)
    path = path.rename(folder / f"{report.target_id}.jsonl")
    second = lines_of(path)[1]  # Claude Code's rewind: a new turn after the first answer
    append_turn(path, "claude-code", "two, again", "2 again", parent=second["uuid"])
    result = await import_file(store, path, "claude-code")
    assert result.entries == 2 and len(result.sessions) == 1 and result.sessions[0] != info.id
    branch = await store.get_session(result.sessions[0])
    assert branch.forked_from == info.id and branch.forked_at == 2
    assert await texts(store, branch.id) == [("user", "one"), ("assistant", "1"), ("user", "two, again"),
                                             ("assistant", "2 again")]  # fmt: skip
    assert (await store.get_session(info.id)).entry_count == 4


def tool(fmt: str) -> str:
    return "Claude Code" if fmt == "claude-code" else "Codex"


async def test_watching_brings_the_tools_turns_back_once(store: Store, tmp_path: Path, folder: Path, rt: Any) -> None:
    from tether.importers.watch import Watcher

    sid = await rt.loop_session(store, tmp_path, compact=False)
    exported = await store.get_session(sid)
    claude, _ = await rt.export_to(store, sid, "claude-code", folder)
    codex, _ = await rt.export_to(store, sid, "codex", folder)
    watcher = Watcher(lambda: [(claude, None), (codex, None)])
    first = await watcher.round(store)
    assert [(r.outcome, r.entries, r.session_id) for r in first] == [("unchanged", 0, sid)] * 2
    append_turn(claude, "claude-code", "from Claude Code", "cc")
    second = await watcher.round(store)
    assert [(r.format, r.outcome, r.entries) for r in second] == [("claude-code", "grown", 2)]
    assert await watcher.round(store) == []  # nothing changed: nothing read
    append_turn(codex, "codex", "from Codex", "cx")  # the original moved on (Claude Code's turn): a fork
    third = await watcher.round(store)
    assert [(r.format, r.outcome, r.entries) for r in third] == [("codex", "imported", 3)]
    assert third[0].session_id != sid and await session_count(store) == 2
    assert (await store.get_session(sid)).entry_count == exported.entry_count + 2
    append_turn(claude, "claude-code", "again", "cc2")
    append_turn(codex, "codex", "again", "cx2")
    fourth = await watcher.round(store)
    assert [(r.outcome, r.entries, r.session_id) for r in fourth] == [
        ("grown", 2, sid), ("grown", 3, third[0].session_id),
    ]  # fmt: skip


def record_again(path: Path) -> str:
    """What Claude Code (2.0.30) writes when it resumes a session whose messages have several blocks: every
    message after the first is written again, one line per block, under new ids, chained from the first
    line. The id of the last line it writes."""
    lines = [ln for ln in lines_of(path) if ln.get("type") in ("user", "assistant") and "uuid" in ln]
    parent = lines[0]["uuid"]
    with path.open("a", encoding="utf-8") as f:
        for ln in lines[1:]:
            content = ln["message"]["content"]
            for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
                again = {k: v for k, v in ln.items() if k != "tether"}
                again.update({"uuid": str(uuid.uuid4()), "parentUuid": parent,
                              "message": {**ln["message"], "content": [block]}})  # fmt: skip
                f.write(json.dumps(again) + "\n")
                parent = again["uuid"]
    return parent


async def test_messages_claude_code_writes_again_are_not_imported_again(
    store: Store, tmp_path: Path, folder: Path, rt: Any
) -> None:
    sid = await rt.loop_session(store, tmp_path, compact=False)  # an assistant message of four blocks
    exported = await store.get_session(sid)
    path, _ = await rt.export_to(store, sid, "claude-code", folder)
    last = record_again(path)
    append_turn(path, "claude-code", "go on", "going", parent=last)
    result = await import_file(store, path, "claude-code")
    assert result.outcome == "grown" and result.entries == 2 and result.sessions == [sid]
    assert (await texts(store, sid))[-3:] == [("assistant", "still here"), ("user", "go on"), ("assistant", "going")]
    assert (await store.get_session(sid)).entry_count == exported.entry_count + 2
    assert (await import_file(store, path, "claude-code")).outcome == "unchanged"
    append_turn(path, "claude-code", "more", "more")  # after the turn: appended the same way
    assert (await import_file(store, path, "claude-code")).entries == 2
    assert await session_count(store) == 1


async def test_an_import_killed_after_writing_is_taken_up_not_forked(
    store: Store, tmp_path: Path, folder: Path, rt: Any, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.importers.claude_code as claude_code_module
    import tether.importers.codex as codex_module

    sid = await rt.loop_session(store, tmp_path, compact=False)
    exported = await store.get_session(sid)
    path, _ = await rt.export_to(store, sid, fmt, folder)
    append_turn(path, fmt, "in the tool", "tool's answer")

    async def killed(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process dies after the entries are in, before it says how far it got

    module = claude_code_module if fmt == "claude-code" else codex_module
    with monkeypatch.context() as patched:
        patched.setattr(module, "record_continuation", killed)
        with pytest.raises(KeyboardInterrupt):
            await import_file(store, path, fmt)
    assert (await store.get_session(sid)).entry_count == exported.entry_count + TURN[fmt]
    again = await import_file(store, path, fmt)
    assert again.outcome == "unchanged" and again.entries == 0 and again.session_id == sid  # not a fork
    assert await session_count(store) == 1
    append_turn(path, fmt, "more", "more")
    assert (await import_file(store, path, fmt)).entries == TURN[fmt]
    await store.append(sid, [Message.user("in tether")])  # tether's own entry: a later turn makes a fork
    append_turn(path, fmt, "and more", "more")
    forked = await import_file(store, path, fmt)
    assert forked.outcome == "imported" and forked.session_id != sid


async def test_a_sub_agent_claude_code_ran_in_the_continuation_is_a_child_of_the_original(
    store: Store, tmp_path: Path, folder: Path, rt: Any
) -> None:
    from tether.importers.sources import files_under
    from tether.importers.sources import import_file as import_any

    sid = await rt.loop_session(store, tmp_path, compact=False)
    path, report = await rt.export_to(store, sid, "claude-code", folder)
    append_turn(path, "claude-code", "plan it with a sub-agent", "planned")
    agent = folder / report.target_id / "subagents" / "agent-a1.jsonl"
    agent.parent.mkdir(parents=True)
    line = {"parentUuid": None, "isSidechain": True, "userType": "external", "cwd": str(tmp_path),
            "sessionId": report.target_id, "agentId": "a1", "type": "user", "uuid": str(uuid.uuid4()),
            "timestamp": "2030-01-01T00:00:00.000Z", "message": {"role": "user", "content": "make a plan"}}  # fmt: skip
    agent.write_text(json.dumps(line) + "\n")
    results = [await import_any(store, str(p)) for p in files_under(folder)]
    assert [(r.outcome, r.entries) for r in results] == [("grown", 2), ("imported", 1)]
    child = results[1].session_id
    assert child is not None and (await store.get_session(child)).parent_id == sid
    assert await session_count(store) == 2
