"""derive_context: the policies, tool calls kept with their results, pruning, fitting the budget (dropping,
then truncating), relevance selection, calibration on provider counts, the cache, and properties that hold
for any history (checked with hypothesis)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.context.derive import INTERRUPTED_NOTE, ContextPolicy, DerivedContext, derive_context
from tether.context.tokens import MESSAGE_OVERHEAD, REQUEST_OVERHEAD, TokenCache, get_counter
from tether.errors import InvalidInput
from tether.messages import (
    INTERRUPTED_MARKER,
    Compaction,
    Entry,
    EntryBody,
    Marker,
    Message,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    Usage,
    encode_body,
)


class Chars:
    """One token a character: budgets in tests can be reasoned about exactly."""

    source = "chars"

    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return len(text)


def journal(*bodies: EntryBody) -> list[Entry]:
    return [Entry(i + 1, 1_000.0 + i, body) for i, body in enumerate(bodies)]


def call(cid: str, name: str = "bash", **args: object) -> Message:
    return Message.assistant(tool_calls=[ToolCallPart(id=cid, name=name, arguments=args or {"command": "ls"})])


def result(cid: str, content: str, name: str = "bash", **kw: object) -> Message:
    return Message.tool(ToolResultPart(call_id=cid, content=content, name=name, **kw))  # type: ignore[arg-type]


def texts(d: DerivedContext) -> list[str]:
    out = []
    for m in d.messages:
        out.append(m.text or "|".join(p.content for p in m.tool_results) or ",".join(c.id for c in m.tool_calls))
    return out


def assert_pairs_intact(d: DerivedContext) -> None:
    """Every call is answered by results right after it, and every result follows its call."""
    pending: set[str] = set()
    for m in d.messages:
        results = {r.call_id for r in m.tool_results}
        if results and not m.tool_calls:
            assert results <= pending, f"result without its call: {results - pending}"
            pending -= results
            continue
        assert not pending, f"calls without results: {pending}"
        pending = {c.id for c in m.tool_calls}
    assert not pending, f"calls without results at the end: {pending}"


# --- policies ---------------------------------------------------------------------------------------------


def test_full_mode_returns_every_message_and_skips_markers() -> None:
    history = journal(
        Message.user("goal"),
        TitleChange(title="t"),
        Message.assistant("ok"),
        Marker(name="note"),
        Message.user("more"),
    )
    d = derive_context(history, ContextPolicy(mode="full"), counter=Chars())
    assert texts(d) == ["goal", "ok", "more"]
    assert d.seqs == [1, 3, 5]
    assert d.omissions == []
    assert d.fits


def test_compacted_mode_starts_from_the_latest_summary() -> None:
    history = journal(
        Message.user("old goal"),  # 1
        Message.assistant("old answer"),  # 2
        Message.user("kept question"),  # 3
        Message.assistant("kept answer"),  # 4
        Compaction(summary="SUMMARY-1", first_kept_seq=3),  # 5
        Message.user("after"),  # 6
    )
    d = derive_context(history, ContextPolicy(), counter=Chars())
    assert texts(d) == ["SUMMARY-1", "kept question", "kept answer", "after"]
    assert d.seqs == [None, 3, 4, 6]
    assert d.compaction_seq == 5 and d.first_kept_seq == 3
    (summarized,) = d.omissions
    assert (summarized.action, summarized.first_seq, summarized.last_seq) == ("summarized", 1, 2)
    full = derive_context(history, ContextPolicy(mode="full"), counter=Chars())
    assert texts(full) == ["old goal", "old answer", "kept question", "kept answer", "after"]


def test_only_the_latest_compaction_counts() -> None:
    history = journal(
        Message.user("a"),
        Compaction(summary="S1", first_kept_seq=1),
        Message.user("b"),
        Message.user("c"),
        Compaction(summary="S2", first_kept_seq=4),
        Message.user("d"),
    )
    # c got no answer before d came: the model is told so (and the turns alternate)
    assert texts(derive_context(history, counter=Chars())) == ["S2", "c", INTERRUPTED_NOTE, "d"]


def test_history_is_never_changed() -> None:
    history = journal(
        Message.user("goal " * 50),
        call("c1"),
        result("c1", "x" * 5_000),
        call("c2"),  # no result: repaired in the context, not in the history
        Message.user("y" * 3_000),
    )
    before = [encode_body(e.body) for e in history]
    d = derive_context(history, ContextPolicy(budget=1_500, prune_keep_tokens=0, prune_min_savings=1), counter=Chars())
    assert d.fits
    assert [encode_body(e.body) for e in history] == before


def test_system_messages_are_left_to_the_request_system_field() -> None:
    history = journal(Message.system("You are an airline agent."), Message.user("hi"))
    assert texts(derive_context(history, counter=Chars())) == ["hi"]


def test_system_prompt_and_tools_count_against_the_budget() -> None:
    chars = Chars()
    tool = ToolSpec(name="bash", description="run")
    bare = derive_context(journal(Message.user("hi")), counter=chars)
    full = derive_context(journal(Message.user("hi")), system="be brief", tools=[tool], counter=chars)
    assert bare.fixed_tokens == REQUEST_OVERHEAD
    assert full.fixed_tokens > bare.fixed_tokens + len("be brief")
    assert full.estimate.counted == full.fixed_tokens + MESSAGE_OVERHEAD + 2


def test_empty_history() -> None:
    d = derive_context([], ContextPolicy(budget=100), counter=Chars())
    assert d.messages == [] and d.fits and d.estimate.counted == REQUEST_OVERHEAD


def test_bad_policy_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        derive_context([], ContextPolicy(mode="everything"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        derive_context([], ContextPolicy(budget=0))
    with pytest.raises(InvalidInput):
        derive_context([], ContextPolicy(prune_keep_tokens=-1))


# --- tool calls and their results -------------------------------------------------------------------------


def test_results_whose_call_was_summarized_are_dropped() -> None:
    history = journal(
        Message.user("go"),
        call("c1"),
        result("c1", "out"),  # 3: the compaction cut between a call and its result
        Message.user("next"),
        Compaction(summary="S", first_kept_seq=3),
    )
    d = derive_context(history, counter=Chars())
    assert texts(d) == ["S", "next"]
    (dropped,) = d.dropped()
    assert dropped.first_seq == 3 and "call is not in the context" in dropped.reason
    assert_pairs_intact(d)


def test_a_call_without_result_gets_an_error_result() -> None:
    history = journal(Message.user("go"), call("c1"), Message.user("are you there?"))
    d = derive_context(history, counter=Chars())
    assert_pairs_intact(d)
    repaired = d.messages[2].tool_results[0]
    assert repaired.call_id == "c1" and repaired.is_error
    assert any(o.action == "repaired" for o in d.omissions)


def test_results_split_over_messages_stay_with_their_calls() -> None:
    both = Message.assistant(
        tool_calls=[ToolCallPart(id="a", name="read"), ToolCallPart(id="b", name="read")],
    )
    history = journal(Message.user("go"), both, result("a", "A"), result("b", "B"), Message.user("end"))
    d = derive_context(history, counter=Chars())
    assert d.seqs == [1, 2, 3, 4, 5]
    assert_pairs_intact(d)


def test_dropping_to_fit_takes_whole_units_oldest_first() -> None:
    history = journal(
        Message.user("goal"),  # 1: the goal is kept
        call("c1"),
        result("c1", "a" * 400),  # 2-3 one unit
        Message.assistant("b" * 400),  # 4
        call("c2"),
        result("c2", "c" * 100),  # 5-6
        Message.user("now"),  # 7
    )
    d = derive_context(history, ContextPolicy(budget=400, prune_tool_outputs=False), counter=Chars())
    assert d.fits
    assert d.seqs == [1, 5, 6, 7]
    (dropped,) = d.dropped()
    assert (dropped.first_seq, dropped.last_seq, dropped.count) == (2, 4, 3)
    assert_pairs_intact(d)


def test_pinned_messages_outlast_older_turns() -> None:
    history = journal(
        Message.user("goal"),
        Message.user("x" * 300),
        Message(role="user", parts=[TextPart(text="PINNED rule")], metadata={"pinned": True}),
        Message.user("y" * 300),
        Message.user("z" * 50),  # pinned by a marker below
        Marker(name="pin", data={"seq": 5}),
        Message.user("last"),
    )
    d = derive_context(history, ContextPolicy(budget=150), counter=Chars())
    assert "PINNED rule" in texts(d) and "z" * 50 in texts(d)
    assert "x" * 300 not in texts(d) and "y" * 300 not in texts(d)
    unpinned = [*history, Entry(8, 2_000.0, Marker(name="unpin", data={"seq": 3}))]
    d2 = derive_context(unpinned, ContextPolicy(budget=100), counter=Chars())
    assert "PINNED rule" not in texts(d2)


# --- pruning ----------------------------------------------------------------------------------------------


def _tool_session(n: int, size: int, *, artifact_every: int = 0) -> list[Entry]:
    bodies: list[EntryBody] = [Message.user("fix it")]
    for i in range(n):
        meta = {"artifact": f"art_{i:064d}"} if artifact_every and i % artifact_every == 0 else {}
        bodies += [call(f"c{i}"), result(f"c{i}", f"{i}:" + "o" * size, metadata=meta)]
    return journal(*bodies)


def test_old_tool_outputs_become_pointers() -> None:
    history = _tool_session(20, 5_000, artifact_every=1)  # 100k chars of output
    d = derive_context(history, ContextPolicy(), session_id="ses_x", counter=Chars())
    pruned = [o for o in d.omissions if o.action == "pruned"]
    assert pruned and sum(o.tokens for o in pruned) >= 20_000
    outputs = [r.content for m in d.messages for r in m.tool_results]
    kept = [c for c in outputs if not c.startswith("[old tool output")]
    assert sum(len(c) for c in kept) >= 40_000  # the newest 40k tokens of output stay whole
    pointer = next(c for c in outputs if c.startswith("[old tool output"))
    assert "entry 3 of session ses_x" in pointer and 'read(path="artifact://art_' in pointer
    assert outputs[-1].startswith("19:")  # the newest one is whole
    assert_pairs_intact(d)


def test_no_pruning_when_it_saves_less_than_the_minimum() -> None:
    history = _tool_session(11, 5_000)  # 55k: 15k beyond the kept 40k, less than 20k to gain
    d = derive_context(history, ContextPolicy(), counter=Chars())
    assert not [o for o in d.omissions if o.action == "pruned"]
    off = derive_context(_tool_session(30, 5_000), ContextPolicy(prune_tool_outputs=False), counter=Chars())
    assert not [o for o in off.omissions if o.action == "pruned"]


def test_the_pruning_cut_moves_in_steps_so_the_prefix_stays_stable() -> None:
    """One more small output must not change which old outputs are pruned (the provider's prompt cache)."""
    base = _tool_session(20, 5_000)
    grown = [*base, Entry(len(base) + 1, 0.0, call("new")), Entry(len(base) + 2, 0.0, result("new", "n" * 500))]
    a = derive_context(base, counter=Chars())
    b = derive_context(grown, counter=Chars())
    assert [m.parts for m in a.messages] == [m.parts for m in b.messages[: len(a.messages)]]


# --- truncation -------------------------------------------------------------------------------------------


def test_a_last_unit_bigger_than_the_budget_is_truncated_with_a_marker() -> None:
    history = journal(Message.user("goal"), call("c1"), result("c1", "HEAD" + "m" * 20_000 + "TAIL"))
    d = derive_context(history, ContextPolicy(budget=2_000), counter=Chars())
    assert d.fits
    content = d.messages[-1].tool_results[0].content
    assert content.startswith("HEAD") and content.endswith("TAIL")
    assert "characters cut to fit the context" in content and "entry 3" in content
    assert any(o.action == "truncated" and o.first_seq == 3 for o in d.omissions)
    assert_pairs_intact(d)


def test_truncation_keeps_tool_call_arguments_valid_json() -> None:
    big = ToolCallPart(id="w", name="write", arguments={"path": "a.py", "content": "q" * 30_000})
    history = journal(Message.user("write it"), Message.assistant(tool_calls=[big]), result("w", "ok"))
    d = derive_context(history, ContextPolicy(budget=3_000), counter=Chars())
    assert d.fits
    (cut,) = d.messages[1].tool_calls
    assert isinstance(cut.arguments, dict) and cut.arguments["path"] == "a.py"
    assert len(cut.arguments["content"]) < 3_000


def test_signed_thinking_is_never_cut() -> None:
    signed = ThinkingPart(text="t" * 2_000, signature="sig")
    history = journal(
        Message.user("q"),
        Message(role="assistant", parts=[signed, TextPart(text="a" * 5_000)]),
    )
    d = derive_context(history, ContextPolicy(budget=3_000), counter=Chars())
    assert d.messages[-1].parts[0] == signed


def test_the_summary_itself_is_truncated_when_it_alone_exceeds_the_budget() -> None:
    history = journal(Message.user("a"), Compaction(summary="s" * 10_000, first_kept_seq=2), Message.user("b"))
    d = derive_context(history, ContextPolicy(budget=1_000), counter=Chars())
    assert d.fits
    assert any(o.action == "truncated" and o.first_seq == 2 for o in d.omissions)


# --- relevance --------------------------------------------------------------------------------------------


def test_relevance_keeps_turns_about_the_current_files() -> None:
    history = journal(
        Message.user("goal"),
        call("r1", "read", path="src/billing.py"),
        result("r1", "billing code " + "b" * 300, name="read"),
        call("r2", "read", path="docs/unrelated.md"),
        result("r2", "other " + "u" * 300, name="read"),
        call("r3", "read", path="src/other.py"),
        result("r3", "misc " + "o" * 300, name="read"),
        Message.user("Now fix the rounding bug in src/billing.py"),
    )
    policy = ContextPolicy(mode="relevant", budget=600, recent_tokens=100, prune_tool_outputs=False)
    d = derive_context(history, policy, counter=Chars())
    assert d.fits
    assert 2 in d.seqs and 3 in d.seqs  # the billing read
    assert 4 not in d.seqs and 6 not in d.seqs
    assert all("least relevant" in o.reason for o in d.dropped())
    assert_pairs_intact(d)


def test_relevance_mode_drops_nothing_when_everything_fits() -> None:
    history = journal(Message.user("a"), Message.assistant("b"), Message.user("c"))
    d = derive_context(history, ContextPolicy(mode="relevant", budget=10_000), counter=Chars())
    assert d.seqs == [1, 2, 3]


# --- calibration --------------------------------------------------------------------------------------------


def test_estimate_is_anchored_on_the_provider_count() -> None:
    answer = Message.assistant("answer")
    answer.usage = Usage(input_tokens=500, output_tokens=3)
    history = journal(Message.user("question"), answer, Message.user("follow-up"))
    d = derive_context(history, counter=Chars())
    before = REQUEST_OVERHEAD + MESSAGE_OVERHEAD + len("question")
    since = d.estimate.counted - before
    assert d.estimate.source == "provider"
    assert d.estimate.provider_tokens == 500 and d.estimate.anchor_seq == 2
    assert d.estimate.tokens == 500 + since
    assert d.estimate.counter == "chars"


def test_recorded_context_tokens_give_the_exact_ratio() -> None:
    answer = Message.assistant("answer")
    answer.usage = Usage(input_tokens=120)
    answer.metadata["context_tokens"] = 100  # what this process counted for that request
    history = journal(Message.user("q" * 200), answer, Message.user("x" * 1_000))
    d = derive_context(history, ContextPolicy(budget=1_100), counter=Chars())
    assert d.calibration == pytest.approx(1.2)
    assert d.fits  # fitted to 1100/1.2 of our count: the older turn went
    assert d.estimate.counted * 1.2 <= 1_100


def test_an_anchor_older_than_the_compaction_is_ignored() -> None:
    answer = Message.assistant("answer")
    answer.usage = Usage(input_tokens=5_000)
    history = journal(Message.user("q"), answer, Message.user("r"), Compaction(summary="S", first_kept_seq=2))
    d = derive_context(history, counter=Chars())
    assert d.estimate.source == "chars"


# --- the cache ----------------------------------------------------------------------------------------------


def test_rederiving_does_not_retokenize() -> None:
    history = _tool_session(50, 100)
    counter, cache = Chars(), TokenCache()
    derive_context(history, session_id="ses_a", counter=counter, cache=cache)
    first = counter.calls
    derive_context(history, session_id="ses_a", counter=counter, cache=cache)
    assert counter.calls - first <= 2  # only the request framing, no entry


# --- properties ---------------------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Entry]:
    bodies: list[EntryBody] = [Message.user(draw(st.text(min_size=1, max_size=50)))]
    n_calls = 0
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "tools", "compaction", "pin", "orphan"]))
        size = draw(st.sampled_from([0, 10, 200, 3_000, 30_000]))
        if kind == "user":
            bodies.append(Message.user("u" * size or "?"))
        elif kind == "assistant":
            bodies.append(Message.assistant("a" * size or "."))
        elif kind == "tools":
            k = draw(st.integers(1, 3))
            ids = [f"c{n_calls + j}" for j in range(k)]
            n_calls += k
            bodies.append(Message.assistant(tool_calls=[ToolCallPart(id=i, name="t", arguments={}) for i in ids]))
            answered = ids[:-1] if draw(st.integers(0, 9)) == 0 else ids  # sometimes a run died mid-call
            for i in answered:
                bodies.append(result(i, "r" * size))
        elif kind == "compaction":
            first = draw(st.integers(1, len(bodies) + 1))
            bodies.append(Compaction(summary="S" * draw(st.sampled_from([10, 2_000])), first_kept_seq=first))
        elif kind == "pin":
            bodies.append(Marker(name="pin", data={"seq": draw(st.integers(1, len(bodies)))}))
        else:
            bodies.append(result("nobody", "o" * size))
    return journal(*bodies)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    mode=st.sampled_from(["full", "compacted", "relevant"]),
    budget=st.one_of(st.none(), st.integers(1_500, 60_000)),
    prune=st.booleans(),
)
def test_derivation_properties(history: list[Entry], mode: str, budget: int | None, prune: bool) -> None:
    counter = get_counter()
    before = [encode_body(e.body) for e in history]
    policy = ContextPolicy(mode=mode, budget=budget, prune_tool_outputs=prune)  # type: ignore[arg-type]
    d = derive_context(history, policy, counter=counter)
    # the history is untouched
    assert [encode_body(e.body) for e in history] == before
    # every call keeps its results and every result its call, in order
    assert_pairs_intact(d)
    # messages come in history order, each from an entry of the history (or the summary / a repair)
    seqs = [s for s in d.seqs if s is not None]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert set(seqs) <= {e.seq for e in history}
    # the budget holds, whatever the history
    assert d.fits, (d.estimate, d.budget)
    if budget is not None:
        assert d.estimate.counted <= budget
    # the estimate is the count of what is sent
    recount = _recount(d.messages, counter) + d.fixed_tokens
    assert d.estimate.counted == recount


