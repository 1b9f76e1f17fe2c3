"""The provider protocol: one request record in, a stream of small typed events out, ending in `StreamDone`
with the assembled assistant message. Also `ResponseBuilder`, which adapters use to turn wire deltas into
those events, and `complete()`, which drains a stream into one `ModelResponse`.

Usage convention (every adapter normalises to it): `input_tokens` counts the whole prompt, cached tokens
included, and `cache_read_tokens` / `cache_write_tokens` say which part of it was read from / written to
the provider's prompt cache; `output_tokens` counts the whole completion, `reasoning_tokens` included.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..errors import ProviderError
from ..messages import Message, Part, TextPart, ThinkingPart, ToolCallPart, ToolSpec, Usage


class TokenCounter(Protocol):
    """Counts the tokens of a text. `source` names how: ``"tiktoken:o200k_base"``, ``"heuristic"``, a model's
    own tokenizer. Defined here, beside the providers that may offer one (`TokenCounting`); the context
    engine's counters (`tether.context.tokens`) are the others."""

    @property
    def source(self) -> str: ...

    def count(self, text: str) -> int: ...


ToolChoice = str
"""``"auto"`` (the model decides), ``"none"`` (no tool calls), ``"required"`` (some tool call), or the name of
the one tool the model must call."""

FinishReason = str
"""Normalised across providers: ``"stop"``, ``"tool_calls"``, ``"length"``, ``"content_filter"``; anything
else a provider reports is passed through as it came."""


class ModelRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Everything one model call needs, and nothing secret: keys live in the provider, so this record may be
    journaled or logged as it is. `model` is the provider's own model id (``"gpt-4.1"``, not
    ``"openai/gpt-4.1"``)."""

    model: str
    messages: list[Message]
    system: str | None = None
    tools: list[ToolSpec] = msgspec.field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    max_output_tokens: int | None = None
    temperature: float | None = None
    stop: list[str] = msgspec.field(default_factory=list)
    thinking_budget: int | None = None
    """Tokens the model may spend reasoning, where the provider takes a budget (Anthropic); None: off."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Free-form, for the caller's bookkeeping; adapters do not send it."""


# --- stream events --------------------------------------------------------------------------------------


class _Event(msgspec.Struct, tag_field="kind", kw_only=True):
    pass


class TextPartDelta(_Event, tag="text_part_delta"):
    text: str


class ThinkingPartDelta(_Event, tag="thinking_part_delta"):
    text: str


class ToolCallPartStart(_Event, tag="tool_call_part_start"):
    id: str
    name: str


class ToolCallPartDelta(_Event, tag="tool_call_part_delta"):
    """A piece of a tool call's argument JSON as it streams; not every provider sends these."""

    id: str
    arguments_delta: str


class ToolCallPartReady(_Event, tag="tool_call_part_ready"):
    """A tool call whose arguments are complete (and parsed, or kept raw when they were not JSON)."""

    part: ToolCallPart


class UsageUpdate(_Event, tag="usage"):
    """Usage so far; the last one a stream sends equals `StreamDone.usage`."""

    usage: Usage


class StreamDone(_Event, tag="done"):
    """The last event of every successful stream. `message` is the whole assistant message, parts in the
    order the model produced them, with model, provider, usage (cost included) and finish_reason set."""

    message: Message
    usage: Usage
    finish_reason: FinishReason


StreamEvent = (
    TextPartDelta
    | ThinkingPartDelta
    | ToolCallPartStart
    | ToolCallPartDelta
    | ToolCallPartReady
    | UsageUpdate
    | StreamDone
)
EventStream = AsyncGenerator[StreamEvent, None]
"""What `Provider.stream` returns: an async generator, so that callers can ``aclose()`` it."""


@runtime_checkable
class Provider(Protocol):
    """A model behind an API (or in process). `stream` is an async generator: iterate it to the end, or
    close it (``aclose()``, cancellation) to abandon the call, which closes the underlying HTTP stream.

    A stream either ends with exactly one `StreamDone` or raises a `tether.errors.ProviderError`
    (`ConfigError` / `MissingExtra` when the provider cannot be set up). Retryable failures before the first
    event are retried inside the stream; after it, they propagate. A caller's step looks like::

        async with contextlib.aclosing(provider.stream(request)) as events:
            async for event in events:
                if isinstance(event, StreamDone):
                    history.append(event.message)
                else:
                    forward(event)  # deltas, for display
    """

    name: str

    def stream(self, request: ModelRequest) -> EventStream: ...


@runtime_checkable
class TokenCounting(Protocol):
    """An optional capability beside `Provider`: counting a model's tokens with that model's own tokenizer
    (the embedded model has its GGUF's). Callers check ``isinstance(provider, TokenCounting)`` and otherwise
    estimate (`tether.context.tokens.get_counter`); `token_counter` returns None for a model whose tokenizer
    the provider cannot offer."""

    def token_counter(self, model: str) -> TokenCounter | None: ...


class ModelResponse(msgspec.Struct, kw_only=True):
    message: Message
    usage: Usage
    finish_reason: FinishReason


async def complete(provider: Provider, request: ModelRequest) -> ModelResponse:
    """Run one call to its end and return the assembled response (no deltas)."""
    stream = provider.stream(request)
    try:
        async for event in stream:
            if isinstance(event, StreamDone):
                return ModelResponse(message=event.message, usage=event.usage, finish_reason=event.finish_reason)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    raise ProviderError(f"provider {provider.name!r} ended its stream without a final message", provider=provider.name)


# --- assembling a response ------------------------------------------------------------------------------


class _PendingCall:
    __slots__ = ("args", "id", "name")

    def __init__(self, id: str, name: str) -> None:
        self.id = id
        self.name = name
        self.args: list[str] = []


