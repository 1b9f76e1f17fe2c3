"""The `session_recall` tool through the real tool runner: evidence from this workspace's sessions with
where it comes from, a session scope, faults with codes, and answer mode through the answerer it is given
(the runtime's reads the evidence with RLM: tests/runtime/test_toolset.py)."""

from __future__ import annotations

from pathlib import Path

from tether.errors import SandboxError
from tether.messages import Message, ToolCallPart
from tether.recall.tool import Answer, SessionRecallTool
from tether.store import Store
from tether.tools.base import ToolContext, ToolRegistry
from tether.tools.runner import run_tool_call


async def workspace(store: Store, tmp_path: Path) -> tuple[ToolContext, str]:
    old = await store.create_session(directory=str(tmp_path), title="yesterday")
    await store.append(
        old.id,
        [
            Message.user("Always run the tests with `make check`, never pytest directly."),
            Message.assistant("Understood: make check from now on."),
        ],
    )
    elsewhere = await store.create_session(directory="/elsewhere")
    await store.append(elsewhere.id, [Message.user("make check is broken here")])
    now = await store.create_session(directory=str(tmp_path))
    return ToolContext(workspace=tmp_path, session_id=now.id, store=store), old.id


async def call(ctx: ToolContext, registry: ToolRegistry | None = None, **args: object):  # type: ignore[no-untyped-def]
    return await run_tool_call(
        registry or ToolRegistry([SessionRecallTool()]),
        ToolCallPart(id="r", name="session_recall", arguments=args),
        ctx,
    )


async def test_evidence_comes_from_this_workspace_with_its_source(store: Store, tmp_path: Path) -> None:
    ctx, old = await workspace(store, tmp_path)
    result = await call(ctx, query="how should tests be run")
    assert not result.is_error
    assert "make check" in result.content and old in result.content and '"yesterday"' in result.content
    assert "#1 user" in result.content and "#2 assistant" in result.content
    assert "broken here" not in result.content  # another directory
    assert result.metadata["hits"][0] == {"session_id": old, "seq": 1}


async def test_session_scope_and_limit(store: Store, tmp_path: Path) -> None:
    ctx, _ = await workspace(store, tmp_path)
    other = (await store.list_sessions(directory="/elsewhere")).items[0].id
    result = await call(ctx, query="make check", session_id=other, limit=1)
    assert "broken here" in result.content and len(result.metadata["hits"]) == 1


async def test_faults_have_codes(store: Store, tmp_path: Path) -> None:
    ctx, _ = await workspace(store, tmp_path)
    result = await call(ctx, query="kubernetes helm")
    assert result.is_error and result.metadata["error"] == "no_match" and "[no_match]" in result.content
    result = await call(ctx, query="   ")
    assert result.is_error and result.metadata["error"] == "invalid_query"
    result = await call(ctx, query="make", session_id="../../etc/passwd")
    assert result.is_error and result.metadata["error"] == "invalid_query"
    result = await call(ctx, query="make", limit=500)
    assert result.is_error and result.metadata["error"] == "invalid_arguments"  # the schema's maximum
    result = await call(ctx, query="make check", mode="answer")
    assert result.is_error and result.metadata["error"] == "answer_unavailable"


async def test_a_broken_store_is_a_backend_fault(store: Store, tmp_path: Path) -> None:
    ctx, _ = await workspace(store, tmp_path)
    await store.close()
    result = await call(ctx, query="make check")
    assert result.is_error and result.metadata["error"] == "backend_error"


async def test_evidence_respects_the_output_budget(store: Store, tmp_path: Path) -> None:
    ctx, _ = await workspace(store, tmp_path)
    sid = (await store.create_session(directory=str(tmp_path))).id
    await store.append(sid, [Message.user(f"make check note {i} " + "padding " * 60) for i in range(30)])
    registry = ToolRegistry([SessionRecallTool(budget=2_000)])
    result = await call(ctx, registry, query="make check note", limit=30)
    assert not result.is_error and len(result.content) < 2_600
    assert result.content.startswith(f"{len(result.metadata['hits'])} of ")


async def test_answer_mode_hands_the_evidence_to_the_answerer(store: Store, tmp_path: Path) -> None:
    ctx, _ = await workspace(store, tmp_path)
    asked: list[tuple[str, str]] = []

    async def answerer(evidence: str, question: str) -> Answer:
        asked.append((evidence, question))
        return Answer("Run `make check` [1]", {"by": "test"})

    result = await call(ctx, ToolRegistry([SessionRecallTool(answerer)]), query="how to run the tests", mode="answer")
    assert not result.is_error and result.content == "Run `make check` [1]"
    assert result.metadata["answer"] == {"by": "test"} and result.metadata["hits"]
    ((evidence, question),) = asked
    assert "[1]" in evidence and "make check" in evidence and question.startswith("how to run the tests")

    async def failing(evidence: str, question: str) -> Answer:
        raise SandboxError("the sandbox died", reason="crashed")

    result = await call(ctx, ToolRegistry([SessionRecallTool(failing)]), query="make check", mode="answer")
    assert result.is_error and result.metadata["error"] == "answer_failed" and "sandbox died" in result.content
