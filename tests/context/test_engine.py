"""ContextEngine, as the agent loop drives it: automatic compaction at the threshold, reactive compaction
once on overflow, `auto_compact = false` honoured on every automatic path (overflow included), manual
compaction regardless, no retry loops, and a history read incrementally."""

from __future__ import annotations

import pytest

from tether.context.budget import ContextSettings, compute_budget
from tether.context.compaction import CompactionEvent, CompactionStarted
from tether.context.engine import CompactionScope, ContextEngine
from tether.errors import ContextOverflow, ProviderError
from tether.messages import Compaction, Message, ToolCallPart, ToolResultPart
from tether.providers import ScriptedProvider
from tether.session import Session
from tether.store import Store

BUDGET = compute_budget(40_000, 4_000)  # usable 35,200; threshold 31,680
SUMMARY = "## Goal\nShip it.\n## Current state\nHalfway."


def SCOPE(provider: ScriptedProvider) -> CompactionScope:
    return CompactionScope(budget=BUDGET, provider=provider, model="m")


async def grow(session: Session, turns: int, output: int = 4_000) -> None:
    for i in range(turns):
        cid = f"c{session.info.entry_count}"
        await session.append(
            Message.user(f"turn {i}"),
            Message.assistant(tool_calls=[ToolCallPart(id=cid, name="bash", arguments={"command": f"make {i}"})]),
            Message.tool(ToolResultPart(call_id=cid, name="bash", content="out\n" * output)),
        )


async def big_session(store: Store, **metadata: object) -> Session:
    session = await Session.create(store, directory="/w", metadata=dict(metadata))
    await session.append(Message.user("Ship the release."))
    await grow(session, 9)  # ~36k tokens: past the threshold
    return session


def overflow() -> ContextOverflow:
    return ContextOverflow("prompt is too long", status=400, provider="scripted")


async def test_below_the_threshold_nothing_happens(store: Store) -> None:
    session = await Session.create(store, directory="/w")
    await session.append(Message.user("hi"), Message.assistant("hello"))
    engine = ContextEngine(store)
    provider = ScriptedProvider([SUMMARY])
    derived = await engine.derive(session.id, budget=BUDGET)
    assert await engine.before_step(session.id, derived, SCOPE(provider)) is None
    assert provider.requests == []


async def test_past_the_threshold_it_compacts_before_the_step(store: Store) -> None:
    session = await big_session(store)
    engine = ContextEngine(store)
    provider = ScriptedProvider([SUMMARY])
    derived = await engine.derive(session.id, budget=BUDGET)
    assert derived.needed_tokens >= BUDGET.threshold()
    events: list[CompactionEvent] = []
    result = await engine.before_step(session.id, derived, SCOPE(provider), emit=events.append)
    assert result is not None and result.ok and result.reason == "auto" and result.strategy == "model"
    after = await engine.derive(session.id, budget=BUDGET)
    assert after.compaction_seq == result.entry.seq  # type: ignore[union-attr]
    assert after.estimate.tokens < BUDGET.threshold()
    assert isinstance(events[0], CompactionStarted) and events[0].reason == "auto"
    # the next step does not compact again
    again = await engine.before_step(session.id, after, SCOPE(provider))
    assert again is None and len(provider.requests) == 1


@pytest.mark.parametrize(
    "where", ["metadata", "shorthand", "config"], ids=["session-context", "session-shorthand", "config"]
)
async def test_auto_compact_off_is_honoured_before_a_step(store: Store, where: str) -> None:
    if where == "metadata":
        session = await big_session(store, context={"auto_compact": False})
        engine = ContextEngine(store)
    elif where == "shorthand":
        session = await big_session(store, auto_compact=False)
        engine = ContextEngine(store)
    else:
        session = await big_session(store)
        engine = ContextEngine(store, settings=ContextSettings(auto_compact=False))
    provider = ScriptedProvider([SUMMARY])
    derived = await engine.derive(session.id, budget=BUDGET)
    assert await engine.before_step(session.id, derived, SCOPE(provider)) is None
    assert provider.requests == []
    assert derived.fits  # the step still gets a context that fits: turns dropped, not compacted


async def test_auto_compact_off_is_honoured_on_the_overflow_path(store: Store) -> None:
    session = await big_session(store, auto_compact=False)
    engine = ContextEngine(store)
    provider = ScriptedProvider([SUMMARY])
    count = (await store.get_session(session.id)).entry_count
    error = overflow()
    with pytest.raises(ContextOverflow) as raised:
        await engine.on_overflow(session.id, error, SCOPE(provider))
    assert raised.value is error
    assert provider.requests == []
    assert (await store.get_session(session.id)).entry_count == count  # nothing appended


