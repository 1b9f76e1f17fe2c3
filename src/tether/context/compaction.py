"""Compaction: a `Compaction` entry whose summary stands, in derived contexts, for the older part of a
session. A model writes it from a structured prompt, merging the previous summary; when the model fails or
saves less than 5%, it is written mechanically instead. The user's first message and pinned messages are
kept verbatim, and a table of the dropped user turns says how to recall them. Undo is a revert."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import msgspec

from .. import markers
from ..errors import InvalidInput, NotFound, SeqConflict, TetherError
from ..events import CompactionCompleted, CompactionFailed, CompactionStarted, durable_events
from ..messages import (
    Compaction,
    Entry,
    EntryBody,
    FilePart,
    ImagePart,
    Message,
    Revert,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    Usage,
)
from ..providers.base import ModelRequest, Provider, complete
from ..store.protocols import Journal
from .budget import Budget, ContextSettings
from .derive import (
    ContextPolicy,
    cut_text,
    derive_context,
    latest_compaction,
    unit_starts,
)
from .facts import Fact, Facts, extract_facts, first_line
from .history import load_context_history
from .tokens import TokenCache, TokenCounter, default_cache, get_counter

CompactionReason = Literal["auto", "overflow", "manual"]
Strategy = Literal["model", "deterministic"]

MIN_REDUCTION = 0.05


def refusal(before: int, after: int) -> str:
    """Why nothing was compacted, in one plain sentence: a summary would not have made the context smaller
    by enough to be worth it (or would have made it bigger, as in a short session)."""
    if after >= before:
        how = f"{before:,} tokens now, {after:,} with one"
    else:
        how = f"it would save only {before - after:,} of its {before:,} tokens"
    return f"the context is too short to gain from a summary ({how}), so nothing was appended"


"""A compaction that takes less than this share off the context is not worth an entry."""
SUMMARY_MAX_TOKENS = 4_096
DEFAULT_KEEP_RECENT = 20_000
GOAL_MAX_TOKENS = 4_000
PIN_MAX_TOKENS = 2_000
TURN_ROWS = 100
TRANSCRIPT_RESULT_TOKENS = 800
TRANSCRIPT_TEXT_TOKENS = 3_000
TRANSCRIPT_CALL_TOKENS = 400
STATE_KEY = "state"


# --- events ---------------------------------------------------------------------------------------------

# The run's own event types (layer 1): what a compaction reports reaches `tether run` and the server as is.
CompactionEvent = CompactionStarted | CompactionCompleted | CompactionFailed
EventSink = Callable[[CompactionEvent], Awaitable[None] | None]
Appender = Callable[[Sequence[EntryBody], int], Awaitable[list[Entry]]]
"""How a compaction's entry is journaled: ``append(bodies, expect_seq)``. The runtime passes its run's one
append path; without one, the store's own append is used."""


class CompactionResult(msgspec.Struct, kw_only=True):
    """What a compaction did. `entry` is the appended `Compaction` entry, None when it failed."""

    session_id: str
    reason: CompactionReason
    entry: Entry | None = None
    strategy: Strategy | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    fallback: str | None = None
    error: str | None = None
    usage: Usage | None = None
    """What the summarizer calls cost."""

    @property
    def ok(self) -> bool:
        return self.entry is not None


# --- the summary's state, carried from one compaction to the next --------------------------------------


class UserTurn(msgspec.Struct, frozen=True, array_like=True):
    seq: int
    at: float
    line: str


class SummaryState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The parts a summary is rendered from, kept in ``Compaction.metadata["state"]`` so that the next
    compaction merges them instead of summarizing a summary: verbatim items are carried as they are, the
    model's text is handed back to the model to update, facts are merged as sets."""

    goal: Fact | None = None
    latest: Fact | None = None
    pinned: list[Fact] = msgspec.field(default_factory=list)
    body: str = ""
    """The model-written summary (merged each time a model compacts)."""
    notes: str = ""
    """The mechanical 'current state' of a compaction made without a model since the last model one."""
    facts: Facts = msgspec.field(default_factory=Facts)
    turns: list[UserTurn] = msgspec.field(default_factory=list)
    turns_omitted: int = 0
    covered_to: int = 0
    """The last seq the summary covers (``first_kept_seq - 1``)."""
    count: int = 0


