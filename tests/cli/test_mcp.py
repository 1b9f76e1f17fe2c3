"""`tether mcp list | add | remove | test` as a user types them: the config file edited and kept as written,
a workspace's `.mcp.json` shown and enabled, a real server started by `test`, bad input refused in a line."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("mcp", reason="the mcp extra (pip install 'tether[mcp]')")

from tether.cli.main import cli
from tether.paths import config_path

SERVER = Path(__file__).parents[1] / "mcp" / "sdk_server.py"


def tether(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    old = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(cli, list(args))
    finally:
        os.chdir(old)
    return result.exit_code, result.output


def test_add_list_test_remove(tmp_path: Path) -> None:
    config_path().parent.mkdir(parents=True, exist_ok=True)
    config_path().write_text('default_model = "openai/gpt-4.1"  # mine\n')
    code, out = tether(
        "mcp", "add", "calc", "--env", "GREETING=hi", "--call-timeout", "9", "--", sys.executable, str(SERVER), "stdio"
    )
    assert code == 0, out
    text = config_path().read_text()
    assert text.startswith('default_model = "openai/gpt-4.1"  # mine\n')  # the rest of the file as written
    table = tomllib.loads(text)["mcp"]["calc"]
    assert table == {
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {"GREETING": "hi"},
        "call_timeout": 9.0,
    }
    code, out = tether("mcp", "add", "calc", "--", "other")
    assert code == 1 and "already has [mcp.calc]" in out
    code, out = tether("mcp", "list", "--json", cwd=tmp_path)
    assert code == 0 and json.loads(out)[0]["name"] == "calc" and json.loads(out)[0]["enabled"]
    code, out = tether("mcp", "test", "calc", "--json", cwd=tmp_path)
    assert code == 0, out
    report = json.loads(out)
    names = {t["name"] for t in report["tools"]}
    assert "mcp__calc__add" in names and report["tokens"] > 100
    echo = next(t for t in report["tools"] if t["name"] == "mcp__calc__echo")
    assert echo["hints"] == {"read_only": True}
    code, out = tether("mcp", "remove", "calc")
    assert code == 0 and "calc" not in tomllib.loads(config_path().read_text()).get("mcp", {})
    assert config_path().read_text().startswith('default_model = "openai/gpt-4.1"  # mine\n')
    code, out = tether("mcp", "remove", "calc")
    assert code == 2 and "no [mcp.calc]" in out


def test_a_workspace_server_is_shown_off_until_enabled(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"calc": {"command": sys.executable, "args": [str(SERVER), "stdio"]}}})
    )
    code, out = tether("mcp", "list", cwd=tmp_path)
    assert code == 0 and "calc" in out and "off" in out and "enabled = true" in out
    code, out = tether("mcp", "add", "calc")
    assert code == 0 and "enabled the workspace's server calc" in out
    code, out = tether("mcp", "list", "--json", cwd=tmp_path)
    [server] = json.loads(out)
    assert server["enabled"] and server["source"].endswith(".mcp.json")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    assert tether("mcp", "add", "x", "--env", "NOEQUALS", "--", "cmd")[0] == 2
    code, out = tether("mcp", "add", "x", "--url", "ftp://nope")
    assert code != 0 and "http:// or https://" in out
    code, out = tether("mcp", "add", "bad name", "--", "cmd")
    assert code != 0 and "server name" in out
    code, out = tether("mcp", "test", "nothing", cwd=tmp_path)
    assert code == 2 and "no MCP server named 'nothing'" in out
    code, out = tether("mcp", "add", "gone", "--", "/nonexistent/server")
    assert code == 0
    code, out = tether("mcp", "test", "gone", cwd=tmp_path)
    assert code == 1 and "not found" in out
