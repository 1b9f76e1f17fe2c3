"""Sub-agents: the `task` tool bound to a run. Each call runs a child session (`parent_id`: the run's session,
in its directory) to its end inside the call, with at most the parent's tools, the parent's permission
check and approver, and rules that never allow more than the parent's; the child's events go out through the parent's run as they come, and a cancelled parent cancels it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Protocol

from ..config import Config
from ..context.engine import ModelLimits
from ..errors import ConfigError, InvalidInput, ToolError
from ..events import Done, Error, Event, Progress
from ..messages import Message
from ..providers.base import Provider
from ..providers.registry import resolve_provider
from ..store.records import SessionInfo
from ..tools.base import ToolContext, ToolOutput, ToolRegistry
from .configuration import rule_lists
from .handle import SessionHandle
from .profiles import AgentProfile, find_profile, profile_tools
from .rules import Rules, layered
from .state import RunOptions, RunState
from .tasks import TaskRequest, TaskTool

TASK_KEY = "task"
"""The metadata key of a child session: ``{"depth": n, "call_id": ..., "description": ...}``, where it came
from and how deep it is."""

DEFAULT_MAX_PARALLEL = 4
DEFAULT_MAX_DEPTH = 3


class ChildRun(Protocol):
    """A run of the loop, as a child needs one (`loop.AgentRun`, passed in: the loop binds this module)."""

    def events(self, prompt: str | Message | None) -> AsyncIterator[Event]: ...


RunFactory = Callable[[SessionHandle, Provider, RunOptions], ChildRun]


def task_depth(info: SessionInfo) -> int:
    """How deep a session sits under top-level ones: what its `task` metadata says (0 without one)."""
    data = info.metadata.get(TASK_KEY)
    depth = data.get("depth") if isinstance(data, dict) else None
    if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0:
        return depth
    return 1 if info.parent_id else 0


def with_children(state: RunState, new_run: RunFactory) -> ToolRegistry:
    """The run's tools with `task` bound to this run; without `task` at the depth limit
    (``[runtime] max_task_depth``, default 3). Unchanged when the run offers no unbound `task`."""
    tools = state.tools
    task = tools.get(TaskTool.name)
    if not isinstance(task, TaskTool) or task.runner is not None:
        return tools
    runtime = (state.options.config or Config()).runtime
    limit = runtime.max_task_depth if runtime.max_task_depth is not None else DEFAULT_MAX_DEPTH
    depth = task_depth(state.session.info)
    tools = tools.subset(tools.names())
    if depth >= limit:
        tools.unregister(TaskTool.name)
        return tools
    runner = ChildRunner(state, new_run, depth + 1, runtime.max_parallel_tasks or DEFAULT_MAX_PARALLEL)
    tools.register(TaskTool(runner), replace=True)
    return tools


class ChildRunner:
    """Runs the sub-agents of one parent run, at most `parallel` at once (the calls beyond wait for a place)."""

    def __init__(self, parent: RunState, new_run: RunFactory, depth: int, parallel: int) -> None:
        self.parent = parent
        self.new_run = new_run
        self.depth = depth
        self.places = asyncio.Semaphore(parallel)

    async def __call__(self, request: TaskRequest, ctx: ToolContext) -> ToolOutput:
        parent, opts = self.parent, self.parent.options
        profile = self._profile(request)
        tools = self._tools(profile, request)
        options = replace(
            opts,
            tools=tools,
            agent=profile,
            rules=self._rules(profile),
            system_prompt=(opts.system_prompt or parent.session.info.system_prompt)
            if request.agent is None
            else profile.system_prompt,
            on_lease_wait=None,
        )
        provider = parent.provider
        if request.agent is not None and profile.model is not None:
            provider, options = self._on_model(profile, options)
        async with self.places:
            child = await SessionHandle.create(
                parent.session.store,
                directory=parent.session.info.directory,
                title=request.description,
                model=f"{provider.name}/{options.model}",
                agent=profile.name,
                parent_id=parent.session_id,
                metadata={TASK_KEY: {"depth": self.depth, "call_id": ctx.call_id, "description": request.description}},
            )
            if ctx.emit is not None:  # which call the child's events belong to, before the first of them
                data = {"call_id": ctx.call_id, "child_id": child.id, "agent": profile.name}
                ctx.emit(Progress(what="task", detail=request.description, data=data))
            outcome: Done | Error | None = None
            async for event in self.new_run(child, provider, options).events(request.prompt):
                parent.journal.forward(event)
                if isinstance(event, Done | Error) and event.session_id == child.id:
                    outcome = event
        return task_output(child.id, profile.name, outcome)

    def _profile(self, request: TaskRequest) -> AgentProfile:
        opts = self.parent.options
        if request.agent is None:
            return opts.agent or find_profile(None, opts.config)
        try:
            return find_profile(request.agent, opts.config)
        except InvalidInput as exc:
            raise ToolError(str(exc)) from None

    def _rules(self, profile: AgentProfile) -> Rules | None:
        """The parent's rules as they stand (with what its session allowed since it started), the profile's
        added, and never more than the parent's (`Rules.for_child`)."""
        parent = self.parent.rules
        if parent is None:
            return None
        source = f"the agent {profile.name}"
        try:
            own = layered([(source, rule_lists(profile.rules))]).rules if profile.rules is not None else ()
        except InvalidInput as exc:
            raise ToolError(f"[agents.{profile.name}.permissions]: {exc}") from None
        return parent.for_child(own)

    def _tools(self, profile: AgentProfile, request: TaskRequest) -> ToolRegistry:
        """Never more than the parent's: its tools (the unbound ones; the child binds its own), as far as
        the profile allows, as far as the call asks."""
        parent = self.parent
        own = parent.options.tools.subset(n for n in parent.tools.names() if n in parent.options.tools)
        if request.tools is not None:
            unknown = [n for n in request.tools if n not in own]
            if unknown:
                raise ToolError(
                    f"you have no tool {', '.join(unknown)} to give; yours are: {', '.join(own.names()) or '(none)'}"
                )
        allowed = profile_tools(profile, own, strict=False)
        if request.tools is None:
            return allowed
        refused = [n for n in request.tools if n not in allowed]
        if refused:
            raise ToolError(f"the agent {profile.name!r} may not use {', '.join(refused)}")
        return allowed.subset(dict.fromkeys(request.tools))

    def _on_model(self, profile: AgentProfile, options: RunOptions) -> tuple[Provider, RunOptions]:
        """The provider of a profile's own model, and the options that go with that model (its window,
        its temperature), resolved as ``--model`` is."""
        spec = profile.model
        assert spec is not None
        try:
            resolved = (
                options.resolve_model(spec)
                if options.resolve_model is not None
                else resolve_provider(spec, config=options.config or Config())
            )
        except ConfigError as exc:
            raise ToolError(
                f"the agent {profile.name!r} names the model {spec!r}, which cannot be used: {exc}"
            ) from None
        info: ModelLimits = resolved.info
        temperature = resolved.info.temperature if resolved.info.supports_temperature else None
        return resolved.provider, replace(
            options, model=resolved.model, model_info=info, temperature=temperature, max_output_tokens=None
        )


def task_output(child_id: str, agent: str, outcome: Done | Error | None) -> ToolOutput:
    """What the parent's model reads: the child's final answer and where to find its session."""
    metadata: dict[str, object] = {"child_id": child_id, "agent": agent}
    if isinstance(outcome, Done):
        metadata.update(outcome=outcome.reason, steps=outcome.steps)
        steps = f"{outcome.steps} step{'s' * (outcome.steps != 1)}"
        if outcome.reason == "completed":
            note = f"[sub-agent session {child_id}: completed in {steps}]"
        else:
            note = f"[sub-agent session {child_id}: stopped ({outcome.reason}) after {steps}; its work is unfinished]"
        return ToolOutput(f"{outcome.text.strip() or '(no final answer)'}\n\n{note}", metadata=metadata)
    code = outcome.code if outcome is not None else "internal"
    message = outcome.message if outcome is not None else "the run ended without a result"
    metadata["outcome"] = code
    return ToolOutput(
        f"the sub-agent failed ({code}): {message} [sub-agent session {child_id}]", is_error=True, metadata=metadata
    )
