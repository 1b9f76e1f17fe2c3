"""RLM's map-reduce on the embedded model itself: over a text several times its window, every call is sized by
the model's own tokenizer and fits, with the reply's room kept. The text is mostly digits, which SmolLM2's
vocabulary spends a token each on and o200k_base packs three to a token."""

from __future__ import annotations

import random

import pytest

from tether.context.tokens import TokenCounter
from tether.errors import ContextOverflow
from tether.providers.base import EventStream, ModelRequest, StreamDone
from tether.providers.local import LocalProvider
from tether.rlm import RlmLimits, rlm_answer

WINDOW = 384
"""Small, so that a text several windows long is read in a minute or two on a CPU; the sizing is the same
arithmetic at any window."""
REPLY = 16


class Watched:
    """The embedded provider, recording what each call cost and every `ContextOverflow` it raised: a
    map-reduce would fail on the first one, but the record says so even where something catches it."""

    def __init__(self, provider: LocalProvider) -> None:
        self.provider = provider
        self.name = provider.name
        self.prompt_tokens: list[int] = []
        self.overflows: list[ContextOverflow] = []

    def token_counter(self, model: str) -> TokenCounter | None:
        return self.provider.token_counter(model)

    async def stream(self, request: ModelRequest) -> EventStream:
        try:
            async for event in self.provider.stream(request):
                if isinstance(event, StreamDone):
                    self.prompt_tokens.append(event.usage.input_tokens)
                yield event
        except ContextOverflow as exc:
            self.overflows.append(exc)
            raise


def readings(lines: int) -> str:
    rng = random.Random(11)
    return "\n".join(f"{n:05d} probe {rng.randrange(10**8):08d} at {rng.randrange(10**4):04d} K" for n in range(lines))


@pytest.mark.local_model
@pytest.mark.slow
async def test_map_reduce_over_several_windows_never_overflows_the_embedded_model() -> None:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra: pip install 'tether[local]'")
    provider = Watched(LocalProvider(seed=0, context_window=WINDOW))
    text = readings(56)
    result = await rlm_answer(
        text,
        "Which probe reads 0 K?",
        provider,
        model="smollm2-135m",
        limits=RlmLimits(context_window=WINDOW, max_output_tokens=REPLY),
        use_repl=False,
    )

    counter = provider.token_counter("smollm2-135m")
    assert counter is not None and counter.count(text) > 3 * WINDOW  # several windows of its own tokens
    assert provider.overflows == []
    assert len(provider.prompt_tokens) >= 4  # three map calls at least, and the answer
    assert max(provider.prompt_tokens) + REPLY <= WINDOW  # every call left the reply its room
    assert result.fallback and result.answer
