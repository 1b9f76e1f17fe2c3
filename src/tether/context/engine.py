"""`ContextEngine`: what the agent loop calls at each step. It derives the context from a bounded history,
read once and then kept current by what the run appends (`observe`), so a steady step reads nothing; it
compacts before a step when the estimate passes the threshold, once when a provider reports an overflow,
and on request; and it honours ``auto_compact = false`` on every automatic path."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ContextOverflow
from ..messages import Compaction, Entry, Revert, ToolSpec
from ..providers.base import Provider
from ..store.protocols import Store
from ..store.records import SessionInfo
from .budget import (
    DEFAULT_COMPACT_THRESHOLD,
    Budget,
    ContextSettings,
    compute_budget,
    resolve_settings,
    settings_from_metadata,
)
from .compaction import Appender, CompactionReason, CompactionResult, EventSink, compact_session
from .derive import ContextPolicy, DerivedContext, derive_context
from .history import load_context_history
from .tokens import TokenCache, TokenCounter, default_cache, get_counter


class ModelLimits(Protocol):
    """What a budget needs from a model's catalog entry (`tether.providers.catalog.ModelInfo` has it)."""

    @property
    def context_window(self) -> int: ...

    @property
    def max_output_tokens(self) -> int: ...


@dataclass
class _Loaded:
    last_seq: int
    entries: list[Entry] = field(default_factory=list)


