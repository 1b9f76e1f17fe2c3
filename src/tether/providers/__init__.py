"""How a model is called: the `Provider` protocol and its stream events (`base`), the scripted provider for
tests (`scripted`), the model catalog and `resolve_provider()` (`catalog`, `registry`), retries (`retry`), and
the adapters (`openai`, `anthropic`, `local`), which import their SDKs only when first used."""

from __future__ import annotations

from .base import (
    EventStream,
    FinishReason,
    ModelRequest,
    ModelResponse,
    Provider,
    ResponseBuilder,
    StreamDone,
    StreamEvent,
    TextPartDelta,
    ThinkingPartDelta,
    ToolCallPartDelta,
    ToolCallPartReady,
    ToolCallPartStart,
    ToolChoice,
    UsageUpdate,
    complete,
)
from .catalog import Catalog, ModelInfo, parse_model
from .registry import PREFERENCE, ResolvedModel, choose_model, make_provider, resolve_provider
from .retry import RetryingProvider, RetryPolicy, classify_http_error, parse_retry_after, retrying
from .scripted import ScriptedProvider, ScriptedResponse

__all__ = [
    "PREFERENCE",
    "Catalog",
    "EventStream",
    "FinishReason",
    "ModelInfo",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ResolvedModel",
    "ResponseBuilder",
    "RetryPolicy",
    "RetryingProvider",
    "ScriptedProvider",
    "ScriptedResponse",
    "StreamDone",
    "StreamEvent",
    "TextPartDelta",
    "ThinkingPartDelta",
    "ToolCallPartDelta",
    "ToolCallPartReady",
    "ToolCallPartStart",
    "ToolChoice",
    "UsageUpdate",
    "choose_model",
    "classify_http_error",
    "complete",
    "make_provider",
    "parse_model",
    "parse_retry_after",
    "resolve_provider",
    "retrying",
]
