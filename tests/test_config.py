"""The shape of config.toml: parsing, exact prices, secrets kept out of repr, and clear errors for mistakes."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tether.config import parse_config
from tether.errors import ConfigError


def test_prices_stay_exact_decimals() -> None:
    config = parse_config('[models."a/b"]\ninput_price = 0.1\noutput_price = "0.3"\ncache_read_price = 1\n')
    model = config.models["a/b"]
    assert (model.input_price, model.output_price, model.cache_read_price) == (Decimal("0.1"), Decimal("0.3"), 1)


def test_an_api_key_in_config_is_never_shown_by_repr() -> None:
    config = parse_config('[providers.openai]\napi_key = "sk-secret-123"\nbase_url = "http://x/v1"\n')
    shown = repr(config) + repr(config.providers["openai"])
    assert "sk-secret-123" not in shown
    assert "***" in shown and "http://x/v1" in shown


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("default_model = ", "not valid TOML"),
        ("[providers.openai]\nbase_urll = 'x'\n", "base_urll"),
        ('[models."a/b"]\ninput_price = "cheap"\n', "input_price"),
        ("[local]\nthreads = 'many'\n", "threads"),
        ("[runtime]\nmax_parallel_tasks = 0\n", "max_parallel_tasks"),
        ('[agents."two words"]\n', "agents"),
        ("[agents.review]\ntool = ['read']\n", "tool"),
    ],
)
def test_mistakes_are_config_errors_that_say_where(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        parse_config(text, source="/home/u/config.toml")
    assert "/home/u/config.toml" in str(caught.value)


def test_the_bash_tool_s_environment_settings() -> None:
    config = parse_config('[tools.bash]\nallow_env = ["GITHUB_TOKEN"]\ndeny_env = ["DATABASE_URL", "CORP_*"]\n')
    assert config.tools.bash.allow_env == ["GITHUB_TOKEN"]
    assert config.tools.bash.deny_env == ["DATABASE_URL", "CORP_*"]
    assert parse_config("").tools.bash.allow_env == []


@pytest.mark.parametrize(
    "text",
    ['[tools.bash]\nallow_env = ["NOT A NAME"]\n', "[tools.bash]\nallow_env = 'GITHUB_TOKEN'\n", "[tools.zsh]\n"],
)
def test_bad_bash_settings_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match=r"tools"):
        parse_config(text, source="config.toml")
