"""What an imported Claude Code or Codex session adds up to, against the source file, for every transcript of
the test corpus (tests/fixtures: the real Claude Code 2.0.30 and Codex 0.169.0 ones, the hand-written ones in
those tools' shapes; and any in the folder `TETHER_TEST_TRANSCRIPTS` names, e.g. ``../shared/data/claude-code-
samples`` or transcripts of your own): output tokens equal the source's, and so does the number of calls
without a result.

The source's figures are computed here from the raw lines, apart from the importers: Claude Code's usage is
the last line's of each API message (``message.id`` with ``requestId``: a streamed message is written as
several lines, each with the counts known so far); Codex's is its last cumulative ``token_count`` (summed
over the runs of a file whose totals start again from zero). A call without a result is a call id that no
result in the file answers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tether.importers.sources import import_path
from tether.messages import Message
from tether.store import Store

from .conftest import FIXTURES

_CORPUS_FOLDERS = ("claude-code-real", "claude-code", "codex-real", "codex")


def _corpus() -> list[Path]:
    files = [p for name in _CORPUS_FOLDERS for p in sorted((FIXTURES / name).rglob("*.jsonl"))]
    extra = os.environ.get("TETHER_TEST_TRANSCRIPTS")
    if extra:
        files += sorted(Path(extra).rglob("*.jsonl"))
    return files


def _objects(path: Path) -> list[dict[str, Any]]:
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            value = json.loads(raw)
        except ValueError:
            continue  # a bad line: the importer reports it; it holds no usage
        if isinstance(value, dict):
            out.append(value)
    return out


def _claude_code_figures(lines: list[dict[str, Any]]) -> tuple[int, int]:
    last: dict[Any, int] = {}
    calls: set[str] = set()
    answered: set[str] = set()
    for n, obj in enumerate(lines):
        message = obj.get("message")
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls.add(block["id"])
            elif isinstance(block, dict) and block.get("type") == "tool_result":
                answered.add(block["tool_use_id"])
        usage = message.get("usage")
        if obj.get("type") == "assistant" and isinstance(usage, dict):
            key = (message["id"], obj.get("requestId")) if isinstance(message.get("id"), str) else n
            last[key] = usage.get("output_tokens") or 0  # a later line of the same message replaces it
    return sum(last.values()), len(calls - answered)


_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _codex_figures(lines: list[dict[str, Any]]) -> tuple[int, int]:
    runs = 0
    total: int | None = None
    calls: set[str] = set()
    answered: set[str] = set()
    for obj in lines:
        payload = obj.get("payload") if "payload" in obj else obj  # the older layout: bare items
        if not isinstance(payload, dict):
            continue
        if payload.get("type") in _CALLS and isinstance(payload.get("call_id"), str):
            calls.add(payload["call_id"])
        elif payload.get("type") in _OUTPUTS and isinstance(payload.get("call_id"), str):
            answered.add(payload["call_id"])
        elif payload.get("type") == "token_count" and isinstance(payload.get("info"), dict):
            totals = payload["info"].get("total_token_usage")
            if isinstance(totals, dict):
                now = totals.get("output_tokens") or 0
                if total is not None and now < total:
                    runs += total  # a new process counting from zero
                total = now
    return runs + (total or 0), len(calls - answered)


async def _tether_figures(store: Store, session_ids: set[str]) -> tuple[int, int]:
    """Output tokens of the sessions an import made (a branch counted from where it leaves its base: what
    comes before is its base's), and the call ids without a result in the session that holds them."""
    output = 0
    unanswered: set[str] = set()
    for sid in session_ids:
        info = await store.get_session(sid)
        own_from = info.forked_at if info.forked_from is not None else 0
        calls: set[str] = set()
        answered: set[str] = set()
        own_output = 0
        for entry in await store.read(sid):
            if not isinstance(entry.body, Message):
                continue
            calls |= {c.id for c in entry.body.tool_calls}
            answered |= {r.call_id for r in entry.body.tool_results}
            if entry.body.usage is not None and entry.seq > (own_from or 0):
                own_output += entry.body.usage.output_tokens
        if info.forked_from is None:
            assert info.output_tokens == own_output  # the session's counters say the same as its entries
        output += own_output
        unanswered |= calls - answered
    return output, len(unanswered)


CORPUS = _corpus()


def test_the_corpus_has_every_pattern() -> None:
    names = {p.parent.name for p in CORPUS} | {p.name for p in CORPUS}
    assert len(CORPUS) >= 25 and "-scratch-project" in names and "-home-dev-app" in names
    assert any(name.startswith("rollout-2026-11-26") for name in names)  # the real Codex 0.169.0 ones


@pytest.mark.parametrize("path", CORPUS, ids=[p.name[:48] for p in CORPUS])
async def test_output_tokens_and_calls_without_a_result_equal_the_source(store: Store, path: Path) -> None:
    results = await import_path(store, str(path))
    assert results and all(r.outcome == "imported" for r in results), [(r.outcome, r.problems) for r in results]
    fmt = results[0].format
    lines = _objects(path)
    want = _codex_figures(lines) if fmt == "codex" else _claude_code_figures(lines)
    sessions = {sid for r in results for sid in [*r.sessions, r.session_id] if sid}
    assert await _tether_figures(store, sessions) == want