def _recount(messages: Sequence[Message], counter: object) -> int:
    from tether.context.tokens import count_message

    return sum(count_message(m, counter) for m in messages)  # type: ignore[arg-type]


def test_derived_context_serializes() -> None:
    d = derive_context(journal(Message.user("hi")), ContextPolicy(budget=1_000), counter=Chars())
    data = msgspec.json.encode(d)
    assert b'"mode":"compacted"' in data


def test_an_unanswered_user_message_gets_a_note_and_the_turns_alternate() -> None:
    history = journal(
        Message.user("first request"),
        Marker(name=INTERRUPTED_MARKER, data={"seq": 1}),
        Message.user("second request"),
        Message.assistant("done"),
        Message.user("third"),
        Message.user("fourth, from a history without the marker"),
    )
    derived = derive_context(history, counter=Chars())
    roles = [m.role for m in derived.messages]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert texts(derived)[1] == INTERRUPTED_NOTE and texts(derived)[5] == INTERRUPTED_NOTE
    assert derived.seqs[1] == 2  # the marker's own entry; the note without a marker has none
    assert derived.seqs[5] is None
    summary_first = journal(Message.user("a"), Compaction(summary="S", first_kept_seq=3), Message.user("b"))
    assert texts(derive_context(summary_first, counter=Chars())) == ["S", "b"]  # a summary is not a turn
