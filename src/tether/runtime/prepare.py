"""Preparing a step: the context the model will see (derived from the journal by the context engine, after
a compaction when it passed the threshold) and the request that carries it. Events of a compaction wait in
the run's journal for the loop to yield them."""

from __future__ import annotations

from dataclasses import dataclass

from ..context.derive import DerivedContext
from ..context.engine import CompactionScope
from ..errors import ContextOverflow
from ..providers.base import ModelRequest
from .state import RunState


@dataclass
class PreparedStep:
    request: ModelRequest
    derived: DerivedContext | None
    """None when the run bypasses the context engine (`RunOptions.context`)."""


def compaction_scope(state: RunState) -> CompactionScope:
    """What every compaction the run asks of the context engine shares: its budget, prompt, tools, settings,
    summarizer, where the session stands and the append that journals the compaction."""
    summarizer = state.summarizer
    return CompactionScope(
        budget=state.budget,
        system=system_prompt(state),
        tools=state.specs,
        settings=state.settings,
        provider=summarizer.provider,
        model=summarizer.model,
        summarizer_input_limit=summarizer.input_limit,
        last_seq=state.journal.last_seq,
        append=state.journal.append_for_engine,
    )


def system_prompt(state: RunState) -> str | None:
    """The run's own system prompt, then the project's instructions, skills and memory notes."""
    base = state.options.system_prompt or state.session.info.system_prompt
    if not state.project_text:
        return base
    return f"{base}\n\n{state.project_text}" if base else state.project_text


async def derive(state: RunState) -> DerivedContext:
    return await state.engine.derive(
        state.session_id,
        budget=state.budget,
        system=system_prompt(state),
        tools=state.specs,
        settings=state.settings,
        model=state.options.model,
        last_seq=state.journal.last_seq,
    )


async def prepare_step(state: RunState) -> PreparedStep:
    """The request of the next model call. Compacts first when the derived context passed the threshold
    (automatic compaction on); raises `ContextOverflow` when even the fixed part does not fit."""
    opts = state.options
    derived: DerivedContext | None = None
    if opts.context is not None:
        messages = await opts.context(state.entries)
    else:
        derived = await derive(state)
        compacted = await state.engine.before_step(
            state.session_id, derived, compaction_scope(state), emit=state.journal.note
        )
        if compacted is not None and compacted.entry is not None:
            derived = await derive(state)
        if not derived.fits:
            raise ContextOverflow(
                f"the system prompt and tool definitions alone ({derived.fixed_tokens:,} tokens) "
                f"do not fit the model's budget of {state.budget.usable:,} input tokens"
            )
        messages = derived.messages
    budget = state.budget
    request = ModelRequest(
        model=opts.model,
        messages=messages,
        system=system_prompt(state),
        tools=state.specs,
        max_output_tokens=min(opts.max_output_tokens or budget.reserved_output, budget.reserved_output),
        temperature=opts.temperature,
    )
    return PreparedStep(request, derived)
