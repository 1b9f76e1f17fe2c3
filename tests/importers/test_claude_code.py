"""Claude Code transcripts: what each kind of line becomes, branches as forks, sub-agents as child
sessions, compaction, images, thinking with signatures, bad lines, and importing again (nothing new; grown;
interrupted). Transcripts are built here line by line in Claude Code's schema (the fields of daaain/
claude-code-log's models and of real files); the shared samples run through the same code at the end."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tether.importers.claude_code import import_claude_code
from tether.importers.jsonl import source_session_id
from tether.messages import (
    ERROR_MARKER,
    Compaction,
    ImagePart,
    Marker,
    Message,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
)
from tether.store import UNSET, Store
from tether.store.records import IMPORTED

from .conftest import FIXTURES, assert_round_trip, export_to, json_lines

SID = "5d4f6c1e-8a52-4b0e-9e1c-1f2a3b4c5d6e"
CWD = "/home/dev/app"


def line(uuid: str | None, parent: str | None, kind: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": CWD,
        "sessionId": SID,
        "version": "1.0.80",
        "gitBranch": "main",
        "type": kind,
        "timestamp": f"2025-08-01T10:00:{len(str(uuid)) % 60:02d}.000Z",
    }
    if uuid is not None:
        out["uuid"] = uuid
    out.update(fields)
    return out


def user(uuid: str, parent: str | None, text: str | list[Any], **fields: Any) -> dict[str, Any]:
    return line(uuid, parent, "user", message={"role": "user", "content": text}, **fields)


def assistant(
    uuid: str, parent: str | None, blocks: list[Any], *, msg_id: str = "msg_1", **fields: Any
) -> dict[str, Any]:
    message = {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-20250514",
        "content": blocks,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 1000,
            "output_tokens": 50,
        },
    }
    return line(uuid, parent, "assistant", message=message, requestId=f"req_{msg_id}", **fields)


def write(path: Path, lines: list[Any], *, tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for item in lines:
            f.write(json.dumps(item).encode() + b"\n")
        f.write(tail)
    return path


def append(path: Path, lines: list[Any]) -> None:
    with open(path, "ab") as f:
        for item in lines:
            f.write(json.dumps(item).encode() + b"\n")


async def bodies(store: Store, session_id: str) -> list[Any]:
    return [e.body for e in await store.read(session_id)]


def conversation() -> list[dict[str, Any]]:
    return [
        user("u1", None, "Read the config and fix the port"),
        assistant(
            "a1", "u1",
            [{"type": "thinking", "thinking": "Let me read it.", "signature": "sig-abc=="}],
            msg_id="msg_1",
        ),
        assistant(
            "a2", "a1",
            [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/home/dev/app/cfg.toml"}}],
            msg_id="msg_1",
        ),
        user(
            "u2", "a2",
            [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "port = 80"}],
            toolUseResult={"type": "text", "file": {"filePath": "/home/dev/app/cfg.toml", "content": "port = 80"}},
        ),
        assistant(
            "a3", "u2",
            [{"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "make", "timeout": 60000}}],
            msg_id="msg_2",
        ),
        user("u3", "a3", [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "make: *** failed", "is_error": True}]),
        assistant("a4", "u3", [{"type": "text", "text": "The build fails; port fixed."}], msg_id="msg_3"),
    ]  # fmt: skip


async def test_a_conversation_becomes_one_session_with_every_part(store: Store, tmp_path: Path) -> None:
    path = write(tmp_path / "proj" / f"{SID}.jsonl", conversation())
    result = await import_claude_code(store, path)
    assert result.outcome == "imported" and result.problems == [] and result.entries == 7
    info = await store.get_session(source_session_id("claude-code", SID))
    assert info.directory == CWD and info.model == "claude-sonnet-4-20250514"
    assert info.metadata[IMPORTED]["tool"] == "claude-code"
    assert info.metadata[IMPORTED]["source_id"] == SID and info.metadata[IMPORTED]["path"] == str(path)
    got = await bodies(store, info.id)
    assert [(b.role, [type(p).__name__ for p in b.parts]) for b in got] == [
        ("user", ["TextPart"]),
        ("assistant", ["ThinkingPart"]),
        ("assistant", ["ToolCallPart"]),
        ("tool", ["ToolResultPart"]),
        ("assistant", ["ToolCallPart"]),
        ("tool", ["ToolResultPart"]),
        ("assistant", ["TextPart"]),
    ]
    assert got[1].parts[0] == ThinkingPart(text="Let me read it.", signature="sig-abc==", provider="anthropic")
    read = got[2].parts[0]
    assert read == ToolCallPart(id="toolu_1", name="read", arguments={"path": "/home/dev/app/cfg.toml"})
    assert got[2].metadata["claude_code"]["tool_names"] == {"toolu_1": "Read"}
    assert got[3].parts[0] == ToolResultPart(call_id="toolu_1", content="port = 80", name="read")
    assert got[3].metadata["claude_code"]["toolUseResult"]["file"]["content"] == "port = 80"
    assert got[4].parts[0].arguments == {"command": "make", "timeout": 60}  # Claude Code's ms, tether's seconds
    assert got[5].parts[0].is_error and got[5].parts[0].content == "make: *** failed"
    # usage is counted once per API message although Claude Code repeats it on each streamed line: on the
    # message's last line, whose counts are final
    assert [b.usage is not None for b in got if b.role == "assistant"] == [False, True, True, True]
    assert got[2].usage.input_tokens == 1110 and got[2].usage.cache_read_tokens == 1000
    assert info.input_tokens == 3 * 1110 and info.output_tokens == 150
    entries = await store.read(info.id)
    assert entries[0].created_at == pytest.approx(1754042402.0)  # the source's time, not the import's


async def test_importing_again_unchanged_grown_and_interrupted(store: Store, tmp_path: Path) -> None:
    path = write(tmp_path / f"{SID}.jsonl", conversation()[:4])
    first = await import_claude_code(store, path)
    assert first.outcome == "imported" and first.entries == 4
    again = await import_claude_code(store, path)
    assert again.outcome == "unchanged" and again.entries == 0
    append(path, conversation()[4:])
    grown = await import_claude_code(store, path)
    assert grown.outcome == "grown" and grown.entries == 3
    sid = source_session_id("claude-code", SID)
    got = await bodies(store, sid)
    assert len(got) == 7 and got[-1].text == "The build fails; port fixed."
    info = await store.get_session(sid)
    assert info.output_tokens == 150  # the message split over the two imports is not counted twice
    # an import cut off after writing, before recording where it stopped: the next one writes nothing twice
    mark = {k: v for k, v in info.metadata[IMPORTED].items() if k not in ("offset", "size", "head", "entries")}
    await store.update_session(sid, metadata={**info.metadata, IMPORTED: mark})
    redo = await import_claude_code(store, path)
    assert redo.outcome == "grown" and redo.entries == 0
    assert len(await bodies(store, sid)) == 7
    assert (await import_claude_code(store, path)).outcome == "unchanged"  # and where it stopped is recorded


async def test_a_rewritten_file_is_refused_and_a_continued_session_is_not_appended(
    store: Store, tmp_path: Path
) -> None:
    path = write(tmp_path / f"{SID}.jsonl", conversation()[:3])
    await import_claude_code(store, path)
    write(path, [user("x1", None, "something else entirely"), *conversation()[:3]])
    result = await import_claude_code(store, path)
    assert result.outcome == "failed" and "rewritten" in result.problems[-1].reason
    write(path, conversation()[:3])
    sid = source_session_id("claude-code", SID)
    info = await store.get_session(sid)
    mark = {**info.metadata[IMPORTED], "confirmed": 1.0}  # a person ran it in tether...
    await store.update_session(sid, metadata={**info.metadata, IMPORTED: mark})
    await store.append(sid, [Message.user("continued here")])  # ...and it went on
    append(path, conversation()[3:])
    result = await import_claude_code(store, path)
    assert result.outcome == "failed" and "continued in tether" in result.problems[-1].reason
    assert (await store.get_session(sid)).entry_count == 4


async def test_branches_become_forks_of_the_main_line(store: Store, tmp_path: Path) -> None:
    lines = [
        user("u1", None, "first question"),
        assistant("a1", "u1", [{"type": "text", "text": "first answer"}], msg_id="m1"),
        user("u2", "a1", "follow-up A"),
        assistant("a2", "u2", [{"type": "text", "text": "answer A"}], msg_id="m2"),
        user("u2b", "a1", "follow-up B, edited"),  # "redo from here": a second child of a1
        assistant("a2b", "u2b", [{"type": "text", "text": "answer B"}], msg_id="m3"),
        {"type": "summary", "summary": "Questions, answered twice", "leafUuid": "a2b"},
    ]
    path = write(tmp_path / f"{SID}.jsonl", lines)
    result = await import_claude_code(store, path)
    assert result.outcome == "imported" and len(result.sessions) == 2
    main_id = source_session_id("claude-code", SID)
    main = await bodies(store, main_id)
    assert [b.text for b in main] == ["first question", "first answer", "follow-up A", "answer A"]
    forks = [s for s in (await store.list_sessions(parent_id=UNSET)).items if s.forked_from == main_id]
    assert len(forks) == 1 and forks[0].forked_at == 2
    fork = await bodies(store, forks[0].id)
    assert [getattr(b, "text", None) for b in fork[:4]] == [
        "first question",
        "first answer",
        "follow-up B, edited",
        "answer B",
    ]
    assert fork[4] == TitleChange(title="Questions, answered twice")
    # a branch made after the import is appended as a fork the next time
    append(
        path, [user("u2c", "a1", "third try"), assistant("a2c", "u2c", [{"type": "text", "text": "C"}], msg_id="m4")]
    )
    again = await import_claude_code(store, path)
    assert again.outcome == "grown" and again.entries == 2
    forks = [s for s in (await store.list_sessions(parent_id=UNSET)).items if s.forked_from == main_id]
    assert len(forks) == 2
    assert len(await bodies(store, main_id)) == 4
    assert (await import_claude_code(store, path)).outcome == "unchanged"


async def test_sidechains_and_subagent_files_are_child_sessions(store: Store, tmp_path: Path) -> None:
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task", "input": {"description": "look", "prompt": "Find the bug", "subagent_type": "general-purpose"}}  # fmt: skip
    lines = [
        user("u1", None, "hunt the bug"),
        assistant("a1", "u1", [task], msg_id="m1"),
        {**user("s1", None, "Find the bug"), "isSidechain": True},
        {**assistant("s2", "s1", [{"type": "text", "text": "found it in x.py"}], msg_id="m2"), "isSidechain": True},
        user("u2", "a1", [{"type": "tool_result", "tool_use_id": "toolu_task", "content": "found it in x.py"}]),
    ]
    project = tmp_path / "-home-dev-app"
    path = write(project / f"{SID}.jsonl", lines)
    result = await import_claude_code(store, path)
    assert result.outcome == "imported" and result.problems == []
    main_id = source_session_id("claude-code", SID)
    assert [b.text for b in await bodies(store, main_id)] == ["hunt the bug", "", ""]
    children = (await store.list_sessions(parent_id=main_id)).items
    assert len(children) == 1
    assert children[0].metadata["task"]["call_id"] == "toolu_task"  # linked by the Task call's prompt
    assert [b.text for b in await bodies(store, children[0].id)] == ["Find the bug", "found it in x.py"]
    # a newer sub-agent file, <session>/subagents/agent-<id>.jsonl, linked by the toolUseResult's agentId
    append(path, [
        assistant("a5", "u2", [{**task, "id": "toolu_t2"}], msg_id="m5"),
        user("u6", "a5", [{"type": "tool_result", "tool_use_id": "toolu_t2", "content": "done"}],
             toolUseResult={"status": "completed", "agentId": "a1b2c3d4", "content": [{"type": "text", "text": "done"}]}),
    ])  # fmt: skip
    await import_claude_code(store, path)
    agent_lines = [
        {**user("g1", None, "Find the bug"), "isSidechain": True, "agentId": "a1b2c3d4"},
        {**assistant("g2", "g1", [{"type": "text", "text": "done"}], msg_id="m6"), "isSidechain": True, "agentId": "a1b2c3d4"},
    ]  # fmt: skip
    agent_path = write(project / SID / "subagents" / "agent-a1b2c3d4.jsonl", agent_lines)
    result = await import_claude_code(store, agent_path)
    assert result.outcome == "imported"
    child = await store.get_session(result.session_id or "")
    assert child.parent_id == main_id and child.metadata["task"] == {"agent_id": "a1b2c3d4", "call_id": "toolu_t2"}
    assert [b.text for b in await bodies(store, child.id)] == ["Find the bug", "done"]


async def test_compaction_images_titles_and_unknown_lines(store: Store, tmp_path: Path) -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    lines = [
        user("u1", None, [{"type": "text", "text": "what is in this?"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]),
        assistant("a1", "u1", [{"type": "text", "text": "a cat"}, {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "cats"}}], msg_id="m1"),
        line("b1", None, "system", subtype="compact_boundary", content="Conversation compacted", logicalParentUuid="a1",
             compactMetadata={"trigger": "auto", "preTokens": 155000}),
        user("c1", "b1", "This session is being continued from a previous conversation. Summary: a cat.",
             isCompactSummary=True, isVisibleInTranscriptOnly=True),
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {"trackedFileBackups": {}}, "isSnapshotUpdate": False},
        {"type": "a-type-from-the-future", "uuid": "f1", "parentUuid": "c1", "sessionId": SID, "data": [1, 2]},
        user("u9", "f1", "and now?"),
        {"type": "custom-title", "customTitle": "Cat pictures", "sessionId": SID},
    ]  # fmt: skip
    path = write(tmp_path / f"{SID}.jsonl", lines)
    result = await import_claude_code(store, path)
    assert result.outcome == "imported" and result.problems == []
    sid = source_session_id("claude-code", SID)
    got = await bodies(store, sid)
    assert got[0].parts[1] == ImagePart(media_type="image/png", data=b"\x89PNG fake")
    assert got[1].metadata["claude_code"]["blocks"][0]["block"]["type"] == "server_tool_use"  # kept, not dropped
    assert isinstance(got[2], Marker) and got[2].name == "claude-code.system"
    assert got[3] == Compaction(
        summary="This session is being continued from a previous conversation. Summary: a cat.",
        first_kept_seq=4, strategy="claude-code", tokens_before=155000, metadata=got[3].metadata,
    )  # fmt: skip
    assert got[4].name == "claude-code.file-history-snapshot" and got[4].data["raw"]["messageId"] == "u1"
    assert got[5].name == "claude-code.a-type-from-the-future" and got[5].data["raw"]["data"] == [1, 2]
    assert got[6] == Message(role="user", parts=[TextPart(text="and now?")], metadata=got[6].metadata)
    assert got[7] == TitleChange(title="Cat pictures")
    assert (await store.get_session(sid)).title == "Cat pictures"


async def test_bad_lines_are_reported_by_line_and_the_rest_imported(store: Store, tmp_path: Path) -> None:
    good = conversation()
    path = tmp_path / f"{SID}.jsonl"
    path.write_bytes(
        b"\n".join(json.dumps(x).encode() for x in good[:2]) + b"\n{not json at all\n42\n"
        + b"\n".join(json.dumps(x).encode() for x in good[2:4]) + b'\n{"type": "user", "uuid": "cut'
    )  # fmt: skip
    result = await import_claude_code(store, path)
    assert result.outcome == "imported" and result.entries == 5
    reasons = {p.line: p.reason for p in result.problems}
    assert set(reasons) == {3, 4, 7}
    assert reasons[3].startswith("not JSON") and "kept as a marker" in reasons[4] and "cut short" in reasons[7]
    assert all(p.path == str(path) for p in result.problems)
    # the cut line is completed later: it is imported then, the others are not written twice
    with open(path, "ab") as f:
        f.write(
            b'-1", "parentUuid": "u2", "sessionId": "%s", "message": {"role": "user", "content": "done"}}\n'
            % SID.encode()
        )
    again = await import_claude_code(store, path)
    assert again.outcome == "grown" and again.entries == 1
    assert [p.line for p in again.problems] == [3, 4]
    assert (await bodies(store, source_session_id("claude-code", SID)))[-1].text == "done"


async def test_dry_run_writes_nothing(store: Store, tmp_path: Path) -> None:
    path = write(tmp_path / f"{SID}.jsonl", conversation())
    result = await import_claude_code(store, path, dry_run=True)
    assert result.outcome == "would import" and result.entries == 7
    assert (await store.list_sessions(parent_id=UNSET)).items == []


def samples_dir() -> Path:
    """The shared Claude Code samples: $TETHER_CLAUDE_SAMPLES, else ../shared/data/claude-code-samples next to
    the repository. A folder named by the variable must be there; the default one is the project's shared
    data, which a clone elsewhere does not have: this test is then skipped, saying how to get it (the
    transcripts written line by line above cover the same code)."""
    configured = os.environ.get("TETHER_CLAUDE_SAMPLES")
    path = Path(configured) if configured else Path(__file__).resolve().parents[3] / "shared/data/claude-code-samples"
    how = (
        "set TETHER_CLAUDE_SAMPLES to a folder of Claude Code .jsonl transcripts (the project uses "
        "daaain/claude-code-log's test/test_data, MIT, kept in ../shared/data/claude-code-samples next to the "
        "repository)"
    )
    if not path.is_dir():
        if configured:
            pytest.fail(f"TETHER_CLAUDE_SAMPLES={configured} is not a folder: {how}")
        pytest.skip(f"no Claude Code samples at {path}: {how}")
    return path


async def test_the_shared_samples_import_whole_and_again_unchanged(store: Store) -> None:
    files = sorted(samples_dir().glob("*.jsonl"))
    assert files
    for path in files:
        lines = [ln for ln in path.read_bytes().split(b"\n") if ln.strip()]
        result = await import_claude_code(store, path)
        assert result.outcome == "imported", result.problems
        # every non-empty line lands somewhere: an entry, or a problem that names it
        parseable = 0
        for raw in lines:
            try:
                json.loads(raw)
                parseable += 1
            except ValueError:
                pass
        written = [(await store.get_session(s)).entry_count for s in result.sessions]
        assert sum(written) == parseable
        assert len([p for p in result.problems if p.reason.startswith("not JSON")]) == len(lines) - parseable
        assert (await import_claude_code(store, path)).outcome == "unchanged"


async def test_an_imported_session_asks_before_it_runs_and_a_later_import_keeps_the_yes(
    store: Store, tmp_path: Path
) -> None:
    """Issue 12's protection holds for transcripts too: the session is marked imported, so launch asks
    first; once a person said yes, importing the file's new lines keeps that yes."""
    from tether.errors import ConfirmationRequired
    from tether.runtime.launch import RunRequest, launch

    path = write(tmp_path / f"{SID}.jsonl", conversation()[:3])
    await import_claude_code(store, path)
    sid = source_session_id("claude-code", SID)
    with pytest.raises(ConfirmationRequired, match=f"imported \\(from {path}\\)"):
        await launch(store, RunRequest("go on", session=sid, directory=tmp_path))
    await launch(store, RunRequest("go on", session=sid, directory=tmp_path, confirmed=True))
    assert isinstance((await store.get_session(sid)).metadata[IMPORTED]["confirmed"], float)
    append(path, conversation()[3:])
    grown = await import_claude_code(store, path)
    assert grown.outcome == "grown" and grown.entries == 4
    assert isinstance((await store.get_session(sid)).metadata[IMPORTED]["confirmed"], float)


