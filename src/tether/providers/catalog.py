"""The model catalog: what tether knows about each model (context window, output limit, prices, what it
supports), `provider/model` names, and exact cost in Decimal. Users add or override entries in config.toml
under ``[models."provider/model"]``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal

import msgspec

from ..config import Config, ModelConfig
from ..errors import ConfigError
from ..messages import Usage

MILLION = Decimal(1_000_000)


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
    supports_thinking: bool = False
    supports_images: bool = False
    known: bool = True
    """False for a model the catalog has never heard of (limits are then conservative guesses)."""

    @property
    def id(self) -> str:
        return f"{self.provider}/{self.model}"

    def cost(self, usage: Usage) -> Decimal | None:
        """Exact cost of `usage`: uncached input, cache reads, cache writes and output each at their price."""
        if self.input_price is None or self.output_price is None:
            return None
        read_price = self.cache_read_price if self.cache_read_price is not None else self.input_price
        write_price = self.cache_write_price if self.cache_write_price is not None else self.input_price
        uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
        total = (
            uncached * self.input_price
            + usage.cache_read_tokens * read_price
            + usage.cache_write_tokens * write_price
            + usage.output_tokens * self.output_price
        )
        return total / MILLION


def _m(
    provider: str,
    model: str,
    context: int,
    output: int,
    prices: tuple[str, str, str | None, str | None] | None,
    **flags: bool | float,
) -> ModelInfo:
    fields: dict[str, object] = {"provider": provider, "model": model, "context_window": context}
    fields["max_output_tokens"] = output
    if prices is not None:
        fields["input_price"], fields["output_price"] = Decimal(prices[0]), Decimal(prices[1])
        fields["cache_read_price"] = Decimal(prices[2]) if prices[2] is not None else None
        fields["cache_write_price"] = Decimal(prices[3]) if prices[3] is not None else None
    return msgspec.convert({**fields, **flags}, ModelInfo)


_REASONING = {"supports_temperature": False, "supports_thinking": True, "supports_images": True}
_VISION = {"supports_images": True}
_CLAUDE = {"supports_thinking": True, "supports_images": True}

# Prices as published by each provider as of late 2025 (US dollars per million tokens: input, output,
# cache read, cache write). They change, models are retired (the SDKs' own model lists carry shutdown dates
# for several of these) and newer ones appear: override or add entries in config.toml rather than trusting
# this table. A model missing here still works; its cost is just not computed.
BUILTIN_MODELS: tuple[ModelInfo, ...] = (
    # OpenAI: cached input is billed at the cache read price; there is no cache write surcharge.
    _m("openai", "gpt-5", 400_000, 128_000, ("1.25", "10", "0.125", None), **_REASONING),
    _m("openai", "gpt-5-mini", 400_000, 128_000, ("0.25", "2", "0.025", None), **_REASONING),
    _m("openai", "gpt-5-nano", 400_000, 128_000, ("0.05", "0.40", "0.005", None), **_REASONING),
    _m("openai", "gpt-4.1", 1_047_576, 32_768, ("2", "8", "0.50", None), **_VISION),
    _m("openai", "gpt-4.1-mini", 1_047_576, 32_768, ("0.40", "1.60", "0.10", None), **_VISION),
    _m("openai", "gpt-4.1-nano", 1_047_576, 32_768, ("0.10", "0.40", "0.025", None), **_VISION),
    _m("openai", "gpt-4o", 128_000, 16_384, ("2.50", "10", "1.25", None), **_VISION),
    _m("openai", "gpt-4o-mini", 128_000, 16_384, ("0.15", "0.60", "0.075", None), **_VISION),
    _m("openai", "o3", 200_000, 100_000, ("2", "8", "0.50", None), **_REASONING),
    _m("openai", "o4-mini", 200_000, 100_000, ("1.10", "4.40", "0.275", None), **_REASONING),
    _m("openai", "o3-mini", 200_000, 100_000, ("1.10", "4.40", "0.55", None), supports_temperature=False),
    # Anthropic: cache writes (5-minute TTL) cost 1.25x input, cache reads 0.1x.
    _m("anthropic", "claude-opus-4-5", 200_000, 64_000, ("5", "25", "0.50", "6.25"), **_CLAUDE),
    _m("anthropic", "claude-opus-4-1", 200_000, 32_000, ("15", "75", "1.50", "18.75"), **_CLAUDE),
    _m("anthropic", "claude-opus-4-0", 200_000, 32_000, ("15", "75", "1.50", "18.75"), **_CLAUDE),
    _m("anthropic", "claude-sonnet-4-5", 200_000, 64_000, ("3", "15", "0.30", "3.75"), **_CLAUDE),
    _m("anthropic", "claude-sonnet-4-0", 200_000, 64_000, ("3", "15", "0.30", "3.75"), **_CLAUDE),
    _m("anthropic", "claude-3-7-sonnet-latest", 200_000, 64_000, ("3", "15", "0.30", "3.75"), **_CLAUDE),
    _m("anthropic", "claude-haiku-4-5", 200_000, 64_000, ("1", "5", "0.10", "1.25"), **_CLAUDE),
    _m("anthropic", "claude-3-5-haiku-latest", 200_000, 8_192, ("0.80", "4", "0.08", "1"), **_VISION),
    # DeepSeek: input on a cache hit is the cache read price; writes cost nothing extra.
    _m("deepseek", "deepseek-chat", 128_000, 8_000, ("0.28", "0.42", "0.028", None)),
    _m("deepseek", "deepseek-reasoner", 128_000, 64_000, ("0.28", "0.42", "0.028", None), supports_thinking=True),
    _m("groq", "llama-3.3-70b-versatile", 131_072, 32_768, ("0.59", "0.79", None, None)),
    _m("moonshot", "kimi-k2-0905-preview", 262_144, 32_768, ("0.60", "2.50", "0.15", None), temperature=0.6),
    _m("zai", "glm-4.6", 200_000, 128_000, ("0.60", "2.20", "0.11", None), temperature=1.0, supports_thinking=True),
    # OpenRouter re-sells other providers' models under their own names, at (about) the same prices.
    _m("openrouter", "anthropic/claude-sonnet-4.5", 200_000, 64_000, ("3", "15", "0.30", "3.75"), **_CLAUDE),
    _m("openrouter", "openai/gpt-4.1", 1_047_576, 32_768, ("2", "8", "0.50", None), **_VISION),
    _m("openrouter", "google/gemini-2.5-pro", 1_048_576, 65_536, ("1.25", "10", "0.31", None), **_REASONING),
    _m("openrouter", "google/gemini-2.5-flash", 1_048_576, 65_536, ("0.30", "2.50", "0.075", None), **_VISION),
    _m("openrouter", "deepseek/deepseek-chat-v3.1", 163_840, 32_768, ("0.27", "1.10", None, None)),
    # The embedded model: SmolLM2-135M-Instruct, 8k context, runs on the CPU for free.
    _m("local", "smollm2-135m", 8_192, 2_048, ("0", "0", "0", "0"), temperature=0.2, supports_tools=True),
)


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
