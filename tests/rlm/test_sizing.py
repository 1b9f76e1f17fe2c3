"""How much text one RLM call may carry: the stated margin, the reply's room, and which counter sizes the calls
(the provider's own tokenizer where it offers one, else the estimate for the model)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.context.tokens import TokenCounter, get_counter
from tether.providers import ScriptedProvider
from tether.providers.base import TokenCounting
from tether.rlm.sizing import (
    MIN_TEXT_TOKENS,
    TEMPLATE_TOKENS,
    TEXT_SHARE,
    loaded_counter,
    model_counter,
    text_budget,
)


class Digits:
    """A tokenizer that spends a token on every digit and one on every four other characters."""

    source = "digits"

    def __init__(self) -> None:
        self.counted = 0

    def count(self, text: str) -> int:
        self.counted += 1
        digits = sum(c.isdigit() for c in text)
        return digits + -(-(len(text) - digits) // 4)


class OwnTokenizer(ScriptedProvider):
    """A scripted model that counts with its own tokenizer for the models it knows."""

    def __init__(self, counter: TokenCounter, models: tuple[str, ...] = ("m",)) -> None:
        super().__init__(["ok"])
        self.counter = counter
        self.models = models

    def token_counter(self, model: str) -> TokenCounter | None:
        return self.counter if model in self.models else None


@given(
    st.integers(min_value=1_000, max_value=2_000_000),
    st.integers(min_value=0, max_value=100_000),
    st.integers(min_value=0, max_value=5_000),
)
def test_a_budget_keeps_the_margin_and_the_reply_free(window: int, reply: int, fixed: int) -> None:
    budget = text_budget(window, reply, fixed)
    room = window - fixed - TEMPLATE_TOKENS
    if budget > MIN_TEXT_TOKENS:
        assert budget <= TEXT_SHARE * room  # the stated margin
        assert fixed + TEMPLATE_TOKENS + budget + reply <= window  # the reply always has its room
    else:
        assert budget == MIN_TEXT_TOKENS  # a window too small to read in pieces still gets a floor


def test_the_embedded_models_window_leaves_the_reply_far_more_than_its_room() -> None:
    budget = text_budget(8_192, 512, 150)
    assert budget == int(TEXT_SHARE * (8_192 - 150 - TEMPLATE_TOKENS))
    assert 8_192 - 150 - TEMPLATE_TOKENS - budget > 3 * 512


def test_a_reply_larger_than_the_margin_is_reserved_outright() -> None:
    assert text_budget(10_000, 6_000, 100) == 10_000 - 100 - TEMPLATE_TOKENS - 6_000


async def test_the_providers_own_tokenizer_sizes_the_calls() -> None:
    own = Digits()
    provider = OwnTokenizer(own)
    assert isinstance(provider, TokenCounting)
    assert model_counter(provider, "m") is own
    assert await loaded_counter(provider, "m") is own and own.counted == 1  # its first count ran off the loop


def test_without_a_tokenizer_for_the_model_the_estimate_sizes_them() -> None:
    assert model_counter(OwnTokenizer(Digits()), "other").source == get_counter(model="other").source
    plain = ScriptedProvider(["ok"])
    assert not isinstance(plain, TokenCounting)
    assert model_counter(plain, "gpt-4").source == get_counter(model="gpt-4").source
