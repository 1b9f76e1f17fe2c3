"""The model catalog: exact Decimal cost, model names, and the user's overrides from config.toml."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal

import pytest

from tether.config import parse_config
from tether.errors import ConfigError
from tether.messages import Usage
from tether.providers.catalog import (
    BUILTIN_MODELS,
    Catalog,
    LongContextPrices,
    ModelInfo,
    parse_model,
    unknown_model,
)


def test_cost_prices_uncached_input_cache_reads_writes_and_output_separately() -> None:
    sonnet = Catalog().info("anthropic", "claude-sonnet-4-5")
    # 10,000 prompt tokens of which 6,000 were read from the cache and 3,000 written to it; 500 out.
    usage = Usage(input_tokens=10_000, cache_read_tokens=6_000, cache_write_tokens=3_000, output_tokens=500)
    # 1,000 x $3 + 6,000 x $0.30 + 3,000 x $3.75 + 500 x $15, per million tokens.
    expected = (Decimal(3000) + Decimal(1800) + Decimal(11250) + Decimal(7500)) / Decimal(1_000_000)
    assert sonnet.cost(usage) == expected == Decimal("0.02355")


def test_cost_is_exact_where_floats_would_drift() -> None:
    mini = Catalog().info("openai", "gpt-4o-mini")  # $0.15 in, $0.60 out
    total = sum((mini.cost(Usage(input_tokens=1, output_tokens=1)) or Decimal(0) for _ in range(1000)), Decimal(0))
    assert total == Decimal("0.00075")


def test_a_missing_cache_price_falls_back_to_the_input_price() -> None:
    info = ModelInfo(
        provider="p",
        model="m",
        context_window=1000,
        max_output_tokens=100,
        input_price=Decimal(2),
        output_price=Decimal(4),
    )
    assert info.cost(Usage(input_tokens=1_000_000, cache_read_tokens=500_000)) == Decimal(2)


def test_unknown_prices_give_no_cost() -> None:
    assert unknown_model("lab", "mystery").cost(Usage(input_tokens=10)) is None
    assert unknown_model("lab", "mystery").known is False


def test_builtin_models_are_consistent() -> None:
    ids = [m.id for m in BUILTIN_MODELS]
    assert len(ids) == len(set(ids))
    for model in BUILTIN_MODELS:
        assert 0 < model.max_output_tokens <= model.context_window, model.id
        # both prices, or (unknown) neither: never a cost computed from half a price list
        assert (model.input_price is None) == (model.output_price is None), model.id
        if model.long_context is not None:
            long = model.long_context
            assert model.input_price is not None and model.output_price is not None, model.id
            assert 0 < long.above < model.context_window, model.id
            assert long.input_price > model.input_price and long.output_price > model.output_price, model.id
        assert model.deprecated or model.retires is None, model.id
    unpriced = [m.id for m in BUILTIN_MODELS if m.input_price is None]
    assert unpriced == ["anthropic/claude-fable-5-2"]  # the one model whose price no source we trust gives
    assert Catalog().info("anthropic", "claude-fable-5-2").cost(Usage(input_tokens=10, output_tokens=10)) is None
    local = Catalog().info("local", "smollm2-135m")
    assert local.cost(Usage(input_tokens=5000, output_tokens=5000)) == 0


def test_long_prompts_are_billed_at_the_long_context_prices_for_the_whole_request() -> None:
    haiku = Catalog().info("anthropic", "claude-haiku-5-5")  # $0.10 / $0.50 up to 100,000 prompt tokens
    assert haiku.long_context == LongContextPrices(
        above=100_000,
        input_price=Decimal("0.50"),
        output_price=Decimal("2.50"),
        cache_read_price=Decimal("0.05"),
        cache_write_price=Decimal("0.625"),
    )
    at_threshold = Usage(input_tokens=100_000, output_tokens=1_000)
    assert haiku.cost(at_threshold) == (100_000 * Decimal("0.10") + 1_000 * Decimal("0.50")) / 1_000_000
    # one token more and every token of the request, output and cache reads included, is at the long rate
    past = Usage(input_tokens=100_001, cache_read_tokens=80_000, output_tokens=1_000)
    expected = 20_001 * Decimal("0.50") + 80_000 * Decimal("0.05") + 1_000 * Decimal("2.50")
    assert haiku.cost(past) == expected / 1_000_000
    gpt = Catalog().info("openai", "gpt-6.2-sol")  # twice the input, 1.5x the output past 272K
    assert gpt.cost(Usage(input_tokens=300_000, output_tokens=10_000)) == Decimal("1.35")


def test_status_says_whether_a_model_retires_or_has_retired() -> None:
    info = ModelInfo(provider="p", model="m", context_window=1000, max_output_tokens=100)
    assert info.status(date(2026, 11, 22)) is None
    dated = ModelInfo(
        provider="p", model="m", context_window=1000, max_output_tokens=100, deprecated=True, retires=date(2026, 11, 30)
    )
    assert dated.status(date(2026, 11, 22)) == "retires 2026-11-30"
    assert dated.status(date(2026, 11, 30)) == "retired 2026-11-30"
    undated = ModelInfo(provider="p", model="m", context_window=1000, max_output_tokens=100, deprecated=True)
    assert undated.status(date(2026, 11, 22)) == "deprecated"


# --- the catalog against the installed SDKs' own deprecation tables ------------------------------------------


def _sdk_day(text: str) -> date:
    """'November 30th, 2026' (the anthropic SDK's form) as a date."""
    return datetime.strptime(re.sub(r"(\d+)(st|nd|rd|th)", r"\1", text), "%B %d, %Y").date()


def anthropic_deprecations() -> dict[str, date]:
    from anthropic.resources.messages import DEPRECATED_MODELS

    return {model: _sdk_day(day) for model, day in DEPRECATED_MODELS.items()}


def openai_deprecations() -> dict[str, date]:
    """The shutdown days in the "Deprecated values" note under `ChatModel` (a string the SDK's source
    carries, not an attribute): each bullet lists quoted model ids, then the day."""
    from openai.types.shared import chat_model

    note = inspect.getsource(chat_model).split("Deprecated values:", 1)[1]
    days: dict[str, date] = {}
    for bullet in note.split("\n- ")[1:]:
        found = re.search(r"shutdown\s+date:\s+(\d{4}-\d{2}-\d{2})", bullet)
        if found is None:
            continue  # "Not a supported model ID" and the like
        for model in re.findall(r'"([^"]+)"', bullet.split("Announced", 1)[0]):
            days[model] = date.fromisoformat(found.group(1))
    return days


@pytest.mark.parametrize(
    ("provider", "table", "example"),
    [("anthropic", anthropic_deprecations, "claude-sonnet-4-5"), ("openai", openai_deprecations, "gpt-4.1")],
)
def test_deprecations_follow_the_installed_sdk(
    provider: str, table: Callable[[], dict[str, date]], example: str
) -> None:
    sdk = table()
    assert example in sdk  # the table was found and read
    for model in (m for m in BUILTIN_MODELS if m.provider == provider):
        if model.model in sdk:
            assert model.deprecated and model.retires == sdk[model.model], model.id
        elif model.retires is not None:
            # The SDK drops a model from its table once it has shut down; a day still to come must be its.
            assert model.retires < date.today(), f"{model.id}: a retirement day the SDK does not announce"


def test_parse_model_splits_at_the_first_slash_only_for_known_providers() -> None:
    known = ["openai", "anthropic", "openrouter"]
    assert parse_model("openai/gpt-4.1", known) == ("openai", "gpt-4.1")
    assert parse_model("openrouter/anthropic/claude-sonnet-4.5", known) == ("openrouter", "anthropic/claude-sonnet-4.5")
    assert parse_model("gpt-4.1", known) == (None, "gpt-4.1")
    assert parse_model("meta-llama/llama-3", known) == (None, "meta-llama/llama-3")
    with pytest.raises(ConfigError):
        parse_model("  ", known)
    with pytest.raises(ConfigError):
        parse_model("openai/", known)


def test_config_overrides_a_builtin_model_and_adds_a_new_one() -> None:
    config = parse_config(
        """
        [models."openai/gpt-4o"]
        input_price = 2.00
        context_window = 64000

        [models."lab/tiny"]
        context_window = 4096
        max_output_tokens = 512
        input_price = "0.10"
        output_price = "0.20"
        supports_tools = false
        """
    )
    catalog = Catalog.from_config(config)
    gpt = catalog.info("openai", "gpt-4o")
    assert gpt.input_price == Decimal("2.00") and gpt.context_window == 64000
    assert gpt.output_price == Decimal(10)  # untouched fields keep the catalog's value
    tiny = catalog.info("lab", "tiny")
    assert tiny.known and not tiny.supports_tools
    assert tiny.cost(Usage(input_tokens=1_000_000, output_tokens=1_000_000)) == Decimal("0.30")
    assert catalog.providers_of("tiny") == ["lab"]


def test_a_model_override_needs_a_provider_prefix() -> None:
    with pytest.raises(ConfigError, match="provider/model"):
        Catalog.from_config(parse_config('[models."gpt-4o"]\ncontext_window = 1\n'))
