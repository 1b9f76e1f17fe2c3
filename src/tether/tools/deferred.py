"""Tools offered on demand: when the definitions of a run's tools would take too much of the model's window
(an MCP server with 200 tools), the run keeps them callable but sends the model only a `tool_search` tool
(and those it has loaded). A search finds tools by words of their names, descriptions and parameters (or
loads named ones, ``select:NAME,NAME``), answers with their definitions, and loads them: from the next step
on the model has them as its own tools."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import ToolError
from ..messages import ToolSpec
from .base import ToolContext, ToolOutput

DEFAULT_SHARE = 0.10
"""The share of the model's context window the tools' definitions may take before tool search engages."""
MAX_RESULTS = 10

_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    # snake_case, camelCase and kebab-case split into their words
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return _WORD.findall(text.lower())


def _document(spec: ToolSpec) -> list[str]:
    props = spec.parameters.get("properties") if isinstance(spec.parameters, dict) else None
    params = " ".join(props) if isinstance(props, dict) else ""
    # the name counts three times: it says most about what a tool is for
    return _words(spec.name) * 3 + _words(spec.description) + _words(params)


@dataclass
class ToolSearchTool:
    """`tool_search` over `catalog` (the deferred tools' definitions). `on_load` is told the names each search
    loads, so that the run offers them from its next step."""

    catalog: Sequence[ToolSpec]
    on_load: Callable[[list[str]], None]
    loaded: set[str] = field(default_factory=set)
    name: str = "tool_search"
    read_only: bool = True
    bulk: bool = False
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": 'Words saying what you want to do ("create a github issue"), or select:NAME,NAME '
                "to load tools by their exact names",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "description": "Tools at most (default 5)",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __post_init__(self) -> None:
        self._docs = [Counter(_document(spec)) for spec in self.catalog]
        self._lengths = [sum(d.values()) for d in self._docs]
        self._average = (sum(self._lengths) / len(self._lengths)) if self._lengths else 1.0
        frequency: Counter[str] = Counter()
        for doc in self._docs:
            frequency.update(doc.keys())
        n = len(self._docs)
        self._idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in frequency.items()}

    @property
    def description(self) -> str:
        servers = sorted({s.name.split("__")[1] for s in self.catalog if s.name.count("__") >= 2})
        where = f" (from the MCP servers {', '.join(servers)})" if servers else ""
        return (
            f"Find and load more tools: {len(self.catalog)} tools{where} are available but not listed, to save "
            "room. Search with words of what you want to do; the answer gives the matching tools' definitions, "
            "and from your next step you can call them. select:NAME,NAME loads tools by exact name."
        )

    def search(self, query: str, limit: int = 5) -> list[ToolSpec]:
        """The catalog's best matches for `query` (BM25 over name, description and parameter names)."""
        terms = _words(query)
        scored: list[tuple[float, int]] = []
        for i, doc in enumerate(self._docs):
            score = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    norm = tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * self._lengths[i] / self._average))
                    score += self._idf.get(term, 0.0) * norm
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [self.catalog[i] for _, i in scored[:limit]]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        query = str(args.get("query", "")).strip()
        if not query:
            raise ToolError("query is empty: give words of what you want to do, or select:NAME")
        limit = int(args.get("limit") or 5)
        if query.startswith("select:"):
            wanted = [n.strip() for n in query[len("select:") :].split(",") if n.strip()]
            by_name = {s.name: s for s in self.catalog}
            missing = [n for n in wanted if n not in by_name]
            if missing:
                raise ToolError(f"no tool named {', '.join(missing)}; search with words to find the names")
            found = [by_name[n] for n in wanted]
        else:
            found = self.search(query, limit)
        if not found:
            return ToolOutput(f"no tool matches {query!r}; try other words", metadata={"loaded": []})
        names = [s.name for s in found]
        self.loaded.update(names)
        self.on_load(names)
        lines = [f"Loaded {len(found)} tools; call them from your next step:"]
        for spec in found:
            lines.append(
                json.dumps({"name": spec.name, "description": spec.description, "parameters": spec.parameters})
            )
        return ToolOutput("\n".join(lines), metadata={"loaded": names})


def defer(
    specs: Sequence[ToolSpec], deferrable: Iterable[str], budget_tokens: int, count: Callable[[Sequence[ToolSpec]], int]
) -> tuple[list[ToolSpec], list[ToolSpec]] | None:
    """Whether to offer `deferrable` tools through search: None when every definition fits in
    `budget_tokens`; else (the specs offered at once, the deferred ones)."""
    if count(specs) <= budget_tokens:
        return None
    names = set(deferrable)
    kept = [s for s in specs if s.name not in names]
    deferred = [s for s in specs if s.name in names]
    if not deferred:
        return None
    return kept, deferred
