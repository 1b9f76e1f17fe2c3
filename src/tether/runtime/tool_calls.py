"""Running the tool calls of a step: consecutive read-only calls together, the others one at a time, in the
model's order. Each call is decided on first, in order, before its batch runs (`approvals.decide`: the
program's check and the rules; an ask waits for a person), and each result is journaled as soon as it is
known, so a crash loses at most the calls in flight. A call that repeats the one before it is flagged where
the model looks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import msgspec

from ..events import Event
from ..messages import Message, ToolCallPart, ToolResultPart
from ..tools.base import ToolContext
from ..tools.runner import run_tool_call
from . import audit
from .approvals import Decision, decide, decided_by
from .condense import condense_tool_output
from .journal import RunJournal
from .state import RunState
from .toolset import batch_kind

REPEAT_LIMIT = 3
REPEAT_NOTE = (
    "[This call repeats the one just before it, with the same arguments, and got the same kind of result. "
    "Use it to answer, or try something different: a third identical call stops the run.]"
)


def repeated_call(state: RunState, calls: Sequence[ToolCallPart]) -> str | None:
    """The name of a call made REPEAT_LIMIT times in a row with the same arguments; notes the calls that
    repeat the one just before (their results say so)."""
    for call in calls:
        signature = f"{call.name}\x00{call.arguments_json()}"
        if state.recent_calls and state.recent_calls[-1] == signature:
            state.repeats.add(call.id)
        state.recent_calls.append(signature)
        tail = state.recent_calls[-REPEAT_LIMIT:]
        if len(tail) == REPEAT_LIMIT and len(set(tail)) == 1:
            return call.name
    return None


async def _run_decided(state: RunState, call: ToolCallPart, ctx: ToolContext, decision: Decision) -> ToolResultPart:
    started = time.perf_counter()
    result = await _run_or_refuse(state, call, ctx, decision)
    seconds, permission = time.perf_counter() - started, decision.permission
    record = audit.tool_call(
        state.session.store, state.session_id, call, result, seconds, allowed=permission.allowed,
        decided_by=decided_by(state, decision), reason=permission.reason, redactor=state.journal.redactor,
    )  # fmt: skip
    if record is not None:
        state.journal.audit.append(record)  # written with the next append: this call's result, as a rule
    return result


async def _run_or_refuse(state: RunState, call: ToolCallPart, ctx: ToolContext, decision: Decision) -> ToolResultPart:
    if not decision.permission.allowed:
        metadata: dict[str, object] = {"error": "denied"}
        if decision.asked:  # `sessions show` marks what a person refused
            metadata["approval"] = "denied"
        return ToolResultPart(
            call_id=call.id,
            name=call.name,
            content=f"{call.name}: not run: {decision.permission.reason or 'permission denied'}",
            is_error=True,
            metadata=metadata,
        )
    result = await run_tool_call(state.tools, call, ctx)
    if decision.asked:  # `sessions show` marks what a person let run
        result = msgspec.structs.replace(result, metadata={**result.metadata, "approval": "approved"})
    return result


def _batches(state: RunState, calls: Sequence[ToolCallPart]) -> list[list[ToolCallPart]]:
    """Consecutive calls that may run together (`toolset.batch_kind`)."""
    batches: list[list[ToolCallPart]] = []
    for call in calls:
        concurrent = batch_kind(state.tools, call)
        if concurrent and batches and all(batch_kind(state.tools, c) == concurrent for c in batches[-1]):
            batches[-1].append(call)
        else:
            batches.append([call])
    return batches


async def _reported_until(journal: RunJournal, unfinished: set[asyncio.Future[Any]]) -> AsyncIterator[Event]:
    """What is reported while `unfinished` run (a sub-agent's events, a request for approval), as it comes
    rather than when they end; returns once one of them is done."""
    while True:
        journal.reported.clear()
        for event in journal.drain():
            yield event
        if any(f.done() for f in unfinished):
            return
        reported = asyncio.ensure_future(journal.reported.wait())
        try:
            await asyncio.wait([*unfinished, reported], return_when=asyncio.FIRST_COMPLETED)
        finally:
            reported.cancel()


async def run_tool_calls(
    state: RunState, calls: Sequence[ToolCallPart], pending: list[ToolCallPart]
) -> AsyncIterator[Event]:
    """Run `calls`, journal each result as it comes, and yield the events of each (its `ToolCallComplete`,
    then any condensing of an oversized output). `pending` loses each call whose result is journaled: what
    is left when the run is cancelled gets an 'aborted' result."""
    ctx = state.tool_context()
    journal = state.journal
    for batch in _batches(state, calls):
        contexts = {call.id: replace(ctx, call_id=call.id) for call in batch}
        decisions: dict[str, Decision] = {}
        # Nothing of this batch or after it has started while it is decided on. A cancel here answers them
        # "aborted", except from a call that waits for a person on (`approvals.awaiting`): those are left
        # without results, for the next run to decide again (the loop's cancel path sorts them).
        for call in batch:
            deciding = asyncio.ensure_future(decide(state, call, contexts[call.id]))
            try:
                async for event in _reported_until(journal, {deciding}):
                    yield event
            finally:
                if not deciding.done():
                    deciding.cancel()
                    await asyncio.gather(deciding, return_exceptions=True)
            decisions[call.id] = deciding.result()
        tasks = [
            asyncio.ensure_future(_run_decided(state, call, contexts[call.id], decisions[call.id])) for call in batch
        ]
        try:
            unfinished: set[asyncio.Future[Any]] = set(tasks)
            while unfinished:
                async for event in _reported_until(journal, unfinished):
                    yield event
                for task in [t for t in tasks if t in unfinished and t.done()]:  # in the model's order
                    unfinished.discard(task)
                    result = task.result()
                    call = next(c for c in batch if c.id == result.call_id)
                    if call.id in state.repeats:
                        # Weak models repeat a call whose answer they already have; say so where they look.
                        result = msgspec.structs.replace(result, content=f"{result.content}\n\n{REPEAT_NOTE}")
                    (stored,) = await state.append(Message.tool(result))
                    pending[:] = [c for c in pending if c.id != call.id]
                    for event in journal.drain():
                        yield event
                    async for event in condense_tool_output(state, call, result, stored.seq):
                        yield event
        finally:
            for task in tasks:
                if not task.done():
                    ctx.abort.set()
                    task.cancel()
            if any(not t.done() for t in tasks):
                await asyncio.gather(*tasks, return_exceptions=True)
