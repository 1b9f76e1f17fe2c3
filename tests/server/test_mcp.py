"""The server's MCP routes (`GET /mcp`, `POST /mcp/servers`, `DELETE /mcp/servers/{name}`, `POST
/mcp/servers/{name}/start`) through the typed client, with the SDK-written test server over stdio: added while
the server runs, its tools used by a run, a bad one that says why it did not start, removed again."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install 'tether[mcp]')")

from tether import Message, ToolCallPart
from tether.client import TetherClient
from tether.errors import NotFound
from tether.events import Done
from tether.providers.base import ModelRequest

from .conftest import Served, serve

SERVER = Path(__file__).parents[1] / "mcp" / "sdk_server.py"


def adds(request: ModelRequest) -> Message | str:
    last = request.messages[-1]
    if last.role == "user":
        call = ToolCallPart(id="m1", name="mcp__calc__add", arguments={"a": 5, "b": 6})
        return Message.assistant(tool_calls=[call])
    return f"sum: {last.tool_results[0].content}"


async def test_servers_are_added_used_and_removed_while_the_server_runs(tmp_path: Path) -> None:
    served: Served
    with serve(tmp_path, adds) as served:
        async with TetherClient(served.url) as client:
            assert (await client.mcp_status()).servers == []
            view = await client.add_mcp_server(
                "calc", command=sys.executable, args=[str(SERVER), "stdio"], env={"A_SETTING": "1"}
            )
            assert view.state == "ready" and "add" in view.tools and view.pid is not None
            bad = await client.add_mcp_server("bad", command="/nonexistent/mcp-server")
            assert bad.state == "failed" and "not found" in (bad.error or "")
            states = {s.name: s.state for s in (await client.mcp_status()).servers}
            assert states == {"calc": "ready", "bad": "failed"}
            created = await client.create_session(str(served.workspace), prompt="add them", allow=["mcp__calc__*"])
            done = None
            async for event in client.events(created.session.id, after=0):
                if isinstance(event, Done):
                    done = event
                    break
            assert done is not None and done.text.startswith("sum: 11")
            await client.remove_mcp_server("bad")
            assert [s.name for s in (await client.mcp_status()).servers] == ["calc"]
            with pytest.raises(NotFound):
                await client.remove_mcp_server("bad")
            with pytest.raises(NotFound):
                await client.start_mcp_server("bad")
            assert (await client.start_mcp_server("calc")).state == "ready"
