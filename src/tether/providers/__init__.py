"""How a model is called: the `Provider` protocol and its stream events (`base`), the scripted provider for
tests (`scripted`), and the adapters (`openai`, `anthropic`, `local`), which import their SDKs lazily."""

from __future__ import annotations

from .base import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    Provider,
    ResponseBuilder,
    StreamDone,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallReady,
    ToolCallStarted,
    ToolChoice,
    UsageUpdate,
    complete,
)
from .scripted import ScriptedProvider, ScriptedResponse

__all__ = [
    "FinishReason",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ResponseBuilder",
    "ScriptedProvider",
    "ScriptedResponse",
    "StreamDone",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolCallReady",
    "ToolCallStarted",
    "ToolChoice",
    "UsageUpdate",
    "complete",
]
