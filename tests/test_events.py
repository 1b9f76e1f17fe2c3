"""The run-event vocabulary: which entries give which durable events, how events are numbered, and that the
numbers say where in the journal an event belongs."""

from __future__ import annotations

import json

from tether.events import (
    EVENT_SPAN,
    LIVE_OFFSET,
    RESERVED_OFFSET,
    CheckpointReached,
    CompactionCompleted,
    TextComplete,
    ThinkingComplete,
    ToolCallComplete,
    ToolCallStart,
    UsageReport,
    durable_events,
    event_json,
    event_number,
    first_live,
    first_reserved,
    live_number,
    reserved_number,
)
from tether.messages import (
    Checkpoint,
    Compaction,
    Entry,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)


def test_an_assistant_message_gives_its_thinking_text_usage_and_calls_in_order() -> None:
    message = Message(
        role="assistant",
        parts=[
            ThinkingPart(text="plan"),
            TextPart(text="Reading."),
            ToolCallPart(id="c1", name="read", arguments={"path": "a"}),
            ToolCallPart(id="c2", name="grep", arguments={"pattern": "x"}),
        ],
        model="m",
        usage=Usage(input_tokens=100, output_tokens=7),
    )
    events = durable_events(Entry(12, 0.0, message), "ses_x")
    assert [type(e) for e in events] == [ThinkingComplete, TextComplete, UsageReport, ToolCallStart, ToolCallStart]
    assert [e.n for e in events] == [12 * EVENT_SPAN + k for k in range(5)]
    assert all(e.session_id == "ses_x" for e in events)
    usage = events[2]
    assert isinstance(usage, UsageReport) and usage.context_tokens == 100 and usage.model == "m"
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.call_id, s.name, s.arguments) for s in starts] == [
        ("c1", "read", {"path": "a"}),
        ("c2", "grep", {"pattern": "x"}),
    ]


def test_tool_results_checkpoints_and_compactions_give_their_events() -> None:
    results = Message.tool(
        ToolResultPart(call_id="c1", name="read", content="line one\nline two", metadata={"duration": 0.25}),
        ToolResultPart(call_id="c2", name="grep", content="no match", is_error=True, metadata={"truncated": True}),
    )
    done = durable_events(Entry(3, 0.0, results), "s")
    assert all(isinstance(e, ToolCallComplete) for e in done)
    first, second = done
    assert isinstance(first, ToolCallComplete) and isinstance(second, ToolCallComplete)
    assert (first.success, first.duration_ms, first.preview, first.seq) == (True, 250.0, "line one", 3)
    assert (second.success, second.truncated) == (False, True)
    (checkpoint,) = durable_events(Entry(4, 0.0, Checkpoint(objective="o", next_action="n", steps=5)), "s")
    assert isinstance(checkpoint, CheckpointReached) and (checkpoint.steps, checkpoint.seq) == (5, 4)
    body = Compaction(
        summary="s", first_kept_seq=2, strategy="deterministic", tokens_before=900, tokens_after=100,
        metadata={"reason": "auto", "fallback": "the summarizer failed"},
    )  # fmt: skip
    (compaction,) = durable_events(Entry(5, 0.0, body), "s")
    assert isinstance(compaction, CompactionCompleted)
    assert (compaction.reason, compaction.fallback, compaction.first_kept_seq) == ("auto", "the summarizer failed", 2)


def test_other_entries_give_no_durable_event() -> None:
    for body in (Message.user("hi"), Revert(to_seq=0), Marker(name="m"), Message.system("s")):
        assert durable_events(Entry(2, 0.0, body), "s") == []


def test_numbers_order_durable_then_live_and_clamp_at_the_span() -> None:
    assert event_number(7, 0) < event_number(7, 3) < live_number(7, 0) < live_number(7, 9) < event_number(8, 0)
    assert live_number(7, 0) == 7 * EVENT_SPAN + LIVE_OFFSET
    # the appending run's part, then the reserved part, and past either a live event keeps its last number
    assert live_number(7, 9) < reserved_number(7, 0) == 7 * EVENT_SPAN + RESERVED_OFFSET
    assert live_number(7, 10**9) == reserved_number(7, 0) - 1
    assert reserved_number(7, 10**9) == 8 * EVENT_SPAN - 1
    assert first_live(reserved_number(7, 5)) == live_number(7, 0)
    assert first_reserved(live_number(7, 5)) == reserved_number(7, 0)


def test_events_serialize_with_type_session_and_number() -> None:
    (event,) = durable_events(Entry(2, 0.0, Message.tool(ToolResultPart(call_id="c", content="ok"))), "ses_1")
    data = json.loads(event_json(event))
    assert (data["type"], data["session_id"], data["n"], data["seq"]) == ("tool_call_complete", "ses_1", 2_000_000, 2)
