"""What a face asks of a stored session besides a run, so that the CLI and a server do the same: the context
the model would see at its next step (`context_view`), and compacting it now (`compact_now`), each with the
settings and models a run of that session would get from the configuration; the sessions whose messages
match a query (`search_sessions`); the model catalog and which providers are configured (`models_overview`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import msgspec

from ..config import Config
from ..context.budget import Budget, ContextSettings, compute_budget
from ..context.compaction import CompactionResult, EventSink
from ..context.derive import DerivedContext
from ..context.engine import CompactionScope, ContextEngine
from ..context.tokens import count_message, count_tools, get_counter
from ..errors import ConfigError, NotFound
from ..messages import Entry, EntryBody
from ..providers.catalog import Catalog, ModelInfo
from ..providers.registry import KEY_ENVS, choose_model, provider_names, resolve_provider, usable
from ..store.protocols import Journal, JournalSearchIndex, Leases, Store
from ..store.records import Lease, LeaseRequest, SessionInfo
from .archive import refuse_archived
from .configuration import context_settings
from .handle import SessionHandle
from .launch import Resolver
from .mcp import mcp_costs
from .project import project_context
from .toolset import default_registry


@dataclass
class ContextView:
    """What the model would see at a session's next step: the derived context, fitted to the budget of
    `model` under `settings`, and the tokens of each of its messages."""

    info: SessionInfo
    model: str
    budget: Budget
    settings: ContextSettings
    derived: DerivedContext
    tokens: list[int]
    tool_tokens: int = 0
    """Tokens of the built-in tools' definitions (in `derived.fixed_tokens`)."""
    project: dict[str, Any] = field(default_factory=dict)
    """What the project adds to a run's system prompt (`runtime.project`): its instruction files with their
    tokens, its skills, its memory notes, and the tokens of it all (not counted in `derived`)."""
    mcp_tools: dict[str, Any] = field(default_factory=dict)
    """What the MCP servers' tools cost at the session's last run: server -> ``{"tools", "tokens"}``, and
    ``"tool_search"`` when they were offered through it (`runtime.mcp`)."""


def model_limits(spec: str | None, info: SessionInfo, config: Config) -> tuple[str, int, int]:
    """``(provider/model, context window, max output)`` for `spec`, else the session's model, else the
    default one, from the catalog (no provider is built, so no key is needed)."""
    catalog = Catalog.from_config(config)
    provider, model = choose_model(spec or info.model, config=config, catalog=catalog)
    entry = catalog.info(provider, model)
    return f"{provider}/{model}", entry.context_window, entry.max_output_tokens


async def context_view(store: Journal, session_id: str, *, config: Config, model: str | None = None) -> ContextView:
    """The context of the session's next step as a run would derive it: the configuration's settings under
    the session's own, the default tools' definitions in the budget. Nothing is written."""
    info = await store.get_session(session_id)
    engine = ContextEngine(store, settings=context_settings(config))
    settings = await engine.settings_for(session_id, info=info)
    model_id, window, max_output = model_limits(model, info, config)
    budget = compute_budget(window, max_output, settings)
    counter = get_counter(model=model_id)
    tools = default_registry().specs()
    derived = await engine.derive(
        session_id,
        budget=budget,
        system=info.system_prompt,
        tools=tools,
        model=model_id,
        settings=settings,
        last_seq=info.entry_count,
    )
    return ContextView(
        info,
        model_id,
        budget,
        settings,
        derived,
        [count_message(m, counter) for m in derived.messages],
        count_tools(tools, counter),
        (await project_context(store, info.directory, config)).report if info.directory else {},
        mcp_costs(info.metadata),
    )


async def revert_session(store: Store, info: SessionInfo, to_seq: int, *, reason: str | None = None) -> Entry:
    """Take the session of `info` back to entry `to_seq`, for every face (the caller holds the session): an
    archived one is refused (its journal is in the bucket: a revert journaled into its stub would be lost),
    an entry past its end is `NotFound`."""
    refuse_archived(info)
    if to_seq > info.entry_count:
        raise NotFound(f"session {info.id} has no entry {to_seq} (it has {info.entry_count})")
    return await SessionHandle(store, await store.get_session(info.id)).revert(to_seq, reason=reason)


