"""Anthropic Messages through the official `anthropic` SDK, streaming: thinking blocks keep their signatures
(and redacted thinking its data) so they can be replayed unchanged, tool_use input is assembled from its
JSON deltas, usage includes prompt-cache reads and writes, and the system prompt and the last message carry
``cache_control`` breakpoints so a long conversation is read from the cache turn after turn."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, MissingExtra, ProviderError, TransientError
from ..messages import FilePart, ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart, Usage
from .base import (
    EventStream,
    ModelRequest,
    ResponseBuilder,
    UsageUpdate,
    aclose_quietly,
    post_stream,
    takes_serialized_body,
    with_cost,
)
from .catalog import Catalog
from .clients import SharedClients, client_for, release
from .retry import RetryPolicy, Sleep, classify_http_error, retrying

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic, AsyncStream

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_OUTPUT = 16_384
"""Output budget when a request states none: enough for long edits, well under every model's limit."""

_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
_CACHE = {"type": "ephemeral"}


class AnthropicProvider:
    """The Anthropic Messages API. The key comes from `api_key`, else ``ANTHROPIC_API_KEY`` (or the variable
    named by `api_key_env`); it lives only in the SDK client, never in requests or `repr`."""

    def __init__(
        self,
        name: str = "anthropic",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 300.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        catalog: Catalog | None = None,
        prompt_caching: bool = True,
        sleep: Sleep = asyncio.sleep,
        clients: SharedClients | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url or DEFAULT_BASE_URL
        key_env = api_key_env or "ANTHROPIC_API_KEY"
        key = api_key or os.environ.get(key_env)
        if not key:
            raise ConfigError(f"provider {name!r} needs an API key: set {key_env}")
        self._api_key = key
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep  # waits between retries; tests pass one that records instead of sleeping
        self.prompt_caching = prompt_caching
        self._headers = dict(headers or {})
        self.catalog = catalog or Catalog()
        self._client: AsyncAnthropic | None = None
        self._clients = clients
        self._sends_bytes = False  # whether this SDK's `post` takes a serialized body (`content=`)

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, base_url={self.base_url!r})"

    def _sdk(self) -> AsyncAnthropic:
        if self._client is None:
            try:
                import anthropic
            except ImportError as exc:
                raise MissingExtra("anthropic", "anthropic") from exc
            self._client = client_for(
                self._clients,
                anthropic.AsyncAnthropic,
                kind="anthropic",
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                headers=self._headers,
            )
            self._sends_bytes = takes_serialized_body(self._client)
        return self._client

    async def aclose(self) -> None:
        """Close this provider's SDK client: its own, or (shared) leave it to the `SharedClients` it came from."""
        if self._client is not None:
            await release(self._clients, self._client)
            self._client = None

    async def __aenter__(self) -> AnthropicProvider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def stream(self, request: ModelRequest) -> EventStream:
        return retrying(lambda: self._stream_once(request), self.retry, sleep=self._sleep)

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API parameters for `request` (what goes on the wire, minus the key)."""
        info = self.catalog.info(self.name, request.model)
        system_texts, messages = to_anthropic_messages(request.messages, cache_last=self.prompt_caching)
        if request.system:
            system_texts.insert(0, request.system)
        max_tokens = request.max_output_tokens or min(info.max_output_tokens, DEFAULT_MAX_OUTPUT)
        body: dict[str, Any] = {"model": request.model, "messages": messages, "stream": True}
        if system_texts:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in system_texts]
            if self.prompt_caching:
                blocks[-1]["cache_control"] = dict(_CACHE)
            body["system"] = blocks
        if request.tools and info.supports_tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in request.tools
            ]
            body["tool_choice"] = _tool_choice(request.tool_choice)
        # The API refuses a forced tool choice together with extended thinking; forcing wins.
        thinking = (
            request.thinking_budget is not None and info.supports_thinking and request.tool_choice in ("auto", "none")
        )
        if thinking:
            assert request.thinking_budget is not None
            budget = max(1024, request.thinking_budget)  # the API's minimum
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            # max_tokens counts thinking too and must exceed the budget.
            max_tokens = max(max_tokens, budget + 1024)
        body["max_tokens"] = max_tokens
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        # Extended thinking accepts no temperature; otherwise pass one only when asked for (the SDK no longer
        # names it, so it goes as an extra field).
        if request.temperature is not None and not thinking and info.supports_temperature:
            body["extra_body"] = {"temperature": request.temperature}
        return body

    async def _stream_once(self, request: ModelRequest) -> EventStream:
        client = self._sdk()  # first: it raises MissingExtra when the SDK is not installed
        import anthropic

        body = self.request_body(request)
        try:
            sdk_stream = await self._send(client, body)
        except anthropic.AnthropicError as exc:
            raise classify_anthropic_error(exc, self.name) from exc
        builder = ResponseBuilder(provider=self.name, model=request.model)
        kinds: dict[int, str] = {}
        usage = Usage()
        stop_reason: str | None = None
        cost = self.catalog.info(self.name, request.model).cost
        try:
            async for event in sdk_stream:
                kind = event.type
                if kind == "message_start":
                    usage = _merge_usage(usage, event.message.usage)
                elif kind == "content_block_start":
                    block = event.content_block
                    kinds[event.index] = block.type
                    if block.type == "text":
                        if (text := builder.text(block.text)) is not None:
                            yield text
                    elif block.type == "thinking":
                        builder.start_thinking()
                        if (thought := builder.thinking(block.thinking)) is not None:
                            yield thought
                        if block.signature:
                            builder.thinking_signature(block.signature)
                    elif block.type == "redacted_thinking":
                        builder.redacted_thinking(block.data)
                    elif block.type == "tool_use":
                        yield builder.start_call(event.index, block.id, block.name)
                        if block.input:
                            # Not streamed in pieces (some proxies send the whole input up front).
                            delta = builder.call_arguments(event.index, json.dumps(block.input))
                            if delta is not None:
                                yield delta
                elif kind == "content_block_delta":
                    delta_kind = event.delta.type
                    if delta_kind == "text_delta":
                        if (text := builder.text(event.delta.text)) is not None:
                            yield text
                    elif delta_kind == "thinking_delta":
                        if (thought := builder.thinking(event.delta.thinking)) is not None:
                            yield thought
                    elif delta_kind == "signature_delta":
                        builder.thinking_signature(event.delta.signature)
                    elif delta_kind == "input_json_delta" and builder.has_call(event.index):
                        piece = builder.call_arguments(event.index, event.delta.partial_json)
                        if piece is not None:
                            yield piece
                elif kind == "content_block_stop":
                    if kinds.get(event.index) == "tool_use" and (ready := builder.finish_call(event.index)) is not None:
                        yield ready
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    usage = _merge_usage(usage, event.usage)
                    yield UsageUpdate(usage=with_cost(usage, cost))
        except anthropic.AnthropicError as exc:
            raise classify_anthropic_error(exc, self.name) from exc
        finally:
            await aclose_quietly(sdk_stream)
        for ready in builder.finish_all_calls():
            yield ready
        final = with_cost(usage, cost)
        finish = _FINISH.get(stop_reason or "end_turn", stop_reason or "stop")
        yield builder.done(usage=final, finish_reason=finish)

    # Events as Any, as `messages.create(**body)` gave them: the loop above tells them apart by `event.type`
    # read into a variable, which mypy does not narrow on.
    async def _send(self, client: AsyncAnthropic, body: dict[str, Any]) -> AsyncStream[Any]:
        """POST `body` (its `extra_body` merged in, as `messages.create` would) through the client: its auth,
        headers, timeout, error types and stream.

        Not `messages.create`: the SDK walks a dict body in Python on every call (copying it to strip
        omitted fields and find file inputs; older SDKs ran a typed transform), which does nothing to a body
        already in wire form and grows with the history. Serializing once here is all a request costs."""
        from anthropic import AsyncStream
        from anthropic.types import Message as AnthropicMessage
        from anthropic.types import RawMessageStreamEvent

        wire = {k: v for k, v in body.items() if k != "extra_body"}
        wire.update(body.get("extra_body") or {})
        return await post_stream(  # type: ignore[no-any-return]
            client,
            "/v1/messages",
            wire,
            cast_to=AnthropicMessage,
            stream_cls=AsyncStream[RawMessageStreamEvent],
            serialized=self._sends_bytes,
        )


def _merge_usage(usage: Usage, raw: Any) -> Usage:
    """Anthropic reports usage at message_start and (cumulatively) at message_delta; each field may be
    missing from either. Its input_tokens exclude cache reads and writes; ours include them."""
    if raw is None:
        return usage
    fresh = getattr(raw, "input_tokens", None)
    reads = getattr(raw, "cache_read_input_tokens", None)
    writes = getattr(raw, "cache_creation_input_tokens", None)
    cache_read = reads if reads is not None else usage.cache_read_tokens
    cache_write = writes if writes is not None else usage.cache_write_tokens
    if fresh is not None:
        input_tokens = fresh + cache_read + cache_write
    else:
        input_tokens = (
            usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens + cache_read + cache_write
        )
    output = getattr(raw, "output_tokens", None)
    details = getattr(raw, "output_tokens_details", None)
    thinking = getattr(details, "thinking_tokens", None) if details is not None else None
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output if output is not None else usage.output_tokens,
        reasoning_tokens=thinking if thinking is not None else usage.reasoning_tokens,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def classify_anthropic_error(exc: Exception, provider: str) -> ProviderError:
    """The typed error for an exception of the `anthropic` SDK. An ``error`` event inside a stream arrives
    as a status error on a 200 response; its ``error.type`` (e.g. ``overloaded_error``) then decides."""
    import anthropic

    if isinstance(exc, anthropic.APITimeoutError):
        return TransientError(f"{provider}: request timed out", provider=provider)
    if isinstance(exc, anthropic.APIConnectionError):
        return TransientError(f"{provider}: connection failed: {exc.__cause__ or exc}", provider=provider)
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code if exc.status_code >= 400 else None
        return classify_http_error(
            status,
            exc.api_message or exc.message,
            code=exc.error_code,
            type=exc.type,
            headers=exc.response.headers,
            provider=provider,
        )
    return ProviderError(f"{provider}: {exc}", provider=provider)


# --- messages ------------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _user_block(part: Any) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        if part.data is not None:
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": part.media_type, "data": _b64(part.data)},
            }
        if part.uri:
            return {"type": "image", "source": {"type": "url", "url": part.uri}}
        return None
    if isinstance(part, FilePart):
        if part.media_type == "application/pdf" and part.data is not None:
            return {
                "type": "document",
                "source": {"type": "base64", "media_type": part.media_type, "data": _b64(part.data)},
            }
        label = part.name or part.uri or "file"
        if part.data is not None and (part.media_type.startswith("text/") or part.media_type == "application/json"):
            return {"type": "text", "text": f"[{label}]\n{part.data.decode('utf-8', errors='replace')}"}
        return {"type": "text", "text": f"[{label}: {part.media_type}, not shown to this model]"}
    return None


def _assistant_block(part: Any) -> dict[str, Any] | None:
    if isinstance(part, ThinkingPart):
        # Only signed (or redacted) thinking can be replayed; unsigned thoughts from another provider are
        # not Anthropic's to verify, and the API refuses them.
        if part.redacted is not None:
            return {"type": "redacted_thinking", "data": part.redacted}
        if part.signature is not None:
            return {"type": "thinking", "thinking": part.text, "signature": part.signature}
        return None
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ToolCallPart):
        # `input` must be an object; arguments that never parsed are shown to the model as they came.
        args = part.arguments if isinstance(part.arguments, dict) else {"_raw_arguments": part.arguments_json()}
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": args}
    return None


def to_anthropic_messages(
    messages: list[Message], *, cache_last: bool = True
) -> tuple[list[str], list[dict[str, Any]]]:
    """Messages API content for a conversation: ``(system texts, messages)``.

    System messages before the first turn join the system prompt; later ones become user text (the API has
    no system turns). Tool results become ``tool_result`` blocks of a user turn, and consecutive turns of one
    role are merged, as the API requires alternating roles.
    """
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system" and not out:
            if message.text:
                system.append(message.text)
            continue
        blocks: list[dict[str, Any]] = []
        if message.role == "assistant":
            role = "assistant"
            blocks = [b for p in message.parts if (b := _assistant_block(p)) is not None]
        else:
            role = "user"
            for part in message.parts:
                if isinstance(part, ToolResultPart):
                    blocks.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": part.call_id,
                            "content": part.content,
                            "is_error": part.is_error,
                        }
                    )
                elif message.role == "system" and isinstance(part, TextPart):
                    blocks.append({"type": "text", "text": f"<system>\n{part.text}\n</system>"})
                elif (block := _user_block(part)) is not None:
                    blocks.append(block)
        if not blocks:
            continue  # the API refuses empty turns
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            if role == "user":
                # tool_result blocks must open a user turn: keep them ahead of the text merged after them.
                results = [b for b in previous + blocks if b["type"] == "tool_result"]
                others = [b for b in previous + blocks if b["type"] != "tool_result"]
                out[-1]["content"] = results + others
            else:
                previous.extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    if cache_last and out:
        for block in reversed(out[-1]["content"]):
            if block["type"] not in ("thinking", "redacted_thinking"):
                block["cache_control"] = dict(_CACHE)
                break
    return system, out