def state_of(compaction: Compaction) -> SummaryState:
    """The state a compaction entry carries; for one written by something else, its summary as the body."""
    raw = compaction.metadata.get(STATE_KEY)
    if raw is not None:
        try:
            state: SummaryState = msgspec.convert(raw, SummaryState)
            if state.count >= 1:  # every state tether writes has counted its compaction
                return state
        except msgspec.ValidationError:
            pass
    return SummaryState(body=compaction.summary, covered_to=compaction.first_kept_seq - 1, count=1)


def _verbatim(text: str, max_tokens: int, counter: TokenCounter) -> str:
    tokens = counter.count(text)
    if tokens <= max_tokens:
        return text
    cut, _ = cut_text(text, tokens, max_tokens, counter, "the whole message is in the session")
    return cut


def render_summary(
    state: SummaryState, *, session_id: str, strategy: Strategy, first_kept_seq: int, attach_facts: bool = True
) -> str:
    """The summary text the model sees in place of entries 1 to ``first_kept_seq - 1``."""
    out = [
        f"[Summary of this session's earlier part (entries 1-{first_kept_seq - 1}), replacing it in your context "
        f"(compaction {state.count}, {strategy}). The full history is kept: to see an earlier turn in full, call "
        f'session_recall(query="<words from it>", session_id="{session_id}").]'
    ]
    if state.goal is not None:
        out.append(f"## The user's first message (entry {state.goal.seq}, verbatim)\n{state.goal.text}")
    if state.pinned:
        lines = "\n".join(f"- (entry {p.seq}) {p.text}" for p in state.pinned)
        out.append(f"## Pinned by the user (verbatim)\n{lines}")
    if state.body:
        out.append(state.body.strip())
    if state.notes:
        out.append(f"## Current state (recorded mechanically)\n{state.notes}")
    facts = state.facts
    # Messages already quoted whole above are not repeated as constraints or table rows.
    verbatim = {f.seq for f in (state.goal, state.latest, *state.pinned) if f is not None}
    if attach_facts or not state.body:
        constraints = [c for c in facts.constraints if c.seq not in verbatim]
        if constraints:
            lines = "\n".join(f"- (entry {c.seq}) {c.text}" for c in constraints)
            out.append(f"## Constraints and preferences the user stated (verbatim)\n{lines}")
        if facts.files:
            out.append("## Files touched\n" + "\n".join(f"- {f}" for f in facts.files))
        if facts.commands:
            lines = "\n".join(f"- (entry {c.seq}) `{c.command}`: {c.outcome}" for c in facts.commands)
            out.append(f"## Commands run (latest {len(facts.commands)})\n{lines}")
        if facts.errors:
            lines = "\n".join(f"- (entry {e.seq}) {e.tool}: {e.text} [{e.state}]" for e in facts.errors)
            out.append(f"## Errors\n{lines}")
    if state.latest is not None:
        out.append(f"## The user's latest request (entry {state.latest.seq}, verbatim)\n{state.latest.text}")
    turns = [t for t in state.turns if t.seq not in verbatim]
    if turns:
        rows = "\n".join(
            f"| {t.seq} | {time.strftime('%Y-%m-%d %H:%M', time.gmtime(t.at))} | {t.line.replace('|', '/')} |"
            for t in turns
        )
        more = f"\n({state.turns_omitted} earlier user turns are not listed.)" if state.turns_omitted else ""
        out.append(
            "## Earlier user turns\n| entry | time (UTC) | first line |\n| --- | --- | --- |\n"
            f'{rows}{more}\nTo read one in full: session_recall(query="<words from its first line>", '
            f'session_id="{session_id}").'
        )
    return "\n\n".join(out)


