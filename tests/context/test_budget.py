"""The budget of a step and the settings that shape it: defaults, per-model and per-session overrides, and
bad values refused with a message that names them."""

from __future__ import annotations

import pytest

from tether.context.budget import (
    Budget,
    ContextSettings,
    compute_budget,
    resolve_settings,
    settings_from_metadata,
)
from tether.errors import InvalidInput


def test_default_budget_reserves_output_and_a_margin() -> None:
    budget = compute_budget(200_000, 64_000)
    assert budget == Budget(context_window=200_000, reserved_output=20_000, safety_margin=4_000)
    assert budget.usable == 176_000
    assert budget.threshold() == int(176_000 * 0.9)
    assert budget.threshold(0.5) == 88_000


def test_reserved_output_is_the_model_max_when_smaller() -> None:
    assert compute_budget(128_000, 4_096).reserved_output == 4_096


def test_small_windows_keep_room_for_input() -> None:
    budget = compute_budget(8_192, 8_192)  # a local model whose output limit is its whole window
    assert budget.reserved_output == 2_048
    assert budget.usable == 8_192 - 2_048 - 512


def test_settings_override_every_term() -> None:
    settings = ContextSettings(context_window=50_000, reserved_output=1_000, safety_margin=0)
    assert compute_budget(200_000, 64_000, settings).usable == 49_000


def test_a_budget_with_no_input_left_is_refused() -> None:
    with pytest.raises(InvalidInput, match="tokens of input"):
        compute_budget(10_000, settings=ContextSettings(reserved_output=9_900))
    with pytest.raises(InvalidInput, match="at least"):
        compute_budget(100)


def test_session_metadata_settings() -> None:
    assert settings_from_metadata(None) == ContextSettings()
    assert settings_from_metadata({"auto_compact": False}).auto_compact is False
    nested = settings_from_metadata({"context": {"reserved_output": 8_000, "policy": "relevant"}})
    assert nested.reserved_output == 8_000 and nested.policy == "relevant"
    # the nested form wins over the shorthand
    both = settings_from_metadata({"auto_compact": True, "context": {"auto_compact": False}})
    assert both.auto_compact is False


@pytest.mark.parametrize(
    "metadata",
    [
        {"auto_compact": "no"},
        {"context": {"reserved_output": -1}},
        {"context": {"compact_threshold": 1.5}},
        {"context": {"policy": "everything"}},
        {"context": {"unknown_knob": 1}},
        {"context": ["not", "a", "map"]},
        {"context": {"context_window": 10}},
    ],
)
def test_bad_session_settings_are_invalid_input(metadata: dict[str, object]) -> None:
    with pytest.raises(InvalidInput):
        settings_from_metadata(metadata)


def test_resolve_settings_first_layer_wins() -> None:
    session = ContextSettings(auto_compact=False)
    model = ContextSettings(reserved_output=4_000, auto_compact=True)
    config = ContextSettings(reserved_output=10_000, compact_threshold=0.8)
    merged = resolve_settings(session, model, config)
    assert merged.auto_compact is False
    assert merged.reserved_output == 4_000
    assert merged.compact_threshold == 0.8
    assert resolve_settings(None, None) == ContextSettings()
