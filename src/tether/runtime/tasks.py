"""The `task` tool: the model hands a sub-task to a sub-agent, which works in a child session and answers
with its final text. The tool only checks the call; running the child is the runtime's (`children`), which
gives each run a task tool bound to it. Unbound (outside a run), it says that sub-agents are unavailable."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ToolError
from ..tools.base import ToolContext, ToolOutput


@dataclass(frozen=True)
class TaskRequest:
    """What the model asked of a sub-agent: a short `description`, the whole `prompt`, an agent profile
    (None: the caller's own) and a subset of the caller's tools (None: all the profile allows)."""

    description: str
    prompt: str
    agent: str | None = None
    tools: tuple[str, ...] | None = None


TaskRunner = Callable[[TaskRequest, ToolContext], Awaitable[ToolOutput]]
"""Runs a sub-agent to its end and says how it ended (the runtime gives one to each run)."""


class TaskTool:
    """The `task` tool. Calls of it in one step run together (`parallel`), up to the run's cap."""

    name = "task"
    description = (
        "Hand a self-contained sub-task to a sub-agent. It works in a child session of this one, in the same "
        "directory, with at most your tools, runs to completion and returns its final answer and its session "
        "id. It does not see this conversation: put everything it needs in the prompt. Several task calls in "
        "one step run in parallel; use them for independent pieces of work (searching several places, "
        "reviewing several files)."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "A short title of the sub-task (3-6 words)"},
            "prompt": {"type": "string", "description": "The whole task, self-contained, and what to answer with"},
            "agent": {
                "type": "string",
                "description": "An agent profile: build (every tool), plan (changes nothing), or a configured "
                "one; default: your own",
            },
            "tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only these of your tools (default: all that the agent may use)",
            },
        },
        "required": ["description", "prompt"],
        "additionalProperties": False,
    }
    read_only = False
    bulk = False
    parallel = True
    """Calls of this tool in one step run together (each sub-agent in its own session), up to the cap."""

    def __init__(self, runner: TaskRunner | None = None) -> None:
        self.runner = runner

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        prompt = str(args["prompt"]).strip()
        if not prompt:
            raise ToolError("the prompt is empty: say what the sub-agent should do")
        tools = args.get("tools")
        request = TaskRequest(
            description=" ".join(str(args["description"]).split()) or prompt[:60],
            prompt=prompt,
            agent=args.get("agent") or None,
            tools=tuple(tools) if tools is not None else None,
        )
        if self.runner is None:
            raise ToolError("sub-agents are not available here (this tool runs only inside an agent run)")
        return await self.runner(request, ctx)
