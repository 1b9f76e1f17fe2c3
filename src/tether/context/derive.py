"""Derivation: the messages a model sees at the next step, computed from the active history by a policy and
never stored. Old tool outputs become pointers, the oldest turns give way when the budget is short, parts
that alone exceed it are cut with a marker; a tool call is never separated from its result; what was left
out, and why, is part of the answer."""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from .. import markers
from ..errors import InvalidInput
from ..markers import CONDENSED_MARKER, PIN_MARKER, UNPIN_MARKER
from ..messages import (
    INTERRUPTED_ANSWER,
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)
from .budget import Mode
from .facts import call_paths, error_line, paths_in
from .tokens import (
    MESSAGE_OVERHEAD,
    TokenCache,
    TokenCounter,
    TokenEstimate,
    count_fixed,
    count_part,
    default_cache,
    get_counter,
    part_counts,
)

OmissionAction = Literal["summarized", "dropped", "pruned", "truncated", "repaired"]

PRUNE_KEEP_TOKENS = 40_000
PRUNE_MIN_SAVINGS = 20_000
PRUNE_MIN_PART = 200
"""Tool outputs smaller than this are never replaced: the pointer would save next to nothing."""
CALIBRATION_MAX = 1.5
"""How far a provider's count may tighten the budget: beyond this the anchor is more likely stale (the
context changed since) than the tokenizer that far off."""
__all__ = ["CONDENSED_MARKER", "PIN_MARKER", "UNPIN_MARKER"]  # their bodies: `markers.Pin`, `Unpin`, `Condensed`
CUT_NOTE = "[This answer was cut off here: tether stopped (a crash or kill) while it was being written.]"
"""What the model reads at the end of its own answer that a kill cut (`messages.INTERRUPTED_ANSWER`), after its
text and before any complete tool call (whose result says it never ran)."""

STOPPED_NOTE = "[This answer was cut off here: the run was stopped (a cancel) while it was being written.]"
"""What the model reads at the end of its own answer that a cancel stopped (Ctrl-C, a person's or a server's
stop), as `CUT_NOTE`."""

LIMIT_NOTE = "[This answer was cut off here: it went on past what one answer may stream.]"
"""What the model reads at the end of its own answer cut at the step's limit (``max_answer_tokens``, a stall:
`finish_reason` ``length`` or ``stalled``, ``metadata.cut``), as `CUT_NOTE`."""

GO_ON_NOTE = "[Go on from where your answer above was cut off.]"
"""What the model reads after an answer cut short that nothing followed but its own next answer (``tether run
--continue`` after a Ctrl-C or a crash): the turns alternate again, and the model knows what is asked."""

INTERRUPTED_NOTE = "[No answer was given to the message above: the run stopped before the model replied.]"
"""What the model sees for an unanswered user message: the note keeps the turns alternating, which some
providers require, and tells the model that the earlier request is still open."""


class Omission(msgspec.Struct, frozen=True, kw_only=True):
    """Something of the history that the derived context does not hold as it is stored."""

    action: OmissionAction
    """``summarized`` (stands behind a compaction summary), ``dropped`` (left out to fit the budget, or a
    tool result whose call is not in the context), ``pruned`` (tool output replaced by a pointer),
    ``truncated`` (cut with a marker to fit), ``repaired`` (a tool call without a recorded result got an
    error result, as providers require)."""
    first_seq: int
    last_seq: int
    count: int
    """Entries (summarized, dropped) or parts (pruned, truncated, repaired) concerned."""
    tokens: int
    """Tokens it took out of the context (what the dropped or pruned parts would have cost)."""
    reason: str


class ContextPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How to derive a context. `budget` is the usable input (see `Budget.usable`); None: no limit."""

    mode: Mode = "compacted"
    """``compacted``: the latest compaction's summary and the entries it kept, then everything after.
    ``full``: every active message (compactions ignored). ``relevant``: like ``compacted``, but when over
    budget the earlier turns are kept by their overlap with the current task's files, tools and errors."""
    budget: int | None = None
    prune_tool_outputs: bool = True
    prune_keep_tokens: int = PRUNE_KEEP_TOKENS
    prune_min_savings: int = PRUNE_MIN_SAVINGS
    recent_tokens: int | None = None
    """``relevant`` mode: the newest tokens always kept (default: half the budget)."""
    min_part_tokens: int = 48
    """Truncation never cuts a part below this."""

    def validate(self) -> ContextPolicy:
        if self.mode not in ("full", "compacted", "relevant"):
            raise InvalidInput(f"unknown context mode {self.mode!r}; use full, compacted or relevant")
        for name in ("budget", "recent_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InvalidInput(f"{name} must be a positive integer or None, not {value!r}")
        if self.prune_keep_tokens < 0 or self.prune_min_savings < 0 or self.min_part_tokens < 1:
            raise InvalidInput("prune_keep_tokens and prune_min_savings must be >= 0, min_part_tokens >= 1")
        return self


class DerivedContext(msgspec.Struct, kw_only=True):
    """What a model would see, and how it came to be. `messages` may share objects with the history they
    came from: treat them as read-only."""

    messages: list[Message]
    seqs: list[int | None]
    """The entry each message came from; None for the compaction summary and repaired results."""
    estimate: TokenEstimate
    budget: int | None
    fixed_tokens: int
    """System prompt, tool definitions and reply priming."""
    mode: Mode
    compaction_seq: int | None = None
    first_kept_seq: int | None = None
    omissions: list[Omission] = msgspec.field(default_factory=list)
    calibration: float = 1.0
    """The provider's count over ours at the anchor step, as used to fit the budget (1.0 to 1.5)."""
    needed_tokens: int = 0
    """Our count of the context before anything was dropped or truncated to fit (pruning applied): what
    the next step would need without a budget. Compaction is due when this passes the threshold."""

    @property
    def fits(self) -> bool:
        return self.budget is None or math.ceil(self.estimate.counted * self.calibration) <= self.budget

    @property
    def tokens(self) -> int:
        return self.estimate.tokens

    def dropped(self) -> list[Omission]:
        return [o for o in self.omissions if o.action == "dropped"]


# --- the working set ------------------------------------------------------------------------------------


class _Item:
    """One message on its way into the context."""

    __slots__ = ("counts", "message", "pinned", "ref", "seq", "tokens", "unit")

    def __init__(self, seq: int | None, message: Message, counts: tuple[int, ...], *, ref: int | None = None) -> None:
        self.seq = seq
        # the entry to name when reporting on this message (the compaction entry, for its summary)
        self.ref = ref if ref is not None else seq
        self.message = message
        self.counts = counts
        self.tokens = MESSAGE_OVERHEAD + sum(counts)
        self.pinned = False
        self.unit: _Unit | None = None

    def replace_part(self, index: int, part: Part, tokens: int) -> None:
        """Swap one part (a new message object: the history's own is never changed)."""
        parts = list(self.message.parts)
        parts[index] = part
        self.set_parts(parts, (*self.counts[:index], tokens, *self.counts[index + 1 :]))

    def set_parts(self, parts: list[Part], counts: tuple[int, ...]) -> None:
        self.message = msgspec.structs.replace(self.message, parts=parts)
        self.counts = counts
        before = self.tokens
        self.tokens = MESSAGE_OVERHEAD + sum(counts)
        if self.unit is not None:
            self.unit.tokens += self.tokens - before


class _Unit:
    """Messages that stand or fall together: a message, or an assistant's tool calls and their results."""

    __slots__ = ("items", "pending", "protected", "tokens")

    def __init__(self, item: _Item, calls: list[ToolCallPart]) -> None:
        self.items: list[_Item] = []
        self.tokens = 0
        self.protected = False
        self.pending: dict[str, ToolCallPart] = {c.id: c for c in calls}
        self.add(item)

    def add(self, item: _Item) -> None:
        item.unit = self
        self.items.append(item)
        self.tokens += item.tokens

    @property
    def seqs(self) -> list[int]:
        return [i.seq for i in self.items if i.seq is not None]


class _Omissions:
    def __init__(self) -> None:
        self.items: list[Omission] = []

    def add(self, action: OmissionAction, seqs: Sequence[int], tokens: int, reason: str, count: int = 0) -> None:
        if not seqs:
            return
        lo, hi = min(seqs), max(seqs)
        n = count or len(seqs)
        last = self.items[-1] if self.items else None
        if last is not None and last.action == action and last.reason == reason and last.last_seq < lo:
            self.items[-1] = Omission(
                action=action,
                first_seq=last.first_seq,
                last_seq=hi,
                count=last.count + n,
                tokens=last.tokens + tokens,
                reason=reason,
            )
        else:
            self.items.append(Omission(action=action, first_seq=lo, last_seq=hi, count=n, tokens=tokens, reason=reason))


# --- derivation -----------------------------------------------------------------------------------------


def latest_compaction(history: Sequence[Entry]) -> int | None:
    """The index in `history` of its latest compaction entry (scanning from the end, so the cost is the
    tail since that compaction, not the history)."""
    for i in range(len(history) - 1, -1, -1):
        if isinstance(history[i].body, Compaction):
            return i
    return None


def derive_context(
    history: Sequence[Entry],
    policy: ContextPolicy | None = None,
    *,
    session_id: str | None = None,
    system: str | None = None,
    tools: Sequence[ToolSpec] = (),
    counter: TokenCounter | None = None,
    cache: TokenCache | None = None,
) -> DerivedContext:
    """The context of the next step from `history`, the active entries in seq order (`Session.entries()`,
    or `load_context_history`, which reads only from the latest compaction on).

    `system` and `tools` are counted against the budget but not returned (a `ModelRequest` carries them
    apart); system-role messages of the history are left out for the same reason. With `session_id`, per-entry counts are cached in `cache` (default: the process-wide one), so a
    step re-derives without re-tokenizing. The history is never changed.
    """
    policy = (policy or ContextPolicy()).validate()
    counter = counter or get_counter()
    cache = cache if cache is not None else default_cache()
    omissions = _Omissions()
    fixed = count_fixed(system, tools, counter)

    # 1. where the context starts
    start = 0
    compaction_entry: Entry | None = None
    if policy.mode != "full":
        ci = latest_compaction(history)
        if ci is not None:
            compaction_entry = history[ci]
            assert isinstance(compaction_entry.body, Compaction)
            first_kept = compaction_entry.body.first_kept_seq
            start = bisect.bisect_left(history, first_kept, key=lambda e: e.seq)
            if first_kept > 1:
                made = compaction_entry.body
                saved = (made.tokens_before or 0) - (made.tokens_after or made.tokens_before or 0)
                omissions.add(
                    "summarized",
                    [1, first_kept - 1],
                    max(saved, 0),
                    f"replaced by the summary of compaction entry {compaction_entry.seq}",
                    count=first_kept - 1,
                )

    # 2. the messages, with cached counts, and the pins that mark some of them
    items: list[_Item] = []
    pinned_seqs: set[int] = set()
    if compaction_entry is not None:
        assert isinstance(compaction_entry.body, Compaction)
        summary = Message(
            role="user",
            parts=[TextPart(text=compaction_entry.body.summary)],
            metadata={"compaction_seq": compaction_entry.seq},
        )
        counts = cache.parts(session_id, compaction_entry, summary, counter)
        items.append(_Item(None, summary, counts, ref=compaction_entry.seq))
    table = cache.table(session_id, counter) if session_id is not None else None
    window = history[start:] if start else history
    condensed = _condensed(window)
    for entry in window:
        body = entry.body
        if isinstance(body, Message):
            if body.role == "system":
                continue  # the request's `system` carries the system prompt, as the loop sends it
            stand_in = condensed.get(entry.seq)
            if stand_in is not None:
                body = _condense(body, stand_in)
                items.append(_Item(entry.seq, body, part_counts(body, counter)))
                continue
            cut = cut_note(body)
            if cut is not None:
                body = _marked_cut(body, cut)
                items.append(_Item(entry.seq, body, part_counts(body, counter)))
                continue
            counts = table.counts(entry, body, counter) if table is not None else part_counts(body, counter)
            items.append(_Item(entry.seq, body, counts))
            if body.metadata.get("pinned") is True:
                pinned_seqs.add(entry.seq)
        elif isinstance(known := markers.parse(body), markers.Interrupted):
            if items and items[-1].message.role == "user":
                note = Message.assistant(INTERRUPTED_NOTE)
                items.append(_Item(entry.seq, note, part_counts(note, counter)))
        elif isinstance(known, markers.Pin):
            pinned_seqs.add(known.seq)
        elif isinstance(known, markers.Unpin):
            pinned_seqs.discard(known.seq)
    items = _go_on_after_cut(_answer_unanswered(items, counter), counter)
    for item in items:
        item.pinned = item.seq is not None and item.seq in pinned_seqs

    # 3. units: tool calls with their results
    units = _units(items, counter, omissions)
    if not units:
        return DerivedContext(
            messages=[],
            seqs=[],
            estimate=TokenEstimate(tokens=fixed, source=counter.source, counted=fixed, counter=counter.source),
            budget=policy.budget,
            fixed_tokens=fixed,
            mode=policy.mode,
            compaction_seq=compaction_entry.seq if compaction_entry else None,
            first_kept_seq=_first_kept(compaction_entry),
            omissions=omissions.items,
            needed_tokens=fixed,
        )
    if compaction_entry is not None:
        units[0].protected = True  # the summary
    elif units[0].items[0].message.role == "user":
        units[0].protected = True  # the user's first message: the goal
    units[-1].protected = True
    for unit in units:
        if any(i.pinned for i in unit.items):
            unit.protected = True

    # 4. calibration: the provider's count of an earlier request over ours
    anchor = _anchor(units, compaction_entry)
    ours = 1
    if anchor is not None:
        provider_tokens, anchor_item = anchor
        recorded = anchor_item.message.metadata.get("context_tokens")
        ours = recorded if isinstance(recorded, int) and recorded > 0 else fixed + _tokens_before(units, anchor_item)
        ours = max(ours, 1)
    ratio = anchor[0] / ours if anchor is not None else 1.0

    # 5. old tool outputs become pointers
    if policy.prune_tool_outputs:
        _prune(units, policy, counter, omissions, session_id)

    # 6. fit the budget
    fit_ratio = min(max(ratio, 1.0), CALIBRATION_MAX)
    needed = math.ceil((fixed + sum(u.tokens for u in units)) * fit_ratio)
    if policy.budget is not None:
        limit = math.floor(policy.budget / fit_ratio) - fixed
        if sum(u.tokens for u in units) > limit:
            # Unprotected turns go first (by relevance or age); then oversized parts are cut; only then
            # do pinned turns and the goal go, and what is left is cut again.
            if policy.mode == "relevant":
                units = _select_relevant(units, limit, policy, omissions)
            else:
                units = _drop_oldest(units, limit, omissions, protected=False)
            _truncate(units, limit, policy, counter, omissions)
            if sum(u.tokens for u in units) > limit:
                units = _drop_oldest(units, limit, omissions, protected=True)
                _truncate(units, limit, policy, counter, omissions)

    # 7. the answer
    messages: list[Message] = []
    seqs: list[int | None] = []
    for unit in units:
        for item in unit.items:
            messages.append(item.message)
            seqs.append(item.seq)
    counted = fixed + sum(u.tokens for u in units)
    estimate = TokenEstimate(tokens=counted, source=counter.source, counted=counted, counter=counter.source)
    if anchor is not None:
        provider_tokens, anchor_item = anchor
        kept = [i for u in units for i in u.items]
        if any(i is anchor_item for i in kept):
            before = fixed + _tokens_before(units, anchor_item)
            since = counted - before
            estimate = TokenEstimate(
                tokens=-(-before * provider_tokens // ours) + since,  # exact ceiling, no float error
                source="provider",
                counted=counted,
                counter=counter.source,
                provider_tokens=provider_tokens,
                anchor_seq=anchor_item.seq,
            )
    omissions.items.sort(key=lambda o: (o.first_seq, o.action))
    return DerivedContext(
        messages=messages,
        seqs=seqs,
        estimate=estimate,
        budget=policy.budget,
        fixed_tokens=fixed,
        mode=policy.mode,
        compaction_seq=compaction_entry.seq if compaction_entry else None,
        first_kept_seq=_first_kept(compaction_entry),
        omissions=omissions.items,
        calibration=fit_ratio,
        needed_tokens=needed,
    )


def cut_note(message: Message) -> str | None:
    """For an answer cut short, what the model reads at its cut: `CUT_NOTE` when a kill or crash cut it (its
    saved stream, `messages.INTERRUPTED_ANSWER`), `STOPPED_NOTE` when a cancel stopped it (the partial answer
    it journals), `LIMIT_NOTE` when the step's limit cut it; None for any other message."""
    if message.role != "assistant":
        return None
    if message.metadata.get(INTERRUPTED_ANSWER) is True:
        return CUT_NOTE
    if message.metadata.get("partial") is True and message.finish_reason == "cancelled":
        return STOPPED_NOTE
    if message.metadata.get("partial") is True and message.metadata.get("cut"):
        return LIMIT_NOTE
    return None


def _marked_cut(message: Message, note: str) -> Message:
    """An answer cut short as the model reads it: its text as it was saved, then `note`."""
    at = next((i for i, p in enumerate(message.parts) if isinstance(p, ToolCallPart)), len(message.parts))
    parts = [*message.parts[:at], TextPart(text=note), *message.parts[at:]]
    return msgspec.structs.replace(message, parts=parts)


def _go_on_after_cut(items: list[_Item], counter: TokenCounter) -> list[_Item]:
    """`items` with `GO_ON_NOTE` after every answer cut short (without tool calls: those get results) that no
    user message follows: the next answer continues it. The note stays once that answer is there, so the
    context a step derives is the one the step before it had, and more."""
    out: list[_Item] = []
    for i, item in enumerate(items):
        out.append(item)
        message = item.message
        if cut_note(message) is None or message.tool_calls:
            continue
        following = items[i + 1].message if i + 1 < len(items) else None
        if following is None or following.role != "user":
            note = Message.user(GO_ON_NOTE)
            out.append(_Item(None, note, part_counts(note, counter), ref=item.seq))
    return out


def unit_starts(messages: Sequence[Entry]) -> list[int]:
    """Indices in `messages` (message entries in order) where a unit begins: every message but those that
    only carry tool results, which belong with the calls before them. A boundary placed at one of these
    never separates a tool call from its result."""
    return [
        i
        for i, entry in enumerate(messages)
        if not (isinstance(entry.body, Message) and entry.body.tool_results and not entry.body.tool_calls) or i == 0
    ]


def _answer_unanswered(items: list[_Item], counter: TokenCounter) -> list[_Item]:
    """`items` with the interrupted note after every user message that another user message follows (a
    history from before the `interrupted` marker, or an import): what the marker gives, without it. The
    compaction summary, a user message of its own kind, is left as it is."""
    out: list[_Item] = []
    for item in items:
        last = out[-1] if out else None
        if last is not None and last.seq is not None and last.message.role == "user" and item.message.role == "user":
            note = Message.assistant(INTERRUPTED_NOTE)
            out.append(_Item(None, note, part_counts(note, counter), ref=last.seq))
        out.append(item)
    return out


def _first_kept(entry: Entry | None) -> int | None:
    return entry.body.first_kept_seq if entry is not None and isinstance(entry.body, Compaction) else None


def _condensed(entries: Sequence[Entry]) -> dict[int, dict[str, Any]]:
    """The stand-ins that `condensed` markers give messages, by the message's seq (the latest marker wins)."""
    out: dict[int, dict[str, Any]] = {}
    for entry in entries:
        condensed = markers.read(entry.body, markers.Condensed)
        if condensed is not None:
            out.setdefault(condensed.seq, {}).update({condensed.call_id or "": condensed.text})
    return out


def _condense(message: Message, stand_ins: dict[str, Any]) -> Message:
    """`message` with its text (no call id) or its tool results (by call id) replaced by their stand-ins."""
    parts: list[Any] = []
    for part in message.parts:
        if isinstance(part, ToolResultPart) and part.call_id in stand_ins:
            parts.append(msgspec.structs.replace(part, content=stand_ins[part.call_id]))
        elif isinstance(part, TextPart) and "" in stand_ins:
            if not any(isinstance(p, TextPart) for p in parts):
                parts.append(TextPart(text=stand_ins[""]))
        else:
            parts.append(part)
    return msgspec.structs.replace(message, parts=parts)


def _units(items: list[_Item], counter: TokenCounter, omissions: _Omissions) -> list[_Unit]:
    units: list[_Unit] = []
    unit_of_call: dict[str, _Unit] = {}
    for item in items:
        message = item.message
        calls: list[ToolCallPart] = []
        results: list[ToolResultPart] = []
        for part in message.parts:
            if type(part) is ToolCallPart:
                calls.append(part)
            elif type(part) is ToolResultPart:
                results.append(part)
        if results and not calls:
            known = [r for r in results if r.call_id in unit_of_call]
            if len(known) < len(results):
                # Results whose call is not in the context (summarized away, or never made): a provider
                # rejects them, and without the call they mean nothing.
                orphans = {
                    i
                    for i, p in enumerate(message.parts)
                    if isinstance(p, ToolResultPart) and p.call_id not in unit_of_call
                }
                omissions.add(
                    "dropped",
                    [item.seq] if item.seq is not None else [],
                    sum(item.counts[i] for i in orphans),
                    "a tool result whose call is not in the context",
                    count=len(orphans),
                )
                if not known:
                    continue
                keep = [i for i in range(len(message.parts)) if i not in orphans]
                item.set_parts([message.parts[i] for i in keep], tuple(item.counts[i] for i in keep))
            unit = unit_of_call[known[-1].call_id]
            unit.add(item)
            for result in known:
                unit.pending.pop(result.call_id, None)
            continue
        unit = _Unit(item, calls)
        units.append(unit)
        for call in calls:
            unit_of_call[call.id] = unit
    for unit in units:
        if unit.pending:
            parts: list[Part] = [
                ToolResultPart(
                    call_id=call.id,
                    name=call.name,
                    is_error=True,
                    content="[no result was recorded for this call: the run stopped before the tool finished]",
                )
                for call in unit.pending.values()
            ]
            repair = Message(role="tool", parts=parts)
            unit.add(_Item(None, repair, tuple(count_part(p, counter) for p in parts)))
            omissions.add(
                "repaired",
                unit.seqs[:1],
                0,
                "a tool call without a recorded result was given an error result",
                count=len(parts),
            )
            unit.pending = {}
    return units


def _anchor(units: list[_Unit], compaction: Entry | None) -> tuple[int, _Item] | None:
    """The newest assistant message that reports the prompt size of the request that produced it, made
    after the latest compaction (before it, the request held other messages)."""
    floor = compaction.seq if compaction is not None else 0
    for unit in reversed(units):
        for item in reversed(unit.items):
            usage = item.message.usage
            if item.message.role == "assistant" and usage is not None and usage.input_tokens > 0:
                if item.seq is None or item.seq <= floor:
                    return None
                return usage.input_tokens, item
    return None


def _tokens_before(units: list[_Unit], anchor: _Item) -> int:
    total = 0
    for unit in units:
        for item in unit.items:
            if item is anchor:
                return total
            total += item.tokens
    return total


# --- pruning --------------------------------------------------------------------------------------------


def _artifact_of(part: ToolResultPart) -> str | None:
    for key in ("artifact", "artifact_id"):
        value = part.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _prune(
    units: list[_Unit], policy: ContextPolicy, counter: TokenCounter, omissions: _Omissions, session_id: str | None
) -> None:
    """Replace old tool outputs by pointers, keeping the newest `prune_keep_tokens` of them.

    The cut moves in steps of `prune_min_savings` tokens of old output, so it stays put from one step to the
    next until another step's worth has piled up: the prompt prefix, and the provider's cache of it, stays
    stable in between."""
    outputs: list[tuple[_Item, int, int]] = []  # item, part index, tokens
    for unit in units:
        for item in unit.items:
            if item.seq is None:
                continue
            for i, part in enumerate(item.message.parts):
                if isinstance(part, ToolResultPart):
                    outputs.append((item, i, item.counts[i]))
    newer = 0
    old_end = len(outputs)
    for k in range(len(outputs) - 1, -1, -1):
        if newer >= policy.prune_keep_tokens:
            old_end = k + 1
            break
        newer += outputs[k][2]
    else:
        return
    old_total = sum(t for _, _, t in outputs[:old_end])
    step = max(policy.prune_min_savings, 1)
    cut = (old_total // step) * step
    if cut <= 0:
        return
    chosen: list[tuple[_Item, int, int]] = []
    cumulative = 0
    for item, i, tokens in outputs[:old_end]:
        cumulative += tokens
        if cumulative > cut:
            break
        if tokens >= PRUNE_MIN_PART:
            chosen.append((item, i, tokens))
    replacements = []
    saved = 0
    for item, i, tokens in chosen:
        part = item.message.parts[i]
        assert isinstance(part, ToolResultPart)
        artifact = _artifact_of(part)
        where = f"entry {item.seq}" + (f" of session {session_id}" if session_id else "")
        how = (
            f'read it with read(path="artifact://{artifact}")'
            if artifact
            else "run the tool again if you need it, or find it with session_recall"
        )
        pointer = msgspec.structs.replace(
            part, content=f"[old tool output ({tokens} tokens) pruned from the context; it is kept in {where}: {how}]"
        )
        pointer_tokens = count_part(pointer, counter)
        saved += tokens - pointer_tokens
        replacements.append((item, i, pointer, pointer_tokens, tokens))
    if saved < policy.prune_min_savings:
        return
    for item, i, pointer, pointer_tokens, tokens in replacements:
        item.replace_part(i, pointer, pointer_tokens)
        omissions.add(
            "pruned",
            [item.seq] if item.seq is not None else [],
            tokens - pointer_tokens,
            f"old tool output (the newest {policy.prune_keep_tokens} tokens of tool output are kept)",
        )


# --- fitting the budget ---------------------------------------------------------------------------------


def _drop_oldest(units: list[_Unit], limit: int, omissions: _Omissions, *, protected: bool) -> list[_Unit]:
    """Drop whole units, oldest first, until they fit: unprotected ones, or (`protected`) the protected
    ones too, but never the summary or the last unit."""
    excess = sum(u.tokens for u in units) - limit
    dropped: set[int] = set()
    for k, unit in enumerate(units):
        if excess <= 0:
            break
        if unit.protected and (not protected or k == len(units) - 1 or unit.items[0].seq is None):
            continue
        dropped.add(k)
        excess -= unit.tokens
        reason = "pinned or first turns, when nothing else was left to drop" if unit.protected else "the oldest turns"
        omissions.add("dropped", unit.seqs, unit.tokens, f"{reason}, to fit the budget")
    return [u for k, u in enumerate(units) if k not in dropped]


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")


def _features(unit: _Unit) -> tuple[set[str], set[str], set[str]]:
    files: set[str] = set()
    tools: set[str] = set()
    words: set[str] = set()
    for item in unit.items:
        for part in item.message.parts:
            if isinstance(part, TextPart):
                files.update(paths_in(part.text))
            elif isinstance(part, ToolCallPart):
                tools.add(part.name)
                files.update(call_paths(part))
            elif isinstance(part, ToolResultPart):
                if part.name:
                    tools.add(part.name)
                if part.is_error:
                    words.update(_WORD.findall(error_line(part.content)))
                files.update(paths_in(part.content[:4000]))
    return files, tools, words


def _select_relevant(units: list[_Unit], limit: int, policy: ContextPolicy, omissions: _Omissions) -> list[_Unit]:
    """Keep the recent tail and the protected units, then the earlier units that share the most files,
    tools and error words with the recent tail, while they fit; drop the rest."""
    recent_budget = policy.recent_tokens if policy.recent_tokens is not None else max(limit // 2, 1)
    keep: set[int] = {len(units) - 1}
    used = units[-1].tokens
    k = len(units) - 2
    while k >= 0 and used + units[k].tokens <= recent_budget:
        keep.add(k)
        used += units[k].tokens
        k -= 1
    focus_files: set[str] = set()
    focus_tools: set[str] = set()
    focus_words: set[str] = set()
    for j in keep:
        f, t, w = _features(units[j])
        focus_files |= f
        focus_tools |= t
        focus_words |= w
    for j, unit in enumerate(units):
        if unit.protected and j not in keep:
            keep.add(j)
            used += unit.tokens
    scored = []
    for j in range(len(units)):
        if j in keep:
            continue
        f, t, w = _features(units[j])
        score = 3 * len(f & focus_files) + len(t & focus_tools) + 2 * len(w & focus_words)
        scored.append((score, j))
    scored.sort(key=lambda s: (-s[0], -s[1]))  # most relevant first, the newer of equals first
    for score, j in scored:
        if score > 0 and used + units[j].tokens <= limit:
            keep.add(j)
            used += units[j].tokens
    for j, unit in enumerate(units):
        if j not in keep:
            omissions.add("dropped", unit.seqs, unit.tokens, "least relevant to the current task, to fit the budget")
    return [u for j, u in enumerate(units) if j in keep]


def cut_text(text: str, tokens: int, target: int, counter: TokenCounter, note: str) -> tuple[str, int]:
    """`text` cut to about `target` tokens: its head and tail around a marker that says what went."""
    chars_per_token = max(len(text) / max(tokens, 1), 0.25)
    budget = max(target - 24, 8)
    for _ in range(4):
        keep = int(budget * chars_per_token)
        head, tail = keep * 2 // 3, keep // 3
        cut = len(text) - head - tail
        if cut <= 0:
            return text, tokens
        marker = f"\n[... {cut} characters cut to fit the context; {note} ...]\n"
        out = text[:head] + marker + (text[-tail:] if tail else "")
        n = counter.count(out)
        if n <= target or budget <= 8:
            return out, n
        budget = max(int(budget * target / n) - 8, 8)
    return out, n


def _cut_value(value: Any, limit_chars: int, note: str) -> Any:
    if isinstance(value, str) and len(value) > limit_chars:
        head, tail = limit_chars * 2 // 3, limit_chars // 3
        return value[:head] + f"[... {len(value) - head - tail} characters cut; {note} ...]" + value[-tail:]
    if isinstance(value, dict):
        return {k: _cut_value(v, limit_chars, note) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_value(v, limit_chars, note) for v in value]
    return value


def _truncatable(part: Part) -> bool:
    if isinstance(part, ThinkingPart):
        return part.signature is None and part.redacted is None  # signed reasoning must replay unchanged
    return True


def _truncate_part(item: _Item, i: int, target: int, counter: TokenCounter) -> None:
    part = item.message.parts[i]
    tokens = item.counts[i]
    note = f"the full text is in entry {item.ref}" if item.ref is not None else "the full text is in the session"
    new: Part
    if isinstance(part, TextPart):
        text, _ = cut_text(part.text, tokens, target, counter, note)
        new = TextPart(text=text)
    elif isinstance(part, ToolResultPart):
        text, _ = cut_text(part.content, tokens, target, counter, note)
        new = msgspec.structs.replace(part, content=text)
    elif isinstance(part, ThinkingPart):
        text, _ = cut_text(part.text, tokens, target, counter, note)
        new = msgspec.structs.replace(part, text=text)
    elif isinstance(part, ToolCallPart):
        if part.raw_arguments is not None:
            raw, _ = cut_text(part.raw_arguments, tokens, target, counter, note)
            new = msgspec.structs.replace(part, raw_arguments=raw)
        else:
            size = len(json.dumps(part.arguments, ensure_ascii=False))
            limit = max(int(size * target / max(tokens, 1)) // 2, 64)
            new = msgspec.structs.replace(part, arguments=_cut_value(part.arguments, limit, note))
    elif isinstance(part, ImagePart | FilePart):
        new = TextPart(text=f"[{part.media_type} attachment left out to fit the context; {note}]")
    else:  # pragma: no cover - the union is closed
        return
    item.replace_part(i, new, count_part(new, counter))


def _truncate(
    units: list[_Unit], limit: int, policy: ContextPolicy, counter: TokenCounter, omissions: _Omissions
) -> None:
    """Cut the biggest parts down to a common cap, found by bisection, until the units fit `limit`."""
    floor = policy.min_part_tokens
    for _ in range(6):
        excess = sum(u.tokens for u in units) - limit
        if excess <= 0:
            return
        parts = [
            (item, i, item.counts[i])
            for unit in units
            for item in unit.items
            for i, part in enumerate(item.message.parts)
            if item.counts[i] > floor and _truncatable(part)
        ]
        if not parts:
            return
        # The marker costs ~30 tokens a part; aim below the excess by that much.
        need = excess + 32 * len(parts)
        lo, hi = floor, max(t for _, _, t in parts)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sum(t - mid for _, _, t in parts if t > mid) >= need:
                lo = mid
            else:
                hi = mid - 1
        cap = max(lo, floor)
        for item, i, tokens in parts:
            if tokens > cap:
                _truncate_part(item, i, cap, counter)
                omissions.add(
                    "truncated",
                    [item.ref] if item.ref is not None else [],
                    tokens - item.counts[i],
                    "a part too big for the budget, cut with a marker",
                )
