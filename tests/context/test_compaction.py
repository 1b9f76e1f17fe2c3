"""Compaction with the scripted provider: the model path, the mechanical fallback (failing summarizer, too
small a gain), no loops, pins and the goal kept verbatim across compactions, merging instead of nesting,
the table of dropped user turns, undo, events, and a session that moved on meanwhile."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tether.context.budget import Budget, ContextSettings, compute_budget
from tether.context.compaction import (
    SUMMARIZER_SYSTEM,
    CompactionCompleted,
    CompactionEvent,
    CompactionFailed,
    CompactionStarted,
    compact_session,
    pin,
    state_of,
    undo_compaction,
)
from tether.context.derive import derive_context
from tether.context.history import load_context_history
from tether.errors import InvalidInput, NotFound, ProviderError
from tether.messages import Compaction, Message, Revert, TextPart, ToolCallPart, ToolResultPart
from tether.providers import ModelRequest, ScriptedProvider
from tether.session import Session
from tether.store import Store, active_entries

CONSTRAINT = "Never touch the payments table directly; always go through billing/ledger.py."
BUDGET = compute_budget(40_000, 4_000)  # usable 35,200


async def coding_session(store: Store, *, turns: int = 12, output: int = 4_000, pinned: bool = True) -> Session:
    session = await Session.create(store, directory="/work/app")
    await session.append(Message.user("Make invoice totals round half-even in src/billing/totals.py."))
    if pinned:
        await session.append(
            Message(role="user", parts=[TextPart(text=CONSTRAINT)], metadata={"pinned": True}),
        )
    await add_turns(session, turns, output)
    return session


async def add_turns(session: Session, turns: int, output: int, tag: str = "") -> None:
    for i in range(turns):
        cid = f"c{tag}{session.info.entry_count}_{i}"
        await session.append(
            Message.user(f"step {tag}{i}: run the tests for module_{i}"),
            Message.assistant(
                "Running them.",
                tool_calls=[ToolCallPart(id=cid, name="bash", arguments={"command": f"pytest tests/test_{i}.py"})],
            ),
            Message.tool(
                ToolResultPart(
                    call_id=cid,
                    name="bash",
                    content=f"test_{i} output\n" + "line of output\n" * (output // 4),
                    is_error=i % 4 == 0,
                )
            ),
            Message.assistant(f"Module {i} done."),
        )


def summarizer(text: str = "## Goal\nRound invoice totals.\n## Current state\nTests pass.") -> ScriptedProvider:
    return ScriptedProvider(lambda request: text)


def collect() -> tuple[list[CompactionEvent], Callable[[CompactionEvent], None]]:
    events: list[CompactionEvent] = []
    return events, events.append


async def context_of(store: Store, session: Session) -> str:
    d = derive_context(await active_entries(store, session.id))
    return "\n".join(m.text for m in d.messages)


# --- the model path ---------------------------------------------------------------------------------------


async def test_model_compaction_appends_a_summary_entry(store: Store) -> None:
    session = await coding_session(store)
    provider = summarizer()
    events, emit = collect()
    result = await compact_session(store, session.id, provider=provider, model="m", budget=BUDGET, emit=emit)
    assert result.ok and result.strategy == "model" and result.fallback is None
    assert result.tokens_after < result.tokens_before * 0.5
    assert result.entry is not None
    body = result.entry.body
    assert isinstance(body, Compaction) and body.strategy == "model"
    assert body.tokens_before == result.tokens_before and body.tokens_after == result.tokens_after
    assert body.metadata["reason"] == "manual" and body.metadata["summarizer"] == "scripted/m"
    assert [type(e) for e in events] == [CompactionStarted, CompactionCompleted]
    done = events[-1]
    assert isinstance(done, CompactionCompleted)
    assert done.seq == result.entry.seq and done.first_kept_seq == body.first_kept_seq
    # the summarizer got the structured prompt
    (request,) = provider.requests
    assert request.system == SUMMARIZER_SYSTEM
    prompt = request.messages[0].text
    for section in ("## Goal", "## Constraints and preferences", "## Files touched", "## Commands run"):
        assert section in prompt
    assert "## Errors" in prompt and "## Current state" in prompt and "## Next steps" in prompt
    assert "pytest tests/test_3.py" in prompt
    # the derived context now opens with the summary, then the kept entries
    d = derive_context(await active_entries(store, session.id))
    assert d.seqs[0] is None and d.seqs[1] == body.first_kept_seq
    assert "Round invoice totals." in d.messages[0].text
    assert d.estimate.counted == result.tokens_after


async def test_the_kept_part_starts_at_a_user_message(store: Store) -> None:
    session = await coding_session(store)
    result = await compact_session(store, session.id, provider=summarizer(), model="m", budget=BUDGET)
    assert result.entry is not None and isinstance(result.entry.body, Compaction)
    first = (await store.read(session.id, result.entry.body.first_kept_seq, result.entry.body.first_kept_seq))[0]
    assert isinstance(first.body, Message) and first.body.role == "user"


async def test_goal_pins_and_dropped_turns_are_in_the_summary(store: Store) -> None:
    session = await coding_session(store)
    result = await compact_session(store, session.id, provider=summarizer(), model="m", budget=BUDGET)
    assert result.entry is not None and isinstance(result.entry.body, Compaction)
    summary = result.entry.body.summary
    assert "Make invoice totals round half-even in src/billing/totals.py." in summary
    assert f"(entry 2) {CONSTRAINT}" in summary
    assert "## Earlier user turns" in summary and "| 3 |" in summary and "step 0: run the tests" in summary
    assert f'session_recall(query="<words from its first line>", session_id="{session.id}")' in summary
    # mechanical facts ride along with the model's text
    assert "src/billing/totals.py" in summary and "`pytest tests/test_0.py`" in summary


async def test_facts_can_be_left_out_of_model_summaries(store: Store) -> None:
    session = await coding_session(store)
    settings = ContextSettings(compaction_facts=False)
    result = await compact_session(
        store, session.id, provider=summarizer(), model="m", budget=BUDGET, settings=settings
    )
    assert result.entry is not None and isinstance(result.entry.body, Compaction)
    assert "## Commands run" not in result.entry.body.summary
    assert CONSTRAINT in result.entry.body.summary  # pins are not facts: always kept


# --- the mechanical fallback, and no loops ----------------------------------------------------------------


async def test_a_failing_summarizer_falls_back_once_and_does_not_loop(store: Store) -> None:
    session = await coding_session(store)
    provider = ScriptedProvider([ProviderError("upstream exploded", provider="scripted")])
    events, emit = collect()
    result = await compact_session(store, session.id, provider=provider, model="m", budget=BUDGET, emit=emit)
    assert len(provider.requests) == 1
    assert result.ok and result.strategy == "deterministic"
    assert result.fallback is not None and "upstream exploded" in result.fallback
    assert isinstance(events[-1], CompactionCompleted) and events[-1].fallback == result.fallback
    assert result.entry is not None and isinstance(result.entry.body, Compaction)
    summary = result.entry.body.summary
    assert CONSTRAINT in summary and "## Commands run" in summary and "## Errors" in summary
    assert result.entry.body.metadata["fallback"] == result.fallback


async def test_an_empty_summary_counts_as_a_failure(store: Store) -> None:
    session = await coding_session(store)
    result = await compact_session(store, session.id, provider=summarizer("   "), model="m", budget=BUDGET)
    assert result.strategy == "deterministic" and result.fallback and "returned nothing" in result.fallback


async def test_a_summary_that_saves_too_little_falls_back(store: Store) -> None:
    session = await coding_session(store)
    huge = "## Current state\n" + "everything, verbatim. " * 15_000
    result = await compact_session(store, session.id, provider=summarizer(huge), model="m", budget=BUDGET)
    assert result.strategy == "deterministic"
    assert result.fallback is not None and "took only" in result.fallback
    assert result.tokens_after < result.tokens_before * 0.95


async def test_a_compaction_that_cannot_save_5_percent_appends_nothing(store: Store) -> None:
    session = await Session.create(store, directory="/w")
    await session.append(Message.user("hi"), Message.assistant("x" * 20_000))
    before = session.info.entry_count
    events, emit = collect()
    result = await compact_session(store, session.id, provider=summarizer(), model="m", budget=BUDGET, emit=emit)
    assert not result.ok and result.error is not None and "nothing was appended" in result.error
    assert result.error.startswith("the context is too short to gain from a summary (") and "%" not in result.error
    assert isinstance(events[-1], CompactionFailed)
    assert (await store.get_session(session.id)).entry_count == before


async def test_nothing_to_compact(store: Store) -> None:
    session = await Session.create(store, directory="/w")
    await session.append(Message.user("only this"))
    provider = summarizer()
    result = await compact_session(store, session.id, provider=provider, model="m")
    assert not result.ok and result.error and "nothing to compact" in result.error
    assert provider.requests == []


async def test_without_a_model_it_is_mechanical_by_choice(store: Store) -> None:
    session = await coding_session(store)
    result = await compact_session(store, session.id, budget=BUDGET)
    assert result.ok and result.strategy == "deterministic" and result.fallback is None


# --- repeated compactions: merge, do not nest; pins survive ------------------------------------------------


async def test_a_pinned_constraint_survives_three_compactions_verbatim(store: Store) -> None:
    session = await coding_session(store, turns=8)
    # A forgetful summarizer: it never repeats the constraint. The summary must hold it anyway.
    n = 0

    def respond(request: ModelRequest) -> str:
        nonlocal n
        n += 1
        return f"## Goal\nRound totals.\n## Current state\nSummary number {n}."

    provider = ScriptedProvider(respond)
    summaries = []
    for round_ in range(3):
        result = await compact_session(store, session.id, provider=provider, model="m", budget=BUDGET)
        assert result.ok and result.strategy == "model", result
        assert result.entry is not None and isinstance(result.entry.body, Compaction)
        summaries.append(result.entry.body.summary)
        await add_turns(session, 8, 4_000, tag=f"r{round_}-")
    assert len(provider.requests) == 3
    final = summaries[-1]
    assert f"(entry 2) {CONSTRAINT}" in final
    assert "Make invoice totals round half-even in src/billing/totals.py." in final
    # merged, not nested: one copy of each verbatim section, the latest model text only
    assert final.count(CONSTRAINT) == 1
    assert final.count("## The user's first message") == 1
    assert "Summary number 3." in final and "Summary number 2." not in final
    # each summarizer call after the first got the previous summary to update
    assert "<previous-summary>" not in provider.requests[0].messages[0].text
    second = provider.requests[1].messages[0].text
    assert "<previous-summary>" in second and "Summary number 1." in second
    # the derived context holds the constraint verbatim after all three
    assert CONSTRAINT in await context_of(store, session)
    # the turn table grew across compactions
    assert "| 3 |" in final and "step r0-0" in final


async def test_a_pin_marker_pins_a_message_already_summarized(store: Store) -> None:
    session = await coding_session(store, pinned=False)
    await compact_session(store, session.id, budget=BUDGET)
    await pin(store, session.id, 4)  # the assistant's "Running them." of the first turn... a message
    entries = await store.read(session.id, 4, 4)
    assert isinstance(entries[0].body, Message)
    await add_turns(session, 10, 4_000, tag="x")
    result = await compact_session(store, session.id, budget=BUDGET)
    assert result.entry is not None and isinstance(result.entry.body, Compaction)
    assert "## Pinned by the user" in result.entry.body.summary
    assert f"(entry 4) {entries[0].body.text}" in result.entry.body.summary
    with pytest.raises(InvalidInput):
        await pin(store, session.id, result.entry.seq)  # not a message


def test_state_survives_a_foreign_compaction_entry() -> None:
    foreign = Compaction(summary="written by an importer", first_kept_seq=3, metadata={"state": {"bad": 1}})
    state = state_of(foreign)
    assert state.body == "written by an importer" and state.covered_to == 2
    garbled = Compaction(summary="s", first_kept_seq=3, metadata={"state": {"count": "x"}})
    assert state_of(garbled).body == "s"


# --- chunked summarization ------------------------------------------------------------------------------


async def test_a_long_transcript_is_summarized_in_rolling_chunks(store: Store) -> None:
    session = await coding_session(store, turns=12)
    seen: list[str] = []

    def respond(request: ModelRequest) -> str:
        seen.append(request.messages[0].text)
        return f"## Current state\nchunk summary {len(seen)}"

    result = await compact_session(
        store, session.id, provider=ScriptedProvider(respond), model="m", budget=BUDGET, summarizer_input_limit=9_000
    )
    assert result.ok and len(seen) >= 2
    for i in range(1, len(seen)):
        assert f"chunk summary {i}" in seen[i]  # each chunk updates the summary of the ones before
    assert result.entry is not None and f"chunk summary {len(seen)}" in result.entry.body.summary  # type: ignore[union-attr]


# --- undo, and a session that moved on ----------------------------------------------------------------------


async def test_a_compaction_undone(store: Store) -> None:
    session = await coding_session(store)
    full_before = await context_of(store, session)
    result = await compact_session(store, session.id, provider=summarizer(), model="m", budget=BUDGET)
    assert result.entry is not None
    assert await context_of(store, session) != full_before
    revert = await undo_compaction(store, session.id)
    assert isinstance(revert.body, Revert) and revert.body.to_seq == result.entry.seq - 1
    assert await context_of(store, session) == full_before
    assert (await load_context_history(store, session.id))[0].seq == 1
    # nothing was deleted: the compaction is still in the journal
    raw = await store.read(session.id, result.entry.seq, result.entry.seq)
    assert isinstance(raw[0].body, Compaction)
    with pytest.raises(NotFound):
        await undo_compaction(store, session.id)
    with pytest.raises(InvalidInput):
        await undo_compaction(store, session.id, 1)


async def test_a_session_that_moved_on_fails_the_compaction(store: Store) -> None:
    session = await coding_session(store)

    async def interject(event: CompactionEvent) -> None:
        if isinstance(event, CompactionStarted):
            await store.append(session.id, [Message.user("a message that arrived meanwhile")])

    count = (await store.get_session(session.id)).entry_count
    result = await compact_session(store, session.id, provider=summarizer(), model="m", budget=BUDGET, emit=interject)
    assert not result.ok and result.error and "moved on" in result.error
    entries = await store.read(session.id, count + 1)
    assert [type(e.body) for e in entries] == [Message]


async def test_overflow_compaction_keeps_less(store: Store) -> None:
    a = await coding_session(store)
    b = await coding_session(store)
    manual = await compact_session(store, a.id, budget=BUDGET, reason="manual")
    overflow = await compact_session(store, b.id, budget=BUDGET, reason="overflow")
    assert manual.entry is not None and overflow.entry is not None
    assert isinstance(manual.entry.body, Compaction) and isinstance(overflow.entry.body, Compaction)
    assert overflow.entry.body.first_kept_seq > manual.entry.body.first_kept_seq
    assert overflow.entry.body.metadata["reason"] == "overflow"


def test_budget_fixture_is_what_the_tests_assume() -> None:
    assert Budget(context_window=40_000, reserved_output=4_000, safety_margin=800) == BUDGET
