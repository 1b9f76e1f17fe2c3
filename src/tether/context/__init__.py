"""What the model sees: token counting (`tokens`), the budget of a step (`budget`), the context derived
from a session's history (`derive`, read by `history`), compaction (`compaction`, with mechanical `facts`),
and `ContextEngine`, which the agent loop calls at every step."""

from __future__ import annotations

from ..events import CompactionCompleted, CompactionFailed, CompactionStarted
from .budget import Budget, ContextSettings, compute_budget, resolve_settings, settings_from_metadata
from .compaction import (
    CompactionEvent,
    CompactionResult,
    SummaryState,
    compact_session,
    pin,
    undo_compaction,
)
from .derive import ContextPolicy, DerivedContext, Omission, derive_context
from .engine import ContextEngine
from .history import load_context_history
from .tokens import (
    TokenCache,
    TokenCounter,
    TokenEstimate,
    count_message,
    count_messages,
    count_tools,
    get_counter,
)

__all__ = [
    "Budget",
    "CompactionCompleted",
    "CompactionEvent",
    "CompactionFailed",
    "CompactionResult",
    "CompactionStarted",
    "ContextEngine",
    "ContextPolicy",
    "ContextSettings",
    "DerivedContext",
    "Omission",
    "SummaryState",
    "TokenCache",
    "TokenCounter",
    "TokenEstimate",
    "compact_session",
    "compute_budget",
    "count_message",
    "count_messages",
    "count_tools",
    "derive_context",
    "get_counter",
    "load_context_history",
    "pin",
    "resolve_settings",
    "settings_from_metadata",
    "undo_compaction",
]
