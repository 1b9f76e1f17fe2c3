"""What a project brings to a run besides its files: its instructions (`instructions`), its skills
(`skills`) and the memory notes kept for it and the user (`memory`), read fresh as each run starts. The
system prompt gets them after the run's own prompt, in that order; the run's tools get `skill` (when there
are skills) and `memory`. `project_report` says what they cost, for `tether context`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..context.tokens import count_tools, get_counter
from ..events import Event, Progress
from ..messages import ToolSpec
from ..store.protocols import Journal
from ..tools.base import ToolRegistry
from .instructions import DEFAULT_MAX_CHARS, read_instructions
from .memory import DEFAULT_MAX_TOKENS, MemoryTool, notes, prompt_block
from .skills import SkillTool, find_skills

if TYPE_CHECKING:
    from .state import RunState


@dataclass
class ProjectContext:
    """The project's part of a run's system prompt, the tools it adds, and what each piece costs."""

    text: str = ""
    tools: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)


async def project_context(
    store: Journal,
    workspace: str | os.PathLike[str],
    config: Config,
    *,
    home: Path | None = None,
    with_tools: bool = True,
    with_report: bool = True,
) -> ProjectContext:
    """Read the instructions, skills and notes of `workspace` (see the module docstring). `with_report`:
    what each piece costs in tokens too (`tether context`; a run's start does without the counting)."""
    out = ProjectContext()
    counter = get_counter()
    blocks: list[str] = []
    files: list[dict[str, Any]] = []
    if config.instructions.enabled is not False:
        found = read_instructions(workspace, max_chars=_or(config.instructions.max_chars, DEFAULT_MAX_CHARS), home=home)
        out.warnings.extend(found.warnings)
        text = found.text()
        if text:
            blocks.append(text)
        files = [
            {"path": f.path, "scope": f.scope, "chars": f.chars, "cut": f.cut, "tokens": counter.count(f.text)}
            for f in found.files
            if with_report
        ]
    skills = find_skills(workspace, home)
    out.warnings.extend(skills.warnings)
    if skills.skills:
        blocks.append(skills.catalogue())
        if with_tools:
            out.tools.append(SkillTool(skills))
    shown = 0
    kept: list[Any] = []
    if config.memory.enabled is not False:
        kept = await notes(store, workspace)
        block, shown = prompt_block(kept, _or(config.memory.max_tokens, DEFAULT_MAX_TOKENS))
        if block:
            blocks.append(block)
        if with_tools:
            out.tools.append(MemoryTool())
    out.text = "\n\n".join(blocks)
    if not with_report:
        return out
    out.report = {
        "instructions": files,
        "skills": [{"name": s.name, "source": s.source, "folder": s.folder} for s in skills.skills.values()],
        "memory": {"notes": len(kept), "shown": shown},
        "tokens": counter.count(out.text) if out.text else 0,
        "tool_tokens": count_tools(
            [ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in out.tools], counter
        ),
        "warnings": out.warnings,
    }
    return out


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def add_tools(registry: ToolRegistry, context: ProjectContext) -> ToolRegistry:
    """`registry` with the project's tools (a copy; a tool of the same name already there stays)."""
    if not context.tools:
        return registry
    out = registry.subset(registry.names())
    for tool in context.tools:
        if tool.name not in out:
            out.register(tool)
    return out


async def bind_project(state: RunState) -> list[Event]:
    """At a run's start (`RunOptions.project`): the project's text into the system prompt, its tools into the
    run's (as its agent profile allows); the warnings to emit."""
    opts = state.options
    if not opts.project:
        return []
    directory = state.session.info.directory or os.getcwd()
    context = await project_context(
        state.session.store, directory, opts.config or Config(), with_tools=opts.project_tools, with_report=False
    )
    profile = opts.agent
    context.tools = [
        t
        for t in context.tools
        if profile is None
        or ((t.read_only or not profile.read_only) and (profile.tools is None or t.name in profile.tools))
    ]
    state.project_text = context.text
    if context.tools:
        state.tools = add_tools(state.tools, context)
        state.specs = state.tools.specs()
    return [Progress(what="project", detail=w, data={"level": "warning"}) for w in context.warnings]
