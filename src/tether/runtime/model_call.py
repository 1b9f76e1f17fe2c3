"""Calling the model for one step: the provider's stream becomes the run's live events (text and thinking
deltas), and ends in the assistant message; a provider that says the context overflowed gets one
compaction and one more try. What has streamed so far is kept, so that a cancel can journal it, and saved
as it comes (`streaming.StreamSaver`), so that a kill loses at most its last half second. An answer that
goes on past what a step allows (`AnswerLimits`: its tokens, a stall) is cut (`AnswerCut`)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from ..config import RuntimeConfig
from ..errors import ContextOverflow, ProviderError
from ..events import Event, TextDelta, ThinkingDelta
from ..messages import Message, TextPart, ThinkingPart, ToolCallPart
from ..providers.base import (
    ModelRequest,
    Provider,
    StreamDone,
    StreamEvent,
    TextPartDelta,
    ThinkingPartDelta,
    TokenCounter,
    ToolCallPartDelta,
    ToolCallPartReady,
    ToolCallPartStart,
)
from ..rlm.sizing import model_counter
from .prepare import PreparedStep, compaction_scope, prepare_step
from .state import RunState
from .streaming import StreamSaver

DEFAULT_STALL_TIMEOUT = 600.0
"""Seconds a model may send nothing before its answer is cut (`[runtime] stall_timeout`): the OpenAI and
Anthropic SDKs' own read timeout, since a reasoning model may think that long before its first token."""

OUTPUT_SLACK = 0.25
"""By default an answer is cut at the output limit asked of the model and this part more: tether counts
with its own tokenizer, which may see fewer tokens than the model's."""


@dataclass(frozen=True)
class AnswerLimits:
    """What one model answer may take before its step is cut: `tokens` streamed (text, thinking and
    tool-call arguments, as tether counts them) and `stall` seconds without an event."""

    tokens: int
    stall: float

    @classmethod
    def of(cls, runtime: RuntimeConfig, request: ModelRequest, declared: int) -> AnswerLimits:
        """The `[runtime]` settings, or the defaults for `request` (`declared`: the model's output limit)."""
        asked = request.max_output_tokens or declared
        tokens = runtime.max_answer_tokens or asked + math.ceil(asked * OUTPUT_SLACK)
        return cls(tokens=tokens, stall=runtime.stall_timeout or DEFAULT_STALL_TIMEOUT)


class AnswerCut(ProviderError):
    """The model's answer went past what a step allows: `reason` ``length`` (more tokens than
    `AnswerLimits.tokens`) or ``stalled`` (nothing for `AnswerLimits.stall` seconds). `detail` is what the
    journal keeps about it; what streamed until then is the call's `partial`."""

    def __init__(self, message: str, *, reason: Literal["length", "stalled"], detail: dict[str, Any], provider: str):
        super().__init__(message, provider=provider)
        self.reason = reason
        self.detail = detail
        self.retryable = reason == "stalled"  # a hung server may answer the next time; a runaway model, not


class _Meter:
    """The tokens an answer has streamed, counted cheaply and close to what the text is: deltas wait
    uncounted while even a token a byte could not take the answer past the limit, and are counted together
    when they could; near the limit, one by one."""

    def __init__(self, limit: int, provider: Provider, model: str) -> None:
        self.limit = limit
        self._provider = provider
        self._model = model
        self._counter: TokenCounter | None = None
        self._pending: list[str] = []
        self._pending_bytes = 0
        self.tokens = 0

    def over(self, text: str) -> bool:
        """Add `text`; whether the answer is now past the limit."""
        if not text:
            return False
        self._pending.append(text)
        self._pending_bytes += len(text.encode("utf-8", "surrogatepass"))
        if self.tokens + self._pending_bytes <= self.limit:
            return False
        if self._counter is None:  # the run model's own tokenizer where its provider has one
            self._counter = model_counter(self._provider, self._model)
        self.tokens += self._counter.count("".join(self._pending))
        self._pending = []
        self._pending_bytes = 0
        return self.tokens > self.limit


