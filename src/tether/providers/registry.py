"""Choosing a provider: the built-in provider names, building one from config, and `resolve_provider()`, which
turns ``"provider/model"`` (or a bare model id, or nothing) into a ready provider, model id and catalog entry.

With no model named, the default is the first provider, in `PREFERENCE` order, whose key is set (environment
or config), with that provider's default model; with no key anywhere, the embedded `local` model. The
configuration is passed in (the runtime reads it); None stands for an empty one.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Config, ProviderConfig
from ..errors import ConfigError, MissingExtra, UnknownModel
from .base import Provider
from .catalog import Catalog, ModelInfo, parse_model
from .clients import SharedClients
from .local import MODEL_ENV as LOCAL_MODEL_ENV
from .openai import PROFILES
from .retry import RetryPolicy

MODEL_ENV = "TETHER_MODEL"

PREFERENCE: tuple[str, ...] = ("anthropic", "openai", "openrouter", "deepseek", "groq", "moonshot", "zai")
"""Providers tried, in this order, for a default when no model is named: the first with a key wins."""

KEY_ENVS: Mapping[str, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    **{name: profile.api_key_env for name, profile in PROFILES.items() if profile.api_key_env},
}

DEFAULT_MODELS: Mapping[str, str] = {
    # Current models, none deprecated in the installed SDKs' tables (see the catalog): Anthropic's current
    # Sonnet; the model OpenAI's reasoning guide starts with and its SDK's examples use; Sonnet on OpenRouter.
    "anthropic": "claude-sonnet-5-5",
    "openai": "gpt-5.5",
    "openrouter": "anthropic/claude-sonnet-5.5",
    "deepseek": "deepseek-chat",
    "groq": "llama-3.3-70b-versatile",
    "moonshot": "kimi-k2-0905-preview",
    "zai": "glm-4.6",
    "local": "smollm2-135m",
}

BASE_URL_ENVS: Mapping[str, str] = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
"""The SDKs' own variables for another endpoint (a gateway, a proxy, a local server), honoured for the
providers of those names when config.toml sets no ``base_url``."""

BUILTIN_KINDS: Mapping[str, str] = {"anthropic": "anthropic", "local": "local", **dict.fromkeys(PROFILES, "openai")}


@dataclass(frozen=True)
class ResolvedModel:
    """A provider ready to stream, the model id to put in `ModelRequest.model`, and what the catalog knows."""

    provider: Provider
    model: str
    info: ModelInfo

    @property
    def id(self) -> str:
        return f"{self.provider.name}/{self.model}"


def provider_names(config: Config) -> list[str]:
    return list(dict.fromkeys([*BUILTIN_KINDS, *config.providers]))


def has_key(name: str, config: Config, env: Mapping[str, str] | None = None) -> bool:
    """Whether a key for provider `name` is set, in its config or its environment variable."""
    env = os.environ if env is None else env
    settings = config.providers.get(name, ProviderConfig())
    if settings.api_key:
        return True
    variable = settings.api_key_env or KEY_ENVS.get(name)
    return bool(variable and env.get(variable))


def key_required(name: str, config: Config) -> bool:
    """Whether provider `name` cannot run without a key: the hosted services. The embedded model, the local
    servers (``ollama``, ``vllm``, ``llamacpp``) and a ``[providers.NAME]`` of kind ``openai`` of one's own (a
    llama.cpp or vLLM server at its ``base_url``) need none."""
    settings = config.providers.get(name, ProviderConfig())
    kind = settings.kind or BUILTIN_KINDS.get(name)
    if kind == "anthropic":
        return True
    if kind == "openai":
        profile = PROFILES.get(name)
        return profile.key_required if profile is not None else False
    return False


def usable(name: str, config: Config, env: Mapping[str, str] | None = None) -> bool:
    """Whether provider `name` can run now: it has its key, or it needs none (`key_required`)."""
    return not key_required(name, config) or has_key(name, config, env)


def require_sdk(module: str) -> None:
    """`MissingExtra` (one line: the pip command) when the SDK a provider speaks through is not installed:
    said when the provider is made, before a run creates anything, never at its first model call."""
    if sys.modules.get(module, module) is None or importlib.util.find_spec(module) is None:
        raise MissingExtra(module, module)


def make_provider(
    name: str, config: Config | None = None, catalog: Catalog | None = None, *, clients: SharedClients | None = None
) -> Provider:
    """Build provider `name` (a built-in or one declared in config) with its config applied. An HTTP one takes
    its SDK client from `clients` when given (shared with the other runs of the process; see `clients`)."""
    config = config if config is not None else Config()
    catalog = catalog or Catalog.from_config(config)
    settings = config.providers.get(name, ProviderConfig())
    kind = settings.kind or BUILTIN_KINDS.get(name)
    if kind is None:
        raise ConfigError(f"unknown provider {name!r}: declare it in config.toml with [providers.{name}] kind = ...")
    retry = RetryPolicy(max_attempts=settings.max_attempts) if settings.max_attempts else None
    # what both HTTP adapters take from a provider's settings
    http: dict[str, Any] = {
        "base_url": settings.base_url or (os.environ.get(BASE_URL_ENVS[name]) if name in BASE_URL_ENVS else None),
        "api_key": settings.api_key,
        "api_key_env": settings.api_key_env,
        "timeout": settings.timeout or 300.0,
        "retry": retry,
        "headers": settings.headers,
        "catalog": catalog,
        "clients": clients,
    }
    if kind == "openai":
        from .openai import OpenAIProvider

        require_sdk("openai")
        return OpenAIProvider(name, **http)
    if kind == "anthropic":
        from .anthropic import AnthropicProvider

        require_sdk("anthropic")
        return AnthropicProvider(name, **http)
    if kind == "local":
        from .local import LocalProvider

        return LocalProvider(
            name,
            model_path=config.local.model_path,
            context_window=config.local.context_window or 8192,
            threads=config.local.threads,
            catalog=catalog,
        )
    raise ConfigError(f"[providers.{name}]: unknown kind {kind!r} (expected 'openai', 'anthropic' or 'local')")


def _default_model(name: str, config: Config) -> str:
    settings = config.providers.get(name, ProviderConfig())
    model = settings.default_model or DEFAULT_MODELS.get(name)
    if model is None:
        raise ConfigError(f"provider {name!r} has no default model: name one, e.g. '{name}/MODEL'")
    return model


def choose_model(
    spec: str | None = None,
    *,
    config: Config | None = None,
    catalog: Catalog | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """``(provider name, model id)`` for `spec`, without building anything. Order: `spec`, `TETHER_MODEL`,
    config ``default_model``, then the first keyed provider in `PREFERENCE`, then ``local``."""
    env = os.environ if env is None else env
    config = config if config is not None else Config()
    catalog = catalog or Catalog.from_config(config)
    spec = spec or env.get(MODEL_ENV) or config.default_model
    names = provider_names(config)
    if not spec:
        for name in PREFERENCE:
            if has_key(name, config, env):
                return name, _default_model(name, config)
        return "local", _default_model("local", config)
    provider, model = parse_model(spec, names)
    if provider is not None:
        check_local_model(provider, model, config, catalog, env)
        return provider, model
    if model in names:
        return model, _default_model(model, config)  # just a provider name: its default model
    candidates = catalog.providers_of(model)
    if not candidates:
        raise UnknownModel(
            f"unknown model {model!r}: write it as 'provider/model' (providers: {', '.join(names)}), "
            "or describe it in config.toml under [models]"
        )
    keyed = [p for p in PREFERENCE if p in candidates and has_key(p, config, env)]
    return (keyed[0] if keyed else candidates[0]), model


def check_local_model(provider: str, model: str, config: Config, catalog: Catalog, env: Mapping[str, str]) -> None:
    """The embedded provider runs the models it has: its catalog entries and those described in config, or
    any name when a GGUF file is configured (`[local] model_path`, `TETHER_LOCAL_MODEL`). Anything else is a
    `ConfigError` that says which there are, never a silent stand-in."""
    settings = config.providers.get(provider, ProviderConfig())
    if (settings.kind or BUILTIN_KINDS.get(provider)) != "local" or catalog.get(provider, model) is not None:
        return
    if config.local.model_path or env.get(LOCAL_MODEL_ENV):
        return
    known = [m.model for m in catalog if m.provider == provider]
    raise ConfigError(
        f"no local model {model!r}: the embedded models are {', '.join(known) or 'none'} "
        f"(or point [local] model_path in config.toml, or {LOCAL_MODEL_ENV}, at a GGUF file)"
    )


def resolve_provider(
    model: str | None = None, *, config: Config | None = None, clients: SharedClients | None = None
) -> ResolvedModel:
    """A ready provider for `model` (``"anthropic/claude-sonnet-5-5"``, ``"gpt-5.5"``, ``"openai"``, or None
    for the default); see `choose_model` for the order. Raises `ConfigError` for an unknown model or a
    provider whose key is missing. `clients`: where an HTTP provider takes its SDK client (a process's runs
    sharing their connections); without it, the provider makes its own and closes it in `aclose`."""
    config = config if config is not None else Config()
    catalog = Catalog.from_config(config)
    name, model_id = choose_model(model, config=config, catalog=catalog)
    provider = make_provider(name, config, catalog, clients=clients)
    return ResolvedModel(provider=provider, model=model_id, info=catalog.info(name, model_id))
