"""When the loop hands text to RLM, and the stand-in the derived context carries instead of the original."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest

from tether.messages import Usage
from tether.providers import ModelRequest, ScriptedProvider
from tether.rlm import (
    MESSAGE_QUESTION,
    PREVIEW_CHARS,
    RlmResult,
    condense,
    needs_rlm,
    stand_in,
    tool_output_needs_rlm,
    tool_output_question,
)


def test_needs_rlm_above_35_percent_of_the_window() -> None:
    assert not needs_rlm(35_000, 100_000)
    assert needs_rlm(35_001, 100_000)
    assert not needs_rlm(0, 8_192)
    assert needs_rlm(10_000, 8_192)
    assert needs_rlm(2_000, 8_192, share=0.2)


@pytest.mark.parametrize("window", [0, -1])
def test_needs_rlm_rejects_a_window_that_is_not_one(window: int) -> None:
    with pytest.raises(ValueError):
        needs_rlm(10, window)


@dataclass
class FakeTool:
    name: str
    bulk: bool


def test_only_bulk_tools_and_never_read_grep_or_bash() -> None:
    assert tool_output_needs_rlm(FakeTool("webfetch", bulk=True), 50_000, 100_000)
    assert not tool_output_needs_rlm(FakeTool("webfetch", bulk=True), 30_000, 100_000)  # small enough
    assert not tool_output_needs_rlm(FakeTool("list", bulk=False), 50_000, 100_000)
    for name in ("read", "grep", "bash"):
        assert not tool_output_needs_rlm(FakeTool(name, bulk=True), 90_000, 100_000)


def result(answer: str, *, fallback: bool = False) -> RlmResult:
    return RlmResult(
        answer=answer,
        iterations=2,
        sub_calls=1,
        usage=Usage(input_tokens=10, output_tokens=5, cost=Decimal(0)),
        duration_s=0.1,
        fallback=fallback,
        fallback_reason="because" if fallback else None,
    )


def test_stand_in_keeps_the_first_500_characters_and_the_answer() -> None:
    original = "HEAD" + "x" * 10_000 + "TAIL"
    text = stand_in(original, result("It asks to fix the parser."))
    assert ("HEAD" + "x" * (PREVIEW_CHARS - 4)) in text
    assert "x" * (PREVIEW_CHARS - 3) not in text and "TAIL" not in text
    assert "It asks to fix the parser." in text
    assert "10,008 characters" in text and "kept in full in the session history" in text
    assert "[... 9,508 more characters]" in text
    assert "map-reduce" in stand_in(original, result("a", fallback=True), what="tool output")


def test_stand_in_of_a_short_text_does_not_claim_more() -> None:
    assert "more characters" not in stand_in("short", result("a"))


def test_questions_name_what_they_are_about() -> None:
    assert "instruction" in MESSAGE_QUESTION
    question = tool_output_question("webfetch", "find the release date")
    assert "`webfetch`" in question and "find the release date" in question
    assert "for this task" not in tool_output_question("webfetch")


async def test_condense_runs_rlm_and_returns_the_stand_in() -> None:
    replies = ["```repl\nprint(context[:20])\n```", "FINAL(The user asks to rename the module.)"]

    def respond(request: ModelRequest) -> str:
        return replies.pop(0)

    original = "Please rename the module. " + "context " * 5_000
    condensed = await condense(original, ScriptedProvider(respond), model="m")
    assert condensed.result.answer == "The user asks to rename the module."
    assert not condensed.result.fallback
    assert condensed.text == stand_in(original, condensed.result)
