"""The events a run emits, as plain typed records tagged by `type`: what `Session.stream` yields, what
`tether run --json` prints one per line, and what the server will send over SSE. Pure data, no I/O.

Every event carries its `session_id` and a number `n` that increases within the session. Events come in
two kinds:

- **durable** events are derived from a journal entry by `durable_events` (an assistant message gives
  `ThinkingComplete`, `TextComplete`, `UsageReport` and one `ToolCallStart` per call; a tool message one
  `ToolCallComplete` per result; a checkpoint `CheckpointReached`; a compaction `CompactionCompleted`; an
  approval request `ApprovalRequested`, its decision `ApprovalResolved`).
  The k-th event of the entry at seq s is numbered ``s * EVENT_SPAN + k``, so they can be replayed from the
  journal after any number, by anyone who can read it, with the same numbers;
- **live** events (deltas, progress, the start and end of a run, compaction attempts) exist only while the
  run streams. Those that follow entry s are numbered in its span's live half, which has two parts: from
  ``s * EVENT_SPAN + LIVE_OFFSET`` the live events of the run that appended entry s (no other run can
  have appended it: the journal's expected seq makes it one writer's), given without a store write; from
  ``s * EVENT_SPAN + RESERVED_OFFSET`` those of a run that starts (or an event given outside a run) after
  entry s, from blocks reserved in the store before one is given (`Store.reserve_numbers`, through
  `runtime.journal.RunJournal`): each block lies above every number reserved for the session before, by
  any process, so no number is given twice, even by a run that follows one killed mid-stream. Only durable
  events reach other processes through the journal, and theirs come from the journal.

Numbers read as the journal position they follow: 12000002 is the third event of entry 12, 12500000 the
first live event after it from the run that appended it, 12750000 the first of a run started after it."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from . import markers
from .messages import (
    APPROVAL_DECISION_MARKER,
    APPROVAL_REQUEST_MARKER,
    Checkpoint,
    Compaction,
    Entry,
    Marker,
    Message,
    ThinkingPart,
    Usage,
    cut_reason,
)

EVENT_SPAN = 1_000_000
"""Event numbers per journal entry: the durable events of entry s, then the live events after it."""
LIVE_OFFSET = EVENT_SPAN // 2
"""Where the live events after an entry start numbering. An entry gives far fewer durable events (three
plus one per tool call: no model answers with half a million calls)."""
RESERVED_OFFSET = LIVE_OFFSET + (EVENT_SPAN - LIVE_OFFSET) // 2
"""Where the live events of a run that starts after an entry (rather than appended it) start numbering,
reserved in the store. A quarter of a million live events fill either part, and any more keep that part's
last number (they repeat it, never go back)."""


class _Event(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    session_id: str = ""
    n: int = 0
    """The event's number in its session (see the module docstring)."""


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
    cut: str | None = None
    """Why the text stops short, in words (`messages.cut_reason`: the output limit, a cancel, a kill)."""


class ThinkingComplete(_Event, tag="thinking_complete"):
    text: str


class ToolCallStart(_Event, tag="tool_call_start"):
    """A tool call the model asked for, journaled with its message; it runs in the message's order."""

    call_id: str
    name: str
    arguments: Any = None


class ToolCallComplete(_Event, tag="tool_call_complete"):
    call_id: str
    name: str
    success: bool
    duration_ms: float
    preview: str = ""
    """The first line or so of the result, for a compact display (a refused call's: the whole reason)."""
    truncated: bool = False
    seq: int = 0
    denied: bool = False
    """The call did not run: the rules, a person, or a program's check refused it."""


class UsageReport(_Event, tag="usage"):
    """The usage of one model call (the run's total is in `Done`). Token figures here are the provider's."""

    model: str
    step: Usage
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
    """A tool call waits for a person's decision (answer it with `SessionManager.answer`). `reason` says why
    it asks; `suggestion` lists the rules an "always" would add."""

    call_id: str
    name: str
    arguments: Any = None
    reason: str = ""
    suggestion: list[str] = msgspec.field(default_factory=list)
    seq: int = 0