class ContextEngine:
    """One per process (or per run) over a store. `settings` are the config's (``[context]``); a
    session's metadata overrides them. Keeps, per session, the entries since the latest compaction (read
    once, then only what was appended), and which automatic compactions already failed or ran, so that
    neither a failing summarizer nor a context that cannot shrink makes it compact in a loop."""

    def __init__(
        self,
        store: Store,
        *,
        settings: ContextSettings | None = None,
        counter: TokenCounter | None = None,
        cache: TokenCache | None = None,
    ) -> None:
        self.store = store
        self.settings = (settings or ContextSettings()).validate()
        self.counter = counter
        self.cache = cache if cache is not None else default_cache()
        self._loaded: dict[str, _Loaded] = {}
        self._auto_failed_at: dict[str, int] = {}
        self._overflow_at: dict[str, int] = {}

    # --- settings and budget ---------------------------------------------------------------------

    async def settings_for(
        self, session_id: str, model_settings: ContextSettings | None = None, *, info: SessionInfo | None = None
    ) -> ContextSettings:
        """The settings in force for a session: its metadata, over the model's, over the config's. `info` is
        the session's row when the caller has it."""
        info = info or await self.store.get_session(session_id)
        return resolve_settings(settings_from_metadata(info.metadata), model_settings, self.settings)

    @staticmethod
    def budget_for(model: ModelLimits, settings: ContextSettings | None = None) -> Budget:
        return compute_budget(model.context_window, model.max_output_tokens, settings)

    def _counter(self, model: str | None) -> TokenCounter:
        return self.counter or get_counter(model=model)

    def counter_for(self, model: str | None) -> TokenCounter:
        """The counter this engine counts `model`'s tokens with (its own, else the model's estimate)."""
        return self._counter(model)

    # --- history and derivation ------------------------------------------------------------------

    async def history(self, session_id: str, *, last_seq: int | None = None) -> list[Entry]:
        """The entries derivation needs (see `load_context_history`). Read once; then only what was appended
        since and not already `observe`d is read. `last_seq` is the session's entry count when the caller
        knows it (the run does), which saves reading the row: a steady step then reads nothing at all."""
        if last_seq is None:
            last_seq = (await self.store.get_session(session_id)).entry_count
        loaded = self._loaded.get(session_id)
        if loaded is None or last_seq < loaded.last_seq:
            return await self._reload(session_id, last_seq)
        if last_seq > loaded.last_seq:
            new = await self.store.read(session_id, loaded.last_seq + 1, last_seq)
            if len(new) != last_seq - loaded.last_seq or not self._extend(loaded, new):
                return await self._reload(session_id, last_seq)
        return loaded.entries

    def prime(self, session_id: str, entries: Sequence[Entry], last_seq: int) -> bool:
        """Take `entries`, read by the caller, as the session's history when they are all of it: seqs 1 to
        `last_seq` with no revert or compaction among them (what `history` would read). A run that read its
        tail so then costs no second read. False (nothing kept) otherwise."""
        whole = len(entries) == last_seq and all(e.seq == i for i, e in enumerate(entries, 1))
        if not whole or any(isinstance(e.body, Revert | Compaction) for e in entries):
            return False
        self._loaded[session_id] = _Loaded(last_seq, list(entries))
        return True

    def observe(self, session_id: str, entries: Sequence[Entry]) -> None:
        """Entries just appended to the session by whoever holds this engine: kept, so the next `history`
        need not read them back. Anything that does not simply continue what is held (a gap, a revert)
        drops the session's cache instead; the next `history` reads again."""
        loaded = self._loaded.get(session_id)
        if loaded is None or not entries:
            return
        if entries[0].seq != loaded.last_seq + 1 or not self._extend(loaded, entries):
            del self._loaded[session_id]

    @staticmethod
    def _extend(loaded: _Loaded, new: Sequence[Entry]) -> bool:
        """Add `new` (the entries right after `loaded`) and trim to the latest compaction's kept start; False
        when a revert is among them (what is active must then be read again)."""
        if any(isinstance(e.body, Revert) for e in new):
            return False
        loaded.entries.extend(new)
        loaded.last_seq = new[-1].seq
        for entry in reversed(new):
            if isinstance(entry.body, Compaction):
                first = min(entry.body.first_kept_seq, entry.seq)
                start = bisect.bisect_left(loaded.entries, first, key=lambda e: e.seq)
                del loaded.entries[:start]
                break
        return True

    async def _reload(self, session_id: str, last_seq: int) -> list[Entry]:
        entries = await load_context_history(self.store, session_id, last_seq=last_seq)
        self._loaded[session_id] = _Loaded(last_seq, entries)
        return entries

    async def derive(
        self,
        session_id: str,
        *,
        budget: Budget | None,
        system: str | None = None,
        tools: Sequence[ToolSpec] = (),
        model: str | None = None,
        settings: ContextSettings | None = None,
        last_seq: int | None = None,
    ) -> DerivedContext:
        """The context of the session's next step, fitted to `budget.usable`."""
        settings = settings or await self.settings_for(session_id)
        policy = ContextPolicy(
            mode=settings.policy or "compacted",
            budget=budget.usable if budget is not None else None,
            prune_tool_outputs=settings.prune_tool_outputs is not False,
        )
        return derive_context(
            await self.history(session_id, last_seq=last_seq),
            policy,
            session_id=session_id,
            system=system,
            tools=tools,
            counter=self._counter(model),
            cache=self.cache,
        )

    # --- compaction ------------------------------------------------------------------------------

    async def _compact(
        self,
        session_id: str,
        reason: CompactionReason,
        *,
        budget: Budget | None,
        provider: Provider | None,
        model: str | None,
        settings: ContextSettings,
        system: str | None,
        tools: Sequence[ToolSpec],
        emit: EventSink | None,
        summarizer_input_limit: int | None = None,
        append: Appender | None = None,
    ) -> CompactionResult:
        return await compact_session(
            self.store,
            session_id,
            provider=provider,
            model=model,
            reason=reason,
            budget=budget,
            settings=settings,
            system=system,
            tools=tools,
            counter=self._counter(model),
            cache=self.cache,
            emit=emit,
            summarizer_input_limit=summarizer_input_limit,
            append=append,
        )

    async def before_step(
        self,
        session_id: str,
        derived: DerivedContext,
        *,
        budget: Budget,
        provider: Provider | None,
        model: str | None,
        system: str | None = None,
        tools: Sequence[ToolSpec] = (),
        emit: EventSink | None = None,
        settings: ContextSettings | None = None,
        summarizer_input_limit: int | None = None,
        last_seq: int | None = None,
        append: Appender | None = None,
    ) -> CompactionResult | None:
        """Compact if `derived` passed the threshold (default 90% of the usable budget) and automatic
        compaction is on. None when nothing was tried. A failed attempt is not retried until the session
        has grown: the caller goes on with the fitted context. `provider`/`model` write the summary;
        `summarizer_input_limit` is what that model takes in one call (default: `budget.usable`). `last_seq`
        is the session's entry count when the caller knows it; `append` journals the compaction (see
        `compact_session`)."""
        settings = settings or await self.settings_for(session_id)
        if settings.auto_compact is False:
            return None
        share = settings.compact_threshold or DEFAULT_COMPACT_THRESHOLD
        if max(derived.estimate.tokens, derived.needed_tokens) < budget.threshold(share):
            return None
        if last_seq is None:
            last_seq = (await self.store.get_session(session_id)).entry_count
        if self._auto_failed_at.get(session_id) == last_seq:
            return None
        result = await self._compact(
            session_id,
            "auto",
            budget=budget,
            provider=provider,
            model=model,
            settings=settings,
            system=system,
            tools=tools,
            emit=emit,
            summarizer_input_limit=summarizer_input_limit,
            append=append,
        )
        if not result.ok:
            self._auto_failed_at[session_id] = last_seq
        return result

    async def on_overflow(
        self,
        session_id: str,
        error: ContextOverflow,
        *,
        budget: Budget | None,
        provider: Provider | None,
        model: str | None,
        system: str | None = None,
        tools: Sequence[ToolSpec] = (),
        emit: EventSink | None = None,
        settings: ContextSettings | None = None,
        summarizer_input_limit: int | None = None,
        last_seq: int | None = None,
        append: Appender | None = None,
    ) -> CompactionResult:
        """React to a provider's `ContextOverflow`: compact once, then the caller re-derives and retries.
        Raises `error` again when automatic compaction is off, when the session already compacted for an
        overflow and nothing was appended since (the retry overflowed too), or when compaction failed."""
        settings = settings or await self.settings_for(session_id)
        if settings.auto_compact is False:
            raise error
        if last_seq is None:
            last_seq = (await self.store.get_session(session_id)).entry_count
        if self._overflow_at.get(session_id) == last_seq:
            raise error
        result = await self._compact(
            session_id,
            "overflow",
            budget=budget,
            provider=provider,
            model=model,
            settings=settings,
            system=system,
            tools=tools,
            emit=emit,
            summarizer_input_limit=summarizer_input_limit,
            append=append,
        )
        if result.entry is None:
            self._overflow_at[session_id] = last_seq
            raise error
        self._overflow_at[session_id] = result.entry.seq
        return result

    async def compact(
        self,
        session_id: str,
        *,
        budget: Budget | None,
        provider: Provider | None,
        model: str | None,
        system: str | None = None,
        tools: Sequence[ToolSpec] = (),
        emit: EventSink | None = None,
        settings: ContextSettings | None = None,
        append: Appender | None = None,
    ) -> CompactionResult:
        """Compact now because a person asked (``tether compact``): runs whatever ``auto_compact`` says."""
        settings = settings or await self.settings_for(session_id)
        return await self._compact(
            session_id,
            "manual",
            budget=budget,
            provider=provider,
            model=model,
            settings=settings,
            system=system,
            tools=tools,
            emit=emit,
            append=append,
        )
