"""tether: the session engine for AI coding agents. Durable, resumable, searchable agent conversations.

The public facade: what a user imports lives here; everything else is reachable through its room."""

from __future__ import annotations

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
from .session import Session
from .store import MemoryStore, SessionInfo, SqliteStore, Store, open_store

__version__ = "0.1.0"

__all__ = [
    "Checkpoint",
    "Compaction",
    "CorruptEntry",
    "Entry",
    "FilePart",
    "ImagePart",
    "ImportFormatError",
    "InvalidId",
    "InvalidInput",
    "Marker",
    "MemoryStore",
    "Message",
    "NotFound",
    "Revert",
    "SeqConflict",
    "Session",
    "SessionInfo",
    "SessionNotFound",
    "SqliteStore",
    "Store",
    "StoreBusy",
    "StoreError",
    "TetherError",
    "TextPart",
    "ThinkingPart",
    "TitleChange",
    "ToolCallPart",
    "ToolResultPart",
    "Usage",
    "__version__",
    "open_store",
]
