"""`ScriptedProvider`: a deterministic provider for tests (tether's and its users'). It answers from a script
of responses or a function of the request, streams them in small chunks like a real model, estimates
usage, and records every request it was given so that tests can assert on what a model would have seen."""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TypeAlias

import msgspec

from ..errors import ProviderError
from ..messages import Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart, Usage
from .base import EventStream, ModelRequest, ResponseBuilder, UsageUpdate


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted answer with the knobs a test may need.

    `message` is the text, or a whole assistant message (thinking, text, tool calls). `delay` waits before
    the first event and `chunk_delay` between chunks (to test cancellation and timeouts). `error`, when set,
    is raised after the content has streamed and before `StreamDone`, like a connection dropped mid-answer.
    """

    message: str | Message = ""
    delay: float = 0.0
    chunk_delay: float = 0.0
    error: BaseException | None = None
    usage: Usage | None = None
    finish_reason: str | None = None


ScriptItem: TypeAlias = "str | Message | BaseException | ScriptedResponse | Callable[[ModelRequest], ScriptItem]"
"""What a script holds: text, an assistant message, an exception to raise (before any event), a
`ScriptedResponse`, or a function of the request that returns one of these."""


def estimate_tokens(text: str) -> int:
    """About four characters a token: the usual rule of thumb, good enough for a test double."""
    return math.ceil(len(text) / 4)


def _request_text(request: ModelRequest) -> str:
    pieces: list[str] = [request.system or ""]
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, TextPart | ThinkingPart):
                pieces.append(part.text)
            elif isinstance(part, ToolCallPart):
                pieces.append(part.name + part.arguments_json())
            elif isinstance(part, ToolResultPart):
                pieces.append(part.content)
    pieces.extend(
        tool.name + tool.description + msgspec.json.encode(tool.parameters).decode() for tool in request.tools
    )
    return "".join(pieces)


class ScriptedProvider:
    """A provider that plays back a script.

    >>> provider = ScriptedProvider(["Hello!", Message.assistant(tool_calls=[ToolCallPart(id="c1", name="ls")])])

    Each call to `stream` takes the next item of the script (or calls `respond(request)` when given a
    function). A script that runs out raises `ProviderError`. `requests` holds the requests received.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] | Callable[[ModelRequest], ScriptItem] = (),
        *,
        name: str = "scripted",
        chunk_size: int = 8,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.name = name
        self.chunk_size = chunk_size
        self.requests: list[ModelRequest] = []
        self._respond: Callable[[ModelRequest], ScriptItem] | None = None
        self._script: list[ScriptItem] = []
        if callable(script):
            self._respond = script
        else:
            self._script = list(script)

    def __repr__(self) -> str:
        return f"ScriptedProvider(name={self.name!r}, remaining={self.remaining})"

    @property
    def remaining(self) -> int | None:
        """Script items not yet used; None when answering from a function."""
        return None if self._respond is not None else len(self._script)

    def add(self, *items: ScriptItem) -> None:
        """Append to the script (a test can feed it as it goes)."""
        if self._respond is not None:
            raise ValueError("this provider answers from a function; it has no script to extend")
        self._script.extend(items)

    def _next(self, request: ModelRequest) -> ScriptedResponse:
        item: ScriptItem
        if self._respond is not None:
            item = self._respond(request)
        elif self._script:
            item = self._script.pop(0)
        else:
            raise ProviderError(
                f"scripted provider {self.name!r} has no response left for request {len(self.requests)}",
                provider=self.name,
            )
        while callable(item) and not isinstance(item, BaseException):
            item = item(request)
        if isinstance(item, ScriptedResponse):
            return item
        if isinstance(item, BaseException):
            raise item
        return ScriptedResponse(message=item)

    async def stream(self, request: ModelRequest) -> EventStream:
        # Record a copy: callers go on appending to their message list after the call.
        self.requests.append(msgspec.structs.replace(request, messages=list(request.messages)))
        response = self._next(request)
        message = (
            Message.assistant(response.message)
            if isinstance(response.message, str)
            else copy.deepcopy(response.message)
        )
        if response.delay:
            await asyncio.sleep(response.delay)

        builder = ResponseBuilder(provider=self.name, model=request.model)
        pause = response.chunk_delay

        async def chunks(text: str) -> AsyncIterator[str]:
            for start in range(0, len(text), self.chunk_size):
                if pause and start:
                    await asyncio.sleep(pause)
                yield text[start : start + self.chunk_size]

        for n, part in enumerate(message.parts):
            if pause and n:
                await asyncio.sleep(pause)
            if isinstance(part, TextPart):
                async for chunk in chunks(part.text):
                    if (event := builder.text(chunk)) is not None:
                        yield event
            elif isinstance(part, ThinkingPart):
                if part.redacted is not None:
                    builder.redacted_thinking(part.redacted)
                    continue
                builder.start_thinking()
                async for chunk in chunks(part.text):
                    if (thought := builder.thinking(chunk)) is not None:
                        yield thought
                if part.signature is not None:
                    builder.thinking_signature(part.signature)
            elif isinstance(part, ToolCallPart):
                yield builder.start_call(n, part.id, part.name)
                async for chunk in chunks(part.arguments_json()):
                    if (delta := builder.call_arguments(n, chunk)) is not None:
                        yield delta
                if (ready := builder.finish_call(n)) is not None:
                    yield ready
        if response.error is not None:
            raise response.error

        usage = response.usage or Usage(
            input_tokens=max(1, estimate_tokens(_request_text(request))),
            output_tokens=estimate_tokens(
                "".join(p.text for p in message.parts if isinstance(p, TextPart | ThinkingPart))
                + "".join(c.name + c.arguments_json() for c in message.tool_calls)
            ),
            cost=Decimal(0),
        )
        yield UsageUpdate(usage=usage)
        finish_reason = response.finish_reason or ("tool_calls" if message.tool_calls else "stop")
        yield builder.done(usage=usage, finish_reason=finish_reason)
