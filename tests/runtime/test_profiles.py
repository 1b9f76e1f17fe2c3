"""Agent profiles: `build` and `plan` built in, `[agents.NAME]` adding or changing them, the tools a profile
allows of a registry, and what `tether run --agent` makes of a request (tools, prompt, model, the session's
agent)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tether.config import parse_config
from tether.errors import ConfigError, InvalidInput
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime.launch import RunRequest, check_request, open_run
from tether.runtime.profiles import PLAN_PROMPT, agent_profiles, find_profile, narrowed, profile_tools
from tether.runtime.toolset import default_registry
from tether.store import Store

CONFIG = """
[agents.review]
description = "reads the change"
system_prompt = "You review."
model = "other/big"
tools = ["read", "grep"]

[agents.plan]
model = "other/small"
"""


def test_build_and_plan_are_built_in() -> None:
    profiles = agent_profiles(None)
    assert list(profiles) == ["build", "plan"]
    registry = default_registry()
    assert profile_tools(profiles["build"], registry).names() == registry.names()
    # plan: only what changes nothing (the read-only tools, the question to a person, sub-agents no freer)
    assert profile_tools(profiles["plan"], registry).names() == [
        "read",
        "glob",
        "grep",
        "list",
        "question",
        "session_recall",
        "task",
    ]
    assert profiles["plan"].system_prompt == PLAN_PROMPT and find_profile(None, None).name == "build"


def test_config_adds_profiles_and_changes_the_built_in_ones() -> None:
    config = parse_config(CONFIG)
    profiles = agent_profiles(config)
    review = profiles["review"]
    assert (review.system_prompt, review.model, review.tools) == ("You review.", "other/big", ("read", "grep"))
    assert profiles["plan"].model == "other/small" and profiles["plan"].read_only  # the rest is plan's own
    assert profiles["plan"].system_prompt == PLAN_PROMPT
    assert profile_tools(review, default_registry()).names() == ["read", "grep"]


def test_a_read_only_profile_of_ones_own_and_its_rules_are_kept() -> None:
    config = parse_config('[agents.look]\nread_only = true\npermissions = { deny = ["bash"] }\n')
    look = find_profile("look", config)
    assert look.rules is not None and look.rules.deny == ["bash"]
    assert "write" not in profile_tools(look, default_registry()) and "read" in profile_tools(look, default_registry())


def test_unknown_agents_and_tools_are_clear_errors() -> None:
    with pytest.raises(InvalidInput, match="unknown agent 'nobody'; the agents are: build, plan, review"):
        find_profile("nobody", parse_config(CONFIG))
    typo = find_profile("r", parse_config('[agents.r]\ntools = ["reed"]\n'))
    with pytest.raises(ConfigError, match="agent 'r' names unknown tool reed; the tools are: read, write"):
        profile_tools(typo, default_registry())
    # a sub-agent's parent may lack a tool its profile names: it is simply not given
    assert profile_tools(typo, default_registry(), strict=False).names() == []
    with pytest.raises(InvalidInput, match="the agent 'plan' has no tool write, bash; its tools are: read, glob"):
        narrowed(find_profile("plan", None), default_registry(), ["read", "write", "bash"])


def resolver(seen: list[str | None]) -> Callable[..., ResolvedModel]:
    """Resolves any ``provider/model`` to a scripted provider, noting which name it was asked for."""
    provider = ScriptedProvider(["ok"])

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        seen.append(model)
        name = model or "scripted/test"
        return ResolvedModel(provider, name.split("/")[1], unknown_model(*name.split("/")))

    return resolve


def test_run_as_an_agent_takes_its_tools_prompt_and_model(tmp_path: Path) -> None:
    seen: list[str | None] = []
    config = parse_config(CONFIG)
    plan = check_request(RunRequest("hi", directory=tmp_path, agent="review"), config, resolve=resolver(seen))
    assert plan.options.tools.names() == ["read", "grep"] and plan.options.system_prompt == "You review."
    assert seen == ["other/big"] and plan.options.agent is not None and plan.options.agent.name == "review"
    # what the request says itself wins: the model, the system prompt, a narrower tool list
    request = RunRequest("hi", directory=tmp_path, agent="review", model="x/y", system_prompt="Mine.", tools="grep")
    plan = check_request(request, config, resolve=resolver(seen))
    assert seen[-1] == "x/y" and plan.options.system_prompt == "Mine." and plan.options.tools.names() == ["grep"]
    with pytest.raises(InvalidInput, match="the agent 'review' has no tool write"):
        check_request(RunRequest("hi", directory=tmp_path, agent="review", tools="write"), config)
    # no agent: build, every tool, no prompt of its own
    plan = check_request(RunRequest("hi", directory=tmp_path), config, resolve=resolver(seen))
    assert plan.options.tools.names() == default_registry().names() and plan.options.system_prompt is None


async def test_the_session_records_its_agent(store: Store, tmp_path: Path) -> None:
    resolve = resolver([])
    config = parse_config("")
    launched = await open_run(
        store, check_request(RunRequest("hi", directory=tmp_path, agent="plan"), config, resolve=resolve)
    )
    assert launched.session.info.agent == "plan"
    sid = launched.session.id
    again = await open_run(store, check_request(RunRequest("hi", session=sid), config, resolve=resolve))
    assert again.session.info.agent == "plan"  # a run that names none leaves it
    moved = await open_run(store, check_request(RunRequest("hi", session=sid, agent="build"), config, resolve=resolve))
    assert moved.session.info.agent == "build" and (await store.get_session(sid)).agent == "build"
