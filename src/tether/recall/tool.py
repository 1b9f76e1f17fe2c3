"""The `session_recall` tool: the model finds what was said in this workspace's earlier sessions (or in
this session before it was compacted away) without the user repeating it. ``evidence`` mode returns
ranked excerpts and costs no model call; ``answer`` mode hands the evidence to an `Answerer` (the runtime
gives one that reads it with RLM and the run's own model). Failures come back as error results with a
fault code: no_match, invalid_query, backend_error, answer_unavailable, answer_failed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import InvalidInput, StoreError, TetherError
from ..tools.base import ToolContext, ToolOutput
from .engine import recall
from .render import EVIDENCE_BUDGET, render_evidence, render_hit

log = logging.getLogger("tether.recall")

ANSWER_EVIDENCE = 25
"""Hits handed to RLM in answer mode."""


@dataclass(frozen=True)
class Answer:
    """What an answerer says, and how it got there (kept in the tool result's metadata)."""

    text: str
    details: dict[str, Any] = field(default_factory=dict)


Answerer = Callable[[str, str], Awaitable[Answer]]
"""Answers a question (second argument) from the evidence (first). Without one, answer mode is unavailable."""


def fault(code: str, message: str) -> ToolOutput:
    return ToolOutput(f"[{code}] {message}", is_error=True, metadata={"error": code})


class SessionRecallTool:
    """See the module docstring. `answerer` enables answer mode; `budget` bounds evidence output."""

    name = "session_recall"
    description = (
        "Search what was said in earlier sessions of this workspace (and earlier in this one): paths, "
        "decisions, instructions, errors, results. Use it when you need something the user or you said "
        "before that is no longer in view, instead of asking the user again. mode 'evidence' (default) "
        "returns the best matching turns with their neighbours and where they come from; mode 'answer' "
        "reads the evidence and answers the query. Words match by stem; names, paths and identifiers "
        "work (e.g. 'snake_case_name', 'src/app.py'); dates in the query favour turns from then."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in words or identifiers"},
            "session_id": {"type": "string", "description": "Search only this session"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 8},
            "mode": {"type": "string", "enum": ["evidence", "answer"], "default": "evidence"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    read_only = True
    bulk = False

    def __init__(self, answerer: Answerer | None = None, *, budget: int = EVIDENCE_BUDGET) -> None:
        self.answerer = answerer
        self.budget = budget

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        query = str(args.get("query") or "").strip()
        if not query:
            return fault("invalid_query", "the query is empty: say what to look for")
        session_id = args.get("session_id") or None
        limit = int(args.get("limit") or 8)
        mode = args.get("mode") or "evidence"
        try:
            directory = None
            if session_id is None:
                # this workspace: the directory of the session the model is working in
                directory = (await ctx.store.get_session(ctx.session_id)).directory
            answering = mode == "answer"
            result = await recall(
                ctx.store,
                query,
                directory=directory,
                session_id=session_id,
                limit=max(limit, ANSWER_EVIDENCE) if answering else limit,
                context=2 if answering else 1,
            )
        except InvalidInput as e:
            return fault("invalid_query", str(e))
        except (StoreError, LookupError) as e:
            return fault("backend_error", f"recall failed: {e}")
        if not result.hits:
            where = f"session {session_id}" if session_id else "this workspace's sessions"
            note = f" ({result.backlog} older entries are not indexed yet)" if result.backlog else ""
            return fault("no_match", f"nothing in {where} matches {query!r}{note}; try other words")
        metadata: dict[str, Any] = {
            "hits": [{"session_id": h.session_id, "seq": h.seq} for h in result.hits],
            "took_ms": round(result.took_ms, 2),
        }
        if mode != "answer":
            text, shown = render_evidence(result, budget=self.budget)
            metadata["hits"] = metadata["hits"][:shown]
            return ToolOutput(text, metadata=metadata)
        return await self._answer(query, result.hits, metadata)

    async def _answer(self, query: str, hits: list[Any], metadata: dict[str, Any]) -> ToolOutput:
        if self.answerer is None:
            return fault("answer_unavailable", "answer mode needs a model and none is configured; use mode 'evidence'")
        evidence = "\n\n".join(render_hit(n, h) for n, h in enumerate(hits, 1))
        question = (
            f"{query}\n\nAnswer from these excerpts of earlier sessions only; cite the [n] of the excerpts "
            "you used, and say so if they do not hold the answer."
        )
        try:
            answer = await self.answerer(evidence, question)
        except TetherError as e:
            log.warning("session_recall answer mode failed", exc_info=True)
            return fault("answer_failed", f"could not answer from the evidence ({e}); use mode 'evidence'")
        metadata["answer"] = answer.details
        return ToolOutput(answer.text, metadata=metadata)
