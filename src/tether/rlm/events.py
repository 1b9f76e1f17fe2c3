"""What an RLM run reports while it works (`RlmProgress`) and when it ends (`RlmFinished`): plain records with
the token figures so far, tagged by `type` like `tether.events`, into which the runtime folds them."""

from __future__ import annotations

from typing import Literal

import msgspec

Stage = Literal[
    "started",  # the REPL is up; `detail` lists the sandbox layers that hold
    "iteration",  # the root model is asked for its next step
    "block",  # a code block runs in the REPL
    "sub_calls",  # a batch of sub-model calls was answered
    "repl_restart",  # the REPL died or hung and a fresh one replaced it
    "fallback",  # RLM gave up; `detail` says why, map-reduce takes over
    "map",  # map-reduce read one chunk (`done` of `total`)
    "reduce",  # map-reduce combines its notes
]


class RlmProgress(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="rlm_progress"):
    stage: Stage
    detail: str = ""
    iteration: int = 0
    sub_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0
    done: int | None = None
    total: int | None = None


class RlmFinished(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="rlm_finished"):
    iterations: int
    sub_calls: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    answer_chars: int
    fallback: bool = False
    fallback_reason: str | None = None


RlmEvent = RlmProgress | RlmFinished
