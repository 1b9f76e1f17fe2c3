"""When the agent loop hands text to RLM, and what the derived context carries afterwards: a user message
larger than 35% of the window, or the output of a tool marked `bulk`, is replaced in what the model sees by
the RLM answer plus the original's first 500 characters. The journal keeps the original (invariant 1)."""

from __future__ import annotations

import math
from typing import Protocol

import msgspec

from ..context.tokens import TokenCounter, tokens_over
from ..providers.base import Provider
from .engine import EventSink, RlmLimits, RlmResult, rlm_answer

RLM_SHARE = 0.35
"""A message above this share of the context window is processed by RLM rather than shown whole."""

PREVIEW_CHARS = 500
"""How much of the original the derived context keeps verbatim, so the model still sees its shape."""

NEVER_CONDENSED = frozenset({"read", "grep", "bash"})
"""Tools whose output is a view of the workspace that the model asked for exactly; it is cut by the tool
layer's own limits, never summarised, even if a tool by that name claims to be bulk."""

MESSAGE_QUESTION = (
    "This is a message from the user that is too long to show whole. Report what it asks for, completely "
    "enough that someone who cannot see it can do it: every instruction and question, and every name, "
    "number, path, identifier and error line it gives, exactly as written."
)


def tool_output_question(tool_name: str, task: str | None = None) -> str:
    """The question RLM answers about a bulk tool's output."""
    purpose = f" for this task: {task}" if task else ""
    return (
        f"This is the output of the tool `{tool_name}`, too long to show whole. Report everything in it that "
        f"matters{purpose}. Keep names, numbers, paths, URLs and error lines exactly as written."
    )


class BulkTool(Protocol):
    """What the policy reads of a tool (`tether.tools.Tool` fits)."""

    @property
    def name(self) -> str: ...

    @property
    def bulk(self) -> bool: ...


def needs_rlm(text_tokens: int, context_window: int, *, share: float = RLM_SHARE) -> bool:
    """True when a text of `text_tokens` is too large to put in a `context_window` as it is."""
    if context_window <= 0:
        raise ValueError("context_window must be positive")
    return text_tokens > share * context_window


def text_needs_rlm(text: str, context_window: int, counter: TokenCounter, *, share: float = RLM_SHARE) -> bool:
    """`needs_rlm` for a text, by `counter` (the target model's own where its provider offers it:
    `sizing.model_counter`), which counts it only where its size leaves the answer open (`tokens_over`)."""
    if context_window <= 0:
        raise ValueError("context_window must be positive")
    return tokens_over(text, math.floor(share * context_window), counter)


def condensable(tool: BulkTool) -> bool:
    """Whether RLM may stand in for the tool's output: it is marked bulk and is not read, grep or bash."""
    return tool.bulk and tool.name not in NEVER_CONDENSED


def tool_output_needs_rlm(tool: BulkTool, output_tokens: int, context_window: int) -> bool:
    """True for the oversized output of a tool marked bulk (never read, grep or bash)."""
    return condensable(tool) and needs_rlm(output_tokens, context_window)


class Condensed(msgspec.Struct, frozen=True, kw_only=True):
    """What replaces an oversized text in the derived context (`text`), and the run that produced it."""

    text: str
    result: RlmResult


def stand_in(original: str, result: RlmResult, *, what: str = "message") -> str:
    """The derived context's text for an oversized `original`: its first `PREVIEW_CHARS` characters and
    the RLM answer, labelled so the model knows it is not seeing the whole."""
    head = original[:PREVIEW_CHARS]
    more = len(original) - len(head)
    how = "map-reduce over its chunks" if result.fallback else "recursive processing in a sandboxed REPL"
    return (
        f"[This {what} is {len(original):,} characters, too large for the context window. It is kept in full "
        f"in the session history; what follows is its beginning and an account of it made by {how}.]\n\n"
        f"Beginning:\n{head}" + (f"\n[... {more:,} more characters]" if more else "") + f"\n\nAccount:\n{result.answer}"
    )


async def condense(
    original: str,
    provider: Provider,
    *,
    model: str,
    question: str = MESSAGE_QUESTION,
    what: str = "message",
    limits: RlmLimits | None = None,
    on_event: EventSink | None = None,
    use_repl: bool = True,
    counter: TokenCounter | None = None,
) -> Condensed:
    """Run RLM on an oversized text and return its stand-in for the derived context. For a bulk tool's
    output pass ``question=tool_output_question(name, task)`` and ``what="tool output"``; `counter` sizes
    the calls (default: the model's own, `sizing.model_counter`)."""
    result = await rlm_answer(
        original,
        question,
        provider,
        model=model,
        limits=limits,
        on_event=on_event,
        use_repl=use_repl,
        counter=counter,
    )
    return Condensed(text=stand_in(original, result, what=what), result=result)
