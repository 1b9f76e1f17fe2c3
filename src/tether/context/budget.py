"""How many input tokens a step may use, and the knobs that decide it: `ContextSettings` (from config, per
model, per session) and `Budget` (context window - reserved output - safety margin = usable input)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from ..errors import InvalidInput

Mode = Literal["full", "compacted", "relevant"]

DEFAULT_RESERVED_OUTPUT = 20_000
DEFAULT_COMPACT_THRESHOLD = 0.9
MIN_USABLE = 256


class ContextSettings(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """What the context engine may do, and within what. Every field is optional: an unset one inherits
    from the next layer down (session metadata over the model's settings over the config's, over the
    defaults). In session metadata they live under ``metadata["context"]``; ``metadata["auto_compact"]``
    is accepted as a shorthand for the switch that users reach for most."""

    context_window: int | None = None
    """Override the model catalog's window (a gateway that serves less, a local model run smaller)."""
    reserved_output: int | None = None
    """Tokens kept free for the reply. Default: min(20,000, the model's max output, a quarter of the window)."""
    safety_margin: int | None = None
    """Tokens kept free for the error of the estimate. Default: 2% of the window, at least 512."""
    auto_compact: bool | None = None
    """False turns compaction off on every automatic path, the overflow path included. Default: on."""
    compact_threshold: float | None = None
    """Compact before a step once the estimate passes this share of the usable budget. Default: 0.9."""
    keep_recent_tokens: int | None = None
    """How much of the newest history a compaction keeps verbatim. Default: a fifth of the usable budget."""
    policy: Mode | None = None
    """How the context is derived: ``compacted`` (default), ``full`` or ``relevant``."""
    prune_tool_outputs: bool | None = None
    """Replace old tool outputs by pointers (the newest 40,000 tokens of them stay). Default: on."""
    compaction_model: str | None = None
    """``provider/model`` that writes summaries. Default: the session's own model."""
    compaction_facts: bool | None = None
    """Append mechanically extracted facts (the user's constraints verbatim, files, commands, errors) to
    model-written summaries too. Default: on."""

    def over(self, base: ContextSettings) -> ContextSettings:
        """These settings with `base`'s filling the fields that are unset here."""
        fields = {f: getattr(self, f) for f in self.__struct_fields__ if getattr(self, f) is not None}
        return msgspec.structs.replace(base, **fields)

    def validate(self) -> ContextSettings:
        for name in ("context_window", "reserved_output", "safety_margin", "keep_recent_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidInput(f"context setting {name} must be a non-negative integer, not {value!r}")
        if self.context_window is not None and self.context_window < MIN_USABLE:
            raise InvalidInput(f"context_window must be at least {MIN_USABLE}, not {self.context_window}")
        t = self.compact_threshold
        if t is not None and not (isinstance(t, int | float) and not isinstance(t, bool) and 0 < t <= 1):
            raise InvalidInput(f"compact_threshold must be a share in (0, 1], not {t!r}")
        return self


def settings_from_metadata(metadata: Mapping[str, Any] | None) -> ContextSettings:
    """The context settings a session's metadata holds (``context`` and the ``auto_compact`` shorthand).
    Bad values are an `InvalidInput` naming the field."""
    if not metadata:
        return ContextSettings()
    raw = metadata.get("context") or {}
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"session metadata 'context' must be an object, not {type(raw).__name__}")
    data = dict(raw)
    if "auto_compact" in metadata and "auto_compact" not in data:
        data["auto_compact"] = metadata["auto_compact"]
    try:
        settings = msgspec.convert(data, ContextSettings, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidInput(f"session metadata 'context': {exc}") from None
    return settings.validate()


def resolve_settings(*layers: ContextSettings | None) -> ContextSettings:
    """Merge settings, the first given winning: ``resolve_settings(session, model, config)``."""
    out = ContextSettings()
    for layer in reversed(layers):
        if layer is not None:
            out = layer.validate().over(out)
    return out


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """The token budget of one model call."""

    context_window: int
    reserved_output: int
    safety_margin: int

    @property
    def usable(self) -> int:
        """Input tokens a request may hold: the window less the reply and the margin."""
        return self.context_window - self.reserved_output - self.safety_margin

    def threshold(self, share: float = DEFAULT_COMPACT_THRESHOLD) -> int:
        """The estimate above which a step compacts first."""
        return int(self.usable * share)


def compute_budget(
    context_window: int, max_output: int | None = None, settings: ContextSettings | None = None
) -> Budget:
    """The budget of a model with `context_window` tokens and replies of at most `max_output`, under
    `settings` (which may override all three terms). Raises `InvalidInput` when nothing usable is left."""
    s = (settings or ContextSettings()).validate()
    window = s.context_window or context_window
    if not isinstance(window, int) or window < MIN_USABLE:
        raise InvalidInput(f"context window must be at least {MIN_USABLE} tokens, not {window!r}")
    if s.reserved_output is not None:
        reserved = s.reserved_output
    else:
        # A quarter of the window at most, so that small local models keep room for their input.
        reserved = min(DEFAULT_RESERVED_OUTPUT, max_output or DEFAULT_RESERVED_OUTPUT, window // 4)
    margin = s.safety_margin if s.safety_margin is not None else max(512, window // 50)
    budget = Budget(context_window=window, reserved_output=reserved, safety_margin=margin)
    if budget.usable < MIN_USABLE:
        raise InvalidInput(
            f"a {window}-token window less {reserved} reserved for output and a {margin}-token margin leaves "
            f"{budget.usable} tokens of input; at least {MIN_USABLE} are needed"
        )
    return budget