# --- threads, usage, images and errors of a whole conversation ------------------------------------------

PATTERNS = FIXTURES / "claude-code" / "projects" / "-home-dev-app" / "5d0c7a1e-2b3f-4c8d-9e6a-1f2b3c4d5e6f.jsonl"
"""tests/fixtures/claude-code: one conversation written in Claude Code 2.1's line shapes (see its README)."""


def _calls(got: list[Any]) -> list[str]:
    return [p.id for b in got if isinstance(b, Message) for p in b.parts if isinstance(p, ToolCallPart)]


def _results(got: list[Any]) -> list[str]:
    return [p.call_id for b in got if isinstance(b, Message) for p in b.parts if isinstance(p, ToolResultPart)]


async def test_progress_parallel_calls_and_bash_mode_stay_on_the_main_line(store: Store) -> None:
    result = await import_claude_code(store, PATTERNS)
    assert result.outcome == "imported" and result.problems == []
    main_id = source_session_id("claude-code", PATTERNS.stem)
    forks = [s for s in (await store.list_sessions(parent_id=UNSET)).items if s.forked_from == main_id]
    assert len(result.sessions) == 2 and len(forks) == 1  # the one edited and resent prompt, nothing else
    got = await bodies(store, main_id)
    # every call on the main line, each paired with its result wherever the result line sits
    assert _calls(got) == ["toolu_01Grep", "toolu_02Ls", "toolu_03Img", "toolu_04Edit"]
    assert sorted(_results(got)) == ["toolu_01Grep", "toolu_02Ls", "toolu_03Img"]  # the edit was stopped
    progress = [b for b in got if isinstance(b, Marker) and b.name == "claude-code.progress"]
    assert [p.data["raw"]["toolUseID"] for p in progress] == ["toolu_02Ls", "toolu_01Grep"]
    texts = [b.text for b in got if isinstance(b, Message) and b.role == "user"]
    assert texts[1:5] == [
        "<bash-input>git status</bash-input>",
        "<bash-stdout>On branch main</bash-stdout><bash-stderr></bash-stderr>",
        "<bash-input>pwd</bash-input>",
        "<bash-stdout>/home/dev/app</bash-stdout><bash-stderr></bash-stderr>",
    ]
    assert "Now fix the first TODO" in texts and "try again" in texts
    assert "Fix the second TODO instead" not in texts
    # the branch: from the line both prompts answer, with the resent prompt and its answer
    fork = await bodies(store, forks[0].id)
    assert fork[: forks[0].forked_at] == got[: forks[0].forked_at]
    assert got[forks[0].forked_at - 1].text.startswith("<local-command-stdout>")
    assert [getattr(b, "text", None) for b in fork[forks[0].forked_at :]] == [
        "Fix the second TODO instead",
        "Errors are logged now.",
    ]
    # titles: the custom title names the conversation (its main session), the branch says what it is
    info = await store.get_session(main_id)
    assert info.title == "TODO cleanup" and TitleChange(title="TODO cleanup") in got
    assert forks[0].title == "Find the TODOs and list the files (branch)"
    assert (await import_claude_code(store, PATTERNS)).outcome == "unchanged"


