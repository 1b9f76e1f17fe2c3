"""Launching a run: what `tether run`, `tether chat` and a server all call. `launch` reads the configuration,
checks every option (tools, configuration, model, provider, workspace) and only then opens or creates the
session, so that a bad option leaves nothing behind: no empty session, no dropped prompt."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..errors import ConfigError, ConfirmationRequired, InvalidInput, SessionBusy, SessionNotFound
from ..events import Event
from ..messages import Message
from ..paths import canonical_directory
from ..providers.registry import ResolvedModel, resolve_provider
from ..store.protocols import Store
from ..store.records import IMPORTED, SessionInfo
from ..tools.base import AskFn, ToolRegistry
from . import audit
from .archive import refuse_archived
from .configuration import context_settings, load_config, permission_rules, run_sandbox
from .handle import SessionHandle
from .lease import DEFAULT_TTL, LeaseTerms
from .lookup import find_session
from .loop import AgentRun
from .mcp import open_mcp
from .pacing import Pacer
from .permission import Approver, PermissionCheck
from .profiles import find_profile, narrowed
from .state import DEFAULT_MAX_STEPS, RunOptions
from .toolset import select_tools
from .trust import ConfirmProject

if TYPE_CHECKING:
    from ..mcp.manager import McpManager


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
    registry: ToolRegistry | None = None
    """The tools `tools` chooses from (default: the default tools); a program's own tools go here."""
    ask: AskFn | None = None
    permission: PermissionCheck | None = None
    """A program's own decision on each tool call, taken with the approval rules (the strictest wins)."""
    permission_mode: str | None = None
    """``default``, ``accept-edits``, ``plan``, ``never-ask`` or ``bypass`` (`rules`); None: as configured."""
    allow: tuple[str, ...] = ()
    """Rules this run adds (``--allow 'bash(git status*)'``), with those of the user's and the workspace's
    ``[permissions]``."""
    deny: tuple[str, ...] = ()
    approver: Approver | None = None
    """Who answers when a call must be asked about (a terminal's prompt); None: such a call is denied with a
    reason that says how to allow it. The `SessionManager` gives its own (`answer`)."""
    approval_timeout: float | None = None
    """Seconds an approval waits before it counts as a no; None: ``[permissions] timeout``, else no limit."""
    confirmed: bool = False
    """Run an imported session without asking (``--yes``); the yes is recorded with the session."""
    wait: float | None = None
    """Seconds to wait for a session another run holds (``--wait``: `math.inf`); None: refuse at once."""
    on_lease_wait: Callable[[SessionBusy], None] | None = None
    """Told who holds the session, once, when the run starts waiting for it."""
    pacer: Pacer | None = None
    """Turns shared with the other runs on this event loop (`pacing`); the `SessionManager` gives its own."""
    mcp: McpManager | None = None
    """The process's MCP servers (a `SessionManager`'s); None: those the configuration gives the workspace,
    started when the run first needs them and ended with the run (`LaunchedRun.events`)."""
    agent: str | None = None
    """The agent profile to work as (``plan``, one of ``[agents.*]``; None: ``build``): its tools (which
    `tools` may narrow further), its system prompt and model unless these are given; recorded with the
    session."""
    confirm_project: ConfirmProject | None = None
    """Asked when the workspace's ``.tether/config.toml`` grants more than this user last accepted (`trust`):
    yes applies and records it; None (or no): its new grants are left out, its deny and ask rules apply."""
    sandbox: str | None = None
    """Where commands run: ``workspace-write``, ``read-only`` or ``off`` (``--sandbox``); None: ``[sandbox]
    mode`` of the configuration, else ``workspace-write``."""
    title: str | None = None
    """The title of the session the run creates (unused when it names or continues one): a person's, journaled
    before the prompt, so the title model never replaces it."""


WIRE_OPTIONS: tuple[str, ...] = (
    "model",
    "agent",
    "tools",
    "max_steps",
    "system_prompt",
    "confirmed",
    "permission_mode",
    "allow",
    "deny",
)
"""The fields of `RunRequest` that cross a wire: what `tether run --server` and `tether.client` send, and what
a server's request body (`tether.wire.RunSettings`, whose fields these are, a test holds) turns back into
a `RunRequest`. A new option of a run is a field above, named here, and described once in `RunSettings`."""