# --- the summarizer -------------------------------------------------------------------------------------

SUMMARIZER_SYSTEM = (
    "You write the working memory of a coding agent. The older part of its session is about to leave its "
    "context, and your summary takes its place: the agent will continue from your summary alone. Be specific "
    "and complete: exact file paths, names, numbers, versions, commands and error messages. Quote the user's "
    "constraints and preferences word for word. Invent nothing. Write the summary only, no preamble."
)

SUMMARY_SECTIONS = (
    ("Goal", "what the user wants done, and why, in one to three sentences"),
    ("Constraints and preferences", 'every rule or preference the user stated, quoted verbatim: - "..."'),
    ("Files touched", "each file read, created or changed: - path: what was done"),
    ("Commands run", "the commands that matter: - `command`: outcome"),
    ("Errors", "each error met: - message: fixed, still open, or worked around (and how)"),
    ("Current state", "what is done and what is in progress, with the exact values that were decided"),
    ("Next steps", "what to do next, in order"),
)


def summarizer_prompt(previous: str | None, transcript: str) -> str:
    """The user message of a summarizer call: the previous summary to update (if any), the conversation,
    and the sections to write."""
    sections = "\n".join(f"## {name}\n({what})" for name, what in SUMMARY_SECTIONS)
    if previous:
        head = (
            f"The summary of the session so far:\n<previous-summary>\n{previous.strip()}\n</previous-summary>\n\n"
            "The session went on as follows. Write the updated summary: merge what is new into each section, "
            "keep what still matters, drop what the new part made obsolete. One summary, not a summary of a "
            "summary."
        )
    else:
        head = "Summarize this part of a coding session."
    return (
        f"{head}\n\n<conversation>\n{transcript}\n</conversation>\n\n"
        f"Write the summary in Markdown with exactly these sections, in this order (write 'none' under a "
        f"section with nothing to say):\n{sections}"
    )


def render_transcript(entries: Sequence[Entry], counter: TokenCounter) -> list[tuple[str, int]]:
    """The messages of `entries` as text blocks for a summarizer, each with its token count; long parts
    are cut (the summarizer needs the gist of a tool's output, not all of it)."""
    blocks: list[tuple[str, int]] = []

    def add(text: str, limit: int, seq: int) -> None:
        tokens = counter.count(text)
        if tokens > limit:
            text, tokens = cut_text(text, tokens, limit, counter, f"the rest is in entry {seq}")
        blocks.append((text, tokens))

    for entry in entries:
        message = entry.body
        if not isinstance(message, Message):
            continue
        for part in message.parts:
            if isinstance(part, TextPart) and part.text.strip():
                add(f"[entry {entry.seq}, {message.role}] {part.text}", TRANSCRIPT_TEXT_TOKENS, entry.seq)
            elif isinstance(part, ToolCallPart):
                add(
                    f"[entry {entry.seq}, assistant calls {part.name}] {part.arguments_json()}",
                    TRANSCRIPT_CALL_TOKENS,
                    entry.seq,
                )
            elif isinstance(part, ToolResultPart):
                label = f"{part.name or 'tool'} result" + (", error" if part.is_error else "")
                add(f"[entry {entry.seq}, {label}] {part.content}", TRANSCRIPT_RESULT_TOKENS, entry.seq)
            elif isinstance(part, ImagePart | FilePart):
                blocks.append((f"[entry {entry.seq}, {message.role} attached {part.media_type}]", 12))
    return blocks


def _clean_summary(text: str) -> str:
    text = text.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text.strip("`").removeprefix("markdown").strip()
    return text


