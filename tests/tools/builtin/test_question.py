from __future__ import annotations

from pathlib import Path

from tether.messages import ToolCallPart
from tether.store import MemoryStore
from tether.tools import ToolContext, run_tool_call
from tether.tools.builtin import builtin_registry
from tether.tools.builtin.question import NO_ONE_TO_ASK


async def ask_with(ctx: ToolContext, **args: object) -> tuple[str, bool]:
    result = await run_tool_call(builtin_registry(), ToolCallPart(id="q", name="question", arguments=args), ctx)
    return result.content, result.is_error


async def test_question_reaches_the_human(tmp_path: Path) -> None:
    asked: list[str] = []

    async def ask(prompt: str) -> str:
        asked.append(prompt)
        return "  the blue one \n"

    ctx = ToolContext(workspace=tmp_path, session_id="s", store=MemoryStore(), ask=ask)
    content, is_error = await ask_with(ctx, question="Which color?", options=["red", "blue"])
    assert (content, is_error) == ("the blue one", False)
    assert asked == ["Which color?\n  1. red\n  2. blue"]


async def test_an_empty_answer_is_said_plainly(tmp_path: Path) -> None:
    async def ask(prompt: str) -> str:
        return ""

    ctx = ToolContext(workspace=tmp_path, session_id="s", store=MemoryStore(), ask=ask)
    assert await ask_with(ctx, question="Anything?") == ("(the user gave no answer)", False)


async def test_without_anyone_to_ask_it_says_so_at_once(tmp_path: Path) -> None:
    ctx = ToolContext(workspace=tmp_path, session_id="s", store=MemoryStore())
    content, is_error = await ask_with(ctx, question="Proceed?")
    assert is_error
    assert content == (
        "question: no one can answer questions in this run (non-interactive); proceed with your best judgement "
        "or stop and say what you need"
    )
    assert content == f"question: {NO_ONE_TO_ASK}"


async def test_question_is_not_run_concurrently_and_needs_text(tmp_path: Path) -> None:
    assert builtin_registry().is_read_only("question") is False
    ctx = ToolContext(workspace=tmp_path, session_id="s", store=MemoryStore())
    content, is_error = await ask_with(ctx, question="   ")
    assert is_error and content == "question: question is empty"
