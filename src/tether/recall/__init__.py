"""Recall across sessions: when the model has forgotten something said earlier in this workspace (a path, a
decision, an instruction), find it again. `recall` ranks turns from the store's full-text index, with an
optional semantic side (`embeddings`); `backfill` indexes stores written before the index existed."""

from __future__ import annotations

from .engine import DEFAULT_TUNING, RecallHit, RecallResult, Tuning, recall
from .query import Period, periods

__all__ = ["DEFAULT_TUNING", "Period", "RecallHit", "RecallResult", "Tuning", "periods", "recall"]