async def summarize(
    provider: Provider,
    model: str,
    previous: str | None,
    blocks: list[tuple[str, int]],
    *,
    input_limit: int,
    max_tokens: int = SUMMARY_MAX_TOKENS,
    timeout: float | None = 300.0,
    counter: TokenCounter,
) -> tuple[str, Usage]:
    """The model's summary of `blocks`, merged into `previous`. `input_limit` is what the summarizer model
    may take in (its window less its output). A transcript too long for one call is summarized in chunks,
    each call updating the summary of the chunks before it, each chunk as big as the room the summary so far
    leaves. Raises on any failure (the caller falls back); an empty answer is a failure too."""
    usage = Usage()
    summary = previous
    overhead = counter.count(SUMMARIZER_SYSTEM) + counter.count(summarizer_prompt(None, "")) + 64
    i = 0
    while i < len(blocks):
        room = max(input_limit - overhead - (counter.count(summary) if summary else 0), 512)
        chunk: list[str] = []
        size = 0
        while i < len(blocks) and (not chunk or size + blocks[i][1] <= room):
            chunk.append(blocks[i][0])
            size += blocks[i][1]
            i += 1
        request = ModelRequest(
            model=model,
            system=SUMMARIZER_SYSTEM,
            messages=[Message.user(summarizer_prompt(summary, "\n\n".join(chunk)))],
            max_output_tokens=max_tokens,
            metadata={"purpose": "compaction"},
        )
        async with asyncio.timeout(timeout):
            response = await complete(provider, request)
        usage = usage + response.usage
        text = _clean_summary(response.message.text)
        if len(text) < 20:
            raise TetherError(f"the summarizer returned {'nothing' if not text else repr(text)}")
        summary = text
    if summary is None:
        raise TetherError("nothing to summarize")
    return summary, usage


# --- planning and running a compaction -----------------------------------------------------------------


class CompactionPlan(msgspec.Struct, kw_only=True):
    """Where a compaction cuts: `span` is summarized, the messages from `first_kept_seq` on stay."""

    previous: Entry | None
    span: list[Entry]
    first_kept_seq: int
    kept_has_user: bool


def plan_compaction(
    entries: Sequence[Entry],
    *,
    keep_recent_tokens: int,
    counter: TokenCounter,
    cache: TokenCache,
    session_id: str | None,
) -> CompactionPlan | None:
    """Choose the cut: keep the newest units worth at most `keep_recent_tokens` (at least the last unit),
    starting at a user message when one is in reach, and summarize the rest. None when there is nothing
    before the last unit to summarize."""
    ci = latest_compaction(entries)
    previous = entries[ci] if ci is not None else None
    start_seq = previous.body.first_kept_seq if previous is not None and isinstance(previous.body, Compaction) else 1
    messages = [e for e in entries if isinstance(e.body, Message) and e.seq >= start_seq]
    starts = unit_starts(messages)
    if len(starts) < 2:
        return None
    sizes = []
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(messages)
        total = 0
        for e in messages[s:end]:
            assert isinstance(e.body, Message)
            total += 4 + sum(cache.parts(session_id, e, e.body, counter))
        sizes.append(total)
    b = len(starts) - 1
    kept = sizes[b]
    while b > 1 and kept + sizes[b - 1] <= keep_recent_tokens:
        b -= 1
        kept += sizes[b]
    # Prefer to start the kept part at a user message: keep less rather than open on a tool exchange.
    for k in range(b, len(starts)):
        body = messages[starts[k]].body
        if isinstance(body, Message) and body.role == "user":
            b = k
            break
    first_kept = messages[starts[b]].seq
    span = [e for e in entries if e.seq < first_kept and (previous is None or e.seq >= start_seq)]
    kept_has_user = any(isinstance(e.body, Message) and e.body.role == "user" for e in messages[starts[b] :])
    return CompactionPlan(previous=previous, span=span, first_kept_seq=first_kept, kept_has_user=kept_has_user)


