"""Agent profiles: named ways to run the agent (a system prompt, a model, the tools it may use, its approval
rules). `build` (every tool) and `plan` (only tools that change nothing) are built in; ``[agents.NAME]`` in
config.toml adds profiles or changes these. `tether run --agent NAME` and the `task` tool choose one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..config import AgentConfig, Config, RulesConfig
from ..errors import ConfigError, InvalidInput, UnknownName
from ..tools.base import ToolRegistry

DEFAULT_AGENT = "build"

SAFE_TOOLS = ("question", "task")
"""Tools a read-only profile keeps although they are not marked read-only: `question` changes nothing (it
is marked so that two questions never run at once), and a `task`'s sub-agent gets no more tools than its
parent has."""

PLAN_PROMPT = (
    "You are in plan mode: read, search and think, but change nothing (no file edits, no commands). "
    "Answer with what you found and a concrete plan: the files to change, how, and how to check the change."
)


@dataclass(frozen=True)
class AgentProfile:
    """One agent profile. `tools` names the tools it may use (None: every tool the run has); `read_only`
    keeps only those that change nothing. `model` (``provider/model``) and `system_prompt` are None when
    the run's own apply. `rules` are its approval rules (``[agents.NAME.permissions]``), a layer over the
    run's (`configuration.permission_rules`; a sub-agent's never reach past its parent's: `children`)."""

    name: str
    description: str = ""
    system_prompt: str | None = None
    model: str | None = None
    tools: tuple[str, ...] | None = None
    read_only: bool = False
    rules: RulesConfig | None = None

    def allows(self, name: str, registry: ToolRegistry) -> bool:
        """Whether this profile lets a run use the tool `name` of `registry`."""
        if self.tools is not None and name not in self.tools:
            return False
        return not self.read_only or registry.is_read_only(name) or name in SAFE_TOOLS


BUILT_IN: dict[str, AgentProfile] = {
    "build": AgentProfile("build", "the default agent: every tool"),
    "plan": AgentProfile(
        "plan", "reads and plans, changes nothing: only tools that change nothing", PLAN_PROMPT, read_only=True
    ),
}


def agent_profiles(config: Config | None) -> dict[str, AgentProfile]:
    """Every profile: the built-in ones with what ``[agents.*]`` changes in them, then the user's own."""
    profiles = dict(BUILT_IN)
    for name, section in (config.agents if config is not None else {}).items():
        profiles[name] = _merged(profiles.get(name, AgentProfile(name)), section)
    return profiles


def _merged(base: AgentProfile, section: AgentConfig) -> AgentProfile:
    fields: dict[str, Any] = {
        "description": section.description,
        "system_prompt": section.system_prompt,
        "model": section.model,
        "tools": tuple(section.tools) if section.tools is not None else None,
        "read_only": section.read_only,
        "rules": section.permissions,
    }
    return replace(base, **{k: v for k, v in fields.items() if v is not None})


def find_profile(name: str | None, config: Config | None) -> AgentProfile:
    """The profile called `name` (None: ``build``); an unknown name is an `InvalidInput` listing the
    profiles there are."""
    profiles = agent_profiles(config)
    profile = profiles.get(name or DEFAULT_AGENT)
    if profile is None:
        raise UnknownName(f"unknown agent {name!r}; the agents are: {', '.join(profiles)}")
    return profile


def profile_tools(profile: AgentProfile, registry: ToolRegistry, *, strict: bool = True) -> ToolRegistry:
    """The tools of `registry` that `profile` allows, in the registry's order. With `strict`, a profile that
    names a tool the registry lacks is a `ConfigError` (a typo in config.toml should not silently drop a
    tool); without it (a sub-agent, whose parent may have fewer tools) such names are skipped."""
    if strict and profile.tools is not None:
        unknown = [n for n in profile.tools if n not in registry]
        if unknown:
            raise ConfigError(
                f"agent {profile.name!r} names unknown tool {', '.join(unknown)}; "
                f"the tools are: {', '.join(registry.names())}"
            )
    return registry.subset(n for n in registry.names() if profile.allows(n, registry))


def narrowed(profile: AgentProfile, registry: ToolRegistry, named: Iterable[str] | None) -> ToolRegistry:
    """`profile`'s tools of `registry`; `named` (the tools someone chose, None: all of them) must all be
    among them, or it is an `InvalidInput` saying which the agent does not have."""
    allowed = profile_tools(profile, registry)
    if named is None:
        return allowed
    wanted = list(named)
    refused = [n for n in wanted if n not in allowed]
    if refused:
        raise InvalidInput(
            f"the agent {profile.name!r} has no tool {', '.join(refused)}; its tools are: "
            f"{', '.join(allowed.names()) or '(none)'}"
        )
    return allowed.subset(wanted)
