"""How much a compaction keeps: a long scripted coding session with planted facts (paths, numbers, versions,
constraints, an error, a command, a ticket id), compacted so that every fact falls in the summarized part,
then checked two ways:

- kept: the share of facts whose answer is still in the context the model would see next (the summary plus
  the kept tail), verbatim;
- answered: the share of questions about them that a reader model answers correctly from that context
  (only with a reader: `--reader`, default the `--model`).

Strategies, each on a fresh copy of the session:
- ``model``: the `--model` writes the summary; mechanically extracted facts are appended (the default);
- ``model-only``: the model's summary alone (``compaction_facts = false``);
- ``deterministic``: no model (the fallback), the baseline.
A model strategy whose summarizer failed or saved too little falls back to the mechanical summary; the row
then says so, and its figure is the fallback's.

    python bench/compaction.py --model local/smollm2-135m [--strategies model,model-only,deterministic]
    python bench/compaction.py                        # deterministic only, no model needed

Last line: JSON with kept_<strategy> (and answered_<strategy>) as shares from 0 to 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Report

from tether.context import ContextSettings, compute_budget, derive_context
from tether.context.budget import Budget
from tether.context.compaction import compact_session
from tether.messages import Message, TextPart, ToolCallPart, ToolResultPart
from tether.providers.base import ModelRequest, Provider, complete
from tether.session import Session
from tether.store import MemoryStore, active_entries


@dataclass(frozen=True)
class Fact:
    key: str
    question: str
    answers: tuple[str, ...]
    """Any of these, case-insensitively, counts as the fact (kept, or answered)."""


FACTS = (
    Fact("money", "How must money amounts be rounded?", ("ROUND_HALF_EVEN", "half-even", "half even")),
    Fact("commits", "In what mood must commit messages be written?", ("imperative",)),
    Fact("ledger_path", "Which file holds the new ledger code?", ("src/billing/ledger_v2.py", "ledger_v2.py")),
    Fact("fixtures", "Where were the invoice fixtures moved?", ("tests/fixtures/invoices_2019.json",)),
    Fact("rate_limit", "What is the API rate limit, in requests per minute?", ("437",)),
    Fact("port", "Which port does the staging database listen on?", ("54329",)),
    Fact("numpy", "Which numpy version must be pinned?", ("1.26.4",)),
    Fact("error", "Which key was missing in the KeyError?", ("invoice_total",)),
    Fact("command", "Which make target runs the ledger migration?", ("make migrate-ledger", "migrate-ledger")),
    Fact("function", "Which function double-counted refunds?", ("reconcile_batches",)),
    Fact("ticket", "What is the ticket id of the ledger bug?", ("BILL-2291",)),
    Fact("currency", "What currency does the Swiss client use?", ("CHF",)),
)


def _noise(i: int, lines: int) -> str:
    return "\n".join(f"tests/test_filler_{i}.py::test_case_{k} PASSED [{k % 100:3d}%]" for k in range(lines))


def scripted_session() -> list[Message]:
    """A coding session: facts planted in user turns, tool calls, tool outputs and assistant text, among
    filler turns; the last turns hold none of them."""
    messages: list[Message] = []
    n = 0

    def turn(user: str | None, calls: list[tuple[str, dict[str, Any], str, bool]], answer: str) -> None:
        nonlocal n
        if user is not None:
            messages.append(Message.user(user))
        parts = [ToolCallPart(id=f"c{n + k}", name=name, arguments=args) for k, (name, args, _, _) in enumerate(calls)]
        if parts:
            messages.append(Message(role="assistant", parts=list(parts)))
            for k, (name, _, output, error) in enumerate(calls):
                messages.append(
                    Message.tool(ToolResultPart(call_id=f"c{n + k}", name=name, content=output, is_error=error))
                )
            n += len(calls)
        messages.append(Message.assistant(answer))

    def filler(i: int) -> None:
        turn(
            f"Run the filler suite {i} and tell me if anything broke.",
            [("bash", {"command": f"pytest tests/test_filler_{i}.py -q"}, _noise(i, 40), False)],
            f"Filler suite {i} passes.",
        )

    turn(
        "We are rewriting the billing ledger. Never use floats for money: amounts are Decimal, rounded "
        "ROUND_HALF_EVEN. Please always write commit messages in the imperative mood.",
        [("read", {"path": "src/billing/ledger_v2.py"}, "class Ledger:\n    ...\n", False)],
        "I read src/billing/ledger_v2.py; it is a skeleton.",
    )
    filler(1)
    turn(
        "Check the API client config.",
        [
            (
                "read",
                {"path": "config/api.toml"},
                "[client]\nbase_url = 'https://api.internal'\nrate_limit = 437  # requests/minute\ntimeout = 30\n",
                False,
            )
        ],
        "The client config is fine.",
    )
    filler(2)
    turn("The staging database listens on port 54329.", [], "Noted.")
    filler(3)
    turn(
        "Pin numpy to 1.26.4, newer breaks the ledger.",
        [("edit", {"path": "requirements.txt"}, "ok", False)],
        "Pinned.",
    )
    filler(4)
    turn(
        "Run the ledger tests.",
        [
            (
                "bash",
                {"command": "pytest tests/test_ledger.py"},
                "E   KeyError: 'invoice_total'\nFAILED tests/test_ledger.py::test_totals",
                True,
            )
        ],
        "The totals test fails on a missing key.",
    )
    filler(5)
    turn(
        None,
        [
            (
                "bash",
                {"command": "git log --oneline -3"},
                "a1b2c3d BILL-2291: ledger totals off by refunds\n9f8e7d6 bump deps\n",
                False,
            )
        ],
        "The bug was in reconcile_batches(), which double-counted refunds; fixed. I moved the fixtures to "
        "tests/fixtures/invoices_2019.json.",
    )
    filler(6)
    turn(
        "Migrate the ledger schema.",
        [("bash", {"command": "make migrate-ledger"}, "migrated 14 tables", False)],
        "Migration done.",
    )
    turn("Next, the invoices.\nAlso: the currency for the Swiss client is CHF, not EUR.", [], "Understood.")
    for i in range(7, 15):
        filler(i)
    return messages


def budget_for(model_spec: str | None) -> Budget:
    if model_spec is None:
        return compute_budget(32_768, 4_096)
    from tether.providers.registry import resolve_provider
    from tether.runtime.configuration import load_config

    info = resolve_provider(model_spec, config=load_config()).info
    return compute_budget(info.context_window, info.max_output_tokens)


async def ask(provider: Provider, model: str, context: list[Message], fact: Fact, max_tokens: int) -> str:
    question = Message.user(f"Answer from the conversation above, in a few words: {fact.question}")
    request = ModelRequest(model=model, messages=[*context, question], max_output_tokens=max_tokens, temperature=0.0)
    return (await complete(provider, request)).message.text


def present(text: str, fact: Fact) -> bool:
    low = text.lower()
    return any(a.lower() in low for a in fact.answers)


async def run_strategy(
    strategy: str,
    messages: list[Message],
    provider: Provider | None,
    model: str | None,
    reader: tuple[Provider, str] | None,
    budget: Budget,
    report: Report,
) -> None:
    key = strategy.replace("-", "_")
    store = MemoryStore()
    session = await Session.create(store, directory="/bench/ledger")
    await session.append(*messages)
    entries = await active_entries(store, session.id)
    total = derive_context(entries).estimate.counted
    keep = max(total // 7, 200)  # the last filler turns: no planted fact is in the kept part
    settings = ContextSettings(compaction_facts=strategy != "model-only")
    use_model = strategy != "deterministic"
    t0 = time.perf_counter()
    result = await compact_session(
        store,
        session.id,
        provider=provider if use_model else None,
        model=model if use_model else None,
        budget=budget,
        settings=settings,
        keep_recent_tokens=keep,
        timeout=900,
    )
    seconds = time.perf_counter() - t0
    if not result.ok:
        report.note(f"{strategy}: compaction failed: {result.error}")
        report.set(f"kept_{key}", None)
        return
    entry = result.entry
    assert entry is not None
    first_kept = getattr(entry.body, "first_kept_seq", 0)
    kept_part = "\n".join(m.text + " ".join(r.content for r in m.tool_results) for m in messages[first_kept - 1 :])
    leaking = [f.key for f in FACTS if present(kept_part, f)]
    if leaking:
        report.note(f"warning: facts in the kept part (not a test of the summary): {leaking}")
    derived = derive_context(await active_entries(store, session.id))
    text = "\n".join(
        " ".join(
            p.text if isinstance(p, TextPart) else p.content if isinstance(p, ToolResultPart) else "" for p in m.parts
        )
        for m in derived.messages
    )
    kept = [f for f in FACTS if present(text, f)]
    fell_back = use_model and result.strategy == "deterministic"
    label = f"{strategy}: facts kept in the context" + (" (FELL BACK to deterministic)" if fell_back else "")
    report.row(label, f"kept_{key}", len(kept) / len(FACTS), "share", digits=2)
    report.note(
        f"   {result.tokens_before:,} -> {result.tokens_after:,} tokens in {seconds:.1f} s; "
        f"missing: {', '.join(f.key for f in FACTS if f not in kept) or 'none'}"
        + (f"; fallback: {result.fallback}" if result.fallback else "")
    )
    report.set(f"fallback_{key}", result.fallback)
    report.set(f"tokens_after_{key}", result.tokens_after)
    report.set(f"missing_{key}", [f.key for f in FACTS if f not in kept])
    if reader is not None:
        answered = []
        max_tokens = min(64, budget.reserved_output)
        for fact in FACTS:
            answer = await ask(reader[0], reader[1], derived.messages, fact, max_tokens)
            if present(answer, fact):
                answered.append(fact.key)
        report.row(
            f"{strategy}: questions answered by the reader",
            f"answered_{key}",
            len(answered) / len(FACTS),
            "share",
            digits=2,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", metavar="PROVIDER/MODEL", help="the summarizer (omit: deterministic only)")
    parser.add_argument("--reader", metavar="PROVIDER/MODEL", help="who answers the questions (default: --model)")
    parser.add_argument("--no-reader", action="store_true", help="only measure what is kept")
    parser.add_argument("--strategies", default=None, help="comma-separated: model,model-only,deterministic")
    args = parser.parse_args()
    strategies = (args.strategies or ("model,model-only,deterministic" if args.model else "deterministic")).split(",")
    unknown = set(strategies) - {"model", "model-only", "deterministic"}
    if unknown or (not args.model and set(strategies) - {"deterministic"}):
        parser.error(f"strategies are model, model-only (both need --model) and deterministic; not {sorted(unknown)}")
    report = Report()
    provider = model = None
    if args.model:
        from tether.providers.registry import resolve_provider
        from tether.runtime.configuration import load_config

        resolved = resolve_provider(args.model, config=load_config())
        provider, model = resolved.provider, resolved.model
    reader = None
    reader_spec = None if args.no_reader else (args.reader or args.model)
    if reader_spec:
        from tether.providers.registry import resolve_provider
        from tether.runtime.configuration import load_config

        r = resolve_provider(reader_spec, config=load_config())
        reader = (r.provider, r.model)
    budget = budget_for(args.model)
    messages = scripted_session()
    report.set("model", args.model)
    report.set("reader", reader_spec)
    report.set("facts", len(FACTS))
    report.note(f"session: {len(messages)} messages, {len(FACTS)} planted facts; summarizer: {args.model or 'none'}")
    report.section("share of planted facts kept after compaction")

    async def run() -> None:
        for strategy in strategies:
            await run_strategy(strategy, messages, provider, model, reader, budget, report)

    asyncio.run(run())
    report.finish()


if __name__ == "__main__":
    main()
