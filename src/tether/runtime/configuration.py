"""Reading the user's configuration: the one place that opens `config.toml` (see `tether.config` for its
shape). Whoever starts work (the CLI, a server, `Session.stream` without a provider) reads it here and
passes what it found down; nothing below the runtime reads configuration."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ..config import Config, parse_config
from ..context.budget import ContextSettings
from ..errors import ConfigError, InvalidInput
from ..paths import config_path


def load_config(path: Path | None = None) -> Config:
    """The user's config (`config_path()` by default), or an empty one when the file does not exist."""
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    return parse_config(text, source=str(path))


def context_settings(config: Config, *, source: str | None = None) -> ContextSettings:
    """The ``[context]`` section as the context engine's settings; a bad value is a `ConfigError` naming
    where it came from."""
    try:
        return msgspec.convert(config.context, ContextSettings).validate()
    except (msgspec.ValidationError, InvalidInput) as exc:
        raise ConfigError(f"[context] in {source or config_path()}: {exc}") from None
