"""resolve_provider: model names, the documented preference order among configured keys, and the local
fallback. Keys are set with monkeypatch; the shared conftest removes every *_API_KEY first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tether.config import parse_config
from tether.errors import ConfigError
from tether.providers import PREFERENCE, choose_model, make_provider, resolve_provider
from tether.providers.anthropic import AnthropicProvider
from tether.providers.catalog import Catalog
from tether.providers.local import LocalProvider
from tether.providers.openai import OpenAIProvider
from tether.providers.registry import DEFAULT_MODELS, KEY_ENVS


def test_no_key_anywhere_falls_back_to_the_local_model() -> None:
    resolved = resolve_provider()
    assert isinstance(resolved.provider, LocalProvider)
    assert resolved.id == "local/smollm2-135m"
    assert resolved.info.context_window == 8192


@pytest.mark.parametrize("position", range(len(PREFERENCE)))
def test_the_first_keyed_provider_in_preference_order_wins(monkeypatch: pytest.MonkeyPatch, position: int) -> None:
    # Set the key of this provider and of every provider after it: this one must be chosen.
    for name in PREFERENCE[position:]:
        monkeypatch.setenv(KEY_ENVS[name], f"key-for-{name}")
    provider, _model = choose_model(config=parse_config(""))
    assert provider == PREFERENCE[position]


def test_preference_order_is_anthropic_then_openai_then_openrouter() -> None:
    assert PREFERENCE[:3] == ("anthropic", "openai", "openrouter")


def test_explicit_model_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-test")
    resolved = resolve_provider("openai/gpt-4o")
    assert isinstance(resolved.provider, OpenAIProvider)
    assert (resolved.provider.name, resolved.model) == ("openai", "gpt-4o")
    assert resolved.info.context_window == 128_000

    # A bare id found in the catalog goes to the provider that lists it.
    bare = resolve_provider("claude-haiku-4-5")
    assert isinstance(bare.provider, AnthropicProvider)
    assert bare.model == "claude-haiku-4-5"

    # Just a provider name: its default model.
    assert resolve_provider("anthropic").id == "anthropic/claude-sonnet-5-5"

    # Ids with slashes after the provider stay whole.
    monkeypatch.setenv("OPENROUTER_API_KEY", "or-test")
    assert resolve_provider("openrouter/google/gemini-2.5-pro").model == "google/gemini-2.5-pro"


def test_tether_model_env_and_config_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = parse_config('default_model = "openai/gpt-4.1-mini"')
    assert choose_model(config=config) == ("openai", "gpt-4.1-mini")
    monkeypatch.setenv("TETHER_MODEL", "openai/o3")
    assert choose_model(config=config) == ("openai", "o3")
    assert choose_model("openai/gpt-4o", config=config) == ("openai", "gpt-4o")


def test_unknown_bare_model_and_missing_key_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="provider/model"):
        resolve_provider("totally-unknown-model")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        resolve_provider("anthropic/claude-sonnet-4-5")
    with pytest.raises(ConfigError, match="unknown provider"):
        make_provider("nobody", parse_config(""))


def test_a_provider_declared_in_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_TOKEN", "lab-secret")
    config = parse_config(
        """
        [providers.lab]
        kind = "openai"
        base_url = "http://127.0.0.1:9/v1"
        api_key_env = "LAB_TOKEN"
        default_model = "tiny"
        max_attempts = 2
        """
    )
    resolved = resolve_provider("lab", config=config)
    provider = resolved.provider
    assert isinstance(provider, OpenAIProvider)
    assert (provider.base_url, resolved.model, provider.retry.max_attempts) == ("http://127.0.0.1:9/v1", "tiny", 2)
    assert not resolved.info.known
    assert "lab-secret" not in repr(provider) and "lab-secret" not in repr(resolved)

    with pytest.raises(ConfigError, match="unknown kind"):
        make_provider("odd", parse_config('[providers.odd]\nkind = "carrier-pigeon"\n'))


def test_a_key_in_config_counts_as_configured() -> None:
    config = parse_config('[providers.deepseek]\napi_key = "ds-from-config"\n')
    assert choose_model(config=config) == ("deepseek", "deepseek-chat")
    provider = make_provider("deepseek", config)
    assert "ds-from-config" not in repr(provider)


def test_local_servers_need_no_key() -> None:
    provider = make_provider("ollama", parse_config(""))
    assert isinstance(provider, OpenAIProvider)
    assert provider.base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize("provider", sorted(DEFAULT_MODELS))
def test_no_default_model_is_deprecated(provider: str) -> None:
    info = Catalog().get(provider, DEFAULT_MODELS[provider])
    assert info is not None, "every default model is in the catalog"
    assert not info.deprecated and info.retires is None


def test_the_anthropic_and_openai_defaults_are_models_their_sdks_name() -> None:
    from typing import get_args

    from anthropic.resources.messages import DEPRECATED_MODELS
    from anthropic.types.model import Model
    from openai.types.shared.chat_model import ChatModel

    claude_ids = {v for arg in get_args(Model) for v in get_args(arg)}
    assert DEFAULT_MODELS["anthropic"] in claude_ids
    assert DEFAULT_MODELS["anthropic"] not in DEPRECATED_MODELS
    assert DEFAULT_MODELS["openai"] in get_args(ChatModel)


def test_the_sdks_base_url_variables_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8001/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:8002")
    assert make_provider("openai", parse_config("")).base_url == "http://127.0.0.1:8001/v1"  # type: ignore[attr-defined]
    assert make_provider("anthropic", parse_config("")).base_url == "http://127.0.0.1:8002"  # type: ignore[attr-defined]
    # config.toml says more than the environment; other OpenAI-compatible providers keep their own address
    configured = parse_config('[providers.openai]\nbase_url = "http://gateway/v1"\n')
    assert make_provider("openai", configured).base_url == "http://gateway/v1"  # type: ignore[attr-defined]
    monkeypatch.setenv("OPENROUTER_API_KEY", "x")
    assert make_provider("openrouter", parse_config("")).base_url == "https://openrouter.ai/api/v1"  # type: ignore[attr-defined]
    monkeypatch.setenv("OPENAI_BASE_URL", "")
    assert make_provider("openai", parse_config("")).base_url == "https://api.openai.com/v1"  # type: ignore[attr-defined]


def test_the_local_provider_runs_only_models_it_has(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert resolve_provider("local/smollm2-135m").model == "smollm2-135m"
    with pytest.raises(ConfigError, match="no local model 'nosuch': the embedded models are smollm2-135m"):
        resolve_provider("local/nosuch")
    described = parse_config('[models."local/mine"]\ncontext_window = 4096\n')
    assert resolve_provider("local/mine", config=described).info.context_window == 4096
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert (
        resolve_provider("local/anything", config=parse_config(f'[local]\nmodel_path = "{gguf}"\n')).model == "anything"
    )
    monkeypatch.setenv("TETHER_LOCAL_MODEL", str(gguf))
    assert resolve_provider("local/other").model == "other"


def test_a_missing_sdk_is_said_when_the_provider_is_made_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.errors import MissingExtra

    config = parse_config('[providers.lab]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n')
    monkeypatch.setitem(sys.modules, "openai", None)  # as if the SDK were not installed
    with pytest.raises(MissingExtra) as caught:
        resolve_provider("lab/m", config=config)
    assert "\n" not in str(caught.value) and "pip install 'tether[openai]'" in str(caught.value)


def test_keyless_providers_are_usable_and_hosted_ones_need_their_key() -> None:
    from tether.providers.registry import key_required, usable

    config = parse_config('[providers.lab]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n')
    env: dict[str, str] = {}
    assert usable("lab", config, env) and usable("local", config, env) and usable("ollama", config, env)
    assert not key_required("llamacpp", config)
    assert key_required("openai", config) and not usable("openai", config, env)
    assert key_required("anthropic", config) and not usable("anthropic", config, env)
    assert usable("openai", config, {"OPENAI_API_KEY": "sk-x"})