async def _pinned(
    store: Journal, session_id: str, entries: Sequence[Entry], plan: CompactionPlan, carried: list[Fact]
) -> list[Fact]:
    """Pinned messages the new summary must hold verbatim: those carried, plus pinned messages of the span
    (by metadata or by a pin marker anywhere in the loaded entries), less those unpinned since."""
    by_seq = {f.seq: f for f in carried}
    marked: set[int] = set()
    unmarked: set[int] = set()
    for entry in entries:
        known = markers.parse(entry.body)
        if isinstance(known, markers.Pin | markers.Unpin):
            pinning = isinstance(known, markers.Pin)
            (marked if pinning else unmarked).add(known.seq)
            (unmarked if pinning else marked).discard(known.seq)
    in_span = {e.seq: e for e in plan.span if isinstance(e.body, Message)}
    for seq, entry in in_span.items():
        assert isinstance(entry.body, Message)
        if entry.body.metadata.get("pinned") is True or seq in marked:
            by_seq.setdefault(seq, Fact(seq, entry.body.text))
    for seq in marked - set(in_span) - set(by_seq):
        if seq < plan.first_kept_seq:  # pinned after an earlier compaction had already summarized it
            for entry in await store.read(session_id, seq, seq):
                if isinstance(entry.body, Message):
                    by_seq[seq] = Fact(seq, entry.body.text)
    for seq in unmarked:
        by_seq.pop(seq, None)
    return [by_seq[s] for s in sorted(by_seq)]


def _mechanical_notes(plan: CompactionPlan) -> str:
    last_text = ""
    for entry in reversed(plan.span):
        if isinstance(entry.body, Message) and entry.body.role == "assistant" and entry.body.text.strip():
            last_text = entry.body.text.strip()
            break
    if not last_text:
        return ""
    if len(last_text) > 1_200:
        last_text = last_text[:1_200] + " [...]"
    return "The assistant's last words before the cut:\n> " + last_text.replace("\n", "\n> ")


async def _emit(sink: EventSink | None, event: CompactionEvent) -> None:
    if sink is None:
        return
    result = sink(event)
    if inspect.isawaitable(result):
        await result


