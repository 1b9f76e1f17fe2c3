"""The model catalog: what tether knows about each model (context window, output limit, prices, what it
supports), `provider/model` names, and exact cost in Decimal. Users add or override entries in config.toml
under ``[models."provider/model"]``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import date
from decimal import Decimal
from typing import Any

import msgspec

from ..config import Config, ModelConfig
from ..errors import ConfigError
from ..messages import Usage

MILLION = Decimal(1_000_000)


class LongContextPrices(msgspec.Struct, frozen=True, kw_only=True):
    """What a request costs, all of it (output included), once its prompt passes `above` input tokens:
    some models bill long prompts at a higher rate. A missing cache price falls back to the input price."""

    above: int
    input_price: Decimal
    output_price: Decimal
    cache_read_price: Decimal | None = None
    cache_write_price: Decimal | None = None


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One model. Prices are US dollars per million tokens; None means unknown (cost is then not computed).
    A missing cache price falls back to the input price."""

    provider: str
    model: str
    context_window: int
    max_output_tokens: int
    input_price: Decimal | None = None
    output_price: Decimal | None = None
    cache_read_price: Decimal | None = None
    cache_write_price: Decimal | None = None
    temperature: float | None = None
    """The temperature the model's makers recommend, used when a request sets none."""
    supports_temperature: bool = True
    supports_tools: bool = True
    offer_tools: bool = True
    """False: a run offers the model no tools unless it names them (`--tools`, an agent's own list, a program's
    registry). The embedded 135M model calls whatever it is offered at random (sub-agents that do nothing, a
    last call printed as its answer), and the tools' definitions fill half its window."""
    supports_thinking: bool = False
    supports_images: bool = False
    known: bool = True
    """False for a model the catalog has never heard of (limits are then conservative guesses)."""
    long_context: LongContextPrices | None = None
    """Higher prices for a request whose prompt passes a size; None: one price whatever the prompt."""
    deprecated: bool = False
    """The provider has announced that it will stop serving this model (or already has)."""
    retires: date | None = None
    """The day the provider stops serving it (its shutdown or end of life), when announced."""

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.model}"

    def status(self, today: date) -> str | None:
        """``"retires 2026-11-30"``, ``"retired 2026-02-19"`` or ``"deprecated"`` (no date announced) for a
        deprecated model, as of `today`; None for a current one."""
        if not self.deprecated:
            return None
        if self.retires is None:
            return "deprecated"
        return f"{'retired' if self.retires <= today else 'retires'} {self.retires.isoformat()}"

    def cost(self, usage: Usage) -> Decimal | None:
        """Exact cost of `usage` (one request): uncached input, cache reads, cache writes and output each at
        their price, the long-context prices when the prompt passes their threshold."""
        prices: ModelInfo | LongContextPrices = self
        if self.long_context is not None and usage.input_tokens > self.long_context.above:
            prices = self.long_context
        if prices.input_price is None or prices.output_price is None:
            return None
        read_price = prices.cache_read_price if prices.cache_read_price is not None else prices.input_price
        write_price = prices.cache_write_price if prices.cache_write_price is not None else prices.input_price
        uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
        total = (
            uncached * prices.input_price
            + usage.cache_read_tokens * read_price
            + usage.cache_write_tokens * write_price
            + usage.output_tokens * prices.output_price
        )
        return total / MILLION


Prices = tuple[str, str, str | None, str | None]
"""input, output, cache read, cache write: US dollars per million tokens, as strings (exact decimals)."""


def _m(
    provider: str,
    model: str,
    context: int,
    output: int,
    prices: Prices | None,
    *,
    long: tuple[int, Prices] | None = None,
    retires: str | None = None,
    deprecated: bool = False,
    **flags: bool | float,
) -> ModelInfo:
    """A catalog entry. `long`: the prices of prompts over a number of input tokens. `retires`: the ISO day
    the provider stops serving the model (which makes it deprecated); `deprecated` alone: no day announced."""
    fields: dict[str, object] = {"provider": provider, "model": model, "context_window": context}
    fields["max_output_tokens"] = output
    if prices is not None:
        fields.update(_prices(prices))
    if long is not None:
        fields["long_context"] = {"above": long[0], **_prices(long[1])}
    if retires is not None:
        fields["retires"], deprecated = date.fromisoformat(retires), True
    fields["deprecated"] = deprecated
    return msgspec.convert({**fields, **flags}, ModelInfo)


