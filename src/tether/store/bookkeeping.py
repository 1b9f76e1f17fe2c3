"""What an append adds to a session's row, computed the same way by every backend: message and token
counters, costs in integer picodollars, the default title taken from the first user message, and the
content address of an artifact."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal

from ..errors import InvalidInput
from ..messages import EntryBody, Message, TextPart

TITLE_MAX = 47

PICO = Decimal(10) ** 12
MAX_PICO = 2**63 - 1


def default_title(text: str) -> str | None:
    """The first user message cut to 47 characters plus '...' (whitespace folded)."""
    # Fold only a prefix: on every append of a long message, folding all of it would be wasted work.
    window = 4 * TITLE_MAX
    folded = " ".join(text[:window].split())
    while len(folded) <= TITLE_MAX and window < len(text):
        window *= 4
        folded = " ".join(text[:window].split())
    if not folded:
        return None
    if len(folded) <= TITLE_MAX:
        return folded  # the loop above folded the whole text
    return folded[:TITLE_MAX] + "..."


def title_candidate(bodies: Sequence[EntryBody]) -> str | None:
    for body in bodies:
        if type(body) is Message and body.role == "user":
            for part in body.parts:
                if type(part) is TextPart:
                    title = default_title(part.text)
                    if title:
                        return title
    return None


def decimal_to_pico(cost: Decimal) -> int:
    """Costs are counted in integer picodollars (1e-12 USD), so counters add up exactly inside SQL and
    every backend rounds the same way."""
    pico = int((cost * PICO).to_integral_value(rounding=ROUND_HALF_EVEN))
    if abs(pico) > MAX_PICO:
        raise InvalidInput(f"a cost of ${cost} is beyond what a session can count (about $9.2 million)")
    return pico


def pico_to_decimal(value: int) -> Decimal:
    """Back to dollars, without trailing zeros and without an exponent ($100, not $1E+2)."""
    if not value:
        return Decimal(0)
    dollars = Decimal(value).scaleb(-12)
    return dollars.quantize(Decimal(1)) if dollars == dollars.to_integral_value() else dollars.normalize()


def message_counters(bodies: Sequence[EntryBody]) -> tuple[int, int, int, Decimal]:
    """(messages, input tokens, output tokens, cost) that appending `bodies` adds to a session."""
    messages = tokens_in = tokens_out = 0
    cost = Decimal(0)
    for body in bodies:
        if isinstance(body, Message):
            messages += 1
            if body.usage is not None:
                tokens_in += body.usage.input_tokens
                tokens_out += body.usage.output_tokens
                if body.usage.cost is not None:
                    cost += body.usage.cost
    return messages, tokens_in, tokens_out, cost


def artifact_id(data: bytes) -> str:
    return "art_" + hashlib.sha256(data).hexdigest()