class ResponseBuilder:
    """Collects the deltas of one streamed response into parts, in order, and makes the matching events.

    Text and thinking deltas extend the last part while it is of the same kind; tool calls are keyed by
    whatever the wire uses to tell them apart (an index, a block number) and become a part when finished.
    """

    def __init__(self, *, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.parts: list[Part] = []
        self._calls: dict[Any, _PendingCall] = {}
        self._call_slots: dict[Any, int] = {}

    def text(self, delta: str) -> TextPartDelta | None:
        if not delta:
            return None
        last = self.parts[-1] if self.parts else None
        if isinstance(last, TextPart):
            last.text += delta
        else:
            self.parts.append(TextPart(text=delta))
        return TextPartDelta(text=delta)

    def thinking(self, delta: str) -> ThinkingPartDelta | None:
        """Extend the open thinking part, or start one when the last part is not an open thinking part."""
        if not delta:
            return None
        last = self.parts[-1] if self.parts else None
        if isinstance(last, ThinkingPart) and last.signature is None and last.redacted is None:
            last.text += delta
        else:
            self.parts.append(ThinkingPart(text=delta, provider=self.provider))
        return ThinkingPartDelta(text=delta)

    def start_thinking(self) -> None:
        """Begin a new thinking part even if one is open (a provider that sends thinking in blocks)."""
        self.parts.append(ThinkingPart(text="", provider=self.provider))

    def thinking_signature(self, signature: str) -> None:
        """Attach (or extend) the signature of the last thinking part; it must be replayed unchanged."""
        last = self.parts[-1] if self.parts else None
        if not isinstance(last, ThinkingPart):
            last = ThinkingPart(text="", provider=self.provider)
            self.parts.append(last)
        last.signature = (last.signature or "") + signature

    def redacted_thinking(self, data: str) -> None:
        self.parts.append(ThinkingPart(redacted=data, provider=self.provider))

    def start_call(self, key: Any, id: str, name: str) -> ToolCallPartStart:
        self._calls[key] = _PendingCall(id, name)
        # Reserve the call's place now so parts stay in the order the model produced them.
        self._call_slots[key] = len(self.parts)
        self.parts.append(ToolCallPart(id=id, name=name))
        return ToolCallPartStart(id=id, name=name)

    def has_call(self, key: Any) -> bool:
        return key in self._calls

    def call_arguments(self, key: Any, delta: str) -> ToolCallPartDelta | None:
        call = self._calls[key]
        if not delta:
            return None
        call.args.append(delta)
        return ToolCallPartDelta(id=call.id, arguments_delta=delta)

    def rename_call(self, key: Any, *, id: str | None = None, name: str | None = None) -> None:
        """Some servers send the id or name of a call in pieces or late; keep the latest non-empty value."""
        call = self._calls[key]
        if id:
            call.id = id
        if name:
            call.name = name

    def finish_call(self, key: Any) -> ToolCallPartReady | None:
        call = self._calls.pop(key, None)
        if call is None:
            return None
        part = ToolCallPart.from_raw(call.id, call.name, "".join(call.args))
        self.parts[self._call_slots.pop(key)] = part
        return ToolCallPartReady(part=part)

    def finish_all_calls(self) -> list[ToolCallPartReady]:
        return [ready for key in list(self._calls) if (ready := self.finish_call(key)) is not None]

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    def done(self, *, usage: Usage, finish_reason: FinishReason) -> StreamDone:
        """The final event. Unfinished tool calls are finished; empty thinking placeholders are dropped."""
        self.finish_all_calls()
        parts = [
            p
            for p in self.parts
            if not (isinstance(p, ThinkingPart) and not p.text and p.signature is None and p.redacted is None)
        ]
        message = Message(
            role="assistant",
            parts=parts,
            model=self.model,
            provider=self.provider,
            usage=usage,
            finish_reason=finish_reason,
        )
        return StreamDone(message=message, usage=usage, finish_reason=finish_reason)


def with_cost(usage: Usage, cost: Callable[[Usage], Decimal | None]) -> Usage:
    """`usage` with its cost filled in by `cost` (left as it is when the model has no known price)."""
    if usage.cost is not None:
        return usage
    value = cost(usage)
    return usage if value is None else msgspec.structs.replace(usage, cost=value)


async def aclose_quietly(stream: object) -> None:
    """Close an SDK stream or async generator, ignoring errors from a connection that is already gone."""
    close = getattr(stream, "aclose", None) or getattr(stream, "close", None)
    if close is None:
        return
    with contextlib.suppress(Exception):
        result = close()
        if hasattr(result, "__await__"):
            await result


def takes_serialized_body(client: Any) -> bool:
    """Whether an SDK client's `post` takes a body already serialized (``content=``): the newer `openai`
    and `anthropic` SDKs do."""
    import inspect

    return "content" in inspect.signature(client.post).parameters


async def post_stream(
    client: Any, path: str, body: dict[str, Any], *, cast_to: type, stream_cls: type, serialized: bool
) -> Any:
    """POST `body` as it is through an SDK client (its auth, headers, timeout, error types and stream
    parsing), serialized once with msgspec when the SDK takes bytes; an older SDK gets the dict, which it
    only JSON-encodes. Not the SDK's typed `create`: that walks the whole body in Python on every call,
    which does nothing to a body already in wire form and grows with the history."""
    if serialized:
        content = msgspec.json.encode(body)
        return await client.post(path, cast_to=cast_to, content=content, stream=True, stream_cls=stream_cls)
    return await client.post(path, cast_to=cast_to, body=body, stream=True, stream_cls=stream_cls)