def _prices(prices: Prices) -> dict[str, Decimal | None]:
    read, write = prices[2], prices[3]
    return {
        "input_price": Decimal(prices[0]),
        "output_price": Decimal(prices[1]),
        "cache_read_price": Decimal(read) if read is not None else None,
        "cache_write_price": Decimal(write) if write is not None else None,
    }


_REASONING: dict[str, Any] = {"supports_temperature": False, "supports_thinking": True, "supports_images": True}
_VISION: dict[str, Any] = {"supports_images": True}
_CLAUDE: dict[str, Any] = {"supports_thinking": True, "supports_images": True}
# Claude 5 and later think on their own (adaptive thinking) and answer a manual thinking budget, or a
# non-default temperature, with an error (documented for Sonnet 5): tether sends them neither.
_CLAUDE_5: dict[str, Any] = {"supports_thinking": False, "supports_temperature": False, "supports_images": True}

# Prices as published by each provider (US dollars per million tokens: input, output, cache read, cache
# write), last checked 2026-11-22 against the providers' model and pricing pages. Deprecations and shutdown
# days are those the installed SDKs carry: `anthropic.resources.messages.DEPRECATED_MODELS` (end of life)
# and the "Deprecated values" of `openai.types.shared.ChatModel` (announced shutdown). Prices change,
# models are retired and newer ones appear: override or add entries in config.toml rather than trusting
# this table. A model missing here still works, and so does one listed without prices (None: unknown);
# their cost is just not computed.
# fmt: off
BUILTIN_MODELS: tuple[ModelInfo, ...] = (
    # OpenAI: cached input is billed at the cache read price. GPT-6 models bill cache writes (30-minute
    # retention) at 1.25x input; older ones have no write surcharge. Past 272K input tokens, the GPT-6
    # models and gpt-5.5 bill the whole request at twice the input and cache rates and 1.5x the output.
    _m("openai", "gpt-6.2-sol", 1_050_000, 128_000, ("2", "10", "0.10", "2.50"), long=(272_000, ("4", "15", "0.20", "5")), **_REASONING),
    _m("openai", "gpt-6.1-sol", 1_050_000, 128_000, ("2", "10", "0.10", "2.50"), long=(272_000, ("4", "15", "0.20", "5")), **_REASONING),
    _m("openai", "gpt-6-sol", 1_050_000, 128_000, ("2", "10", "0.20", "2.50"), long=(272_000, ("4", "15", "0.40", "5")), **_REASONING),
    _m("openai", "gpt-6-luna", 1_050_000, 128_000, ("0.10", "0.50", "0.01", "0.125"), long=(272_000, ("0.20", "0.75", "0.02", "0.25")), **_REASONING),
    _m("openai", "gpt-5.5", 1_050_000, 128_000, ("5", "30", "0.50", None), long=(272_000, ("10", "45", "1", None)), **_REASONING),
    _m("openai", "gpt-5", 400_000, 128_000, ("1.25", "10", "0.125", None), retires="2026-12-11", **_REASONING),
    _m("openai", "gpt-5-mini", 400_000, 128_000, ("0.25", "2", "0.025", None), retires="2026-12-11", **_REASONING),
    _m("openai", "gpt-5-nano", 400_000, 128_000, ("0.05", "0.40", "0.005", None), retires="2026-12-11", **_REASONING),
    _m("openai", "gpt-4.1", 1_047_576, 32_768, ("2", "8", "0.50", None), retires="2027-01-14", **_VISION),
    _m("openai", "gpt-4.1-mini", 1_047_576, 32_768, ("0.40", "1.60", "0.10", None), retires="2027-01-14", **_VISION),
    _m("openai", "gpt-4.1-nano", 1_047_576, 32_768, ("0.10", "0.40", "0.025", None), retires="2026-10-23", **_VISION),
    _m("openai", "gpt-4o", 128_000, 16_384, ("2.50", "10", "1.25", None), retires="2027-01-14", **_VISION),
    _m("openai", "gpt-4o-mini", 128_000, 16_384, ("0.15", "0.60", "0.075", None), retires="2027-01-14", **_VISION),
    _m("openai", "o3", 200_000, 100_000, ("2", "8", "0.50", None), retires="2026-12-11", **_REASONING),
    _m("openai", "o4-mini", 200_000, 100_000, ("1.10", "4.40", "0.275", None), retires="2026-10-23", **_REASONING),
    _m("openai", "o3-mini", 200_000, 100_000, ("1.10", "4.40", "0.55", None), retires="2026-10-23", supports_temperature=False),
    # Anthropic: cache writes (5-minute TTL) cost 1.25x input; cache reads 0.1x, and less on the newest
    # models (Sonnet 5.5's was cut from $0.20 to $0.10 on 2026-10-07). Claude Haiku 5.5 bills the whole
    # request at 5x once the prompt (input, cache reads and writes) passes 100,000 tokens. Claude Fable 5.2
    # (released 2026-11-09) has no price here yet.
    _m("anthropic", "claude-fable-5-2", 1_000_000, 128_000, None, **_CLAUDE_5),
    _m("anthropic", "claude-fable-5-1", 1_000_000, 128_000, ("10", "50", "0.25", "12.50"), **_CLAUDE_5),
    _m("anthropic", "claude-opus-5-5", 1_000_000, 128_000, ("4", "20", "0.20", "5"), **_CLAUDE_5),
    _m("anthropic", "claude-sonnet-5-5", 1_000_000, 128_000, ("2", "10", "0.10", "2.50"), **_CLAUDE_5),
    _m("anthropic", "claude-haiku-5-5", 1_000_000, 128_000, ("0.10", "0.50", "0.01", "0.125"), long=(100_000, ("0.50", "2.50", "0.05", "0.625")), **_CLAUDE_5),
    _m("anthropic", "claude-fable-5", 1_000_000, 128_000, ("10", "50", "1", "12.50"), **_CLAUDE_5),
    _m("anthropic", "claude-opus-5", 1_000_000, 128_000, ("5", "25", "0.50", "6.25"), **_CLAUDE_5),
    _m("anthropic", "claude-sonnet-5", 1_000_000, 128_000, ("2", "10", "0.20", "2.50"), **_CLAUDE_5),
    _m("anthropic", "claude-opus-4-8", 1_000_000, 128_000, ("5", "25", "0.50", "6.25"), **_CLAUDE),
    _m("anthropic", "claude-opus-4-7", 1_000_000, 128_000, ("5", "25", "0.50", "6.25"), **_CLAUDE),
    _m("anthropic", "claude-opus-4-6", 1_000_000, 128_000, ("5", "25", "0.50", "6.25"), **_CLAUDE),
    _m("anthropic", "claude-sonnet-4-6", 1_000_000, 128_000, ("3", "15", "0.30", "3.75"), **_CLAUDE),
    _m("anthropic", "claude-opus-4-5", 200_000, 64_000, ("5", "25", "0.50", "6.25"), retires="2027-01-22", **_CLAUDE),
    # Anthropic's pricing page lists Opus 4.1 as retired (except on Bedrock and Google Cloud), with no day.
    _m("anthropic", "claude-opus-4-1", 200_000, 32_000, ("15", "75", "1.50", "18.75"), deprecated=True, **_CLAUDE),
    _m("anthropic", "claude-opus-4-0", 200_000, 32_000, ("15", "75", "1.50", "18.75"), retires="2026-06-15", **_CLAUDE),
    _m("anthropic", "claude-sonnet-4-5", 200_000, 64_000, ("3", "15", "0.30", "3.75"), retires="2026-11-30", **_CLAUDE),
    _m("anthropic", "claude-sonnet-4-0", 200_000, 64_000, ("3", "15", "0.30", "3.75"), retires="2026-06-15", **_CLAUDE),
    _m("anthropic", "claude-3-7-sonnet-latest", 200_000, 64_000, ("3", "15", "0.30", "3.75"), retires="2026-02-19", **_CLAUDE),
    _m("anthropic", "claude-haiku-4-5", 200_000, 64_000, ("1", "5", "0.10", "1.25"), **_CLAUDE),
    _m("anthropic", "claude-3-5-haiku-latest", 200_000, 8_192, ("0.80", "4", "0.08", "1"), retires="2026-02-19", **_VISION),
    # DeepSeek: input on a cache hit is the cache read price; writes cost nothing extra.
    _m("deepseek", "deepseek-chat", 128_000, 8_000, ("0.28", "0.42", "0.028", None)),
    _m("deepseek", "deepseek-reasoner", 128_000, 64_000, ("0.28", "0.42", "0.028", None), supports_thinking=True),
    _m("groq", "llama-3.3-70b-versatile", 131_072, 32_768, ("0.59", "0.79", None, None)),
    _m("moonshot", "kimi-k2-0905-preview", 262_144, 32_768, ("0.60", "2.50", "0.15", None), temperature=0.6),
    _m("zai", "glm-4.6", 200_000, 128_000, ("0.60", "2.20", "0.11", None), temperature=1.0, supports_thinking=True),
    # OpenRouter re-sells other providers' models under their own names, at (about) the same prices, and
    # stops serving them when their makers do.
    _m("openrouter", "anthropic/claude-sonnet-5.5", 1_000_000, 128_000, ("2", "10", "0.10", "2.50"), **_CLAUDE_5),
    _m("openrouter", "anthropic/claude-sonnet-4.5", 200_000, 64_000, ("3", "15", "0.30", "3.75"), retires="2026-11-30", **_CLAUDE),
    _m("openrouter", "openai/gpt-4.1", 1_047_576, 32_768, ("2", "8", "0.50", None), retires="2027-01-14", **_VISION),
    _m("openrouter", "google/gemini-2.5-pro", 1_048_576, 65_536, ("1.25", "10", "0.31", None), **_REASONING),
    _m("openrouter", "google/gemini-2.5-flash", 1_048_576, 65_536, ("0.30", "2.50", "0.075", None), **_VISION),
    _m("openrouter", "deepseek/deepseek-chat-v3.1", 163_840, 32_768, ("0.27", "1.10", None, None)),
    # The embedded model: SmolLM2-135M-Instruct, 8k context, runs on the CPU for free. Past ~500 tokens a
    # model this small only repeats itself: its answers are capped there.
    _m("local", "smollm2-135m", 8_192, 512, ("0", "0", "0", "0"), temperature=0.2, offer_tools=False),
)
# fmt: on