@dataclass
class LaunchedRun:
    """A run ready to go: its session (`created`: new for this run), the resolved model, its options.
    Iterate `events()` to run it."""

    request: RunRequest
    session: SessionHandle
    created: bool
    resolved: ResolvedModel
    options: RunOptions
    owns_mcp: bool = False
    """The run's MCP servers were started for it alone: they end with it."""

    def __post_init__(self) -> None:
        self.run = AgentRun(self.session, self.resolved.provider, self.options)

    def events(self) -> AsyncIterator[Event]:
        if not self.owns_mcp or self.options.mcp is None:
            return self.run.events(self.request.prompt)
        return self._events_then_stop_mcp(self.options.mcp)

    async def _events_then_stop_mcp(self, mcp: McpManager) -> AsyncIterator[Event]:
        inner = self.run.events(self.request.prompt)
        try:
            async for event in inner:
                yield event
        finally:
            try:
                await inner.aclose()  # type: ignore[attr-defined]
            finally:
                await mcp.close()


@dataclass(frozen=True)
class LaunchPlan:
    """A request checked and resolved, before any store is touched: what `open_run` needs."""

    request: RunRequest
    config: Config
    workspace: str
    resolved: ResolvedModel
    options: RunOptions
    resolve: Callable[..., ResolvedModel] = resolve_provider
    """How the plan resolved its model: `open_run` resolves an existing session's own model with it."""
    owns_mcp: bool = False
    default_tools: ToolRegistry | None = None
    """When nobody named the run's tools: those a model that takes tools is offered. The model's catalog entry
    decides whether it gets them (`ModelInfo.offer_tools`), so a session that keeps its own model takes that
    model's. None: they were named."""


def run_options(resolved: ResolvedModel, config: Config, **fields: Any) -> RunOptions:
    """The options of a run on `resolved`: its catalog entry (the context budget is the model's own window,
    not a guess), its default temperature, the configuration; `fields` are other `RunOptions` fields (they
    win over these)."""
    lease = LeaseTerms(ttl=config.runtime.lease_ttl or DEFAULT_TTL)
    options = RunOptions(
        **{"model": resolved.model, "model_info": resolved.info, "config": config, "lease": lease, **fields}
    )
    if options.temperature is None and resolved.info.temperature is not None and resolved.info.supports_temperature:
        options.temperature = resolved.info.temperature
    return options


Resolver = Callable[..., ResolvedModel]
"""How a ``provider/model`` name (or None: the default) becomes a ready provider: ``resolve(name,
config=config)``; `providers.registry.resolve_provider` unless a caller (a test, a server with providers of
its own) gives another."""