async def test_a_streamed_message_counts_its_last_lines_usage_once(store: Store) -> None:
    await import_claude_code(store, PATTERNS)
    main_id = source_session_id("claude-code", PATTERNS.stem)
    got = [b for b in await bodies(store, main_id) if isinstance(b, Message) and b.role == "assistant"]
    # msg_01 over three lines (thinking, two calls): output 1, 1, then 259: counted once, at 259
    assert [b.usage.output_tokens if b.usage else None for b in got[:3]] == [None, None, 259]
    assert got[2].usage is not None and got[2].usage.input_tokens == 3 + 1200 + 14000
    info = await store.get_session(main_id)
    assert info.output_tokens == 259 + 42 + 30 + 0 + 88  # the error reply is not a model answer: no usage


async def test_an_image_in_a_tool_result_is_an_image_part_and_goes_back_in_place(store: Store, tmp_path: Path) -> None:
    await import_claude_code(store, PATTERNS)
    main_id = source_session_id("claude-code", PATTERNS.stem)
    got = await bodies(store, main_id)
    raw = next(o for o in json_lines(PATTERNS) if o.get("toolUseResult", {}).get("type") == "image")
    data = base64.b64decode(raw["message"]["content"][0]["content"][0]["source"]["data"])
    tool = next(
        b for b in got if isinstance(b, Message) and any(getattr(p, "call_id", "") == "toolu_03Img" for p in b.parts)
    )
    result, image = tool.parts
    assert isinstance(result, ToolResultPart) and result.content == "" and result.metadata["images"] == 1
    assert image == ImagePart(media_type="image/png", data=data)
    assert "base64" not in json.dumps(result.metadata)  # the bytes are the part's, not a copy in metadata
    # back to Claude Code: the image inside its tool result; only the stopped edit gets an invented result
    folder = tmp_path / "out"
    folder.mkdir()
    path, report = await export_to(store, main_id, "claude-code", folder)
    lines = json_lines(path)
    blocks = [b for o in lines for b in (o.get("message") or {}).get("content") or [] if isinstance(b, dict)]
    results = {b["tool_use_id"]: b for b in blocks if b.get("type") == "tool_result"}
    assert results["toolu_03Img"]["content"] == raw["message"]["content"][0]["content"]
    assert [c for c, b in results.items() if b.get("is_error")] == ["toolu_04Edit"]
    assert report.flattened.get("calls that never got a result (given an error result)") == 1
    await assert_round_trip(store, main_id, "claude-code", folder)


