"""Recall results as text for a model: ranked excerpts that say where each comes from (session, title,
position, time), with their neighbours, cut to fit an output budget without breaking a hit in half."""

from __future__ import annotations

from datetime import datetime

from .engine import RecallHit, RecallResult

EVIDENCE_BUDGET = 8_000
"""Characters of evidence a `session_recall` call returns by default."""


def when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render_hit(n: int, hit: RecallHit) -> str:
    title = f' "{_one_line(hit.title, 60)}"' if hit.title else ""
    author = hit.metadata.get("name")
    who = f"{hit.role} ({author})" if isinstance(author, str) and author else hit.role
    flags = " [reverted]" if hit.reverted else ""
    lines = [f"[{n}] session {hit.session_id}{title} #{hit.seq} {who} {when(hit.created_at)}{flags}"]
    before = [c for c in hit.context if c.seq < hit.seq]
    after = [c for c in hit.context if c.seq > hit.seq]
    lines += [f"    #{c.seq} {c.role}: {_one_line(c.text, 300)}" for c in before]
    lines.append(f"  > {hit.excerpt}")
    lines += [f"    #{c.seq} {c.role}: {_one_line(c.text, 300)}" for c in after]
    return "\n".join(lines)


def render_evidence(result: RecallResult, *, budget: int = EVIDENCE_BUDGET) -> tuple[str, int]:
    """The hits, best first, as long as they fit in `budget` characters (the first always does, cut if it
    must be). Returns the text and how many hits it holds."""
    shown = 0
    parts: list[str] = []
    used = 0
    for n, hit in enumerate(result.hits, 1):
        block = render_hit(n, hit)
        if shown and used + len(block) + 2 > budget:
            break
        if not shown and len(block) > budget:
            block = block[: budget - 1] + "…"
        parts.append(block)
        used += len(block) + 2
        shown += 1
    more = len(result.hits) - shown
    head = f"{shown} of {len(result.hits)} results" if more else f"{shown} result{'s' * (shown != 1)}"
    text = f"{head} for {result.query!r}, best first:\n\n" + "\n\n".join(parts)
    if result.backlog:
        text += f"\n\n(note: {result.backlog} older entries are not indexed yet; run `tether recall --backfill`)"
    return text, shown