async def test_overflow_compacts_once(store: Store) -> None:
    session = await big_session(store)
    engine = ContextEngine(store)
    provider = ScriptedProvider([SUMMARY, SUMMARY])
    result = await engine.on_overflow(session.id, overflow(), SCOPE(provider))
    assert result.ok and result.reason == "overflow"
    # the retried call overflowed too, with nothing appended in between: no second compaction
    with pytest.raises(ContextOverflow):
        await engine.on_overflow(session.id, overflow(), SCOPE(provider))
    assert len(provider.requests) == 1
    # after the session moves on, a new overflow may compact again
    await grow(session, 9)
    again = await engine.on_overflow(session.id, overflow(), SCOPE(provider))
    assert again.ok and len(provider.requests) == 2


async def test_a_failed_overflow_compaction_raises_the_overflow(store: Store) -> None:
    session = await Session.create(store, directory="/w")
    await session.append(Message.user("x" * 200_000))  # one turn: nothing to compact
    engine = ContextEngine(store)
    with pytest.raises(ContextOverflow):
        await engine.on_overflow(session.id, overflow(), CompactionScope(budget=BUDGET))


async def test_a_failing_summarizer_on_the_auto_path_does_not_loop(store: Store) -> None:
    session = await big_session(store)
    engine = ContextEngine(store)
    provider = ScriptedProvider(lambda request: ProviderError("down", provider="scripted"))
    for _ in range(3):  # three steps in a row
        derived = await engine.derive(session.id, budget=BUDGET)
        await engine.before_step(session.id, derived, SCOPE(provider))
    assert len(provider.requests) == 1  # one try; the mechanical fallback then made the context small
    derived = await engine.derive(session.id, budget=BUDGET)
    assert derived.compaction_seq is not None and derived.estimate.tokens < BUDGET.threshold()


async def test_an_auto_compaction_that_cannot_help_is_not_retried_until_the_session_grows(store: Store) -> None:
    session = await Session.create(store, directory="/w")
    await session.append(Message.user("go"), Message.assistant("y" * 150_000))  # one giant turn
    engine = ContextEngine(store)
    provider = ScriptedProvider(lambda request: SUMMARY)
    for _ in range(3):
        derived = await engine.derive(session.id, budget=BUDGET)
        assert derived.fits  # truncated to fit
        result = await engine.before_step(session.id, derived, SCOPE(provider))
    assert result is None  # the first attempt failed; the later ones were not made
    assert len(provider.requests) == 1


async def test_manual_compaction_runs_even_with_auto_off(store: Store) -> None:
    session = await big_session(store, auto_compact=False)
    engine = ContextEngine(store)
    result = await engine.compact(session.id, SCOPE(ScriptedProvider([SUMMARY])))
    assert result.ok and result.reason == "manual"


async def test_history_is_read_incrementally(store: Store) -> None:
    session = await big_session(store)
    engine = ContextEngine(store)
    first = await engine.history(session.id)
    assert first[0].seq == 1
    await session.append(Message.user("one more"))
    assert (await engine.history(session.id))[-1].seq == session.info.entry_count
    # a compaction trims what is kept
    await session.append(Compaction(summary="S", first_kept_seq=20))
    trimmed = await engine.history(session.id)
    assert trimmed[0].seq == 20 and isinstance(trimmed[-1].body, Compaction)
    # a revert makes it read again, with the revert's rules
    compaction_seq = trimmed[-1].seq
    await session.revert(compaction_seq - 1)
    reread = await engine.history(session.id)
    assert reread[0].seq == 1 and all(e.seq < compaction_seq for e in reread)


async def test_session_budget_overrides_apply_to_derivation(store: Store) -> None:
    session = await big_session(store, context={"policy": "full", "prune_tool_outputs": False})
    engine = ContextEngine(store)
    settings = await engine.settings_for(session.id)
    assert settings.policy == "full" and settings.prune_tool_outputs is False
    budget = engine.budget_for(_Limits(), settings)
    assert budget.usable == compute_budget(40_000, 4_000).usable
    derived = await engine.derive(session.id, budget=budget)
    assert derived.mode == "full"


class _Limits:
    context_window = 40_000
    max_output_tokens = 4_000
