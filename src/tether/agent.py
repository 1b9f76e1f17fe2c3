"""The agent loop: a prompt runs model steps and tool calls until the model stops calling tools or the
step limit is reached. Every message is journaled before the next step starts; the run streams typed
events (`tether.events`). Cancellation and crashes leave a history that `--continue` can finish."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from . import events as ev
from .config import config_path, load_config
from .context.budget import ContextSettings, compute_budget
from .context.derive import CONDENSED_MARKER
from .context.engine import ContextEngine, ModelLimits
from .context.tokens import get_counter
from .errors import (
    AuthError,
    ConfigError,
    ContextOverflow,
    InvalidInput,
    ProviderError,
    RateLimited,
    SeqConflict,
)
from .ids import new_id
from .messages import (
    Checkpoint,
    Entry,
    EntryBody,
    Marker,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from .providers.base import ModelRequest, Provider, StreamDone, ToolCallReady
from .providers.base import TextDelta as ProviderTextDelta
from .providers.base import ThinkingDelta as ProviderThinkingDelta
from .providers.catalog import unknown_model
from .recall.tool import Answerer, SessionRecallTool
from .rlm.engine import RlmLimits
from .rlm.events import RlmFinished, RlmProgress
from .rlm.policy import RLM_SHARE, condense, needs_rlm, tool_output_needs_rlm, tool_output_question
from .session import Session
from .store.base import active_tail
from .tools.base import AskFn, ToolContext, ToolLimits, ToolRegistry, default_registry
from .tools.output import read_artifact_bytes
from .tools.runner import run_tool_call

if TYPE_CHECKING:
    from .providers.registry import ResolvedModel

DEFAULT_MAX_STEPS = 50
REPEAT_LIMIT = 3

INTERRUPTED = (
    "interrupted: this tool call was started, but tether stopped (crash or kill) before its result was "
    "recorded. It was NOT re-run. Check whether it took effect before calling it again."
)
ABORTED = "aborted: the run was cancelled before this tool call finished."
REPEAT_NOTE = (
    "[This call repeats the one just before it, with the same arguments, and got the same kind of result. "
    "Use it to answer, or try something different: a third identical call stops the run.]"
)

RESUME_TAIL = 256
"""Entries of the history a run keeps in hand (the context engine reads what derivation needs itself)."""

ContextFn = Callable[[Sequence[Entry]], Awaitable[list[Message]]]
"""Turns entries into the messages of a model call: an override of the context engine, for tests and for
callers with a policy of their own."""


async def all_messages(entries: Sequence[Entry]) -> list[Message]:
    """Every message of `entries`, as they are: a `ContextFn` that derives nothing."""
    return [e.body for e in entries if isinstance(e.body, Message) and e.body.role != "system"]


@dataclass
class RunOptions:
    """How one run behaves. `model` is the provider's own model id (``gpt-4.1``); `label` how it is shown."""

    model: str
    max_steps: int = DEFAULT_MAX_STEPS
    system_prompt: str | None = None
    tools: ToolRegistry = field(default_factory=default_registry)
    confine_to_workspace: bool = True
    ask: AskFn | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    tool_limits: ToolLimits = field(default_factory=ToolLimits)
    model_info: ModelLimits | None = None
    """The model's context window and output limit (a catalog entry); unknown: conservative guesses."""
    context_engine: ContextEngine | None = None
    """Shared across runs to keep its caches; None: one for this run."""
    context: ContextFn | None = None
    """Bypass the context engine (no derivation, no compaction) with a function of the run's entries."""
    resolve_model: Callable[[str], ResolvedModel] | None = None
    """How the context setting ``compaction_model`` (``provider/model``) becomes a provider; None: the
    registry's `resolve_provider`, as for ``--model``."""


@dataclass(frozen=True)
class _Summarizer:
    """Who writes the summaries of a run's automatic compactions, and what it takes in one call."""

    provider: Provider
    model: str
    input_limit: int | None = None
    """None: the run's own budget (the summarizer is the run's model)."""


