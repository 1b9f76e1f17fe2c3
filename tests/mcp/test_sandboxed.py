"""Stdio MCP servers run in the commands' sandbox (bubblewrap): a server a model drives cannot write outside
the workspace, reach tether's environment or a host UNIX socket; `[mcp.NAME] sandbox = false` runs one
unconfined."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tether.mcp.manager import McpManager
from tether.mcp.servers import ServerSpec
from tether.store.memory import MemoryStore
from tether.tools.base import ToolContext
from tether.tools.sandbox import Sandbox, SandboxPolicy, support

WRITER = textwrap.dedent(
    """
    import os, sys
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("writer", log_level="WARNING")

    @server.tool()
    def write(path: str, text: str) -> str:
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            return f"refused: {e.strerror}"
        return "written"

    @server.tool()
    def where() -> str:
        return f"{os.getpid()} {os.getcwd()} {os.getppid()}"

    server.run("stdio")
    """
)


def writer(ws: Path, **fields: object) -> ServerSpec:
    ws.mkdir(exist_ok=True)
    script = ws / "writer.py"  # (the real /tmp is not there under bubblewrap: the workspace is)
    script.write_text(WRITER)
    return ServerSpec(name="w", transport="stdio", command=sys.executable, args=(str(script),), source="test",
                      startup_timeout=60.0, call_timeout=30.0, **fields)  # fmt: skip


async def call(manager: McpManager, tmp_path: Path, tool: str, **args: object) -> str:
    found = await manager.tools()
    assert not found.failed, found.failed
    tools = {t.name: t for t in found.tools}
    ctx = ToolContext(workspace=tmp_path, session_id="ses_mcp", store=MemoryStore())
    return (await tools[f"mcp__w__{tool}"].run(dict(args), ctx)).content


@pytest.fixture
def box() -> Sandbox:
    if support("bwrap").mechanism is None:
        pytest.fail("bubblewrap is needed for the sandboxed MCP servers")
    return Sandbox(SandboxPolicy(network="on"))


async def test_a_sandboxed_server_writes_its_workspace_and_nothing_else(tmp_path: Path, box: Sandbox) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home_file = Path.home() / ".tether-mcp-sandbox-test"
    manager = McpManager([writer(ws)], sandbox=box, workspace=str(ws))
    try:
        assert await call(manager, tmp_path, "write", path=str(ws / "in.txt"), text="x") == "written"
        assert "refused: Read-only file system" in await call(manager, tmp_path, "write", path=str(home_file), text="x")
        pid, cwd, _ = (await call(manager, tmp_path, "where")).split()
        assert cwd == str(ws.resolve()) and int(pid) < 10  # its own PID namespace: tether is not in it
    finally:
        await manager.close()
    assert (ws / "in.txt").read_text() == "x" and not home_file.exists()


async def test_a_server_that_opts_out_runs_unconfined(tmp_path: Path, box: Sandbox) -> None:
    target = tmp_path / "outside.txt"
    manager = McpManager([writer(tmp_path / "ws", sandboxed=False)], sandbox=box, workspace=str(tmp_path / "ws"))
    try:
        assert await call(manager, tmp_path, "write", path=str(target), text="y") == "written"
    finally:
        await manager.close()
    assert target.read_text() == "y"
