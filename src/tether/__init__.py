"""tether: the session engine for AI coding agents. Durable, resumable, searchable agent conversations.

The public facade: what a user imports lives here; everything else is reachable through its room."""

from __future__ import annotations

from . import events
from .agent import AgentRun, RunOptions
from .errors import (
    CorruptEntry,
    ImportFormatError,
    InvalidId,
    InvalidInput,
    NotFound,
    SeqConflict,
    SessionNotFound,
    StoreBusy,
    StoreError,
    TetherError,
)
from .events import Done, Error, Event, RunStarted, TextDelta, ToolCallComplete, ToolCallStart
from .messages import (
    Checkpoint,
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from .providers import ModelRequest, Provider, ScriptedProvider, ScriptedResponse
from .providers.registry import resolve_provider
from .session import RunResult, Session
from .store import MemoryStore, SessionInfo, SqliteStore, Store, open_store
from .tools import ToolRegistry, default_registry, function_tool

__version__ = "0.1.0"

__all__ = [
    "AgentRun",
    "Checkpoint",
    "Compaction",
    "CorruptEntry",
    "Done",
    "Entry",
    "Error",
    "Event",
    "FilePart",
    "ImagePart",
    "ImportFormatError",
    "InvalidId",
    "InvalidInput",
    "Marker",
    "MemoryStore",
    "Message",
    "ModelRequest",
    "NotFound",
    "Provider",
    "Revert",
    "RunOptions",
    "RunResult",
    "RunStarted",
    "ScriptedProvider",
    "ScriptedResponse",
    "SeqConflict",
    "Session",
    "SessionInfo",
    "SessionNotFound",
    "SqliteStore",
    "Store",
    "StoreBusy",
    "StoreError",
    "TetherError",
    "TextDelta",
    "TextPart",
    "ThinkingPart",
    "TitleChange",
    "ToolCallComplete",
    "ToolCallPart",
    "ToolCallStart",
    "ToolRegistry",
    "ToolResultPart",
    "Usage",
    "__version__",
    "default_registry",
    "events",
    "function_tool",
    "open_store",
    "resolve_provider",
]
