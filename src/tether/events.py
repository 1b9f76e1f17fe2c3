"""The events a run emits, as plain typed records tagged by `type`: what `Session.stream` yields, what
`tether run --json` prints one per line, and what the server sends over SSE. Pure data, no I/O."""

from __future__ import annotations

from typing import Any

import msgspec

from .messages import Usage


class _Event(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    session_id: str = ""


class RunStarted(_Event, tag="run_started"):
    run_id: str
    model: str
    provider: str
    resumed: bool = False
    """True when the run picks up an earlier one (``--continue`` with no new prompt)."""


class TextDelta(_Event, tag="text_delta"):
    text: str


class ThinkingDelta(_Event, tag="thinking_delta"):
    text: str


class TextComplete(_Event, tag="text_complete"):
    text: str
    seq: int
    """Where the assistant message holding it was journaled."""


class ThinkingComplete(_Event, tag="thinking_complete"):
    text: str


class ToolCallStart(_Event, tag="tool_call_start"):
    call_id: str
    name: str
    arguments: Any = None


class ToolCallComplete(_Event, tag="tool_call_complete"):
    call_id: str
    name: str
    success: bool
    duration_ms: float
    preview: str = ""
    """The first line or so of the result, for a compact display."""
    truncated: bool = False
    seq: int = 0


class UsageReport(_Event, tag="usage"):
    """The usage of one model call, and the run's total so far. Token figures here are the provider's."""

    model: str
    step: Usage
    total: Usage
    context_tokens: int | None = None
    """The prompt size of the call as the provider reported it: the calibration point of token estimates."""


class CheckpointReached(_Event, tag="checkpoint"):
    reason: str
    objective: str
    next_action: str
    steps: int
    seq: int


class CompactionStarted(_Event, tag="compaction_started"):
    reason: str
    """``auto`` (the estimate crossed the threshold), ``overflow`` (the provider said so) or ``manual``."""
    tokens_before: int
    summarizer: str | None = None
    """``provider/model`` of the summarizer; None when the compaction is mechanical from the start."""


class CompactionCompleted(_Event, tag="compaction_completed"):
    reason: str
    strategy: str
    tokens_before: int
    tokens_after: int
    seq: int
    """The seq of the new `Compaction` entry; undo it with a revert to ``seq - 1``."""
    first_kept_seq: int
    fallback: str | None = None
    """Why the mechanical strategy stood in for the model, when it did."""


class CompactionFailed(_Event, tag="compaction_failed"):
    reason: str
    error: str


class ApprovalRequested(_Event, tag="approval_requested"):
    call_id: str
    name: str
    arguments: Any = None


class ApprovalResolved(_Event, tag="approval_resolved"):
    call_id: str
    approved: bool
    by: str = ""


class Progress(_Event, tag="progress"):
    """Long work inside a step (RLM, backfill): what it is doing, and how far along."""

    what: str
    detail: str = ""
    done: int | None = None
    total: int | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


class Done(_Event, tag="done"):
    """The run ended normally. `reason`: ``completed`` (the model stopped calling tools), ``step_limit``
    (a checkpoint was written; ``--continue`` resumes) or ``nothing_to_do``."""

    text: str
    steps: int
    usage: Usage
    reason: str = "completed"


class Error(_Event, tag="error"):
    """The run ended on an error. `code` is stable (``cancelled``, ``repeated_tool_call``, ``provider_auth``,
    ``rate_limited``, ``context_overflow``, ``provider_error``, ``busy``, ``internal``)."""

    code: str
    message: str
    retryable: bool = False


Event = (
    RunStarted
    | TextDelta
    | ThinkingDelta
    | TextComplete
    | ThinkingComplete
    | ToolCallStart
    | ToolCallComplete
    | UsageReport
    | CheckpointReached
    | CompactionStarted
    | CompactionCompleted
    | CompactionFailed
    | ApprovalRequested
    | ApprovalResolved
    | Progress
    | Done
    | Error
)

_encoder = msgspec.json.Encoder(decimal_format="string")


def event_json(event: Event) -> bytes:
    """One event as a JSON object with its `type` field."""
    return _encoder.encode(event)