class _Step:
    """What one model call has produced so far: enough to journal a partial answer on cancel."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolCallPart] = []

    def partial_message(self, model: str, provider: str) -> Message | None:
        parts: list[TextPart | ThinkingPart | ToolCallPart] = []
        if self.thinking:
            parts.append(ThinkingPart(text="".join(self.thinking), provider=provider))
        if self.text:
            parts.append(TextPart(text="".join(self.text)))
        parts.extend(self.calls)
        if not parts:
            return None
        return Message(
            role="assistant",
            parts=list(parts),
            model=model,
            provider=provider,
            finish_reason="cancelled",
            metadata={"partial": True},
        )


class AgentRun:
    """One run of the loop over a session. Use `events()`; or `Session.stream` / `Session.prompt`."""

    def __init__(self, session: Session, provider: Provider, options: RunOptions) -> None:
        self.session = session
        self.provider = provider
        self.options = options
        self.run_id = new_id("run")
        self.entries: list[Entry] = []
        self.usage = Usage()
        self.steps = 0
        self._recent_calls: list[str] = []
        self._repeats: set[str] = set()
        self.tools = options.tools

    # --- journal ---------------------------------------------------------------------------------------

    async def _append(self, *bodies: EntryBody) -> list[Entry]:
        """Journal bodies, stating the seq we expect: another writer on this session is a conflict, never
        an interleaving."""
        expect = self.session.info.entry_count + 1
        stored = await self.session.store.append(self.session.id, bodies, expect_seq=expect)
        info = self.session.info
        self.session.info.entry_count = info.entry_count + len(stored)
        self.entries.extend(stored)
        return stored

    # --- the loop --------------------------------------------------------------------------------------

    async def events(self, prompt: str | Message | None) -> AsyncIterator[ev.Event]:
        sid = self.session.id
        opts = self.options
        await self.session.refresh()
        self.entries = await active_tail(self.session.store, sid, RESUME_TAIL)
        engine = opts.context_engine or ContextEngine(self.session.store, settings=configured_context())
        model_info = opts.model_info or unknown_model(self.provider.name, opts.model)
        settings = await engine.settings_for(sid)
        budget = engine.budget_for(model_info, settings)
        summarizer = self._summarizer(settings)  # before anything is journaled: a bad setting fails here
        self.tools = _with_recall_answers(opts.tools, self.provider, opts.model)
        specs = self.tools.specs()
        yield ev.RunStarted(
            session_id=sid, run_id=self.run_id, model=opts.model, provider=self.provider.name, resumed=prompt is None
        )
        step: _Step | None = None
        pending: list[ToolCallPart] = []
        try:
            # A run killed between a tool call and its result left calls without results: say so, never re-run.
            orphans = self._unanswered_calls()
            if orphans:
                for part in orphans:
                    await self._append(
                        Message.tool(
                            ToolResultPart(call_id=part.id, name=part.name, content=INTERRUPTED, is_error=True)
                        )
                    )
            if prompt is not None:
                (user_entry,) = await self._append(prompt if isinstance(prompt, Message) else Message.user(prompt))
                text = user_entry.body.text if isinstance(user_entry.body, Message) else ""
                if opts.context is None and self._oversized(text, model_info.context_window):
                    async for note in self._condense(
                        text, seq=user_entry.seq, what="message", question=None, window=model_info
                    ):
                        yield note
            elif not self._has_work():
                yield ev.Done(session_id=sid, text="", steps=0, usage=self.usage, reason="nothing_to_do")
                return

            last_text = ""
            while True:
                if self.steps >= opts.max_steps:
                    yield await self._checkpoint(last_text)
                    yield ev.Done(
                        session_id=sid, text=last_text, steps=self.steps, usage=self.usage, reason="step_limit"
                    )
                    return
                self.steps += 1
                system = opts.system_prompt or self.session.info.system_prompt
                # what every call to the context engine in this step shares
                scope: dict[str, Any] = {"budget": budget, "system": system, "tools": specs, "settings": settings}
                compaction_scope = {
                    **scope,
                    "provider": summarizer.provider,
                    "model": summarizer.model,
                    "summarizer_input_limit": summarizer.input_limit,
                }
                overflowed = False
                while True:  # one model call; a second only after compacting for a context overflow
                    notes: list[Any] = []
                    derived = None
                    if opts.context is not None:
                        messages = await opts.context(self.entries)
                    else:
                        derived = await engine.derive(sid, model=opts.model, **scope)
                        compacted = await engine.before_step(sid, derived, emit=notes.append, **compaction_scope)
                        for note in notes:
                            yield note
                        if compacted is not None and compacted.entry is not None:
                            await self._adopt(compacted.entry)
                            derived = await engine.derive(sid, model=opts.model, **scope)
                        if not derived.fits:
                            raise ContextOverflow(
                                f"the system prompt and tool definitions alone ({derived.fixed_tokens:,} tokens) "
                                f"do not fit the model's budget of {budget.usable:,} input tokens"
                            )
                        messages = derived.messages
                    step = _Step()
                    request = ModelRequest(
                        model=opts.model,
                        messages=messages,
                        system=system,
                        tools=specs,
                        max_output_tokens=min(opts.max_output_tokens or budget.reserved_output, budget.reserved_output),
                        temperature=opts.temperature,
                    )
                    done: StreamDone | None = None
                    stream = self.provider.stream(request)
                    try:
                        async for event in stream:
                            if isinstance(event, ProviderTextDelta):
                                step.text.append(event.text)
                                yield ev.TextDelta(session_id=sid, text=event.text)
                            elif isinstance(event, ProviderThinkingDelta):
                                step.thinking.append(event.text)
                                yield ev.ThinkingDelta(session_id=sid, text=event.text)
                            elif isinstance(event, ToolCallReady):
                                step.calls.append(event.part)
                            elif isinstance(event, StreamDone):
                                done = event
                    except ContextOverflow as overflow:
                        if overflowed or opts.context is not None or step.text or step.thinking:
                            raise
                        overflowed = True
                        notes = []
                        try:
                            result = await engine.on_overflow(
                                sid,
                                overflow,
                                emit=notes.append,
                                **compaction_scope,
                            )
                        finally:
                            for note in notes:
                                yield note
                        if result.entry is not None:
                            await self._adopt(result.entry)
                        continue
                    finally:
                        aclose = getattr(stream, "aclose", None)
                        if aclose is not None:
                            await aclose()
                    break
                if done is None:
                    raise ProviderError(f"{self.provider.name} ended its answer without a final message")

                message = done.message
                if derived is not None:
                    # our count of what was sent, next to the provider's: the calibration of the next estimate
                    message.metadata["context_tokens"] = derived.estimate.counted
                (stored,) = await self._append(message)
                step = None
                self.usage = self.usage + done.usage
                for thought in message.parts:
                    if isinstance(thought, ThinkingPart) and thought.text:
                        yield ev.ThinkingComplete(session_id=sid, text=thought.text)
                last_text = message.text
                if last_text:
                    yield ev.TextComplete(session_id=sid, text=last_text, seq=stored.seq)
                yield ev.UsageReport(
                    session_id=sid,
                    model=message.model or opts.model,
                    step=done.usage,
                    total=self.usage,
                    context_tokens=done.usage.input_tokens or None,
                )

                calls = message.tool_calls
                if not calls:
                    yield ev.Done(session_id=sid, text=last_text, steps=self.steps, usage=self.usage)
                    return
                pending = list(calls)
                repeated = self._repeated(calls)
                if repeated is not None:
                    reason = (
                        f"stopped: the model called {repeated} with the same arguments {REPEAT_LIMIT} times in a row"
                    )
                    for part in calls:
                        await self._append(
                            Message.tool(ToolResultPart(call_id=part.id, name=part.name, content=reason, is_error=True))
                        )
                    pending = []
                    yield ev.Error(session_id=sid, code="repeated_tool_call", message=reason)
                    return
                async for tool_event in self._run_tools(calls, pending):
                    yield tool_event
                pending = []
        except (asyncio.CancelledError, GeneratorExit):
            await self._record_interruption(step, pending)
            raise
        except SeqConflict as exc:
            yield ev.Error(session_id=sid, code="busy", message=f"another writer appended to this session: {exc}")
        except ProviderError as exc:
            yield ev.Error(session_id=sid, code=_provider_code(exc), message=str(exc), retryable=exc.retryable)

    def _summarizer(self, settings: ContextSettings) -> _Summarizer:
        """The context setting ``compaction_model`` resolved now, through the same registry as ``--model``,
        so that one that cannot be used (unknown, no key) is a `ConfigError` at the start of the run rather
        than a failed compaction halfway through it. Unset, or never used (automatic compaction off, the
        context engine bypassed): the run's own provider and model."""
        opts = self.options
        spec = settings.compaction_model
        own = _Summarizer(self.provider, opts.model)
        if not spec or settings.auto_compact is False or opts.context is not None:
            return own
        resolve = opts.resolve_model or _resolve_model
        try:
            resolved = resolve(spec)
        except ConfigError as exc:
            raise ConfigError(f"the context setting compaction_model = {spec!r} cannot be used: {exc}") from exc
        if resolved.provider.name == self.provider.name and resolved.model == opts.model:
            return own
        info = resolved.info
        limit = compute_budget(info.context_window, info.max_output_tokens).usable
        return _Summarizer(resolved.provider, resolved.model, limit)

    # --- oversized inputs: RLM -------------------------------------------------------------------------

    def _oversized(self, text: str, window: int) -> bool:
        if len(text) <= RLM_SHARE * window:  # a token is at least a character: no need to count
            return False
        return needs_rlm(get_counter(model=self.options.model).count(text), window)

    async def _condense_bulk(self, call: ToolCallPart, result: ToolResultPart, seq: int) -> AsyncIterator[ev.Event]:
        """A bulk tool's output too large for the window: RLM over all of it (the artifact, when the result
        was cut), its account standing in for the output in derived contexts."""
        tool = self.tools.get(call.name)
        info = self.options.model_info or unknown_model(self.provider.name, self.options.model)
        size = int(result.metadata.get("original_chars") or len(result.content))
        if (
            tool is None
            or result.is_error
            or self.options.context is not None
            or size <= RLM_SHARE * info.context_window
        ):
            return
        artifact = result.metadata.get("artifact")
        full = (
            (await read_artifact_bytes(self.session.store, artifact)).decode("utf-8", "replace")
            if isinstance(artifact, str)
            else result.content
        )
        tokens = get_counter(model=self.options.model).count(full)
        if not tool_output_needs_rlm(tool, tokens, info.context_window):
            return
        question = tool_output_question(call.name, self._objective()[:500] or None)
        async for note in self._condense(
            full, seq=seq, what="tool output", question=question, window=info, call_id=call.id
        ):
            yield note

    async def _condense(
        self,
        text: str,
        *,
        seq: int,
        what: str,
        question: str | None,
        window: ModelLimits,
        call_id: str | None = None,
    ) -> AsyncIterator[ev.Event]:
        """Run RLM on `text` while streaming its progress, then journal its stand-in as a `condensed` marker."""
        sid = self.session.id
        notes: asyncio.Queue[RlmProgress | RlmFinished] = asyncio.Queue()
        limits = RlmLimits(context_window=window.context_window, max_output_tokens=min(window.max_output_tokens, 4096))
        kwargs: dict[str, Any] = {"question": question} if question is not None else {}
        task = asyncio.ensure_future(
            condense(
                text,
                self.provider,
                model=self.options.model,
                what=what,
                limits=limits,
                on_event=notes.put_nowait,
                use_repl=self.provider.name != "local",  # the embedded model cannot write code
                **kwargs,
            )
        )
        yield ev.Progress(
            session_id=sid, what="rlm", detail=f"processing an oversized {what} ({len(text):,} characters)"
        )
        try:
            while True:
                getter = asyncio.ensure_future(notes.get())
                finished, _ = await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter in finished:
                    yield _rlm_progress(sid, getter.result())
                    continue
                getter.cancel()
                break
            while not notes.empty():
                yield _rlm_progress(sid, notes.get_nowait())
            condensed = task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        data: dict[str, Any] = {
            "seq": seq,
            "text": condensed.text,
            "fallback": condensed.result.fallback,
            "input_tokens": condensed.result.usage.input_tokens,
            "output_tokens": condensed.result.usage.output_tokens,
        }
        if call_id is not None:
            data["call_id"] = call_id
        await self._append(Marker(name=CONDENSED_MARKER, data=data))

    def _objective(self) -> str:
        for entry in reversed(self.entries):
            if isinstance(entry.body, Message) and entry.body.role == "user" and entry.body.text.strip():
                return entry.body.text.strip()
        return ""

    async def _adopt(self, entry: Entry) -> None:
        """An entry someone else of ours appended (a compaction): the next append expects the seq after it."""
        await self.session.refresh()
        self.entries.append(entry)

    def _unanswered_calls(self) -> list[ToolCallPart]:
        """Tool calls of the last assistant message that have no result after them."""
        answered: set[str] = set()
        for entry in reversed(self.entries):
            body = entry.body
            if not isinstance(body, Message):
                continue
            if body.role == "tool":
                answered.update(r.call_id for r in body.tool_results)
            elif body.role == "assistant":
                return [c for c in body.tool_calls if c.id not in answered]
            else:
                return []
        return []

    def _has_work(self) -> bool:
        """Whether the history ends where a model call is due (a user turn or tool results)."""
        for entry in reversed(self.entries):
            body = entry.body
            if isinstance(body, Checkpoint):
                return True
            if isinstance(body, Message):
                return body.role in ("user", "tool")
        return False

    def _repeated(self, calls: Sequence[ToolCallPart]) -> str | None:
        """The name of a call made REPEAT_LIMIT times in a row with the same arguments; notes the calls
        that repeat the one just before (their results say so, see `_run_tools`)."""
        for call in calls:
            signature = f"{call.name}\x00{call.arguments_json()}"
            if self._recent_calls and self._recent_calls[-1] == signature:
                self._repeats.add(call.id)
            self._recent_calls.append(signature)
            tail = self._recent_calls[-REPEAT_LIMIT:]
            if len(tail) == REPEAT_LIMIT and len(set(tail)) == 1:
                return call.name
        return None

    async def _run_tools(self, calls: Sequence[ToolCallPart], pending: list[ToolCallPart]) -> AsyncIterator[ev.Event]:
        """Run the calls: consecutive read-only calls together, the others one at a time, in order. Each
        result is journaled as soon as it is known (so a crash loses at most the calls in flight)."""
        sid = self.session.id
        ctx = ToolContext(
            workspace=Path(self.session.info.directory or "."),
            session_id=sid,
            store=self.session.store,
            confine_to_workspace=self.options.confine_to_workspace,
            ask=self.options.ask,
            limits=self.options.tool_limits,
        )
        registry = self.tools
        batches: list[list[ToolCallPart]] = []
        for call in calls:
            concurrent = registry.is_read_only(call.name) and call.arguments_ok
            if concurrent and batches and all(registry.is_read_only(c.name) for c in batches[-1]):
                batches[-1].append(call)
            else:
                batches.append([call])
        for batch in batches:
            for call in batch:
                yield ev.ToolCallStart(session_id=sid, call_id=call.id, name=call.name, arguments=call.arguments)
            started = time.perf_counter()
            tasks = [asyncio.ensure_future(run_tool_call(registry, call, ctx)) for call in batch]
            try:
                for next_done in asyncio.as_completed(tasks):
                    result = await next_done
                    call = next(c for c in batch if c.id == result.call_id)
                    if call.id in self._repeats:
                        # Weak models repeat a call whose answer they already have; say so where they look.
                        result = msgspec.structs.replace(result, content=f"{result.content}\n\n{REPEAT_NOTE}")
                    (stored,) = await self._append(Message.tool(result))
                    pending[:] = [c for c in pending if c.id != call.id]
                    async for note in self._condense_bulk(call, result, stored.seq):
                        yield note
                    yield ev.ToolCallComplete(
                        session_id=sid,
                        call_id=call.id,
                        name=call.name,
                        success=not result.is_error,
                        duration_ms=float(result.metadata.get("duration", time.perf_counter() - started)) * 1000,
                        preview=_preview(result.content),
                        truncated=bool(result.metadata.get("truncated", False)),
                        seq=stored.seq,
                    )
            finally:
                for task in tasks:
                    if not task.done():
                        ctx.abort.set()
                        task.cancel()
                if any(not t.done() for t in tasks):
                    await asyncio.gather(*tasks, return_exceptions=True)

    async def _checkpoint(self, last_text: str) -> ev.CheckpointReached:
        objective = ""
        for entry in self.entries:
            if isinstance(entry.body, Message) and entry.body.role == "user" and entry.body.text.strip():
                objective = entry.body.text.strip()
        tools_used: dict[str, int] = {}
        for entry in self.entries[-4 * self.steps - 4 :]:
            if isinstance(entry.body, Message):
                for call in entry.body.tool_calls:
                    tools_used[call.name] = tools_used.get(call.name, 0) + 1
        done = f"{self.steps} steps; tool calls: " + (
            ", ".join(f"{name} x{n}" for name, n in tools_used.items()) or "none"
        )
        next_action = last_text.strip()[:500] or "continue with the pending work (the last tool results are unread)"
        body = Checkpoint(
            objective=objective[:2000], done=done, next_action=next_action, reason="step_limit", steps=self.steps
        )
        (stored,) = await self._append(body)
        return ev.CheckpointReached(
            session_id=self.session.id,
            reason="step_limit",
            objective=body.objective,
            next_action=next_action,
            steps=self.steps,
            seq=stored.seq,
        )

    async def _record_interruption(self, step: _Step | None, pending: list[ToolCallPart]) -> None:
        """On cancel: keep the partial answer, and mark the calls that never finished as aborted."""
        try:
            if step is not None:
                partial = step.partial_message(self.options.model, self.provider.name)
                if partial is not None:
                    await self._append(partial)
                    pending = list(step.calls)
            for call in pending:
                await self._append(
                    Message.tool(ToolResultPart(call_id=call.id, name=call.name, content=ABORTED, is_error=True))
                )
        except Exception:  # the store may be the reason we are stopping; the original error matters more
            pass


