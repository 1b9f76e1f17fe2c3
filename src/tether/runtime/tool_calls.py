"""Running the tool calls of a step: consecutive read-only calls together, the others one at a time, in the
model's order. Each call passes the permission decision first (`permission.PermissionCheck`, the one place
where approval rules will decide), and each result is journaled as soon as it is known, so a crash loses at most
the calls in flight. A call that repeats the one before it is flagged where the model looks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import msgspec

from ..events import Event
from ..messages import Message, ToolCallPart, ToolResultPart
from ..tools.base import ToolContext
from ..tools.runner import run_tool_call
from .condense import condense_tool_output
from .permission import ALLOWED, Permission
from .state import RunState

log = logging.getLogger("tether.runtime")

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


async def _decide_and_run(state: RunState, call: ToolCallPart, ctx: ToolContext) -> ToolResultPart:
    check = state.options.permission
    try:
        permission = ALLOWED if check is None else await check(call, ctx)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a broken check refuses: a tool never runs without a decision
        log.warning("the permission check failed on %s", call.name, exc_info=True)
        permission = Permission(False, f"the permission check failed ({type(exc).__name__}: {exc})")
    if not permission.allowed:
        return ToolResultPart(
            call_id=call.id,
            name=call.name,
            content=f"{call.name}: not run: {permission.reason or 'permission denied'}",
            is_error=True,
            metadata={"error": "denied"},
        )
    return await run_tool_call(state.tools, call, ctx)


def _batches(state: RunState, calls: Sequence[ToolCallPart]) -> list[list[ToolCallPart]]:
    """Consecutive calls that may run together: read-only ones, or calls of one parallel tool (`task`)."""
    registry = state.tools

    def kind(call: ToolCallPart) -> str | None:
        if not call.arguments_ok:
            return None
        if registry.is_read_only(call.name):
            return "read"
        return f"parallel:{call.name}" if registry.is_parallel(call.name) else None

    batches: list[list[ToolCallPart]] = []
    for call in calls:
        concurrent = kind(call)
        if concurrent and batches and all(kind(c) == concurrent for c in batches[-1]):
            batches[-1].append(call)
        else:
            batches.append([call])
    return batches


async def run_tool_calls(
    state: RunState, calls: Sequence[ToolCallPart], pending: list[ToolCallPart]
) -> AsyncIterator[Event]:
    """Run `calls`, journal each result as it comes, and yield the events of each (its `ToolCallComplete`,
    then any condensing of an oversized output). `pending` loses each call whose result is journaled: what
    is left when the run is cancelled gets an 'aborted' result."""
    ctx = state.tool_context()
    journal = state.journal
    for batch in _batches(state, calls):
        tasks = [asyncio.ensure_future(_decide_and_run(state, call, replace(ctx, call_id=call.id))) for call in batch]
        try:
            unfinished = set(tasks)
            while unfinished:
                # what the calls report while they run (a sub-agent's events, a request for approval) goes
                # out as it comes, not when the call ends
                journal.reported.clear()
                for event in journal.drain():
                    yield event
                reported = asyncio.ensure_future(journal.reported.wait())
                waiters: list[asyncio.Future[Any]] = [*unfinished, reported]
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    reported.cancel()
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