async def compact_now(
    store: Store,
    session_id: str,
    *,
    config: Config,
    model: str | None = None,
    mechanical: bool = False,
    keep_tokens: int | None = None,
    emit: EventSink | None = None,
    resolve: Resolver | None = None,
) -> CompactionResult:
    """Compact the session now, whatever ``auto_compact`` says: a model writes the summary (`model`, else
    the context setting ``compaction_model``, else the session's own model), or nobody does (`mechanical`).
    The compaction is journaled through the session handle. A summarizer that cannot be used is a
    `ConfigError` that says how to compact without one. `resolve` turns the model's name into a provider
    (the registry's unless given, as `SessionManager` takes one)."""
    session = await SessionHandle.open(store, session_id)
    engine = ContextEngine(store, settings=context_settings(config))
    settings = await engine.settings_for(session_id, info=session.info)
    if keep_tokens is not None:
        settings = msgspec.structs.replace(settings, keep_recent_tokens=keep_tokens)
    model_id, window, max_output = model_limits(model or settings.compaction_model, session.info, config)
    budget = compute_budget(window, max_output, settings)
    provider = summarizer = None
    if not mechanical:
        try:
            resolved = (resolve or resolve_provider)(model_id, config=config)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (or compact without a model: --mechanical)") from exc
        provider, summarizer = resolved.provider, resolved.model

    async def append(bodies: Sequence[EntryBody], expect_seq: int) -> list[Entry]:
        return await session.append(*bodies, expect_seq=expect_seq)

    scope = CompactionScope(budget=budget, provider=provider, model=summarizer, settings=settings, append=append)
    return await engine.compact(session_id, scope, emit=emit)


async def ask_run(store: Leases, session_id: str, request: LeaseRequest) -> Lease | None:
    """Ask the run that holds the session, in this process or another, to stop now (``cancel``: it keeps
    what it has, marks its unfinished calls aborted) or at its next step (``pause``: a checkpoint, the session
    marked paused; a later run resumes it). The request waits in the session's lease, which its run reads
    within a second. None when no run holds the session."""
    return await store.request_lease(session_id, request)


async def search_sessions(
    store: JournalSearchIndex,
    query: str,
    *,
    directory: str | None = None,
    limit: int = 50,
    include_children: bool = False,
) -> list[SessionInfo]:
    """The sessions whose messages best match `query` (the search index, best hit first), at most `limit`,
    within `directory` when given; top-level sessions only unless `include_children`."""
    seen: dict[str, SessionInfo] = {}
    for hit in await store.search(query, directory=directory, limit=max(limit * 4, 20)):
        if hit.session_id in seen or len(seen) >= limit:
            continue
        info = await store.get_session(hit.session_id)
        if info.parent_id is None or include_children:
            seen[info.id] = info
    return list(seen.values())


class ProviderStatus(msgspec.Struct, kw_only=True):
    name: str
    configured: bool
    """It can run: a key is set, or it needs none (the embedded model, a local server: `key_required`)."""
    key_env: str | None = None


class ModelsOverview(msgspec.Struct, kw_only=True):
    """The catalog (with the configuration's additions), which providers are configured, and the model a run
    gets by default (with its retirement status, when its provider retires it)."""

    default: str
    default_status: str | None
    providers: list[ProviderStatus]
    models: list[ModelInfo]


def models_overview(config: Config, *, provider: str | None = None, today: date | None = None) -> ModelsOverview:
    """What `tether models` shows and a server's `/models` gives (`provider`: only its models)."""
    catalog = Catalog.from_config(config)
    default_provider, default_model = choose_model(None, config=config, catalog=catalog)
    status = catalog.info(default_provider, default_model).status(today or date.today())
    names = provider_names(config)
    return ModelsOverview(
        default=f"{default_provider}/{default_model}",
        default_status=status,
        providers=[ProviderStatus(name=n, configured=usable(n, config), key_env=KEY_ENVS.get(n)) for n in names],
        models=[m for m in catalog if provider is None or m.provider == provider],
    )
