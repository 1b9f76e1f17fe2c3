"""GET /sessions/{id}/export in Claude Code's and Codex's formats, over a real HTTP server on loopback: the
JSON Lines body, and what the format could not carry in the ``X-Tether-Export-Report`` header."""

from __future__ import annotations

import http.client
import json

import pytest

from tether.client import TetherClient
from tether.errors import SessionNotFound
from tether.messages import Message, TextPart, ThinkingPart

from .conftest import Served


async def test_claude_code_and_codex_formats(server: Served) -> None:
    async def make() -> str:
        store = server.state.store
        info = await store.create_session(directory=str(server.workspace))
        unsigned = ThinkingPart(text="hmm", provider="local")
        await store.append(
            info.id, [Message.user("hello"), Message(role="assistant", parts=[unsigned, TextPart(text="hi")])]
        )
        return info.id

    sid = server.call(make())
    async with TetherClient(server.url) as client:
        lines = [json.loads(line) for line in (await client.export(sid, format="claude-code")).splitlines()]
        assert [ln["type"] for ln in lines] == ["user", "assistant", "summary"]
        rollout = [json.loads(line) for line in (await client.export(sid, format="codex")).splitlines()]
        assert rollout[0]["type"] == "session_meta" and rollout[0]["payload"]["cwd"] == str(server.workspace)
        with pytest.raises(SessionNotFound):
            await client.export("ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", format="codex")
    connection = http.client.HTTPConnection(server.host, timeout=30)
    try:
        connection.request("GET", f"/sessions/{sid}/export?format=claude-code")
        response = connection.getresponse()
        response.read()
        report = json.loads(response.headers["X-Tether-Export-Report"])
        assert response.headers["content-type"] == "application/x-ndjson"
        assert report["left_out"] == {"thinking blocks without an Anthropic signature": 1}
        assert f'filename="{report["target_id"]}.jsonl"' in response.headers["content-disposition"]
        connection.request("GET", f"/sessions/{sid}/export?format=cursor")
        bad = connection.getresponse()
        assert bad.status in (400, 422) and "claude-code" in bad.read().decode()
    finally:
        connection.close()
