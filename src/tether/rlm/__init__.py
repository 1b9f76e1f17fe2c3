"""RLM: answering questions about texts far larger than a model's window. The text lives as `context` in a
confined Python REPL (`sandbox`, `confine`, `repl_process`) that the model drives with code and sub-model calls
(`engine`); a chunked map-reduce (`mapreduce`) is the fallback; `sizing` cuts calls to the model's own window
and tokenizer; `policy` says when the agent loop uses it."""

from __future__ import annotations

from ..events import RlmEvent, RlmFinished, RlmProgress
from .engine import RlmLimits, RlmResult, find_code_blocks, find_final, rlm_answer
from .mapreduce import map_reduce, split_text, split_tokens
from .policy import (
    MESSAGE_QUESTION,
    PREVIEW_CHARS,
    RLM_SHARE,
    Condensed,
    condense,
    needs_rlm,
    stand_in,
    text_needs_rlm,
    tool_output_needs_rlm,
    tool_output_question,
)
from .sandbox import BlockResult, Sandbox, SandboxLayer, SandboxLimits
from .sizing import TEXT_SHARE, model_counter, text_budget

__all__ = [
    "MESSAGE_QUESTION",
    "PREVIEW_CHARS",
    "RLM_SHARE",
    "TEXT_SHARE",
    "BlockResult",
    "Condensed",
    "RlmEvent",
    "RlmFinished",
    "RlmLimits",
    "RlmProgress",
    "RlmResult",
    "Sandbox",
    "SandboxLayer",
    "SandboxLimits",
    "condense",
    "find_code_blocks",
    "find_final",
    "map_reduce",
    "model_counter",
    "needs_rlm",
    "rlm_answer",
    "split_text",
    "split_tokens",
    "stand_in",
    "text_budget",
    "text_needs_rlm",
    "tool_output_needs_rlm",
    "tool_output_question",
]
