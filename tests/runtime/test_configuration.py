"""Reading the configuration, the runtime's job: the file under the tether home (or TETHER_CONFIG), a
missing file, an unreadable one, and the [context] section as the context engine's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.config import Config, parse_config
from tether.errors import ConfigError, InvalidInput
from tether.paths import config_path
from tether.runtime.configuration import context_settings, load_config, permission_rules


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


def test_the_rules_of_the_same_layers_are_built_once_and_a_bad_flag_fails_each_time(tmp_path: Path) -> None:
    config = parse_config('[permissions]\nallow = ["read"]\ndeny = ["bash(rm *)"]\n')
    first = permission_rules(config, tmp_path, allow=["bash(git status*)"])
    again = permission_rules(config, tmp_path, allow=["bash(git status*)"])
    assert first is again  # the same layers: built once
    assert permission_rules(config, tmp_path, allow=["bash(ls*)"]) is not first
    assert permission_rules(config, tmp_path, mode="plan").mode == "plan"
    for _ in range(2):
        with pytest.raises(InvalidInput, match="--allow"):
            permission_rules(config, tmp_path, allow=["bash()"])
    with pytest.raises(InvalidInput, match="--allow"):
        permission_rules(config, tmp_path, allow=[{"not": "a rule"}])  # type: ignore[list-item]
    # a workspace's file, once there, counts (read again since it changed)
    (tmp_path / ".tether").mkdir()
    (tmp_path / ".tether" / "config.toml").write_text('[permissions]\ndeny = ["write"]\n')
    with_project = permission_rules(config, tmp_path, allow=["bash(git status*)"])
    assert any(r.tool == "write" and r.action == "deny" for r in with_project.rules)
