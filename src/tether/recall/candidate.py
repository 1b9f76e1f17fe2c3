"""`Candidate`: one turn under consideration while the recall engine ranks, shared by the lexical ranking
(`engine`) and the semantic re-ranking (`embeddings`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..store.records import SearchHit


@dataclass
class Candidate:
    """A turn (session, seq), its score so far, the store's hit when the search found it (neighbours come in
    without one), and named partial scores for the bench's diagnostics."""

    session_id: str
    seq: int
    score: float = 0.0
    hit: SearchHit | None = None
    extra: dict[str, float] = field(default_factory=dict)
