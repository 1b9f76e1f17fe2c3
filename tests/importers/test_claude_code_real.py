"""Claude Code transcripts written by Claude Code 2.0.30 itself (tests/fixtures/claude-code-real, made by
tests/fixtures/make_real_transcripts.py against a scripted Anthropic API): what the scripted model sent comes
back out of the import (texts, thinking with its signature, calls with their arguments and results, the
failed read as an error, usage once per API message, model, times, the directory, the Task's sub-agent as a
child, the continued session, the compaction), every line lands somewhere, and a second import adds nothing."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tether.importers.claude_code import import_claude_code
from tether.importers.jsonl import parse_time, source_session_id
from tether.importers.sources import files_under
from tether.messages import Compaction, Marker, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from tether.store import Store

from .conftest import FIXTURES, json_lines, real_transcripts_script

PROJECT = FIXTURES / "claude-code-real" / "projects" / "-scratch-project"
FILES = list(files_under(PROJECT))  # sessions before sub-agents


S = real_transcripts_script()


def _session(prompt: str) -> Path:
    """The session file whose first user line says `prompt`."""
    for path in FILES:
        first = next((o for o in json_lines(path) if o.get("type") == "user"), None)
        if first is not None and first["message"]["content"] == prompt:
            return path
    raise AssertionError(f"no transcript starts with {prompt!r}")


async def _import_all(store: Store) -> None:
    for path in FILES:
        result = await import_claude_code(store, path)
        assert result.outcome == "imported" and result.problems == [], (path.name, result.problems)


async def _read(store: Store, path: Path) -> tuple[str, list[Any]]:
    sid = source_session_id("claude-code", path.stem)
    return sid, await store.read(sid)


def _messages(entries: list[Any]) -> list[Message]:
    return [e.body for e in entries if isinstance(e.body, Message)]


def _parts(entries: list[Any], kind: type) -> list[Any]:
    return [p for m in _messages(entries) for p in m.parts if isinstance(p, kind)]


async def test_every_line_lands_and_a_second_import_adds_nothing(store: Store) -> None:
    assert len(FILES) > 4 and any(p.stem.startswith("agent-") for p in FILES)
    for path in FILES:
        result = await import_claude_code(store, path)
        assert result.outcome == "imported" and result.problems == []
        # one source line, one entry (messages, the compaction, markers for the rest)
        written = [(await store.get_session(s)).entry_count for s in result.sessions]
        assert sum(written) == len(json_lines(path)) == result.entries, path.name
    for path in FILES:
        assert (await import_claude_code(store, path)).outcome == "unchanged"


async def test_thinking_with_its_signature_text_usage_model_times_directory(store: Store) -> None:
    await _import_all(store)
    path = _session("HELLO there")
    sid, entries = await _read(store, path)
    info = await store.get_session(sid)
    assert info.directory == S.SCRATCH and info.model == "claude-sonnet-4-5-20250929" and info.title == "HELLO there"
    assistant = [m for m in _messages(entries) if m.role == "assistant"]
    # one API message, written by Claude Code as two lines: thinking, then text; its usage counted once,
    # from the last line
    assert [m.parts for m in assistant] == [
        [ThinkingPart(text=S.HELLO_THINKING, signature=S.HELLO_SIGNATURE, provider="anthropic")],
        [TextPart(text=S.HELLO_TEXT)],
    ]
    assert [m.usage is not None for m in assistant] == [False, True]  # on the message's last line: its final counts
    usage = assistant[1].usage
    assert usage is not None and usage.output_tokens == S.USAGE["output_tokens"]
    assert usage.input_tokens == sum(S.USAGE[k] for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))  # fmt: skip
    assert usage.cache_read_tokens == S.USAGE["cache_read_input_tokens"]
    assert info.input_tokens == usage.input_tokens and info.output_tokens == usage.output_tokens
    # no costUSD in 2.0.30's lines: priced from tether's list (Sonnet 4.5: $3 / $15 / $0.30 / $3.75 per MTok)
    assert usage.cost == Decimal("0.000360") + Decimal("0.000450") + Decimal("0.000012") + Decimal("0.000030")
    lines = json_lines(path)
    assert [e.created_at for e in entries] == pytest.approx([parse_time(o["timestamp"]) for o in lines])
    assert [e.body.name for e in entries if isinstance(e.body, Marker)] == ["claude-code.queue-operation"] * 2


async def test_a_command_that_works_and_a_read_that_fails(store: Store) -> None:
    await _import_all(store)
    _, listed = await _read(store, _session("LIST the files"))
    assert _parts(listed, ToolCallPart) == [ToolCallPart(id="toolu_ls1", name="bash", arguments=S.LS_INPUT)]
    assert _parts(listed, ToolResultPart) == [
        ToolResultPart(call_id="toolu_ls1", content="README.md\nmain.py", name="bash")
    ]
    said = [p.text for p in _parts(listed, TextPart) if p.text != "LIST the files"]
    assert said == [S.LIST_TEXT, S.LIST_DONE]
    _, failed = await _read(store, _session("read the MISSING file"))
    call = _parts(failed, ToolCallPart)[0]
    assert call.name == "read" and call.arguments == {"path": f"{S.SCRATCH}/missing.txt"}
    result = _parts(failed, ToolResultPart)[0]
    assert result.is_error and "File does not exist." in result.content and result.call_id == "toolu_fail1"
    assert _messages(failed)[-1].text == S.MISSING_DONE


async def test_the_task_sub_agent_is_a_child_linked_to_its_call(store: Store) -> None:
    await _import_all(store)
    main = _session("DELEGATE a listing")
    main_id, entries = await _read(store, main)
    task = _parts(entries, ToolCallPart)[0]
    assert task.id == "toolu_task1" and task.name == "task" and task.arguments["prompt"] == "SUBAGENT: list the files"
    assert _parts(entries, ToolResultPart)[0].content == S.SUB_DONE
    children = (await store.list_sessions(parent_id=main_id)).items
    worker = [c for c in children if c.metadata.get("task", {}).get("call_id") == "toolu_task1"]
    assert len(worker) == 1
    child = await store.read(worker[0].id)
    assert next(m.text for m in _messages(child) if m.role == "user") == "SUBAGENT: list the files"
    assert [c.id for c in _parts(child, ToolCallPart)] == ["toolu_sub1"]
    assert _messages(child)[-1].text == S.SUB_DONE
    # the Warmup sidechains Claude Code runs at each start are children too, nothing is dropped
    assert all(c.parent_id == main_id for c in children) and len(children) >= 2


async def test_the_continued_session_and_its_compaction(store: Store) -> None:
    await _import_all(store)
    _, entries = await _read(store, _session("DELEGATE a listing"))
    bodies = [e.body for e in entries]
    compactions = [b for b in bodies if isinstance(b, Compaction)]
    assert len(compactions) == 1 and S.SUMMARY in compactions[0].summary
    boundary = next(o for o in json_lines(_session("DELEGATE a listing")) if o.get("subtype") == "compact_boundary")
    assert compactions[0].tokens_before == boundary["compactMetadata"]["preTokens"]
    cut = bodies.index(compactions[0])
    before = [m.text for m in _messages(entries[:cut]) if m.role == "user"]
    assert "AGAIN please" in before  # `--continue` went on in the same file
    after = _messages(entries[cut:])
    assert after[-2].text == "AGAIN after the compaction" and after[-1].text == S.AGAIN_TEXT
    assert any(isinstance(b, Marker) and b.name == "claude-code.system" for b in bodies[:cut])  # the boundary
    # the answer Claude Code wrote itself, not the model: kept, with its model, and no usage counted
    synthetic = next(m for m in after if m.model == "<synthetic>")
    assert synthetic.role == "assistant" and not (synthetic.usage and synthetic.usage.input_tokens)


@pytest.mark.slow
async def test_transcripts_the_installed_claude_code_writes_now_import_whole(store: Store, tmp_path: Path) -> None:
    """The fixtures made again with the Claude Code at $TETHER_CLAUDE_CODE_CLI (skipped without it): every
    file it writes imports without a problem, one entry per line, the failed read an error, the compaction
    a compaction, the sub-agent a child."""
    import asyncio
    import os
    import shutil

    cli = os.environ.get("TETHER_CLAUDE_CODE_CLI")
    if not cli or shutil.which("node") is None:
        pytest.skip(
            "no Claude Code: set TETHER_CLAUDE_CODE_CLI to Claude Code's cli.js (`npm pack "
            "@anthropic-ai/claude-code@2.0.30`, untar, package/cli.js) and have node on PATH"
        )
    await asyncio.to_thread(S.main, ["--claude-code", cli, "--out", str(tmp_path)])
    made = list(files_under(tmp_path / "claude-code-real" / "projects" / "-scratch-project"))
    assert len([p for p in made if not p.stem.startswith("agent-")]) == 4
    kinds: list[str] = []
    for path in made:
        result = await import_claude_code(store, path)
        assert result.outcome == "imported" and result.problems == []
        assert result.entries == len(json_lines(path)), path.name
        for sid in result.sessions:
            session = await store.get_session(sid)
            for e in await store.read(sid):
                kinds.append(type(e.body).__name__ + (":child" if session.parent_id else ""))
                if isinstance(e.body, Message):
                    kinds += ["error" for p in e.body.parts if isinstance(p, ToolResultPart) and p.is_error]
    assert kinds.count("Compaction") == 1 and kinds.count("error") == 1 and "Message:child" in kinds