async def compact_session(
    store: Journal,
    session_id: str,
    *,
    provider: Provider | None = None,
    model: str | None = None,
    reason: CompactionReason = "manual",
    budget: Budget | None = None,
    settings: ContextSettings | None = None,
    system: str | None = None,
    tools: Sequence[ToolSpec] = (),
    counter: TokenCounter | None = None,
    cache: TokenCache | None = None,
    emit: EventSink | None = None,
    keep_recent_tokens: int | None = None,
    summarizer_input_limit: int | None = None,
    timeout: float | None = 300.0,
    append: Appender | None = None,
) -> CompactionResult:
    """Compact a session now and append the `Compaction` entry.

    With `provider` and `model`, a model writes the summary; without them, or when the model fails or its
    summary takes less than 5% off the context, the summary is written mechanically. A compaction that
    cannot take 5% off even mechanically appends nothing and fails (so a caller never compacts in a loop).
    The append states the seq it expects: a session that moved on meanwhile fails the compaction rather
    than cut at a stale place. Never raises for a failed compaction: see `CompactionResult.error`. The
    `CompactionCompleted` it emits is the entry's durable event (`tether.events.durable_events`), numbered.
    """
    settings = settings or ContextSettings()
    counter = counter or get_counter(model=model)
    cache = cache if cache is not None else default_cache()
    result = CompactionResult(session_id=session_id, reason=reason)

    async def fail(error: str) -> CompactionResult:
        result.error = error
        await _emit(emit, CompactionFailed(session_id=session_id, reason=reason, error=error))
        return result

    info = await store.get_session(session_id)
    entries = await load_context_history(store, session_id)
    usable = budget.usable if budget is not None else None
    prune = settings.prune_tool_outputs is not False
    policy = ContextPolicy(mode="compacted", prune_tool_outputs=prune)
    before = derive_context(
        entries, policy, session_id=session_id, system=system, tools=tools, counter=counter, cache=cache
    )
    result.tokens_before = before.estimate.counted
    keep = keep_recent_tokens or settings.keep_recent_tokens
    if keep is None:
        # A fifth of the budget, and never more than a quarter of what is there: a compaction asked for
        # early (by hand, on a big window) still has something to summarize.
        keep = min(usable // 5 if usable else DEFAULT_KEEP_RECENT, (before.estimate.counted - before.fixed_tokens) // 4)
    if reason == "overflow":
        keep //= 2  # the context did not fit as estimated: cut deeper
    plan = plan_compaction(entries, keep_recent_tokens=keep, counter=counter, cache=cache, session_id=session_id)
    if plan is None:
        await _emit(emit, CompactionStarted(session_id=session_id, reason=reason, tokens_before=result.tokens_before))
        return await fail("nothing to compact: the context holds a single turn")

    summarizer = f"{provider.name}/{model}" if provider is not None and model else None
    await _emit(
        emit,
        CompactionStarted(
            session_id=session_id, reason=reason, tokens_before=result.tokens_before, summarizer=summarizer
        ),
    )

    # What every strategy shares: verbatim goal and pins, the turn table, mechanical facts.
    previous = state_of(plan.previous.body) if plan.previous and isinstance(plan.previous.body, Compaction) else None
    state = previous or SummaryState()
    span_messages = [e for e in plan.span if isinstance(e.body, Message)]
    users = [e for e in span_messages if isinstance(e.body, Message) and e.body.role == "user"]
    goal = state.goal
    if goal is None and users:
        assert isinstance(users[0].body, Message)
        goal = Fact(users[0].seq, _verbatim(users[0].body.text, GOAL_MAX_TOKENS, counter))
    pinned = [
        Fact(p.seq, _verbatim(p.text, PIN_MAX_TOKENS, counter))
        for p in await _pinned(store, session_id, entries, plan, state.pinned)
    ]
    latest = None
    if not plan.kept_has_user and users and users[-1].seq != (goal.seq if goal else None):
        assert isinstance(users[-1].body, Message)
        latest = Fact(users[-1].seq, _verbatim(users[-1].body.text, GOAL_MAX_TOKENS, counter))
    turns = [*state.turns]
    for entry in users:
        assert isinstance(entry.body, Message)
        turns.append(UserTurn(entry.seq, entry.created_at, first_line(entry.body.text, 100)))
    omitted = state.turns_omitted + max(0, len(turns) - TURN_ROWS)
    base = SummaryState(
        goal=goal,
        latest=latest,
        pinned=pinned,
        body=state.body,
        notes=state.notes,
        facts=state.facts.merged(extract_facts(plan.span)),
        turns=turns[-TURN_ROWS:],
        turns_omitted=omitted,
        covered_to=plan.first_kept_seq - 1,
        count=state.count + 1,
    )
    attach = settings.compaction_facts is not False
    next_seq = info.entry_count + 1

    def build(strategy: Strategy, new_state: SummaryState, usage: Usage | None) -> tuple[Compaction, int]:
        summary = render_summary(
            new_state,
            session_id=session_id,
            strategy=strategy,
            first_kept_seq=plan.first_kept_seq,
            attach_facts=attach,
        )
        meta: dict[str, Any] = {"reason": reason, STATE_KEY: msgspec.to_builtins(new_state)}
        if plan.previous is not None:
            meta["previous_seq"] = plan.previous.seq
        if summarizer and strategy == "model":
            meta["summarizer"] = summarizer
        if usage is not None:
            meta["usage"] = msgspec.to_builtins(usage)
        body = Compaction(
            summary=summary,
            first_kept_seq=plan.first_kept_seq,
            strategy=strategy,
            tokens_before=result.tokens_before,
            metadata=meta,
        )
        after = derive_context(
            [*entries, Entry(next_seq, time.time(), body)],
            policy,
            session_id=session_id,
            system=system,
            tools=tools,
            counter=counter,
            cache=cache,
        )
        return body, after.estimate.counted

    def reduction(after: int) -> float:
        return 1 - after / max(result.tokens_before, 1)

    body: Compaction | None = None
    fallback: str | None = None
    if provider is not None and model:
        prior = "\n\n".join(x for x in (state.body, state.notes) if x) or None
        limit = summarizer_input_limit or usable or 100_000
        max_tokens = min(SUMMARY_MAX_TOKENS, budget.reserved_output) if budget is not None else SUMMARY_MAX_TOKENS
        try:
            text, usage = await summarize(
                provider,
                model,
                prior,
                render_transcript(plan.span, counter),
                input_limit=limit,
                max_tokens=max_tokens,
                timeout=timeout,
                counter=counter,
            )
            result.usage = usage
            candidate, after = build("model", msgspec.structs.replace(base, body=text, notes=""), usage)
            if reduction(after) >= MIN_REDUCTION:
                body, result.tokens_after, result.strategy = candidate, after, "model"
            else:
                fallback = f"the model's summary took only {reduction(after):.1%} off the context"
        except (TetherError, TimeoutError, OSError, ValueError) as exc:
            fallback = f"the summarizer failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    else:
        fallback = None  # mechanical by choice, not by failure
    if body is None:
        mechanical = msgspec.structs.replace(base, notes=_mechanical_notes(plan) or base.notes)
        candidate, after = build("deterministic", mechanical, result.usage)
        if reduction(after) < MIN_REDUCTION:
            failed = f"; {fallback}" if fallback and fallback.startswith("the summarizer failed") else ""
            return await fail(refusal(result.tokens_before, after) + failed)
        body, result.tokens_after, result.strategy = candidate, after, "deterministic"
        result.fallback = fallback
        if fallback:
            body.metadata["fallback"] = fallback
    body = msgspec.structs.replace(body, tokens_after=result.tokens_after)
    try:
        if append is not None:
            (entry,) = await append([body], next_seq)
        else:
            (entry,) = await store.append(session_id, [body], expect_seq=next_seq)
    except SeqConflict:
        return await fail("the session moved on while it was being compacted; nothing appended")
    result.entry = entry
    for event in durable_events(entry, session_id):
        if isinstance(event, CompactionCompleted):
            await _emit(emit, event)
    return result


async def undo_compaction(store: Journal, session_id: str, seq: int | None = None) -> Entry:
    """Undo a compaction (default: the latest active one) by a revert to just before it. Entries appended
    after the compaction are hidden too, like any revert; nothing is deleted."""
    if seq is None:
        entries = await load_context_history(store, session_id)
        ci = latest_compaction(entries)
        if ci is None:
            raise NotFound(f"session {session_id} has no compaction to undo")
        seq = entries[ci].seq
    found = await store.read(session_id, seq, seq)
    if not found or not isinstance(found[0].body, Compaction):
        raise InvalidInput(f"entry {seq} of session {session_id} is not a compaction")
    (entry,) = await store.append(session_id, [Revert(to_seq=seq - 1, reason=f"undo compaction {seq}")])
    return entry


async def pin(store: Journal, session_id: str, seq: int, *, pinned: bool = True) -> Entry:
    """Pin message `seq` (compactions keep it verbatim), or unpin it, with a marker entry."""
    found = await store.read(session_id, seq, seq)
    if not found or not isinstance(found[0].body, Message):
        raise InvalidInput(f"entry {seq} of session {session_id} is not a message")
    marker = markers.to_marker(markers.Pin(seq=seq) if pinned else markers.Unpin(seq=seq))
    (entry,) = await store.append(session_id, [marker])
    return entry
