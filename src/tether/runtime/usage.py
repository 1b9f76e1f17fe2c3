"""Usage that never reads zero. A provider that reports no usage for a call (an OpenAI-compatible server that
streams without it, as llama.cpp's does) gets tether's own count instead: the request as the context engine
counted it, and the answer counted with the same tokenizer (the provider's own where it offers one,
`TokenCounting`), marked `Usage.estimated`, and priced from the model's catalog entry when it has prices (a
cost it cannot know stays None: "cost unknown")."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import msgspec

from ..context.tokens import MESSAGE_OVERHEAD, TokenCounter, count_fixed, count_message
from ..messages import USAGE_ESTIMATED, Message, Usage
from ..providers.base import TokenCounting
from .prepare import PreparedStep
from .state import RunState


def counter_of(state: RunState) -> TokenCounter:
    """The tokenizer of the run's model: its provider's own when it has one, else the context engine's."""
    if isinstance(state.provider, TokenCounting):
        own = state.provider.token_counter(state.options.model)
        if own is not None:
            return own
    return state.engine.counter_for(state.options.model)


def counted_usage(state: RunState, prepared: PreparedStep, answer: Message) -> Usage:
    """tether's count of one call the provider gave no usage for, priced when the model has prices."""
    counter = counter_of(state)
    if prepared.derived is not None:
        sent = prepared.derived.estimate.counted
    else:
        request = prepared.request
        sent = sum(count_message(m, counter) for m in request.messages)
        sent += count_fixed(request.system, request.tools, counter)
    said = max(0, count_message(answer, counter) - MESSAGE_OVERHEAD)  # the answer's parts, not its framing
    usage = Usage(input_tokens=sent, output_tokens=said, estimated=True)
    price: Callable[[Usage], Decimal | None] | None = getattr(state.model_info, "cost", None)
    if callable(price):
        cost = price(usage)
        if cost is not None:
            usage = msgspec.structs.replace(usage, cost=cost)
    return usage


def needs_count(usage: Usage | None) -> bool:
    """Whether a call's usage says nothing (none reported, or all zero)."""
    return usage is None or usage.total_tokens == 0


__all__ = ["USAGE_ESTIMATED", "counted_usage", "counter_of", "needs_count"]
