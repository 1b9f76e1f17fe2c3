"""The agent loop: a prompt runs model steps and tool calls until the model stops calling tools or the step
limit is reached. Each step is its phases in turn: prepare (`prepare`: the derived context, a compaction
when due), call the model (`model_call`), journal the answer, run the tools (`tool_calls`, with the RLM
hand-off of `condense`). Every entry goes through the run's journal before the next phase starts, and the
run streams numbered events (`tether.events`). Cancellation and crashes leave a history that a later run
(``--continue``) finishes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable

from .. import markers
from ..config import Config
from ..context.budget import ContextSettings, compute_budget
from ..context.derive import cut_note
from ..context.engine import ContextEngine
from ..errors import (
    ConfigError,
    LeaseLost,
    ProviderError,
    SeqConflict,
    TetherError,
)
from ..events import Done, Error, Event, Progress, RunStarted
from ..ids import new_id
from ..messages import (
    Checkpoint,
    EntryBody,
    Message,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
)
from ..providers.base import Provider
from ..providers.catalog import unknown_model
from ..providers.registry import ResolvedModel, resolve_provider
from ..store.records import LeaseRequest
from ..store.reverts import active_tail
from .approvals import awaiting
from .children import with_children
from .condense import condense_text, oversized
from .configuration import context_settings
from .handle import SessionHandle
from .journal import RunJournal
from .lease import RunLease
from .mcp import bind_mcp
from .model_call import AnswerCut, ModelCall, PartialAnswer
from .project import bind_project
from .state import RunOptions, RunState, Summarizer
from .streaming import recover_stream
from .titles import TITLE_WAIT, first_exchange, title_model, titled_by_a_person, write_title
from .tool_calls import REPEAT_LIMIT, repeated_call, run_tool_calls
from .toolset import with_recall_answers
from .usage import USAGE_ESTIMATED, counted_usage, needs_count

log = logging.getLogger("tether.runtime")

INTERRUPTED = (
    "interrupted: this tool call was started, but tether stopped (crash or kill) before its result was "
    "recorded. It was NOT re-run. Check whether it took effect before calling it again."
)
ABORTED = "aborted: the run was cancelled before this tool call finished."

UNTOOLED = "none offered to this model unless named (tether run --tools read,grep,glob; over HTTP, a prompt's tools)"
"""What a run whose model is offered no tools by default says as it starts (`RunOptions.untooled`)."""
RESUME_TAIL = 256
"""Entries of the history a run keeps in hand (the context engine reads what derivation needs itself)."""


class AgentRun:
    """One run of the loop over a session. Use `events()`; or `Session.stream` / `Session.prompt`."""

    def __init__(self, session: SessionHandle, provider: Provider, options: RunOptions) -> None:
        self.session = session
        self.provider = provider
        self.options = options
        self.run_id = new_id("run")
        self.state: RunState | None = None
        self._stopped: str | None = None  # why another process stopped the run (its lease says)
        self._pause_requested = False
        self._inbox: list[Message] = []  # prompts steered into the run, for its next step
        self._titling: asyncio.Future[str | None] | None = None  # the title of the first exchange, coming
        self.admit: Callable[[], Awaitable[None]] | None = None
        """Called once the run holds its session's lease, before it reads or journals anything: what raises
        there ends the run with no event (a queued prompt that another run took already: `queued.admit`)."""
        self.open_now = False
        """The run is being opened on the task of the request that started it (`SessionManager.start`): a
        lease that the terms would wait for raises `lease.WouldWait` instead of keeping that task; the
        session's worker then begins the run again, and waits."""
        self._task: asyncio.Task[object] | None = None
        """The task that drives the run now (None while it waits at a `yield` to be asked for more): the
        one a cancel from another process stops. The first event may be asked for on one task and the
        rest on another (see `open_now`)."""
        self._stop_pending = False

    def pause(self) -> None:
        """Stop at the next step boundary (a checkpoint, the session marked paused)."""
        self._pause_requested = True

    def steer(self, prompt: str | Message) -> None:
        """Have the model read `prompt` at the run's next step, as a user message journaled before it."""
        self._inbox.append(prompt if isinstance(prompt, Message) else Message.user(prompt))

    async def _start(self) -> RunState:
        """Everything a run settles before it journals anything: a bad setting fails here, with the session
        untouched. Reads the session's row and the tail of its history once."""
        session, opts = self.session, self.options
        info = session.info = await session.store.get_session(session.id)
        config = opts.config or Config()
        engine = opts.context_engine or ContextEngine(session.store, settings=context_settings(config))
        model_info = opts.model_info or unknown_model(self.provider.name, opts.model)
        settings = await engine.settings_for(session.id, info=info)
        tools = with_recall_answers(opts.tools, self.provider, opts.model, model_info)
        state = RunState(
            run_id=self.run_id,
            session=session,
            provider=self.provider,
            options=opts,
            journal=RunJournal(session, engine),
            engine=engine,
            tools=tools,
            specs=tools.specs(),
            model_info=model_info,
            settings=settings,
            budget=engine.budget_for(model_info, settings),
            summarizer=self._summarizer(settings, config),
        )
        state.tools = with_children(state, AgentRun)  # `task` runs sub-agents of this run
        state.specs = state.tools.specs()
        state.entries = await active_tail(session.store, session.id, RESUME_TAIL, last_seq=info.entry_count)
        engine.prime(session.id, state.entries, info.entry_count)  # a short history: read once, not twice
        await state.journal.open()
        return state

    def _summarizer(self, settings: ContextSettings, config: Config) -> Summarizer:
        """The context setting ``compaction_model`` resolved now, through the same registry as ``--model``,
        so that one that cannot be used (unknown, no key) is a `ConfigError` at the start of the run rather
        than a failed compaction halfway through it. Unset, or never used (automatic compaction off, the
        context engine bypassed): the run's own provider and model."""
        opts = self.options
        spec = settings.compaction_model
        own = Summarizer(self.provider, opts.model)
        if not spec or settings.auto_compact is False or opts.context is not None:
            return own
        try:
            resolved: ResolvedModel = (
                opts.resolve_model(spec) if opts.resolve_model is not None else resolve_provider(spec, config=config)
            )
        except ConfigError as exc:
            raise ConfigError(f"the context setting compaction_model = {spec!r} cannot be used: {exc}") from exc
        if resolved.provider.name == self.provider.name and resolved.model == opts.model:
            return own
        info = resolved.info
        return Summarizer(
            resolved.provider, resolved.model, compute_budget(info.context_window, info.max_output_tokens).usable
        )

    async def events(self, prompt: str | Message | None) -> AsyncIterator[Event]:
        """Run the loop and yield its events (see `_events`). The run's one outlet: a live number leaves
        only once it is reserved in the store (`RunJournal.reserve_through`), so no later process gives
        it again."""
        self._task = asyncio.current_task()
        inner = self._events(prompt)
        try:
            event = await anext(inner)
            while True:
                state = self.state
                if state is not None and event.session_id == state.session_id:
                    await state.journal.reserve_through(event.n)
                self._task = None
                yield event
                self._task = asyncio.current_task()
                if self._stop_pending:  # stopped while no task drove it: cancelled where it stands
                    self._stop_pending = False
                    event = await inner.athrow(asyncio.CancelledError())
                else:
                    event = await anext(inner)
        except StopAsyncIteration:
            return
        finally:
            await inner.aclose()

    async def stopped(self, code: str, message: str) -> Error:
        """The end of this run when its task was stopped from outside (the manager cancelled it): numbered
        after its last event and reserved, as the run's own events are."""
        state = self.state
        if state is None:  # stopped before it started: nothing numbered yet, the caller numbers it
            return Error(session_id=self.session.id, n=0, code=code, message=message)
        n = await state.journal.reserve_through(state.journal.next_number())
        return Error(session_id=self.session.id, n=n, code=code, message=message)

    async def _events(self, prompt: str | Message | None) -> AsyncGenerator[Event, None]:
        """Run the loop and yield its events. The run holds its session's lease from before its first read
        to its end (`RunOptions.lease`): another run on the session is a `SessionBusy` (or waits, as the
        terms say). A cancel another process asks for ends the run here with an `Error` (code
        ``cancelled``), as one that lost its lease does (``busy``); a pause stops it at its next step."""
        lease = None
        if self.options.lease is not None:
            lease = RunLease(self.session.store, self.session.id, self.run_id, self.options.lease)
            await lease.acquire(self.options.on_lease_wait, wait=not self.open_now)
            lease.watch(self._requested, self._lost)
        try:
            if self.admit is not None:
                await self.admit()
            async for event in self._run(prompt):
                yield event
            async for event in self._journal_title(TITLE_WAIT):  # after the run said it is done
                yield event
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._stopped is None or task is None:
                raise
            task.uncancel()
            state = self.state
            yield Error(
                session_id=self.session.id,
                n=state.journal.next_number() if state is not None else 0,
                code=LeaseLost.code if self._stopped.startswith("lost") else "cancelled",
                message=self._stopped,
            )
        finally:
            if self._titling is not None and not self._titling.done():
                self._titling.cancel()
            if lease is not None:
                await lease.release()

    def _start_title(self, answer: Message) -> None:
        """After the session's first exchange: its title model writes a title, while the run goes on."""
        state = self.state
        if self._titling is not None or state is None or not answer.text or state.session.info.parent_id:
            return
        if state.session.info.entry_count > len(state.entries) or titled_by_a_person(state.entries):
            return  # not the session's whole history in hand (so not its first exchange), or titled by a person
        exchange = first_exchange(state.entries)
        if exchange is None or exchange[1] != answer.text:
            return
        who = title_model(
            self.options.config or Config(), self.provider, self.options.model, self.options.resolve_model
        )
        if who is not None:
            self._titling = asyncio.ensure_future(write_title(*who, *exchange))

    async def _journal_title(self, wait: float = 0.0) -> AsyncIterator[Event]:
        """The title, journaled once it is written (waiting up to `wait` seconds); a failed one is logged."""
        titling, state = self._titling, self.state
        if titling is None or state is None or (not titling.done() and wait <= 0):
            return
        self._titling = None
        try:
            title = await asyncio.wait_for(titling, wait) if not titling.done() else titling.result()
        except (TetherError, TimeoutError, OSError) as exc:
            log.warning("no title for session %s: %s", state.session_id, exc)
            return
        if title:
            await state.append(TitleChange(title=title))
            for event in state.journal.drain():
                yield event

    async def _pace(self) -> None:
        """A stretch of work begins: with many runs on this loop, wait for a turn (see `pacing`)."""
        if self.options.pacer is not None:
            await self.options.pacer.turn()

    def _requested(self, request: LeaseRequest) -> None:
        """What another process asked of the run through its lease: a pause, or a cancel."""
        if request == "pause":
            self._pause_requested = True
        else:
            self._stop("cancelled from another process")

    def _lost(self, lost: LeaseLost) -> None:
        self._stop(f"lost the session: {lost}")

    def _stop(self, why: str) -> None:
        """Stop the run from outside (its lease says so): its task is cancelled, and the run ends with an
        `Error` saying `why`. A run that waits at a `yield` is cancelled when it is next asked for more."""
        if self._stopped is not None:
            return
        self._stopped = why
        if self._task is not None and not self.open_now:
            self._task.cancel()
        else:  # (not the task of a request that opens it: the worker cancels itself as it takes over)
            self._stop_pending = True

    async def _run(self, prompt: str | Message | None) -> AsyncIterator[Event]:
        state = self.state = await self._start()
        if state.session.info.state == "paused":  # a run on a paused session resumes it
            await state.session.update(state="active")
        sid, opts, journal = state.session_id, self.options, state.journal
        yield RunStarted(
            session_id=sid,
            n=journal.next_number(),
            run_id=state.run_id,
            model=opts.model,
            provider=self.provider.name,
            resumed=prompt is None,
        )
        sandbox = opts.sandbox
        if sandbox is not None and sandbox.unavailable is not None and "bash" in state.tools:
            yield Progress(
                session_id=sid,
                n=journal.next_number(),
                what="sandbox",
                detail=(
                    f"no sandbox for commands here ({sandbox.unavailable}): every command will be asked about; "
                    "install bubblewrap, or run with --sandbox off to run them unconfined"
                ),
                data={"mode": sandbox.policy.mode, "available": False},
            )
        if opts.untooled:
            yield Progress(session_id=sid, n=journal.next_number(), what="tools", detail=UNTOOLED, data={"offered": 0})
        call: ModelCall | None = None
        pending: list[ToolCallPart] = []
        try:
            # the run's opening (the prompt's task, up to the event above) is done; what it binds and journals
            # next is a stretch of its own, after the runs that waited before it
            await self._pace()
            # A run killed while the model streamed left what it had saved of the answer: journal it first.
            await recover_stream(state)
            for warning in await bind_project(state):  # AGENTS.md, skills, memory notes: read fresh each run
                journal.note(warning)
            for warning in await bind_mcp(state):  # the MCP servers' tools, started now if need be
                journal.note(warning)
            for event in journal.drain():
                yield event
            # A run killed between a tool call and its result left calls without results: say so, never re-run;
            # those that waited for an approval never started: they are decided on (asked about) again.
            unanswered_calls = state.unanswered_calls()
            waiting = awaiting(state, unanswered_calls)
            for part in unanswered_calls:
                if part not in waiting:
                    await state.append(
                        Message.tool(
                            ToolResultPart(call_id=part.id, name=part.name, content=INTERRUPTED, is_error=True)
                        )
                    )
            for event in journal.drain():
                yield event
            if waiting:
                pending = list(waiting)
                async for event in run_tool_calls(state, waiting, pending):
                    yield event
                pending = []
            if prompt is not None:
                bodies: list[EntryBody] = []
                unanswered = state.unanswered_prompt()
                if unanswered is not None:  # the last prompt got no answer: say so before the next one
                    bodies.append(markers.to_marker(markers.Interrupted(seq=unanswered)))
                bodies.append(prompt if isinstance(prompt, Message) else Message.user(prompt))
                user_entry = (await state.append(*bodies))[-1]
                text = user_entry.body.text if isinstance(user_entry.body, Message) else ""
                if oversized(state, text):
                    async for event in condense_text(
                        state, text, seq=user_entry.seq, what="message", question=None, window=state.model_info
                    ):
                        yield event
            elif not self._has_work():
                yield self._done("", "nothing_to_do")
                return

            last_text = ""
            while True:
                async for event in self._journal_title():  # a title written since the last step
                    yield event
                if self._inbox:  # prompts steered in since the last step: the model reads them now
                    steered, self._inbox = self._inbox, []
                    await state.append(*steered)
                    for event in journal.drain():
                        yield event
                if state.steps >= opts.max_steps or self._pause_requested:
                    reason = "paused" if self._pause_requested else "step_limit"
                    await self._checkpoint(last_text, reason)
                    if reason == "paused":
                        await state.session.update(state="paused")
                    for event in journal.drain():
                        yield event
                    yield self._done(last_text, reason)
                    return
                state.steps += 1
                await self._pace()
                call = ModelCall(state)
                async for event in call.stream():
                    yield event
                assert call.done is not None and call.prepared is not None
                message = call.done.message
                # what the journal and its events say about the answer: the model that gave it, what it cost
                message.model = message.model or opts.model
                message.usage = message.usage or call.done.usage
                if needs_count(message.usage):  # the provider reported none: tether's own count, marked so
                    message.usage = counted_usage(state, call.prepared, message)
                    await self._mark_estimated()
                if call.prepared.derived is not None:
                    # our count of what was sent, next to the provider's: the calibration of the next estimate
                    message.metadata["context_tokens"] = call.prepared.derived.estimate.counted
                await state.append(message)
                # From here the answer's calls are journaled without results: a cancel at any await below
                # (a pacer's turn, the yields, dropping the stream record) must answer them "aborted".
                call.partial = None
                pending = list(message.tool_calls)
                self._start_title(message)
                if call.saver is not None:
                    await call.saver.forget()
                state.usage = state.usage + (message.usage or call.done.usage)
                for event in journal.drain():
                    yield event
                # after the answer is in the journal: a cancel while waiting must not make it a partial one
                await self._pace()
                last_text = message.text
                calls = message.tool_calls
                if not calls and self._inbox:
                    continue  # steered in while the model answered: it reads them at a next step
                if not calls:
                    yield self._done(last_text, "completed")
                    return
                pending = list(calls)
                repeated = repeated_call(state, calls)
                if repeated is not None:
                    reason = (
                        f"stopped: the model called {repeated} with the same arguments {REPEAT_LIMIT} times in a row"
                    )
                    for part in calls:
                        await state.append(
                            Message.tool(ToolResultPart(call_id=part.id, name=part.name, content=reason, is_error=True))
                        )
                    pending = []
                    for event in journal.drain():
                        yield event
                    yield Error(session_id=sid, n=journal.next_number(), code="repeated_tool_call", message=reason)
                    return
                async for event in run_tool_calls(state, calls, pending):
                    yield event
                pending = []
        except (asyncio.CancelledError, GeneratorExit):
            await self._record_interruption(call.partial if call is not None else None, pending)
            if call is not None and call.saver is not None:
                with contextlib.suppress(Exception):
                    await call.saver.forget()
            raise
        except AnswerCut as cut:
            assert call is not None
            await self._record_cut(call, cut)
            for event in journal.drain():
                yield event
            yield Error(
                session_id=sid,
                n=journal.next_number(),
                code="answer_cut",
                message=f"{cut}; what it said is kept: `tether run --continue` goes on",
                retryable=cut.retryable,
            )
        except SeqConflict as exc:
            yield Error(
                session_id=sid,
                n=journal.next_number(),
                code=exc.code,
                message=f"another writer appended to this session: {exc}",
            )
        except ProviderError as exc:
            yield Error(
                session_id=sid,
                n=journal.next_number(),
                code=exc.code,
                message=str(exc),
                retryable=exc.retryable,
            )

    async def _mark_estimated(self) -> None:
        """Say once in the session's metadata that some of its counts are tether's own."""
        session = self.session
        if session.info.metadata.get(USAGE_ESTIMATED) is not True:
            await session.update(metadata={**session.info.metadata, USAGE_ESTIMATED: True})

    def _done(self, text: str, reason: str) -> Done:
        state = self.state
        assert state is not None
        return Done(
            session_id=state.session_id,
            n=state.journal.next_number(),
            text=text,
            steps=state.steps,
            usage=state.usage,
            reason=reason,
        )

    def _has_work(self) -> bool:
        """Whether the history ends where a model call is due: a user turn, tool results, a checkpoint, or an
        answer cut short (a Ctrl-C's, a crash's) that the next answer goes on with."""
        assert self.state is not None
        for entry in reversed(self.state.entries):
            body = entry.body
            if isinstance(body, Checkpoint):
                return True
            if isinstance(body, Message):
                return body.role in ("user", "tool") or (cut_note(body) is not None and not body.tool_calls)
        return False

    async def _checkpoint(self, last_text: str, reason: str = "step_limit") -> None:
        """Journal where the run stopped (its step limit, a pause): a `Checkpoint` that ``--continue`` picks
        up."""
        state = self.state
        assert state is not None
        tools_used: dict[str, int] = {}
        for entry in state.entries[-4 * state.steps - 4 :]:
            if isinstance(entry.body, Message):
                for call in entry.body.tool_calls:
                    tools_used[call.name] = tools_used.get(call.name, 0) + 1
        done = f"{state.steps} steps; tool calls: " + (
            ", ".join(f"{name} x{n}" for name, n in tools_used.items()) or "none"
        )
        next_action = last_text.strip()[:500] or "continue with the pending work (the last tool results are unread)"
        objective = ""
        for entry in state.entries:
            if isinstance(entry.body, Message) and entry.body.role == "user" and entry.body.text.strip():
                objective = entry.body.text.strip()
        body = Checkpoint(
            objective=objective[:2000], done=done, next_action=next_action, reason=reason, steps=state.steps
        )
        await state.append(body)

    async def _record_cut(self, call: ModelCall, cut: AnswerCut) -> None:
        """An answer cut at a step's limit: what it said is journaled, marked (``finish_reason`` ``length`` or
        ``stalled``, ``metadata["cut"]``), the calls it had finished get a result saying they did not run, and a
        checkpoint lets ``--continue`` go on."""
        state = self.state
        assert state is not None
        partial, call.partial = call.partial, None
        message = partial.message(self.options.model, self.provider.name) if partial is not None else None
        if message is not None:
            message.finish_reason = cut.reason
            message.metadata["cut"] = cut.detail
            not_run = f"not run: {cut}, before the model had finished asking for its calls"
            await state.append(
                message,
                *(
                    Message.tool(ToolResultPart(call_id=part.id, name=part.name, content=not_run, is_error=True))
                    for part in message.tool_calls
                ),
            )
        await self._checkpoint(message.text if message is not None else "", "answer_cut")

    async def _record_interruption(self, partial: PartialAnswer | None, pending: list[ToolCallPart]) -> None:
        """On cancel: keep the partial answer, and mark the calls that never finished as aborted, but those
        that wait for a person's decision (and the calls decided with them): the next run asks again."""
        state = self.state
        if state is None:
            return
        waiting = awaiting(state, pending)
        pending = [call for call in pending if call not in waiting]
        try:
            if partial is not None:
                message = partial.message(self.options.model, self.provider.name)
                if message is not None:
                    await state.append(message)
                    pending = list(partial.calls)
            for call in pending:
                await state.append(
                    Message.tool(ToolResultPart(call_id=call.id, name=call.name, content=ABORTED, is_error=True))
                )
        except Exception:  # the store may be the reason we are stopping; the original error matters more
            pass


__all__ = ["ABORTED", "INTERRUPTED", "RESUME_TAIL", "AgentRun", "RunOptions"]