class ApprovalResolved(_Event, tag="approval_resolved"):
    """The decision on an approval request: `approved` or not, `by` whom (``user``, ``timeout``), how far a
    yes reaches (`scope`: ``once``, ``session``, ``project``, with the `rules` it added), and a denial's
    `message` for the model."""

    call_id: str
    approved: bool
    by: str = ""
    scope: str = "once"
    rules: list[str] = msgspec.field(default_factory=list)
    message: str = ""
    seq: int = 0


class Progress(_Event, tag="progress"):
    """Long work inside a step (RLM, backfill): what it is doing, and how far along."""

    what: str
    detail: str = ""
    done: int | None = None
    total: int | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


RlmStage = Literal[
    "input",  # an input too large for the window goes to RLM; `detail` says what and how large
    "started",  # the REPL is up; `detail` lists the sandbox layers that hold
    "iteration",  # the root model is asked for its next step
    "block",  # a code block runs in the REPL
    "sub_calls",  # a batch of sub-model calls was answered
    "repl_restart",  # the REPL died or hung and a fresh one replaced it
    "fallback",  # RLM gave up; `detail` says why, map-reduce takes over
    "map",  # map-reduce read one chunk (`done` of `total`)
    "reduce",  # map-reduce combines its notes
]


class RlmProgress(_Event, tag="rlm_progress"):
    """Where an RLM run over an oversized input stands, with its token figures so far."""

    stage: RlmStage
    detail: str = ""
    iteration: int = 0
    sub_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0
    done: int | None = None
    total: int | None = None


class RlmFinished(_Event, tag="rlm_finished"):
    """An RLM run ended (its answer stands in for the oversized input in what the model sees)."""

    iterations: int
    sub_calls: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    answer_chars: int
    fallback: bool = False
    fallback_reason: str | None = None


RlmEvent = RlmProgress | RlmFinished


class Done(_Event, tag="done"):
    """The run ended normally. `reason`: ``completed`` (the model stopped calling tools), ``step_limit``
    (a checkpoint was written; ``--continue`` resumes) or ``nothing_to_do``. `usage` is the run's total."""

    text: str
    steps: int
    usage: Usage
    reason: str = "completed"


class Error(_Event, tag="error"):
    """The run ended on an error. `code` is stable: ``cancelled``, ``repeated_tool_call``, ``internal``, or
    the `code` of the tether exception that ended it, the same code an HTTP error body carries
    (`tether.errors`: ``auth_error``, ``rate_limited``, ``context_overflow``, ``transient_error``,
    ``bad_request``, ``provider_error``, ``answer_cut``, ``session_busy``, ``lease_lost``, ``seq_conflict``;
    and ``invalid_input``, with no session, for a request refused before it started)."""

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
    | RlmProgress
    | RlmFinished
    | Done
    | Error
)

DURABLE_TYPES: tuple[type[_Event], ...] = (
    TextComplete,
    ThinkingComplete,
    ToolCallStart,
    ToolCallComplete,
    UsageReport,
    CheckpointReached,
    CompactionCompleted,
    ApprovalRequested,
    ApprovalResolved,
)
"""The event types `durable_events` derives from journal entries; every other type is live only."""


def event_number(seq: int, k: int) -> int:
    """The number of the k-th durable event of the entry at `seq`."""
    return seq * EVENT_SPAN + k


def live_number(seq: int, k: int) -> int:
    """The number of the k-th live event after the entry at `seq` given by the run that appended it (the
    last of that part once it is full)."""
    return seq * EVENT_SPAN + LIVE_OFFSET + min(k, RESERVED_OFFSET - LIVE_OFFSET - 1)


def reserved_number(seq: int, k: int) -> int:
    """The number of the k-th live event after the entry at `seq` from the store's reserved blocks (a run
    that starts there, an event given outside a run; the span's last once it is full)."""
    return seq * EVENT_SPAN + RESERVED_OFFSET + min(k, EVENT_SPAN - RESERVED_OFFSET - 1)


def span_last(seq: int) -> int:
    """The last number of the span of the entry at `seq` (live numbers after it never go further)."""
    return (seq + 1) * EVENT_SPAN - 1