def parse_model(spec: str, known_providers: Iterable[str]) -> tuple[str | None, str]:
    """Split ``"provider/model"`` at the first slash when the prefix names a provider. Model ids may hold
    slashes themselves (``"openrouter/anthropic/claude-sonnet-4.5"``); a bare id gives ``(None, id)``."""
    spec = spec.strip()
    if not spec:
        raise ConfigError("empty model name")
    head, sep, rest = spec.partition("/")
    if sep and head in set(known_providers):
        if not rest:
            raise ConfigError(f"model name {spec!r} names a provider but no model")
        return head, rest
    return None, spec


class Catalog:
    """Built-in models plus the user's overrides, looked up by provider and model id."""

    def __init__(self, models: Iterable[ModelInfo] = BUILTIN_MODELS, overrides: Mapping[str, ModelConfig] = {}) -> None:
        self._models: dict[tuple[str, str], ModelInfo] = {(m.provider, m.model): m for m in models}
        for name, override in overrides.items():
            provider, sep, model = name.partition("/")
            if not sep or not model:
                raise ConfigError(f"[models.{name!r}]: model names in config are written 'provider/model'")
            self._models[(provider, model)] = self._apply(
                self._models.get((provider, model)), provider, model, override
            )

    @classmethod
    def from_config(cls, config: Config) -> Catalog:
        return cls(BUILTIN_MODELS, config.models)

    @staticmethod
    def _apply(base: ModelInfo | None, provider: str, model: str, override: ModelConfig) -> ModelInfo:
        if base is None:
            base = unknown_model(provider, model)
            # A model the user describes is known to them; prices they leave out stay unknown.
            base = msgspec.structs.replace(base, known=True)
        changes = {f: getattr(override, f) for f in override.__struct_fields__ if getattr(override, f) is not None}
        return msgspec.structs.replace(base, **changes)

    def get(self, provider: str, model: str) -> ModelInfo | None:
        return self._models.get((provider, model))

    def info(self, provider: str, model: str) -> ModelInfo:
        """The entry for a model, or conservative guesses (`known=False`) for one the catalog lacks."""
        return self.get(provider, model) or unknown_model(provider, model)

    def providers_of(self, model: str) -> list[str]:
        """Providers that list a model under this bare id, in catalog order."""
        return [p for (p, m) in self._models if m == model]

    def __iter__(self) -> Iterator[ModelInfo]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)


def unknown_model(provider: str, model: str) -> ModelInfo:
    return ModelInfo(
        provider=provider,
        model=model,
        context_window=32_768,
        max_output_tokens=4_096,
        known=False,
    )
