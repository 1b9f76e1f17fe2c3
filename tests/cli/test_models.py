"""`tether models` through the real CLI: which models their providers retire, long-context prices, and a
warning when the default model is a deprecated one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tether.cli.main import cli


def invoke(tmp_path: Path, *args: str) -> tuple[int, str]:
    runner = CliRunner()
    # a wide terminal, so that no cell of the table is wrapped
    result = runner.invoke(cli, ["--store", f"sqlite:///{tmp_path / 'cli.db'}", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout


def row(out: str, model: str) -> str:
    return next(line for line in out.splitlines() if f" {model} " in line)


def test_json_carries_deprecation_and_long_context_prices(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "models", "--json")
    assert code == 0
    data = json.loads(out)
    models = {f"{m['provider']}/{m['model']}": m for m in data["models"]}
    sonnet = models["anthropic/claude-sonnet-4-5"]
    assert sonnet["deprecated"] is True and sonnet["retires"] == "2026-11-30"
    assert models["anthropic/claude-opus-4-1"]["deprecated"] is True  # retired, on no announced day
    assert models["anthropic/claude-opus-4-1"]["retires"] is None
    current = models["anthropic/claude-sonnet-5-5"]
    assert current["deprecated"] is False and current["retires"] is None
    assert models["anthropic/claude-haiku-5-5"]["long_context"]["above"] == 100_000
    assert models["anthropic/claude-fable-5-2"]["input_price"] is None  # unknown, not made up
    assert data["default_status"] is None  # the embedded model: no keys in the test environment


def test_the_table_shows_what_is_retired_and_what_retires(tmp_path: Path) -> None:
    code, out = invoke(tmp_path, "models", "--provider", "anthropic")
    assert code == 0
    assert "status" in out
    assert "retired 2026-02-19" in row(out, "anthropic/claude-3-7-sonnet-latest")  # a day long past
    assert "2026-11-30" in row(out, "anthropic/claude-sonnet-4-5")
    assert "deprecated" in row(out, "anthropic/claude-opus-4-1")
    assert "retire" not in row(out, "anthropic/claude-sonnet-5-5") and "deprecated" not in row(
        out, "anthropic/claude-sonnet-5-5"
    )
    assert "$0.10*" in row(out, "anthropic/claude-haiku-5-5")  # priced up to a prompt size
    assert "longer prompts cost more" in out
    assert "the default model is deprecated" not in out


def test_a_deprecated_default_is_called_out(tmp_path: Path) -> None:
    config = Path(os.environ["TETHER_HOME"]) / "config.toml"
    config.write_text('default_model = "anthropic/claude-3-7-sonnet-latest"\n')
    code, out = invoke(tmp_path, "models")
    assert code == 0
    assert "the default model is deprecated (retired 2026-02-19)" in out
    code, out = invoke(tmp_path, "models", "--json")
    assert json.loads(out)["default_status"] == "retired 2026-02-19"


@pytest.mark.slow
def test_models_at_80_columns_drop_columns_and_never_cut_a_figure(terminal80: Any) -> None:
    screen = terminal80.run("models")
    lines = screen.splitlines()
    assert all(len(line) <= 80 for line in lines)
    rows = [line for line in lines if line.startswith("│")]
    assert rows and not any("…" in row for row in rows)
    # the table's right edge is there: a header that does not wrap ("out $/M") once made it a column too
    # wide, and the terminal cropped its last characters
    assert all(
        line.rstrip().endswith(("│", "┃", "┓", "┩", "┘"))
        for line in lines
        if line.startswith(("│", "┃", "┏", "┡", "└"))
    )
    header = next(line for line in lines if line.startswith("┃") and "model" in line)
    assert "context" in header and "in $/M" in header and "out $/M" in header
    assert "not shown at this width: max out, cache read, cache write" in screen
    catalog = json.loads(CliRunner().invoke(cli, ["models", "--json"]).output)["models"]
    table = "\n".join(rows)
    for model in catalog:
        assert f"{model['context_window']:,}" in table  # every window whole
