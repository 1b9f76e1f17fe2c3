"""Codex rollouts written by Codex 0.169.0 itself (tests/fixtures/codex-real, made by
tests/fixtures/make_real_transcripts.py against a scripted Responses API): what the scripted model sent comes
back out of the import (texts, reasoning, calls with their arguments and outputs, failures as errors, usage,
model, times, the directory, the spawned thread as a child), every line lands somewhere, and a second import
adds nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.importers.codex import import_codex
from tether.importers.jsonl import parse_time, source_session_id
from tether.messages import Compaction, Marker, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from tether.store import Store

from .conftest import FIXTURES, json_lines, real_transcripts_script

ROLLOUTS = sorted((FIXTURES / "codex-real" / "sessions").rglob("rollout-*.jsonl"))


S = real_transcripts_script()


def _by_prompt(prompt: str) -> Path:
    """The rollout whose first user prompt (after Codex's own context messages) starts with `prompt`."""
    for path in ROLLOUTS:
        for obj in json_lines(path):
            payload = obj.get("payload") or {}
            if payload.get("type") == "message" and payload.get("role") == "user":
                text = "".join(c.get("text", "") for c in payload["content"])
                if text.startswith(prompt):
                    return path
                if not text.startswith("<"):
                    break
    raise AssertionError(f"no rollout starts with {prompt!r}")


async def _imported(store: Store, path: Path) -> tuple[str, list[Any]]:
    result = await import_codex(store, path)
    assert result.outcome == "imported" and result.problems == [], result.problems
    return result.sessions[0], [e for e in await store.read(result.sessions[0])]


def _messages(entries: list[Any]) -> list[Message]:
    return [e.body for e in entries if isinstance(e.body, Message)]


def _parts(entries: list[Any], kind: type) -> list[Any]:
    return [p for m in _messages(entries) for p in m.parts if isinstance(p, kind)]


@pytest.mark.parametrize("path", ROLLOUTS, ids=[p.name[-12:-6] for p in ROLLOUTS])
async def test_every_line_lands_and_a_second_import_adds_nothing(store: Store, path: Path) -> None:
    """Each line is an entry, the session's metadata (its `session_meta`), or one of the lines a message
    names as its own (one response's items and its usage record)."""
    lines = json_lines(path)
    sid, entries = await _imported(store, path)
    placed: set[int] = {1}  # session_meta: the session itself
    for e in entries:
        body = e.body
        if isinstance(body, Marker):
            placed.add(body.data["line"])
        elif isinstance(body, Message):
            codex = body.metadata["codex"]
            placed.update(codex["lines"] if "lines" in codex else [codex["line"]])
        elif isinstance(body, Compaction):
            placed.add(body.metadata["codex"]["line"])
    assert placed == set(range(1, len(lines) + 1))
    assert (await import_codex(store, path)).outcome == "unchanged"
    assert len(await store.read(sid)) == len(entries)


async def test_text_reasoning_usage_model_times_and_directory(store: Store) -> None:
    path = _by_prompt("HELLO")
    sid, entries = await _imported(store, path)
    info = await store.get_session(sid)
    meta = json_lines(path)[0]["payload"]
    assert info.directory == S.SCRATCH == meta["cwd"] and info.model == "gpt-5" and info.title == "HELLO there"
    assert info.metadata["codex"]["cli_version"] == "0.169.0"
    assistant = [m for m in _messages(entries) if m.role == "assistant"]
    assert len(assistant) == 1  # reasoning and text of one response stay one message
    assert assistant[0].parts == [
        ThinkingPart(text=S.REASONING_SUMMARY, redacted=S.ENCRYPTED, provider="openai"),
        TextPart(text=S.HELLO_TEXT),
    ]
    usage = assistant[0].usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (170, 30)
    assert (usage.cache_read_tokens, usage.reasoning_tokens) == (40, 10)
    assert info.input_tokens == 170 and info.output_tokens == 30
    # the source's times, not the import's
    stamps = {json.dumps(o["payload"].get("content")): o["timestamp"] for o in json_lines(path) if o["type"] == "response_item"}  # fmt: skip
    user = next(e for e in entries if isinstance(e.body, Message) and e.body.text == "HELLO there")
    assert user.created_at == pytest.approx(
        parse_time(stamps[json.dumps([{"type": "input_text", "text": "HELLO there"}])])
    )


async def test_a_command_that_works_and_its_output(store: Store) -> None:
    sid, entries = await _imported(store, _by_prompt("LIST"))
    calls, results = _parts(entries, ToolCallPart), _parts(entries, ToolResultPart)
    assert calls == [ToolCallPart(id="call_ls1", name="bash", arguments={"command": "ls"})]
    assert [r.call_id for r in results] == ["call_ls1"] and not results[0].is_error
    assert "Process exited with code 0" in results[0].content and "README.md\nmain.py" in results[0].content
    said = [p.text for m in _messages(entries) if m.role == "assistant" for p in m.parts if isinstance(p, TextPart)]
    assert said == [S.LIST_TEXT, S.LIST_DONE]
    assert (await store.get_session(sid)).input_tokens == 2 * 170  # two responses, each counted once


async def test_a_failed_command_and_an_unknown_tool_are_errors(store: Store) -> None:
    _, entries = await _imported(store, _by_prompt("read the MISSING"))
    calls = {c.id: c for c in _parts(entries, ToolCallPart)}
    assert calls["call_fail1"].arguments == {"command": "cat missing.txt"}
    assert calls["call_bogus1"] == ToolCallPart(id="call_bogus1", name="no_such_tool", arguments={"x": 1})
    results = {r.call_id: r for r in _parts(entries, ToolResultPart)}
    # Codex's item for the command says `status: failed` (exit code 1); its router answers an unknown tool
    assert results["call_fail1"].is_error and "No such file or directory" in results["call_fail1"].content
    assert results["call_bogus1"].is_error and results["call_bogus1"].content == "unsupported call: no_such_tool"
    assert results["call_bogus1"].name == "no_such_tool"


async def test_the_spawned_thread_is_a_child_linked_to_its_spawn_call(store: Store) -> None:
    parent_path = _by_prompt("DELEGATE")
    child_path = _by_prompt("SUBAGENT")
    parent_id, parent_entries = await _imported(store, parent_path)
    child_id, child_entries = await _imported(store, child_path)
    child = await store.get_session(child_id)
    parent_thread = json_lines(parent_path)[0]["payload"]["id"]
    assert parent_id == source_session_id("codex", parent_thread) and child.parent_id == parent_id
    assert child.metadata["task"]["call_id"] == "call_spawn1"
    spawn = next(c for c in _parts(parent_entries, ToolCallPart) if c.id == "call_spawn1")
    assert spawn.name == "spawn_agent" and spawn.arguments == {"message": "SUBAGENT: list the files"}
    assert [c.id for c in _parts(child_entries, ToolCallPart)] == ["call_sub1"]
    said = [p.text for m in _messages(child_entries) if m.role == "assistant" for p in m.parts if isinstance(p, TextPart)]  # fmt: skip
    assert said == [S.SUB_DONE]
    # the resumed turn (`codex exec resume --last`) went on in the same rollout
    users = [m.text for m in _messages(parent_entries) if m.role == "user"]
    assert users[-1] == "AGAIN please" and _messages(parent_entries)[-1].text == S.AGAIN_TEXT


async def test_an_automatic_compaction_is_a_compaction_entry(store: Store) -> None:
    path = _by_prompt("COMPACT")
    _, entries = await _imported(store, path)
    compactions = [e.body for e in entries if isinstance(e.body, Compaction)]
    assert len(compactions) == 1 and S.SUMMARY in compactions[0].summary
    raw = next(o for o in json_lines(path) if o["type"] == "compacted")["payload"]
    assert compactions[0].summary == raw["message"]
    assert compactions[0].metadata["codex"]["replacement_history"] == raw["replacement_history"]
    after = entries[[e.body for e in entries].index(compactions[0]) :]
    assert [m.text for m in _messages(after) if m.role == "user"] == ["AGAIN after the compaction"]


@pytest.mark.slow
async def test_rollouts_the_installed_codex_writes_now_import_whole(store: Store, tmp_path: Path) -> None:
    """The fixtures made again with the Codex at $TETHER_CODEX_BIN (skipped without one): every rollout it
    writes imports without a problem, every line placed, the failure an error, usage counted."""
    import asyncio
    import os

    binary = os.environ.get("TETHER_CODEX_BIN")
    if not binary:
        pytest.skip(
            "no Codex: set TETHER_CODEX_BIN to a Codex binary (`npm pack @openai/codex@0.169.0-linux-x64`, untar, "
            "package/vendor/x86_64-unknown-linux-musl/bin/codex)"
        )
    await asyncio.to_thread(S.main, ["--codex", binary, "--out", str(tmp_path)])
    made = sorted((tmp_path / "codex-real" / "sessions").rglob("rollout-*.jsonl"))
    assert len(made) == len(ROLLOUTS)
    for path in made:
        sid, entries = await _imported(store, path)
        assert sum(1 for e in entries if isinstance(e.body, Message)) > 0
        assert (await store.get_session(sid)).input_tokens > 0
    errors = [r.call_id for path in made for r in _parts(await store.read(source_session_id("codex", json.loads(path.read_bytes().splitlines()[0])["payload"]["id"])), ToolResultPart) if r.is_error]  # fmt: skip
    assert sorted(errors) == ["call_bogus1", "call_fail1"]
