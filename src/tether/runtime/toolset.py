"""The tools a run offers: the built-in ones plus the tools of other engines (`session_recall`) and of the
runtime (`task`), assembled here so that no engine has to import another; choosing them by name (``--tools
read,grep``); and giving `session_recall` its answer mode, which reads the evidence with RLM and the run's
own model."""

from __future__ import annotations

from ..context.engine import ModelLimits
from ..errors import InvalidInput, UnknownName
from ..messages import ToolCallPart
from ..providers.base import Provider
from ..recall.tool import Answer, Answerer, SessionRecallTool
from ..rlm import rlm_answer
from ..rlm.engine import RlmLimits
from ..tools.base import ToolRegistry
from ..tools.builtin import builtin_tools
from .tasks import TaskTool

NO_TOOLS = "none"


def default_registry() -> ToolRegistry:
    """A fresh registry of the default tools: read, write, edit, bash, glob, grep, list, question,
    session_recall (evidence mode; a run gives it answer mode with its own model) and task (a run binds it
    to itself: `children`)."""
    return ToolRegistry([*builtin_tools(), SessionRecallTool(), TaskTool()])


def batch_kind(registry: ToolRegistry, call: ToolCallPart) -> str | None:
    """What a call may run together with, as a name: consecutive calls of one kind run at once (read-only
    ones, or calls of one parallel tool such as `task`); None: it runs alone."""
    if not call.arguments_ok:
        return None
    if registry.is_read_only(call.name):
        return "read"
    return f"parallel:{call.name}" if registry.is_parallel(call.name) else None


def select_tools(spec: str | None, registry: ToolRegistry | None = None) -> ToolRegistry:
    """The tools named in `spec` (``"read,grep"``), all of `registry` (None; default: the default tools),
    or none (``"none"``). An unknown name is an `InvalidInput` that lists the tools there are."""
    registry = registry if registry is not None else default_registry()
    if spec is None:
        return registry
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == [NO_TOOLS]:
        return ToolRegistry()
    if not names:
        raise InvalidInput(f"--tools names no tool; give a comma list ({', '.join(registry.names())}) or none")
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise UnknownName(f"unknown tool {', '.join(unknown)}; the tools are: {', '.join(registry.names())}")
    return registry.subset(names)


def rlm_answerer(provider: Provider, model: str, window: ModelLimits | None = None) -> Answerer:
    """An answerer for `session_recall` that reads the evidence with RLM and this model, sized to its
    `window` (default: RLM's own limits) and without the REPL for the embedded model, which cannot write
    code (as the run's own RLM hand-off does)."""
    limits = None
    if window is not None:
        limits = RlmLimits(context_window=window.context_window, max_output_tokens=min(window.max_output_tokens, 4096))

    async def answer(evidence: str, question: str) -> Answer:
        result = await rlm_answer(
            evidence, question, provider, model=model, limits=limits, use_repl=provider.name != "local"
        )
        return Answer(result.answer, {"fallback": result.fallback, "sub_calls": result.sub_calls})

    return answer


def with_recall_answers(
    tools: ToolRegistry, provider: Provider, model: str, window: ModelLimits | None = None
) -> ToolRegistry:
    """The run's tools, with `session_recall` (when offered and without an answerer) able to answer with the
    run's own model, within its `window`."""
    recall = tools.get("session_recall")
    if not isinstance(recall, SessionRecallTool) or recall.answerer is not None:
        return tools
    tools = tools.subset(tools.names())
    tools.register(SessionRecallTool(rlm_answerer(provider, model, window), budget=recall.budget), replace=True)
    return tools
