"""Calling the model for one step: the provider's stream becomes the run's live events (text and thinking
deltas), and ends in the assistant message; a provider that says the context overflowed gets one
compaction and one more try. What has streamed so far is kept, so that a cancel can journal it, and saved
as it comes (`streaming.StreamSaver`), so that a kill loses at most its last half second."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..errors import ContextOverflow, ProviderError
from ..events import Event, TextDelta, ThinkingDelta
from ..messages import Message, TextPart, ThinkingPart, ToolCallPart
from ..providers.base import (
    StreamDone,
    TextPartDelta,
    ThinkingPartDelta,
    ToolCallPartDelta,
    ToolCallPartReady,
    ToolCallPartStart,
)
from .prepare import PreparedStep, compaction_scope, prepare_step
from .state import RunState
from .streaming import StreamSaver


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
            stream = state.provider.stream(self.prepared.request)
            first = True
            try:
                async for part in stream:
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
            except ContextOverflow as overflow:
                if overflowed or state.options.context is not None or partial.text or partial.thinking:
                    raise
                overflowed = True
                try:
                    await state.engine.on_overflow(sid, overflow, emit=journal.note, **compaction_scope(state))
                finally:
                    for event in journal.drain():
                        yield event
                continue
            finally:
                saver.stop()
                aclose = getattr(stream, "aclose", None)  # the HTTP stream goes at once, however we leave
                if aclose is not None:
                    await aclose()
            break
        if self.done is None:
            raise ProviderError(f"{state.provider.name} ended its answer without a final message")
