"""Codex rollouts: the fixtures in tests/fixtures/codex (hand-written to codex-rs/protocol's types; see the
README there) in the current and the older layout, usage from token counts, shell calls as bash, failed
calls as errors, compaction, unknown lines, bad lines, and importing again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tether.importers.codex import import_codex
from tether.importers.jsonl import source_session_id
from tether.messages import Compaction, ImagePart, Marker, Message, TextPart, ThinkingPart, ToolCallPart
from tether.store import Store, open_store
from tether.store.records import IMPORTED

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
ROLLOUT = FIXTURES / "rollout-2025-09-20T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl"
LEGACY = FIXTURES / "legacy-rollout-2025-05-07T17-24-21-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl"
ROLLOUT_ID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


async def test_a_rollout_becomes_a_session(store: Store) -> None:
    result = await import_codex(store, ROLLOUT)
    assert result.outcome == "imported" and result.problems == []
    info = await store.get_session(source_session_id("codex", ROLLOUT_ID))
    assert info.directory == "/home/dev/project" and info.model == "gpt-5"
    assert info.system_prompt == "You are Codex, a coding agent."
    assert info.title == "Why does the test in tests/test_math.py fail?"  # not the environment context
    assert info.metadata[IMPORTED]["source_id"] == ROLLOUT_ID
    assert info.metadata["codex"]["git"]["branch"] == "main"
    got = [e.body for e in await store.read(info.id)]
    kinds = [b.role if isinstance(b, Message) else f"{type(b).__name__}:{getattr(b, 'name', '')}" for b in got]
    assert kinds == [
        "user",  # environment context
        "Marker:codex.turn_context",
        "user",
        "assistant",  # reasoning + shell call, with the first token count
        "Marker:codex.exec_command_end",
        "tool",
        "assistant",  # apply_patch
        "tool",
        "assistant",  # rm, then (no token count between) the web search and the answer
        "tool",
        "assistant",
        "Compaction:",
        "Marker:codex.world_state",
        "user",
    ]
    question = got[2]
    assert question.parts[0] == TextPart(text="Why does the test in tests/test_math.py fail?")
    assert isinstance(question.parts[1], ImagePart) and question.parts[1].media_type == "image/png"
    first = got[3]
    assert isinstance(first.parts[0], ThinkingPart) and first.parts[0].redacted == "gAAAAABo-encrypted-reasoning"
    assert first.parts[1] == ToolCallPart(
        id="call_shell_1", name="bash",
        arguments={"command": "pytest -q tests/test_math.py", "workdir": "/home/dev/project", "timeout": 120},
    )  # fmt: skip
    assert first.metadata["codex"]["calls"]["call_shell_1"]["name"] == "shell"  # the call as it came
    assert first.usage is not None and first.usage.input_tokens == 5200 and first.usage.cache_read_tokens == 4096
    assert first.usage.reasoning_tokens == 128 and first.usage.cost is not None  # gpt-5's prices
    assert got[5].parts[0].name == "bash" and '"exit_code":1' in got[5].parts[0].content
    assert got[6].parts[0].name == "apply_patch" and "*** Begin Patch" in got[6].parts[0].arguments["input"]
    assert got[9].parts[0].content == "failed in sandbox: permission denied"
    answer = got[10]
    assert answer.text == "The test expected 2 + 2 to be 5; I fixed the assertion."
    assert answer.metadata["codex"]["items"][0]["item"]["type"] == "web_search_call"  # kept, no part for it
    assert isinstance(got[11], Compaction) and got[11].first_kept_seq == 12
    assert got[11].metadata["codex"]["replacement_history"][0]["role"] == "user"
    assert info.input_tokens == 5200 + 5400 + 5600 and info.output_tokens == 180 + 80 + 40


async def test_the_older_layout(store: Store) -> None:
    result = await import_codex(store, LEGACY)
    assert result.outcome == "imported" and result.problems == []
    got = [e.body for e in await store.read(source_session_id("codex", "5973b6c0-94b8-487b-a530-2aeb6098ae0e"))]
    assert [getattr(b, "role", getattr(b, "name", "")) for b in got] == [
        "codex.state", "user", "codex.state", "assistant", "tool", "assistant", "codex.state",
    ]  # fmt: skip
    failed = got[4].parts[0]
    assert failed.is_error and failed.content.startswith("ls: cannot open directory")
    assert got[3].parts[0].arguments == {"command": "ls -la"}


async def test_importing_again_and_after_growth(store: Store, tmp_path: Path) -> None:
    lines = ROLLOUT.read_bytes().splitlines(keepends=True)
    path = tmp_path / ROLLOUT.name
    path.write_bytes(b"".join(lines[:9]))  # a whole response, its token count included
    first = await import_codex(store, path)
    assert first.outcome == "imported"
    assert (await import_codex(store, path)).outcome == "unchanged"
    with open(path, "ab") as f:
        f.write(b"".join(lines[9:]))
    grown = await import_codex(store, path)
    assert grown.outcome == "grown" and grown.problems == []
    sid = source_session_id("codex", ROLLOUT_ID)
    whole = [e.body for e in await store.read(sid)]
    async with open_store("memory://") as other:
        once = await import_codex(other, ROLLOUT)
        assert whole == [e.body for e in await other.read(sid)]  # the same as one import of it all
    assert first.entries + grown.entries == once.entries == len(whole)
    assert (await import_codex(store, path)).outcome == "unchanged"


async def test_a_response_cut_by_the_end_of_the_file_stays_cut(store: Store, tmp_path: Path) -> None:
    """The file ends in the middle of a response (its token count is not written yet): the response is
    journaled as it is, and where it was cut is remembered, so that importing the rest appends after it
    instead of shifting what follows; its token count, when it comes, is kept as a marker."""
    lines = ROLLOUT.read_bytes().splitlines(keepends=True)
    path = tmp_path / ROLLOUT.name
    path.write_bytes(b"".join(lines[:8]))
    first = await import_codex(store, path)
    sid = source_session_id("codex", ROLLOUT_ID)
    head = [e.body for e in await store.read(sid)]
    assert head[-1].role == "assistant" and head[-1].usage is None
    with open(path, "ab") as f:
        f.write(b"".join(lines[8:]))
    grown = await import_codex(store, path)
    whole = [e.body for e in await store.read(sid)]
    assert whole[: len(head)] == head and first.entries + grown.entries == len(whole)
    assert isinstance(whole[len(head)], Marker) and whole[len(head)].name == "codex.token_count"
    assert [b.role for b in whole if isinstance(b, Message)].count("user") == 3  # nothing twice
    assert (await import_codex(store, path)).outcome == "unchanged"


async def test_bad_and_unknown_lines(store: Store, tmp_path: Path) -> None:
    lines = ROLLOUT.read_bytes().splitlines()
    path = tmp_path / ROLLOUT.name
    path.write_bytes(b"\n".join([*lines[:4], b"garbage{", b"[1, 2]", *lines[4:], b'{"timestamp": "2025-09-2']))
    result = await import_codex(store, path)
    assert result.outcome == "imported"
    assert [(p.line, p.reason.split(" (")[0].split(";")[0]) for p in result.problems] == [
        (5, "not JSON"),
        (6, "not a rollout line"),
        (len(lines) + 3, "the last line is cut short"),
    ]
    got = [e.body for e in await store.read(source_session_id("codex", ROLLOUT_ID))]
    assert Marker(name="codex.unknown", data={"line": 6, "raw": [1, 2]}) in got


async def test_a_rollout_line_of_another_version_is_kept(store: Store, tmp_path: Path) -> None:
    path = tmp_path / ROLLOUT.name
    meta = ROLLOUT.read_bytes().splitlines()[0]
    future = {"timestamp": "2026-01-01T00:00:00Z", "type": "response_item", "payload": {"type": "hologram", "x": 1}}
    path.write_bytes(meta + b"\n" + json.dumps(future).encode() + b"\n")
    result = await import_codex(store, path)
    assert result.outcome == "imported" and result.entries == 1
    got = [e.body for e in await store.read(source_session_id("codex", ROLLOUT_ID))]
    assert got == [Marker(name="codex.hologram", data={"line": 2, "raw": {"type": "hologram", "x": 1}})]


SPAWN = FIXTURES / "spawn"
PARENT_THREAD = "0199b000-1111-7aaa-8bbb-000000000001"
CHILD_THREAD = "0199b000-2222-7aaa-8bbb-000000000002"


async def test_a_spawned_thread_is_a_child_session_linked_to_its_spawn_call(store: Store) -> None:
    for path in sorted(SPAWN.glob("*.jsonl")):  # path order is time order: the parent first
        result = await import_codex(store, path)
        assert result.outcome == "imported" and result.problems == []
    parent_id = source_session_id("codex", PARENT_THREAD)
    child = await store.get_session(source_session_id("codex", CHILD_THREAD))
    assert child.parent_id == parent_id
    assert child.metadata["task"] == {
        "thread_id": CHILD_THREAD, "depth": 1, "agent_nickname": "Robie", "agent_role": "explorer",
        "agent": "explorer", "call_id": "call_spawn_1",
    }  # fmt: skip
    parent = [e.body for e in await store.read(parent_id)]
    spawn = next(p for b in parent if isinstance(b, Message) for p in b.parts if isinstance(p, ToolCallPart))
    assert spawn.id == "call_spawn_1" and spawn.name == "spawn_agent"
    assert any(isinstance(b, Marker) and b.name == "codex.collab_agent_spawn_end" for b in parent)
    texts = [
        p.text
        for e in await store.read(child.id)
        if isinstance(e.body, Message)
        for p in e.body.parts
        if isinstance(p, TextPart)
    ]
    assert texts[-1] == "Two TODOs: src/app.py:12 and src/db.py:40."
    top = await store.list_sessions(parent_id=None)
    assert [s.id for s in top.items] == [parent_id]  # the child is listed under its parent, not beside it
    children = await store.list_sessions(parent_id=parent_id)
    assert [s.id for s in children.items] == [child.id]


async def test_a_spawned_thread_imported_before_its_parent_keeps_the_link_to_find(store: Store) -> None:
    child_path = sorted(SPAWN.glob("*.jsonl"))[1]
    await import_codex(store, child_path)
    child = await store.get_session(source_session_id("codex", CHILD_THREAD))
    assert child.parent_id is None
    assert child.metadata["imported_parent_id"] == source_session_id("codex", PARENT_THREAD)


COUNTS = FIXTURES / "rollout-2025-11-03T14-00-00-019a7c3e-5b21-7d40-9f3a-2c8e6b1d4f70.jsonl"
"""Counts written after the tool outputs that follow a response, an image in a tool output, a repeated
total, a count with no info, a call that never got its output (see the README)."""


def _totals(path: Path) -> dict[str, int]:
    last: dict[str, int] = {}
    for raw in path.read_bytes().splitlines():
        payload = json.loads(raw).get("payload") or {}
        if payload.get("type") == "token_count" and isinstance(payload.get("info"), dict):
            last = payload["info"]["total_token_usage"]
    return last


async def test_each_cumulative_count_goes_to_the_response_it_follows(store: Store) -> None:
    result = await import_codex(store, COUNTS)
    assert result.outcome == "imported" and result.problems == []
    info = await store.get_session(result.session_id or "")
    got = [e.body for e in await store.read(info.id)]
    answers = [b for b in got if isinstance(b, Message) and b.role == "assistant"]
    # the view_image call, the shell call (each counted after its output), the answer, the interrupted call
    assert [(u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cache_read_tokens) for u in (a.usage for a in answers) if u] == [
        (9000, 310, 256, 8000), (9600, 95, 64, 9000), (9800, 42, 0, 9500), (10100, 27, 0, 9800),
    ]  # fmt: skip
    totals = _totals(COUNTS)
    assert (info.input_tokens, info.output_tokens) == (totals["input_tokens"], totals["output_tokens"])
    # the count with no info and the one that repeats the total are kept as markers, adding nothing
    counts = [b for b in got if isinstance(b, Marker) and b.name == "codex.token_count"]
    assert len(counts) == 2
    assert [b.role for b in got if isinstance(b, Message)].count("tool") == 2


async def test_counts_between_responses_go_to_the_next_and_totals_that_restart_add_up(
    store: Store, tmp_path: Path
) -> None:
    def count(total_out: int, total_in: int) -> dict[str, Any]:
        usage = {"input_tokens": total_in, "cached_input_tokens": 0, "output_tokens": total_out,
                 "reasoning_output_tokens": 0, "total_tokens": total_in + total_out}  # fmt: skip
        return {"timestamp": "2025-11-03T10:00:02.000Z", "type": "event_msg",
                "payload": {"type": "token_count", "info": {"total_token_usage": usage, "last_token_usage": usage}}}  # fmt: skip

    def said(text: str, role: str = "assistant") -> dict[str, Any]:
        kind = "output_text" if role == "assistant" else "input_text"
        return {"timestamp": "2025-11-03T10:00:01.000Z", "type": "response_item",
                "payload": {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}}  # fmt: skip

    meta = {"timestamp": "2025-11-03T10:00:00.000Z", "type": "session_meta",
            "payload": {"id": "019a0000-0000-7000-8000-00000000c0de", "timestamp": "2025-11-03T10:00:00.000Z", "cwd": "/w"}}  # fmt: skip
    lines = [
        meta, said("one", "user"), said("first"), count(10, 100),
        said("two", "user"), count(25, 250),  # a count after the user's message: no response open
        said("second"), count(40, 400),
        said("three", "user"), said("third"), count(7, 70),  # resumed: a new process counts from zero
    ]  # fmt: skip
    path = tmp_path / "rollout-2025-11-03T10-00-00-019a0000-0000-7000-8000-00000000c0de.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = await import_codex(store, path)
    got = [e.body for e in await store.read(result.session_id or "")]
    answers = [b for b in got if isinstance(b, Message) and b.role == "assistant"]
    assert [a.usage.output_tokens if a.usage else None for a in answers] == [10, 15 + 15, 7]
    info = await store.get_session(result.session_id or "")
    assert info.output_tokens == 40 + 7 and info.input_tokens == 400 + 70


async def test_an_image_in_a_tool_output_is_an_image_part(store: Store) -> None:
    import base64

    await import_codex(store, COUNTS)
    got = [e.body for e in await store.read(source_session_id("codex", "019a7c3e-5b21-7d40-9f3a-2c8e6b1d4f70"))]
    tool = next(b for b in got if isinstance(b, Message) and b.role == "tool")
    result, image = tool.parts
    raw = next(json.loads(r) for r in COUNTS.read_bytes().splitlines() if b'"call_view1","output"' in r)
    url = raw["payload"]["output"][1]["image_url"]
    assert result.content == "static/logo.png" and result.metadata["images"] == 1
    assert image == ImagePart(media_type="image/png", data=base64.b64decode(url.split(",", 1)[1]))
    assert url not in json.dumps(result.metadata)


JSON_ROLLOUT = FIXTURES / "rollout-2025-04-22-7f3e9a10-4c2b-4d8e-9a1f-2b3c4d5e6f70.json"


async def test_the_first_clis_json_rollout_by_name_by_folder_and_again(store: Store, tmp_path: Path) -> None:
    from tether.importers.sources import detect_format, discover, import_path

    assert detect_format(str(JSON_ROLLOUT)) == "codex"
    assert JSON_ROLLOUT in discover("codex", FIXTURES)  # a folder import finds it beside the .jsonl ones
    result = (await import_path(store, str(JSON_ROLLOUT)))[0]
    assert result.outcome == "imported" and result.problems == [] and result.entries == 8
    info = await store.get_session(source_session_id("codex", "7f3e9a10-4c2b-4d8e-9a1f-2b3c4d5e6f70"))
    assert info.system_prompt == "Prefer small diffs." and info.title == "what does ci.sh do?"
    got = [e.body for e in await store.read(info.id)]
    assert [b.role for b in got if isinstance(b, Message)] == [
        "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"
    ]  # fmt: skip
    calls = [p for b in got if isinstance(b, Message) for p in b.parts if isinstance(p, ToolCallPart)]
    assert [c.arguments for c in calls] == [{"command": "cat ci.sh"}, {"command": "sh ci.sh", "timeout": 60}]
    assert (await import_codex(store, JSON_ROLLOUT)).outcome == "unchanged"
    # saved whole again after one more turn: only that turn is added
    doc = json.loads(JSON_ROLLOUT.read_text())
    doc["items"] += [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed."}]},
    ]
    copy = tmp_path / JSON_ROLLOUT.name
    copy.write_text(json.dumps(doc, indent=2))
    again = await import_codex(store, copy)
    assert again.outcome == "grown" and again.entries == 2
    assert [getattr(e.body, "text", None) for e in await store.read(info.id)][-2:] == ["fix it", "Fixed."]


async def test_from_codex_on_another_kind_of_file_imports_nothing(store: Store, tmp_path: Path) -> None:
    other = tmp_path / "notes.jsonl"
    other.write_text(json.dumps({"type": "user", "sessionId": "x", "uuid": "u1", "message": {"content": "hi"}}) + "\n")
    result = await import_codex(store, other)
    assert result.outcome == "failed" and "not a Codex rollout" in result.problems[-1].reason
    assert (await store.list_sessions()).items == []
    broken = tmp_path / "rollout-2025-04-22-7f3e9a10-4c2b-4d8e-9a1f-2b3c4d5e6f71.json"
    broken.write_text('{\n  "session": {"id": "x"},\n  "items": 3\n}')
    failed = await import_codex(store, broken)
    assert failed.outcome == "failed" and "without" in failed.problems[-1].reason