def _with_recall_answers(tools: ToolRegistry, provider: Provider, model: str) -> ToolRegistry:
    """The run's tools, with `session_recall` able to answer (through RLM) with the run's own model."""
    recall = tools.get("session_recall")
    if not isinstance(recall, SessionRecallTool) or recall.answerer is not None:
        return tools
    tools = tools.subset(tools.names())
    tools.register(SessionRecallTool(Answerer(provider=provider, model=model), budget=recall.budget), replace=True)
    return tools


def _resolve_model(spec: str) -> ResolvedModel:
    from .providers.registry import resolve_provider

    return resolve_provider(spec)


def configured_context() -> ContextSettings:
    """The ``[context]`` section of the user's config as context settings (a bad value: `ConfigError`)."""
    raw = load_config().context
    try:
        return msgspec.convert(raw, ContextSettings).validate()
    except (msgspec.ValidationError, InvalidInput) as exc:
        raise ConfigError(f"[context] in {config_path()}: {exc}") from None


def _rlm_progress(session_id: str, note: RlmProgress | RlmFinished) -> ev.Event:
    if isinstance(note, RlmFinished):
        detail = f"done in {note.duration_s:.1f}s, {note.iterations} iterations, {note.sub_calls} sub-calls"
        if note.fallback:
            detail += f" (map-reduce: {note.fallback_reason})"
        return ev.Progress(
            session_id=session_id,
            what="rlm",
            detail=detail,
            data={"input_tokens": note.input_tokens, "output_tokens": note.output_tokens, "finished": True},
        )
    return ev.Progress(
        session_id=session_id,
        what="rlm",
        detail=f"{note.stage} {note.detail}".strip(),
        done=note.done,
        total=note.total,
        data={
            "iteration": note.iteration,
            "sub_calls": note.sub_calls,
            "input_tokens": note.input_tokens,
            "output_tokens": note.output_tokens,
        },
    )


def _preview(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _provider_code(exc: ProviderError) -> str:
    if isinstance(exc, AuthError):
        return "provider_auth"
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, ContextOverflow):
        return "context_overflow"
    return "provider_error"
