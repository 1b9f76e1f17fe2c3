"""OpenAI-compatible Chat Completions through the official `openai` SDK: OpenAI itself and the many servers
that speak its wire format (OpenRouter, Groq, DeepSeek, Moonshot, Z.ai, Ollama, vLLM, llama.cpp), each a
named profile. Streams text, reasoning (``reasoning_content``) and tool calls assembled from their deltas."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, MissingExtra, ProviderError, TransientError
from ..ids import new_id
from ..messages import (
    FilePart,
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from .base import (
    EventStream,
    ModelRequest,
    ResponseBuilder,
    StreamEvent,
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
    from openai import AsyncOpenAI, AsyncStream
    from openai.types.chat import ChatCompletionChunk


@dataclass(frozen=True)
class OpenAIProfile:
    """Where an OpenAI-compatible service lives and how it wants to be spoken to."""

    base_url: str
    api_key_env: str | None
    key_required: bool = True
    max_tokens_param: str = "max_tokens"
    """OpenAI's own API wants ``max_completion_tokens`` (its reasoning models refuse ``max_tokens``);
    most compatible servers know only ``max_tokens``."""


PROFILES: Mapping[str, OpenAIProfile] = {
    "openai": OpenAIProfile("https://api.openai.com/v1", "OPENAI_API_KEY", max_tokens_param="max_completion_tokens"),
    "openrouter": OpenAIProfile("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "groq": OpenAIProfile("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "deepseek": OpenAIProfile("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "moonshot": OpenAIProfile("https://api.moonshot.ai/v1", "MOONSHOT_API_KEY"),
    "zai": OpenAIProfile("https://api.z.ai/api/paas/v4", "ZAI_API_KEY"),
    # Servers on the user's own machine: a key is optional.
    "ollama": OpenAIProfile("http://127.0.0.1:11434/v1", "OLLAMA_API_KEY", key_required=False),
    "vllm": OpenAIProfile("http://127.0.0.1:8000/v1", "VLLM_API_KEY", key_required=False),
    "llamacpp": OpenAIProfile("http://127.0.0.1:8080/v1", "LLAMACPP_API_KEY", key_required=False),
}

_FINISH = {"function_call": "tool_calls", "eos": "stop", "end_turn": "stop", "max_tokens": "length"}


class OpenAIProvider:
    """A Chat Completions endpoint. The key comes from `api_key`, else the profile's environment variable;
    it is handed to the SDK client and kept nowhere else (not in requests, not in `repr`).

    The SDK's own retries are switched off: `retry` decides, so that a retry never follows a forwarded token.
    """

    def __init__(
        self,
        name: str = "openai",
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        key_required: bool | None = None,
        max_tokens_param: str | None = None,
        timeout: float = 300.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        catalog: Catalog | None = None,
        sleep: Sleep = asyncio.sleep,
        clients: SharedClients | None = None,
    ) -> None:
        profile = PROFILES.get(name)
        self.name = name
        self.base_url = base_url or (profile.base_url if profile else None)
        if not self.base_url:
            raise ConfigError(f"provider {name!r} needs a base_url (set [providers.{name}] base_url in config.toml)")
        key_env = api_key_env or (profile.api_key_env if profile else None)
        required = key_required if key_required is not None else (profile.key_required if profile else False)
        key = api_key or (os.environ.get(key_env) if key_env else None)
        if not key and required:
            raise ConfigError(f"provider {name!r} needs an API key: set {key_env or 'api_key'}")
        # The SDK insists on some key; local servers ignore it.
        self._api_key = key or "not-needed"
        self.max_tokens_param = max_tokens_param or (profile.max_tokens_param if profile else "max_tokens")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._sleep = sleep  # waits between retries; tests pass one that records instead of sleeping
        self._headers = dict(headers or {})
        self.catalog = catalog or Catalog()
        self._client: AsyncOpenAI | None = None
        self._clients = clients
        self._sends_bytes = False  # whether this SDK's `post` takes a serialized body (`content=`)

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, base_url={self.base_url!r})"

    def _sdk(self) -> AsyncOpenAI:
        if self._client is None:
            try:
                import openai
            except ImportError as exc:
                raise MissingExtra("openai", "openai") from exc
            self._client = client_for(
                self._clients,
                openai.AsyncOpenAI,
                kind="openai",
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

    async def __aenter__(self) -> OpenAIProvider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def stream(self, request: ModelRequest) -> EventStream:
        return retrying(lambda: self._stream_once(request), self.retry, sleep=self._sleep)

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The Chat Completions parameters for `request` (what goes on the wire, minus the key)."""
        info = self.catalog.info(self.name, request.model)
        body: dict[str, Any] = {
            "model": request.model,
            "messages": to_openai_messages(request.messages, system=request.system),
            "stream": True,
            # Servers that do not know the option ignore it; then usage is simply not reported.
            "stream_options": {"include_usage": True},
        }
        if request.tools and info.supports_tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
            if request.tool_choice in ("auto", "none", "required"):
                body["tool_choice"] = request.tool_choice
            else:
                body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
        temperature = request.temperature if request.temperature is not None else info.temperature
        if temperature is not None and info.supports_temperature:
            body["temperature"] = temperature
        if request.max_output_tokens is not None:
            body[self.max_tokens_param] = request.max_output_tokens
        if request.stop:
            body["stop"] = list(request.stop)
        return body

    async def _stream_once(self, request: ModelRequest) -> EventStream:
        client = self._sdk()  # first: it raises MissingExtra when the SDK is not installed
        import openai

        body = self.request_body(request)
        try:
            sdk_stream = await self._send(client, body)
        except openai.OpenAIError as exc:
            raise classify_openai_error(exc, self.name) from exc
        builder = ResponseBuilder(provider=self.name, model=request.model)
        usage: Usage | None = None
        finish: str | None = None
        calls: list[Any] = []  # keys of the tool calls started, in order
        try:
            async for chunk in sdk_stream:
                if chunk.usage is not None:
                    usage = self._usage(chunk, request.model)
                for choice in chunk.choices[:1]:
                    for event in self._deltas(builder, choice.delta, calls):
                        yield event
                    if choice.finish_reason:
                        finish = choice.finish_reason
                        for ready in builder.finish_all_calls():
                            yield ready
        except openai.OpenAIError as exc:
            raise classify_openai_error(exc, self.name) from exc
        finally:
            # Runs on normal end, on error, and when the consumer closes us: the HTTP stream goes at once.
            await aclose_quietly(sdk_stream)
        for ready in builder.finish_all_calls():
            yield ready
        if usage is not None:
            yield UsageUpdate(usage=usage)
        finish = _FINISH.get(finish or "", finish) or "stop"
        if builder.tool_calls and finish == "stop":
            # Some servers say "stop" after a tool call; the loop goes by what the message holds.
            finish = "tool_calls"
        yield builder.done(usage=usage or Usage(), finish_reason=finish)

    async def _send(self, client: AsyncOpenAI, body: dict[str, Any]) -> AsyncStream[ChatCompletionChunk]:
        """POST `body` as it is, through the client (its auth, headers, timeout, error types and stream).

        Not `chat.completions.create`: that first walks every message through the SDK's typed transform,
        which does nothing to a body already in wire form but costs ~0.2 ms a message, on every call, so
        a turn grew by 0.75 ms per turn of history. Serializing once here is all a request costs."""
        from openai import AsyncStream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        return await post_stream(  # type: ignore[no-any-return]
            client,
            "/chat/completions",
            body,
            cast_to=ChatCompletion,
            stream_cls=AsyncStream[ChatCompletionChunk],
            serialized=self._sends_bytes,
        )

    def _deltas(self, builder: ResponseBuilder, delta: Any, calls: list[Any]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        extra = delta.model_extra or {}
        # DeepSeek, Moonshot, vLLM and llama.cpp send `reasoning_content`; OpenRouter sends `reasoning`.
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        if isinstance(reasoning, str) and (thought := builder.thinking(reasoning)) is not None:
            events.append(thought)
        if delta.content and (text := builder.text(delta.content)) is not None:
            events.append(text)
        for call in delta.tool_calls or []:
            function = call.function
            name = function.name if function is not None else None
            key: Any = call.index
            if key is None:
                # Servers that leave out `index` send each call whole, or continue the last one without an id.
                key = call.id or (calls[-1] if calls else 0)
            if not builder.has_call(key):
                calls.append(key)
                events.append(builder.start_call(key, call.id or new_id("call"), name or ""))
            else:
                builder.rename_call(key, id=call.id, name=name)
            if function is not None and function.arguments:
                piece = builder.call_arguments(key, function.arguments)
                if piece is not None:
                    events.append(piece)
        return events

    def _usage(self, chunk: ChatCompletionChunk, model: str) -> Usage:
        raw = chunk.usage
        assert raw is not None
        cached = 0
        if raw.prompt_tokens_details is not None and raw.prompt_tokens_details.cached_tokens:
            cached = raw.prompt_tokens_details.cached_tokens
        elif isinstance(hit := (raw.model_extra or {}).get("prompt_cache_hit_tokens"), int):
            cached = hit  # DeepSeek's name for it
        reasoning = 0
        if raw.completion_tokens_details is not None and raw.completion_tokens_details.reasoning_tokens:
            reasoning = raw.completion_tokens_details.reasoning_tokens
        usage = Usage(
            input_tokens=raw.prompt_tokens or 0,
            output_tokens=raw.completion_tokens or 0,
            reasoning_tokens=reasoning,
            cache_read_tokens=cached,
        )
        return with_cost(usage, self.catalog.info(self.name, model).cost)


def classify_openai_error(exc: Exception, provider: str) -> ProviderError:
    """The typed error for an exception of the `openai` SDK."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return TransientError(f"{provider}: request timed out", provider=provider)
    if isinstance(exc, openai.APIConnectionError):
        return TransientError(f"{provider}: connection failed: {exc.__cause__ or exc}", provider=provider)
    if isinstance(exc, openai.APIStatusError):
        return classify_http_error(
            exc.status_code,
            _error_message(exc.body) or exc.message,
            code=exc.code,
            type=exc.type,
            headers=exc.response.headers,
            provider=provider,
        )
    if isinstance(exc, openai.APIError):
        # An error event inside a stream: no HTTP status, but some servers put one in `code`.
        status = int(exc.code) if exc.code and exc.code.isdigit() else None
        return classify_http_error(status, exc.message, code=exc.code, type=exc.type, provider=provider)
    return ProviderError(f"{provider}: {exc}", provider=provider)


def _error_message(body: object) -> str | None:
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return None


# --- messages ------------------------------------------------------------------------------------------


def _data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def _file_text(part: FilePart) -> str:
    label = part.name or part.uri or "file"
    if part.data is not None and (part.media_type.startswith("text/") or part.media_type == "application/json"):
        return f"[{label}]\n{part.data.decode('utf-8', errors='replace')}"
    return f"[{label}: {part.media_type}, not shown to this model]"


def _content(parts: list[Any]) -> str | list[dict[str, Any]]:
    """Text-only content as a plain string (every server takes it); mixed content as typed parts."""
    items: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            items.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            url = part.uri if part.data is None else _data_url(part.media_type, part.data)
            if url:
                items.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(part, FilePart):
            items.append({"type": "text", "text": _file_text(part)})
    if all(item["type"] == "text" for item in items):
        return "".join(item["text"] for item in items)
    return items


def to_openai_messages(messages: list[Message], *, system: str | None = None) -> list[dict[str, Any]]:
    """Chat Completions messages for a conversation. Tool results become ``tool`` messages (one per result,
    tied by ``tool_call_id``); thinking is not replayed (these APIs do not take it back)."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        results = [p for p in message.parts if isinstance(p, ToolResultPart)]
        others = [p for p in message.parts if not isinstance(p, ToolResultPart)]
        for result in results:
            content = result.content
            if result.is_error and not content.lower().startswith("error"):
                content = f"Error: {content}"
            out.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
        if message.role == "tool" or (results and not others):
            continue
        if message.role == "assistant":
            calls = [p for p in others if isinstance(p, ToolCallPart)]
            text = "".join(p.text for p in others if isinstance(p, TextPart))
            # "" beside tool calls, never null: llama.cpp's server (and others) refuse a null content with 500
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                entry["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                    for c in calls
                ]
            elif not text:
                continue  # an assistant turn that held only thinking
            out.append(entry)
        else:
            out.append({"role": message.role, "content": _content(others)})
    return out


def from_openai_message(data: Mapping[str, Any]) -> Message:
    """A tether message from a Chat Completions message dict (for imports and tests)."""
    role = data.get("role", "user")
    if role == "tool":
        return Message.tool(
            ToolResultPart(call_id=str(data.get("tool_call_id", "")), content=_as_text(data.get("content")))
        )
    parts: list[Any] = []
    content = data.get("content")
    if isinstance(content, str) and content:
        parts.append(TextPart(text=content))
    elif isinstance(content, list):
        for item in content:
            if item.get("type") == "text":
                parts.append(TextPart(text=str(item.get("text", ""))))
            elif item.get("type") == "image_url":
                url = str(item.get("image_url", {}).get("url", ""))
                parts.append(_image_from_url(url))
    for call in data.get("tool_calls") or []:
        function = call.get("function", {})
        parts.append(
            ToolCallPart.from_raw(
                str(call.get("id", "")), str(function.get("name", "")), str(function.get("arguments") or "")
            )
        )
    if role not in ("system", "user", "assistant"):
        role = "user"
    return Message(role=role, parts=parts)


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(i.get("text", "")) for i in content if isinstance(i, dict))
    return ""


def _image_from_url(url: str) -> ImagePart:
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        return ImagePart(media_type=head[5:] or "application/octet-stream", data=base64.b64decode(data))
    return ImagePart(media_type="image/*", uri=url)
