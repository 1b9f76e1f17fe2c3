"""How much text one RLM call may carry: counted by the target model's own tokenizer where its provider offers
one (`model_counter`), with the chat template's tokens bounded (`TEMPLATE_TOKENS`) and a stated margin
(`TEXT_SHARE`) that map-reduce chunks and `llm_query` prompts are cut to."""

from __future__ import annotations

import asyncio

from ..context.tokens import TokenCounter, get_counter
from ..providers.base import Provider, TokenCounting

TEXT_SHARE = 0.6
"""The share of a call's room that the text it carries (a map-reduce chunk, the notes of a merge, an
`llm_query` prompt) may fill, the room being the window less the call's system prompt, its question and the
chat template's tokens. The other 40% hold the reply (also reserved outright, see `text_budget`) and the
counter's error: none for the embedded model, counted by its own tokenizer, but for a remote model an
o200k_base count stands in for a vocabulary that may count a third more on code, digits or other scripts."""

TEMPLATE_TOKENS = 32
"""A bound on what the chat template adds to a call of one system and one user message: ChatML (the embedded
model) adds 14 tokens, OpenAI's published accounting 9 (3 a message, 3 to prime the reply)."""

MIN_TEXT_TOKENS = 64
"""The least text a call is given, however small the window: a window that cannot hold the question and
this much besides cannot be read in pieces at all, and a budget of a token or two would cut a text into
millions of calls."""


def text_budget(window: int, reply_tokens: int, fixed_tokens: int) -> int:
    """The most tokens of text one call may carry in a `window` beside `fixed_tokens` (its system prompt,
    question and framing, counted by the model's counter), leaving `reply_tokens` for the answer:
    `TEXT_SHARE` of the room, and never more than the room less the reply."""
    room = window - fixed_tokens - TEMPLATE_TOKENS
    return max(MIN_TEXT_TOKENS, min(int(room * TEXT_SHARE), room - reply_tokens))


def model_counter(provider: Provider, model: str) -> TokenCounter:
    """The counter that sizes calls to `model`: the provider's own tokenizer where it offers one
    (`TokenCounting`: the embedded model's GGUF), else the best estimate for the model (`get_counter`)."""
    if isinstance(provider, TokenCounting):
        counter = provider.token_counter(model)
        if counter is not None:
            return counter
    return get_counter(model=model)


async def loaded_counter(provider: Provider, model: str) -> TokenCounter:
    """`model_counter`, with whatever its first count loads (a vocabulary, the embedded model itself) loaded
    in a worker thread rather than on the event loop."""
    counter = model_counter(provider, model)
    await asyncio.to_thread(counter.count, "tokens")
    return counter
