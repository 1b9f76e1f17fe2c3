"""The user's config.toml: parsing, defaults, and clear errors for mistakes."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from tether.config import Config, config_path, load_config, parse_config
from tether.errors import ConfigError


def test_missing_file_is_an_empty_config(tmp_path: Path) -> None:
    assert load_config(tmp_path / "nope.toml") == Config()


def test_the_file_lives_under_tether_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    assert config_path() == tmp_path / "config.toml"
    (tmp_path / "config.toml").write_text('default_model = "openai/gpt-4.1"\n[providers.openai]\nmax_attempts = 2\n')
    config = load_config()
    assert config.default_model == "openai/gpt-4.1"
    assert config.providers["openai"].max_attempts == 2
    monkeypatch.setenv("TETHER_CONFIG", str(tmp_path / "other.toml"))
    assert config_path() == tmp_path / "other.toml"


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
    ],
)
def test_mistakes_are_config_errors_that_say_where(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        parse_config(text, source="/home/u/config.toml")
    assert "/home/u/config.toml" in str(caught.value)


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)