def check_text(text: str, what: str) -> None:
    """Refuse text that cannot be journaled: bytes that were not UTF-8, which Python keeps as lone surrogates
    (a Latin-1 file read as a prompt, an argument from an old archive's name)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = text[exc.start]
        found = f"byte 0x{ord(char) - 0xDC00:02x}" if 0xDC80 <= ord(char) <= 0xDCFF else f"{char!r}"
        raise InvalidInput(
            f"{what} is not valid UTF-8 text ({found} at character {exc.start + 1} cannot be read): "
            "convert it to UTF-8 first, e.g. `iconv -f latin1 -t utf-8`"
        ) from None


def check_request(request: RunRequest, config: Config | None = None, *, resolve: Resolver | None = None) -> LaunchPlan:
    """Check everything `request` asks for, without a store: the prompt, the step limit, the workspace, the
    tools, the configuration (read now unless given), the model and its provider, the summarizer. Raises
    `InvalidInput` or `ConfigError` saying what is wrong."""
    if isinstance(request.prompt, str) and not request.prompt.strip():
        raise InvalidInput("the prompt is empty")
    prompt = request.prompt.text if isinstance(request.prompt, Message) else request.prompt
    for what, text in (("the prompt", prompt), ("the system prompt", request.system_prompt)):
        if text is not None:
            check_text(text, what)
    if request.prompt is None and not request.continue_last and request.session is None:
        raise InvalidInput("give a prompt, or continue a session (the last of this workspace, or one named)")
    if not isinstance(request.max_steps, int) or request.max_steps < 1:
        raise InvalidInput(f"the step limit must be a positive integer, not {request.max_steps!r}")
    workspace = canonical_directory(request.directory)
    if not os.path.isdir(workspace):
        raise InvalidInput(f"the workspace {workspace} is not a directory")
    config = config if config is not None else load_config()
    profile = find_profile(request.agent, config)
    selected = select_tools(request.tools, request.registry)
    tools = narrowed(profile, select_tools(None, request.registry), selected.names() if request.tools else None)
    rules = permission_rules(
        config,
        workspace,
        mode=request.permission_mode,
        allow=request.allow,
        deny=request.deny,
        agent=(profile.name, profile.rules),
        confirm=request.confirm_project,
    )
    sandbox = run_sandbox(config, request.sandbox)
    if sandbox.unavailable is not None:
        rules = replace(rules, unconfined=sandbox.unavailable)
    settings = context_settings(config)
    given = resolve
    resolve = resolve or resolve_provider
    resolved = resolve(request.model or profile.model, config=config)
    default_tools = tools if request.tools is None and request.registry is None and profile.tools is None else None
    untooled = default_tools is not None and not resolved.info.offer_tools
    if untooled:
        tools = ToolRegistry()  # a model too small to use tools is offered them only when they are named
    if settings.compaction_model and settings.auto_compact is not False:
        try:
            resolve(settings.compaction_model, config=config)
        except ConfigError as exc:
            raise ConfigError(
                f"the context setting compaction_model = {settings.compaction_model!r} cannot be used: {exc}"
            ) from exc
    options = run_options(
        resolved,
        config,
        max_steps=request.max_steps,
        system_prompt=request.system_prompt or profile.system_prompt,
        tools=tools,
        agent=profile,
        ask=request.ask,
        permission=request.permission,
        rules=rules,
        approver=request.approver,
        approval_timeout=request.approval_timeout or config.permissions.timeout,
        on_lease_wait=request.on_lease_wait,
        pacer=request.pacer,
        project=True,
        project_tools=request.tools is None and len(tools) > 0,
        sandbox=sandbox,
    )
    if given is not None:  # the run's other models (compaction's, a sub-agent's) as its own: the same clients
        options.resolve_model = functools.partial(given, config=config)
    if options.lease is not None and request.wait is not None:
        options.lease = replace(options.lease, wait=request.wait)
    options.untooled = untooled
    owns_mcp = False
    if request.mcp is not None:
        options.mcp = request.mcp
    elif len(tools) and not profile.read_only:
        options.mcp = open_mcp(config, workspace)  # nothing starts before the run needs it
        owns_mcp = options.mcp is not None
    return LaunchPlan(request, config, workspace, resolved, options, resolve, owns_mcp, default_tools)


async def open_run(store: Store, plan: LaunchPlan, *, info: SessionInfo | None = None) -> LaunchedRun:
    """Open or create the session of a checked request (`SessionNotFound` when the one it names, or the
    last of its workspace, is not there). `info`, the row of the session it names as the caller just read
    it, is taken instead of reading it again (the run reads it once more under its lease)."""
    session, created = await _open_session(store, plan.request, plan.workspace, plan.resolved, info)
    await audit.retain(store, plan.config)
    resolved, options = plan.resolved, plan.options
    own = session.info.model
    profile_model = options.agent.model if options.agent is not None else None
    if not created and plan.request.model is None and profile_model is None and own and own != resolved.id:
        # An existing session keeps its own model unless the request names one (`--model`). An imported one
        # names its source tool's model ("claude-sonnet-4-20250514"), which may mean nothing here: it runs on
        # the default then, as it always has.
        try:
            own_model: ResolvedModel | None = plan.resolve(own, config=plan.config)
        except ConfigError as exc:
            if IMPORTED not in session.info.metadata:
                raise ConfigError(
                    f"session {session.id} runs on {own}, which cannot be used now ({exc}); "
                    "name another with --model to run it there"
                ) from exc
            own_model = None
        if own_model is not None:
            offered = plan.resolved.info.offer_tools
            resolved = own_model
            temperature = resolved.info.temperature if resolved.info.supports_temperature else None
            options = replace(options, model=resolved.model, model_info=resolved.info, temperature=temperature)
            if plan.default_tools is not None and resolved.info.offer_tools != offered:
                # (the MCP servers' tools come only with a run whose plan offered tools)
                tools = plan.default_tools if resolved.info.offer_tools else ToolRegistry()
                untooled = not resolved.info.offer_tools
                options = replace(options, tools=tools, project_tools=len(tools) > 0, untooled=untooled)
    directory = session.info.directory
    if directory and directory != plan.workspace:  # the workspace's own rules are those of where it runs
        request = plan.request
        profile = options.agent
        rules = permission_rules(
            plan.config,
            directory,
            mode=request.permission_mode,
            allow=request.allow,
            deny=request.deny,
            agent=(profile.name, profile.rules) if profile is not None else None,
            confirm=request.confirm_project,
        )
        options = replace(options, rules=replace(rules, unconfined=options.rules.unconfined if options.rules else None))
    return LaunchedRun(plan.request, session, created, resolved, options, plan.owns_mcp)


async def launch(store: Store, request: RunRequest, *, config: Config | None = None) -> LaunchedRun:
    """`check_request`, then `open_run`: every option is checked before any session is created or
    touched. Raises `InvalidInput` (a bad prompt, tool list, step limit or workspace), `ConfigError` (a bad
    configuration file, an unknown model, a provider without its key, a context setting that cannot be
    used) or `SessionNotFound`."""
    return await open_run(store, check_request(request, config))


async def _open_session(
    store: Store, request: RunRequest, workspace: str, resolved: ResolvedModel, known: SessionInfo | None = None
) -> tuple[SessionHandle, bool]:
    """The session a run works in: the one named, the last of the workspace (continue), or a new one. An
    existing session runs in its own directory unless the request names another (`--dir`: it is then filed
    there); one whose directory is gone, or an imported one whose directory is `/` or the home directory,
    is refused without one. An imported session runs only once a person said yes (`ConfirmationRequired`)."""
    if request.session is not None and known is not None and known.id == request.session:
        session = SessionHandle(store, known)
    elif request.session is not None:
        session = SessionHandle(store, await find_session(store, request.session))
    elif request.continue_last:
        last = await SessionHandle.last(store, workspace)
        if last is None:
            raise SessionNotFound(f"no earlier session in {workspace} to continue")
        session = last
    else:
        created = await SessionHandle.create(store, directory=workspace, model=resolved.id, agent=request.agent)
        if request.title:  # (nobody else knows the session yet: no run can hold it)
            await created.set_title(request.title)
        return created, True
    info = session.info
    refuse_archived(info)  # where it is, and how to bring it back
    imported = info.metadata.get(IMPORTED)
    updates: dict[str, Any] = {}
    if request.directory is not None and workspace != info.directory:
        updates["directory"] = workspace
    else:
        problem = _unusable_directory(info.directory, imported is not None)
        if problem:
            raise InvalidInput(
                f"session {info.id} would run in {info.directory or 'no directory'}, which {problem}; "
                "name where to run it with --dir"
            )
    if isinstance(imported, dict) and not imported.get("confirmed"):
        if not request.confirmed:
            where = updates.get("directory", info.directory)
            raise ConfirmationRequired(
                f"session {info.id} was imported (from {imported.get('source', 'a file')}): it would run in "
                f"{where}" + (" with its own system prompt" if info.system_prompt else ""),
                session_id=info.id,
                directory=where,
                system_prompt=info.system_prompt,
            )
        updates["metadata"] = {**info.metadata, IMPORTED: {**imported, "confirmed": time.time()}}
    if request.model is not None and info.model != resolved.id:
        updates["model"] = resolved.id
    if request.agent is not None and info.agent != request.agent:
        updates["agent"] = request.agent
    if updates:
        await session.update(**updates)
    return session, False


def _unusable_directory(directory: str | None, imported: bool) -> str | None:
    """Why a session cannot run in its own directory, or None."""
    if not directory or not os.path.isdir(directory):
        return "does not exist here"
    if imported and directory == os.path.sep:
        return "is the root of the file system"
    if imported and os.path.realpath(directory) == os.path.realpath(os.path.expanduser("~")):
        return "is the home directory"
    return None
