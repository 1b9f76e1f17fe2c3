"""The run's tool set: the built-in tools plus `session_recall`, chosen by name, and `session_recall`'s
answer mode through RLM with the run's model (a scripted model: no real model can run here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import InvalidInput
from tether.messages import Message, ToolCallPart
from tether.providers.scripted import ScriptedProvider
from tether.recall.tool import SessionRecallTool
from tether.runtime.toolset import default_registry, rlm_answerer, select_tools, with_recall_answers
from tether.store import Store
from tether.tools.base import ToolContext, ToolRegistry
from tether.tools.runner import run_tool_call


def test_the_default_tools_are_the_builtins_session_recall_and_task() -> None:
    names = default_registry().names()
    assert names == ["read", "write", "edit", "bash", "glob", "grep", "list", "question", "session_recall", "task"]
    assert default_registry().is_read_only("session_recall")
    assert default_registry().is_parallel("task") and not default_registry().is_read_only("task")


def test_tools_are_chosen_by_name() -> None:
    assert select_tools(None).names() == default_registry().names()
    assert select_tools("none").names() == []
    assert select_tools(" read , grep ").names() == ["read", "grep"]
    with pytest.raises(InvalidInput, match="unknown tool rm; the tools are: read, write"):
        select_tools("read,rm")
    with pytest.raises(InvalidInput, match="names no tool"):
        select_tools(",")


def test_a_run_gives_session_recall_its_answer_mode() -> None:
    tools = default_registry()
    provider = ScriptedProvider(["x"])
    given = with_recall_answers(tools, provider, "m")
    recall = given.get("session_recall")
    assert isinstance(recall, SessionRecallTool) and recall.answerer is not None
    original = tools.get("session_recall")
    assert isinstance(original, SessionRecallTool) and original.answerer is None  # the caller's registry is kept
    assert with_recall_answers(ToolRegistry(), provider, "m").names() == []


async def test_answer_mode_reads_the_evidence_with_rlm(store: Store, tmp_path: Path) -> None:
    old = await store.create_session(directory=str(tmp_path))
    await store.append(old.id, [Message.user("Always run the tests with `make check`.")])
    now = await store.create_session(directory=str(tmp_path))
    ctx = ToolContext(workspace=tmp_path, session_id=now.id, store=store)
    seen: list[str] = []

    def respond(request):  # type: ignore[no-untyped-def]
        seen.append(request.messages[0].text if request.messages else "")
        return "FINAL(Run `make check` [1])"

    tool = SessionRecallTool(rlm_answerer(ScriptedProvider(respond), "scripted"))
    ctx_call = ToolCallPart(
        id="r", name="session_recall", arguments={"query": "how to run the tests", "mode": "answer"}
    )
    result = await run_tool_call(ToolRegistry([tool]), ctx_call, ctx)
    assert not result.is_error, result.content
    assert result.content == "Run `make check` [1]"
    assert result.metadata["hits"] and "answer" in result.metadata


async def test_the_embedded_model_answers_recall_by_map_reduce_within_its_window() -> None:
    """The local model cannot write code: answer mode reads the evidence without the REPL, each call sized
    to the run's window (it assumed a 128k window and the REPL before)."""
    from tether.providers.catalog import ModelInfo
    from tether.rlm.mapreduce import ANSWER_SYSTEM, DIRECT_SYSTEM, MAP_SYSTEM

    window = ModelInfo(provider="local", model="m", context_window=4_000, max_output_tokens=512)
    provider = ScriptedProvider(lambda request: "notes on it", name="local")
    answer = rlm_answerer(provider, "m", window)
    result = await answer("evidence line about make check\n" * 2_000, "how are the tests run?")
    assert result.text and provider.requests
    assert {r.system for r in provider.requests} <= {MAP_SYSTEM, ANSWER_SYSTEM, DIRECT_SYSTEM}  # no REPL
    assert all((r.max_output_tokens or 0) <= 512 for r in provider.requests)
    assert all(sum(len(m.text) for m in r.messages) < 4_000 * 4 for r in provider.requests)  # a window's worth
