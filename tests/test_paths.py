"""Where tether keeps things: the home, the config file and the default store inside it, and the canonical
form of a workspace path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.paths import canonical_directory, config_path, default_store_url, tether_home


def test_canonical_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert canonical_directory(tmp_path / "link") == str(real.resolve())
    assert canonical_directory(str(real / "sub" / "..")) == str(real.resolve())
    monkeypatch.chdir(real)
    assert canonical_directory(None) == str(real.resolve())
    assert canonical_directory(".") == str(real.resolve())
    monkeypatch.setenv("HOME", str(real))
    assert canonical_directory("~") == str(real.resolve())


def test_home_config_and_store_follow_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TETHER_CONFIG", raising=False)
    assert tether_home() == tmp_path / "home"
    assert config_path() == tmp_path / "home" / "config.toml"
    assert default_store_url() == f"sqlite:///{tmp_path / 'home' / 'tether.db'}"
    monkeypatch.setenv("TETHER_STORE", "memory://")
    monkeypatch.setenv("TETHER_CONFIG", str(tmp_path / "c.toml"))
    assert (default_store_url(), config_path()) == ("memory://", tmp_path / "c.toml")
    monkeypatch.delenv("TETHER_HOME")
    assert tether_home().name == "tether"  # the user data directory