class PartialAnswer:
    """What one model call has produced so far: enough to journal a partial answer on cancel."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolCallPart] = []
        self.building: dict[str, tuple[str, list[str]]] = {}  # call id -> (tool, its arguments so far)

    def message(self, model: str, provider: str) -> Message | None:
        parts: list[TextPart | ThinkingPart | ToolCallPart] = []
        if self.thinking:
            parts.append(ThinkingPart(text="".join(self.thinking), provider=provider))
        if self.text:
            parts.append(TextPart(text="".join(self.text)))
        parts.extend(self.calls)
        done = {c.id for c in self.calls}
        cut = [{"id": k, "name": n, "arguments": "".join(a)} for k, (n, a) in self.building.items() if k not in done]
        if not parts and not cut:
            return None
        return Message(
            role="assistant",
            parts=list(parts),
            model=model,
            provider=provider,
            finish_reason="cancelled",
            metadata={"partial": True, **({"cut_calls": cut} if cut else {})},
        )


class ModelCall:
    """One step's call: iterate `stream()` for its live events; then `done` holds the provider's final
    event and `prepared` the request that got it. `partial` is what streamed, until the answer is journaled."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.partial: PartialAnswer | None = None
        self.prepared: PreparedStep | None = None
        self.done: StreamDone | None = None
        self.saver: StreamSaver | None = None

    async def stream(self) -> AsyncIterator[Event]:
        state = self.state
        journal = state.journal
        sid = state.session_id
        overflowed = False
        while True:  # one model call; a second only after compacting for a context overflow
            self.prepared = await prepare_step(state)
            for event in journal.drain():
                yield event
            self.partial = partial = PartialAnswer()
            self.saver = saver = StreamSaver(state, partial)
            request = self.prepared.request
            limits = AnswerLimits.of(
                (state.options.config.runtime if state.options.config else RuntimeConfig()),
                request,
                state.model_info.max_output_tokens,
            )
            meter = _Meter(limits.tokens, state.provider, request.model)
            stream = state.provider.stream(request)
            watch = _Watchdog(limits.stall)
            first = True
            try:
                while True:
                    try:
                        part = await watch.next(stream)
                    except StopAsyncIteration:
                        break
                    except asyncio.CancelledError:
                        if not watch.stalled():
                            raise
                        raise _stalled(limits.stall, state.provider.name) from None
                    if first:  # the model's answer begins: its handling is a stretch of work (see `pacing`)
                        first = False
                        if state.options.pacer is not None:
                            await state.options.pacer.turn()
                    if isinstance(part, TextPartDelta):
                        partial.text.append(part.text)
                        yield TextDelta(session_id=sid, n=journal.next_number(), text=part.text)
                        if saver.grew(len(part.text)):
                            await saver.save()
                    elif isinstance(part, ThinkingPartDelta):
                        partial.thinking.append(part.text)
                        yield ThinkingDelta(session_id=sid, n=journal.next_number(), text=part.text)
                        if saver.grew(len(part.text)):
                            await saver.save()
                    elif isinstance(part, ToolCallPartStart):
                        partial.building[part.id] = (part.name, [])
                    elif isinstance(part, ToolCallPartDelta):
                        building = partial.building.get(part.id)
                        if building is not None:
                            building[1].append(part.arguments_delta)
                            if saver.grew(len(part.arguments_delta)):
                                await saver.save()
                    elif isinstance(part, ToolCallPartReady):
                        partial.calls.append(part.part)
                        if saver.grew(1):
                            await saver.save()
                    elif isinstance(part, StreamDone):
                        self.done = part
                    if meter.over(_streamed(part)):
                        raise _too_long(meter.tokens, limits.tokens, request, state.provider.name)
            except ContextOverflow as overflow:
                if overflowed or state.options.context is not None or partial.text or partial.thinking:
                    raise
                overflowed = True
                try:
                    await state.engine.on_overflow(sid, overflow, compaction_scope(state), emit=journal.note)
                finally:
                    for event in journal.drain():
                        yield event
                continue
            finally:
                saver.stop()
                watch.close()
                aclose = getattr(stream, "aclose", None)  # the HTTP stream goes at once, however we leave
                if aclose is not None:
                    await aclose()
            break
        if self.done is None:
            raise ProviderError(f"{state.provider.name} ended its answer without a final message")


def _too_long(tokens: int, limit: int, request: ModelRequest, provider: str) -> AnswerCut:
    return AnswerCut(
        f"the model's answer was cut after {tokens:,} tokens, past the {limit:,} a step allows ([runtime] "
        f"max_answer_tokens; by default the output limit asked of the model, {request.max_output_tokens or 0:,}, "
        "and a quarter more)",
        reason="length",
        detail={"reason": "length", "tokens": tokens, "limit": limit},
        provider=provider,
    )


def _stalled(stall: float, provider: str) -> AnswerCut:
    return AnswerCut(
        f"the model sent nothing for {stall:g} s, so its answer was cut ([runtime] stall_timeout)",
        reason="stalled",
        detail={"reason": "stalled", "seconds": stall},
        provider=provider,
    )


def _streamed(event: StreamEvent) -> str:
    """The text an event adds to the answer (its text, its thinking, a tool call's arguments)."""
    if isinstance(event, TextPartDelta | ThinkingPartDelta):
        return event.text
    if isinstance(event, ToolCallPartDelta):
        return event.arguments_delta
    return ""


class _Watchdog:
    """Cuts a model call whose provider sends nothing for `stall` seconds: one timer for the whole call, moved
    on lazily, which cancels the call's task only while that task waits on the provider (not while whoever
    reads the events does something else). An event costs two clock reads, not a timer of its own."""

    def __init__(self, stall: float) -> None:
        self.stall = stall
        self.fired = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._waiting_since: float | None = None
        self._timer = self._loop.call_at(self._loop.time() + stall, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        since = self._waiting_since
        if since is not None and now >= since + self.stall and self._task is not None:
            self.fired = True
            self._task.cancel()
        else:
            self._timer = self._loop.call_at((now if since is None else since) + self.stall, self._check)

    async def next(self, events: AsyncIterator[StreamEvent]) -> StreamEvent:
        """The provider's next event (`StopAsyncIteration` at its end), waited for under the watch."""
        self._waiting_since = self._loop.time()
        try:
            return await anext(events)
        finally:
            self._waiting_since = None

    def stalled(self) -> bool:
        """After a `CancelledError`: whether it was this watch's (then taken back), not someone else's."""
        return self.fired and self._task is not None and self._task.uncancel() == 0

    def close(self) -> None:
        self._timer.cancel()
