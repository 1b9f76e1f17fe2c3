"""Launching a run: what `tether run`, `tether chat` and a server all call. `launch` reads the configuration,
checks every option (tools, configuration, model, provider, workspace) and only then opens or creates the
session, so that a bad option leaves nothing behind: no empty session, no dropped prompt."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..config import Config
from ..errors import ConfigError, InvalidInput, SessionNotFound
from ..events import Event
from ..messages import Message
from ..paths import canonical_directory
from ..providers.registry import ResolvedModel, resolve_provider
from ..store.protocols import Store
from ..tools.base import AskFn
from .configuration import context_settings, load_config
from .handle import SessionHandle
from .lookup import find_session
from .loop import AgentRun
from .state import DEFAULT_MAX_STEPS, RunOptions
from .toolset import select_tools


@dataclass(frozen=True)
class RunRequest:
    """What someone asks for: a prompt (None: continue where the session stopped), in which session (an id
    or a unique piece of one; `continue_last`: the last of the workspace; neither: a new one), on which
    model (``provider/model``; None: the configured default), with which tools (``"read,grep"``,
    ``"none"``; None: the default set), in which workspace (None: the current directory)."""

    prompt: str | Message | None
    session: str | None = None
    continue_last: bool = False
    model: str | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    directory: str | os.PathLike[str] | None = None
    system_prompt: str | None = None
    tools: str | None = None
    ask: AskFn | None = None


@dataclass
class LaunchedRun:
    """A run ready to go: its session (`created`: new for this run), the resolved model, its options.
    Iterate `events()` to run it."""

    request: RunRequest
    session: SessionHandle
    created: bool
    resolved: ResolvedModel
    options: RunOptions

    def events(self) -> AsyncIterator[Event]:
        return AgentRun(self.session, self.resolved.provider, self.options).events(self.request.prompt)


async def launch(store: Store, request: RunRequest, *, config: Config | None = None) -> LaunchedRun:
    """Check everything `request` asks for, then open or create its session. Raises `InvalidInput` (a bad
    prompt, tool list, step limit or workspace), `ConfigError` (a bad configuration file, an unknown model,
    a provider without its key, a context setting that cannot be used) or `SessionNotFound`, in each case
    before any session is created or touched."""
    if isinstance(request.prompt, str) and not request.prompt.strip():
        raise InvalidInput("the prompt is empty")
    if request.prompt is None and not request.continue_last and request.session is None:
        raise InvalidInput("give a prompt, or continue a session (the last of this workspace, or one named)")
    if not isinstance(request.max_steps, int) or request.max_steps < 1:
        raise InvalidInput(f"the step limit must be a positive integer, not {request.max_steps!r}")
    workspace = canonical_directory(request.directory)
    if not os.path.isdir(workspace):
        raise InvalidInput(f"the workspace {workspace} is not a directory")
    tools = select_tools(request.tools)
    config = config if config is not None else load_config()
    settings = context_settings(config)
    resolved = resolve_provider(request.model, config=config)
    if settings.compaction_model and settings.auto_compact is not False:
        try:
            resolve_provider(settings.compaction_model, config=config)
        except ConfigError as exc:
            raise ConfigError(
                f"the context setting compaction_model = {settings.compaction_model!r} cannot be used: {exc}"
            ) from exc
    session, created = await _open_session(store, request, workspace, resolved)
    options = RunOptions(
        model=resolved.model,
        max_steps=request.max_steps,
        system_prompt=request.system_prompt,
        tools=tools,
        ask=request.ask,
        model_info=resolved.info,  # the context budget is the model's own window, not a guess
        config=config,
    )
    if resolved.info.temperature is not None and resolved.info.supports_temperature:
        options.temperature = resolved.info.temperature
    return LaunchedRun(request, session, created, resolved, options)


async def _open_session(
    store: Store, request: RunRequest, workspace: str, resolved: ResolvedModel
) -> tuple[SessionHandle, bool]:
    """The session a run works in: the one named, the last of the workspace (continue), or a new one."""
    if request.session is not None:
        session = SessionHandle(store, await find_session(store, request.session))
    elif request.continue_last:
        last = await SessionHandle.last(store, workspace)
        if last is None:
            raise SessionNotFound(f"no earlier session in {workspace} to continue")
        session = last
    else:
        return await SessionHandle.create(store, directory=workspace, model=resolved.id), True
    if request.model is not None and session.info.model != resolved.id:
        await session.update(model=resolved.id)
    return session, False
