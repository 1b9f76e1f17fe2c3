"""Reading the configuration, the runtime's job: the file under the tether home (or TETHER_CONFIG), a
missing file, an unreadable one, and the [context] section as the context engine's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.config import Config, parse_config
from tether.errors import ConfigError
from tether.paths import config_path
from tether.runtime.configuration import context_settings, load_config


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


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)


def test_the_context_section_becomes_the_engine_settings() -> None:
    settings = context_settings(parse_config("[context]\nauto_compact = false\ncompact_threshold = 0.8\n"))
    assert settings.auto_compact is False and settings.compact_threshold == 0.8
    assert context_settings(Config()).auto_compact is None


@pytest.mark.parametrize("text", ["[context]\ncompact_threshold = 7\n", "[context]\nno_such_setting = 1\n"])
def test_a_bad_context_setting_is_a_config_error_naming_the_file(text: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\[context\] in .*cfg\.toml"):
        context_settings(parse_config(text), source=str(tmp_path / "cfg.toml"))