def is_live(n: int) -> bool:
    """Whether an event number is a live event's (else a durable event's, derived from an entry)."""
    return n % EVENT_SPAN >= LIVE_OFFSET


def first_live(n: int) -> int:
    """The first live number of the span that event number `n` lies in: where the live events of the run
    that appended that entry start."""
    return live_number(n // EVENT_SPAN, 0)


def first_reserved(n: int) -> int:
    """The first reserved live number of the span that event number `n` lies in (`reserved_number`)."""
    return reserved_number(n // EVENT_SPAN, 0)


def durable_events(entry: Entry, session_id: str) -> list[Event]:
    """The durable events of one journal entry, numbered. The loop emits exactly these when it journals the
    entry, and a replay of the journal gives them again, equal field by field."""
    body = entry.body
    out: list[Event] = []
    seq = entry.seq
    if isinstance(body, Message):
        if body.role == "assistant":
            for part in body.parts:
                if isinstance(part, ThinkingPart) and part.text:
                    out.append(ThinkingComplete(text=part.text))
            if body.text:
                out.append(TextComplete(text=body.text, seq=seq, cut=cut_reason(body)))
            usage = body.usage or Usage()
            out.append(UsageReport(model=body.model or "", step=usage, context_tokens=usage.input_tokens or None))
            for call in body.tool_calls:
                out.append(ToolCallStart(call_id=call.id, name=call.name, arguments=call.arguments))
        elif body.role == "tool":
            for result in body.tool_results:
                meta = result.metadata
                duration = meta.get("duration")
                denied = meta.get("error") == "denied"
                out.append(
                    ToolCallComplete(
                        call_id=result.call_id,
                        name=result.name or "",
                        success=not result.is_error,
                        duration_ms=float(duration) * 1000 if isinstance(duration, int | float) else 0.0,
                        preview=preview(result.content, 1000 if denied else 160),
                        truncated=bool(meta.get("truncated", False)),
                        seq=seq,
                        denied=denied,
                    )
                )
    elif isinstance(body, Checkpoint):
        out.append(
            CheckpointReached(
                reason=body.reason, objective=body.objective, next_action=body.next_action, steps=body.steps, seq=seq
            )
        )
    elif isinstance(body, Compaction):
        fallback = body.metadata.get("fallback")
        out.append(
            CompactionCompleted(
                reason=str(body.metadata.get("reason", "manual")),
                strategy=body.strategy,
                tokens_before=body.tokens_before or 0,
                tokens_after=body.tokens_after or 0,
                seq=seq,
                first_kept_seq=body.first_kept_seq,
                fallback=fallback if isinstance(fallback, str) else None,
            )
        )
    elif isinstance(body, Marker) and body.name in (APPROVAL_REQUEST_MARKER, APPROVAL_DECISION_MARKER):
        approval = _approval_event(body, seq)
        if approval is not None:
            out.append(approval)
    for k, event in enumerate(out):
        event.session_id = session_id
        event.n = event_number(seq, k)
    return out


def _approval_event(marker: Marker, seq: int) -> Event | None:
    """The event of an approval marker; None for one whose data is not what the runtime writes (an import)."""
    body = markers.parse(marker)
    if isinstance(body, markers.ApprovalRequest):
        return ApprovalRequested(
            call_id=body.call_id,
            name=body.tool,
            arguments=body.arguments,
            reason=body.reason,
            suggestion=list(body.suggestion),
            seq=seq,
        )
    if isinstance(body, markers.ApprovalDecision):
        return ApprovalResolved(
            call_id=body.call_id,
            approved=body.approved,
            by=body.by,
            scope=body.scope,
            rules=list(body.rules),
            message=body.message or "",
            seq=seq,
        )
    return None


def preview(text: str, limit: int = 160) -> str:
    """The first line of a tool's output, cut to `limit` characters."""
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


_encoder = msgspec.json.Encoder(decimal_format="string")


def event_json(event: Event) -> bytes:
    """One event as a JSON object with its `type` field."""
    return _encoder.encode(event)