async def test_api_errors_are_error_entries_with_their_text(store: Store) -> None:
    await import_claude_code(store, PATTERNS)
    got = await bodies(store, source_session_id("claude-code", PATTERNS.stem))
    errors = [b for b in got if isinstance(b, Marker) and b.name == ERROR_MARKER]
    assert [e.data["message"] for e in errors] == [
        "API error 529: overloaded_error: Overloaded (retry 1 of 10 in 1.1 s)",
        'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},'
        '"request_id":"req_011Overload"}',
    ]
    assert all(e.data["raw"]["type"] in ("system", "assistant") for e in errors)  # the line kept whole
    # the error reply is not an answer of the model's
    assert not any(isinstance(b, Message) and b.text.startswith("API Error") for b in got)


async def test_calls_run_together_in_other_shapes_stay_paired_on_one_line(store: Store, tmp_path: Path) -> None:
    """Parallel calls whose results arrive out of order, each result chained off its own call's line, the
    next message chained off the first result; a result whose parent line is missing goes where its call is."""
    lines = [
        user("u1", None, "check both"),
        assistant("a1", "u1", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/a"}}], msg_id="m1"),
        assistant("a2", "a1", [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/b"}}], msg_id="m1"),
        assistant("a3", "a2", [{"type": "tool_use", "id": "t3", "name": "Bash", "input": {"command": "ls"}}], msg_id="m1"),
        user("r2", "a2", [{"type": "tool_result", "tool_use_id": "t2", "content": "b"}]),
        user("r3", "a3", [{"type": "tool_result", "tool_use_id": "t3", "content": "x y"}]),
        user("r1", "a1", [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]),
        assistant("a4", "r2", [{"type": "text", "text": "both read"}], msg_id="m2"),
        user("u2", "a4", "and again", origin={"kind": "human"}),
        user("n1", "a4", "<task-notification>build done</task-notification>", origin={"kind": "task-notification"}),
        user("p1", "a4", "from the other session", origin={"kind": "peer", "from": "local_x"}),
        assistant("a5", "u2", [{"type": "tool_use", "id": "t4", "name": "Bash", "input": {"command": "pwd"}}], msg_id="m3"),
        user("u2b", "a4", "no: do something else"),  # edited and resent: a branch
        assistant("a6", "u2b", [{"type": "text", "text": "something else"}], msg_id="m4"),
        user("r4", "gone-line", [{"type": "tool_result", "tool_use_id": "t4", "content": "/w"}]),  # parent not in the file
    ]  # fmt: skip
    path = write(tmp_path / f"{SID}.jsonl", lines)
    result = await import_claude_code(store, path)
    assert result.outcome == "imported" and len(result.sessions) == 2
    main = await bodies(store, source_session_id("claude-code", SID))
    assert _calls(main) == ["t1", "t2", "t3", "t4"] and _results(main) == ["t2", "t3", "t1", "t4"]
    assert [b.text for b in main if isinstance(b, Message) and b.role == "user"] == [
        "check both", "and again", "<task-notification>build done</task-notification>", "from the other session"
    ]  # a background task's notice and another session's message share the parent, and do not branch  # fmt: skip


async def test_a_file_imported_as_it_grows_comes_out_as_one_import_of_the_whole(store: Store, tmp_path: Path) -> None:
    from tether.store.memory import MemoryStore

    whole = PATTERNS.read_bytes().splitlines(keepends=True)
    path = tmp_path / PATTERNS.name
    for cut in (4, 9, 21, 25, len(whole)):  # within a streamed message, after calls, before and after the branch
        path.write_bytes(b"".join(whole[:cut]))
        assert (await import_claude_code(store, path)).outcome in ("imported", "grown")
    once = MemoryStore()
    await import_claude_code(once, PATTERNS)
    for db in (store, once):
        assert len((await db.list_sessions(parent_id=UNSET)).items) == 2
    main_id = source_session_id("claude-code", PATTERNS.stem)
    grown, whole_import = await bodies(store, main_id), await bodies(once, main_id)
    assert [getattr(b, "parts", None) for b in grown] == [getattr(b, "parts", None) for b in whole_import]
    assert (await store.get_session(main_id)).output_tokens == (await once.get_session(main_id)).output_tokens
