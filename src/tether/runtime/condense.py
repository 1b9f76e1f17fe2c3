"""The RLM hand-off: an input too large for the model's window (a user message, or the output of a bulk
tool) is read by RLM while its progress streams as run events; its account is journaled as a `condensed`
marker, which stands in for the input in derived contexts while the journal keeps the input whole."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ..context.engine import ModelLimits
from ..context.tokens import TokenCounter
from ..events import Event, RlmEvent, RlmProgress
from ..markers import Condensed, to_marker
from ..messages import ToolCallPart, ToolResultPart
from ..rlm.engine import RlmLimits
from ..rlm.policy import RLM_SHARE, condensable, condense, text_needs_rlm, tool_output_question
from ..rlm.sizing import model_counter
from ..tools.output import read_artifact_bytes
from .state import RunState

MAX_BYTES_PER_CHAR = 4
"""UTF-8 spends at most four bytes on a character, and a token is at least one byte."""


def counter_for(state: RunState) -> TokenCounter:
    """The counter of the run's model: its own tokenizer where the provider offers one (the embedded
    model's), else the estimate for its family. The decision to condense and RLM's calls both use it."""
    return model_counter(state.provider, state.options.model)


def oversized(state: RunState, text: str) -> bool:
    """Whether a user message is too large for the model's window and goes to RLM first. (Counting by the
    embedded model's tokenizer loads that model, on the event loop, when no call has loaded it yet.)"""
    if state.options.context is not None:
        return False
    return text_needs_rlm(text, state.model_info.context_window, counter_for(state))


async def condense_tool_output(
    state: RunState, call: ToolCallPart, result: ToolResultPart, seq: int
) -> AsyncIterator[Event]:
    """A bulk tool's output too large for the window: RLM over all of it (the artifact, when the result
    was cut), its account standing in for the output in derived contexts."""
    tool = state.tools.get(call.name)
    info = state.model_info
    size = int(result.metadata.get("original_chars") or len(result.content))
    if tool is None or result.is_error or state.options.context is not None or not condensable(tool):
        return
    if MAX_BYTES_PER_CHAR * size <= RLM_SHARE * info.context_window:
        return  # small enough whatever the tokenizer: the artifact need not be read
    artifact = result.metadata.get("artifact")
    full = (
        (await read_artifact_bytes(state.session.store, artifact)).decode("utf-8", "replace")
        if isinstance(artifact, str)
        else result.content
    )
    if not text_needs_rlm(full, info.context_window, counter_for(state)):
        return
    question = tool_output_question(call.name, state.objective()[:500] or None)
    async for event in condense_text(
        state, full, seq=seq, what="tool output", question=question, window=info, call_id=call.id
    ):
        yield event


async def condense_text(
    state: RunState,
    text: str,
    *,
    seq: int,
    what: str,
    question: str | None,
    window: ModelLimits,
    call_id: str | None = None,
) -> AsyncIterator[Event]:
    """Run RLM on `text` while streaming its progress, then journal its stand-in as a `condensed` marker."""
    journal = state.journal
    notes: asyncio.Queue[RlmEvent] = asyncio.Queue()
    limits = RlmLimits(context_window=window.context_window, max_output_tokens=min(window.max_output_tokens, 4096))
    kwargs: dict[str, Any] = {"question": question} if question is not None else {}
    task = asyncio.ensure_future(
        condense(
            text,
            state.provider,
            model=state.options.model,
            what=what,
            limits=limits,
            on_event=notes.put_nowait,
            use_repl=state.provider.name != "local",  # the embedded model cannot write code
            counter=counter_for(state),
            **kwargs,
        )
    )
    yield RlmProgress(
        session_id=state.session_id,
        n=journal.next_number(),
        stage="input",
        detail=f"an oversized {what} ({len(text):,} characters)",
    )
    try:
        while True:
            getter = asyncio.ensure_future(notes.get())
            finished, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter in finished:
                yield journal.number(getter.result())
                continue
            getter.cancel()
            break
        while not notes.empty():
            yield journal.number(notes.get_nowait())
        condensed = task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    usage = condensed.result.usage
    await state.append(
        to_marker(
            Condensed(
                seq=seq,
                text=condensed.text,
                call_id=call_id,
                fallback=condensed.result.fallback,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        )
    )
    for event in journal.drain():
        yield event
