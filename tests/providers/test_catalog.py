"""The model catalog: exact Decimal cost, model names, and the user's overrides from config.toml."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tether.config import parse_config
from tether.errors import ConfigError
from tether.messages import Usage
from tether.providers.catalog import BUILTIN_MODELS, Catalog, ModelInfo, parse_model, unknown_model


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
        assert model.input_price is not None and model.output_price is not None, model.id
    local = Catalog().info("local", "smollm2-135m")
    assert local.cost(Usage(input_tokens=5000, output_tokens=5000)) == 0


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
