"""MCP servers in a run: which servers a workspace has (user config, the workspace's `.mcp.json` and
`.tether/config.toml`, enabled only by the user), the real loop with a scripted model calling a real MCP
server through the approval rules, a server that fails to start (a warning event, the run goes on), and the
servers and tool list journaled so that a later run says when a server's tools changed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install 'tether[mcp]')")

from tether import Message, Session, ToolCallPart
from tether.config import parse_config
from tether.errors import ConfigError
from tether.events import Done, Event, Progress, ToolCallComplete
from tether.mcp.manager import McpManager
from tether.mcp.servers import ServerSpec
from tether.messages import Marker
from tether.providers.base import ModelRequest
from tether.providers.scripted import ScriptedProvider
from tether.runtime.mcp import MCP_MARKER, SESSION_KEY, configured_servers, open_mcp
from tether.runtime.operations import context_view
from tether.runtime.rules import Rules, layered
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry

SERVER = Path(__file__).parents[1] / "mcp" / "sdk_server.py"


def spec(name: str = "t", *extra: str) -> ServerSpec:
    return ServerSpec(
        name=name, transport="stdio", command=sys.executable, args=(str(SERVER), "stdio", *extra), startup_timeout=60
    )


def calling(tool: str, arguments: dict[str, Any]) -> Any:
    """A model that calls `tool` once (per prompt), then says what came back."""

    def respond(request: ModelRequest) -> Message | str:
        start = max(i for i, m in enumerate(request.messages) if m.role == "user")
        results = [r for m in request.messages[start:] for r in m.tool_results]
        if not results:
            return Message.assistant(tool_calls=[ToolCallPart(id="c1", name=tool, arguments=arguments)])
        return "got: " + results[-1].content

    return respond


async def run(session: Session, manager: McpManager, respond: Any, rules: Rules | None) -> list[Event]:
    provider = ScriptedProvider([respond, respond])
    return [
        e
        async for e in session.stream(
            "go", provider=provider, model="m", tools=ToolRegistry(), mcp=manager, rules=rules, config=None
        )
    ]


async def test_a_run_calls_an_mcp_tool_allowed_by_a_glob_rule(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    manager = McpManager([spec("t")])
    try:
        session = await Session.create(store, directory=str(tmp_path))
        rules = layered([("test", {"allow": ["mcp__t__*"]})])
        events = await run(session, manager, calling("mcp__t__add", {"a": 20, "b": 22}), rules)
        done = [e for e in events if isinstance(e, Done)][-1]
        assert done.text.startswith("got: 42")
        markers = [e.body for e in await session.entries() if isinstance(e.body, Marker) and e.body.name == MCP_MARKER]
        assert len(markers) == 1
        assert "add" in markers[0].data["servers"]["t"]["tools"]
        info = await store.get_session(session.id)
        assert info.metadata[SESSION_KEY]["t"]["digest"] == markers[0].data["servers"]["t"]["digest"]
        # the server's start is in the audit trail, with the session that started it (issue 28)
        (started,) = await store.list_audit(kind="mcp.started")
        assert started.session_id == session.id and started.outcome == "ok"
        assert started.detail["server"] == "t" and started.detail["tools"] >= 10
    finally:
        await manager.close()
        await store.close()


async def test_mcp_tools_ask_by_default_whatever_the_server_hints(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    manager = McpManager([spec("t")])
    try:
        session = await Session.create(store, directory=str(tmp_path))
        # echo says it is read-only; the hint is not trusted: with nobody to ask, the call is denied
        events = await run(session, manager, calling("mcp__t__echo", {"text": "hi"}), Rules())
        [complete] = [e for e in events if isinstance(e, ToolCallComplete)]
        assert complete.denied and "mcp__t__echo" in complete.preview
        other = await Session.create(store, directory=str(tmp_path))
        rules = layered([("t", {"deny": ["mcp__t__echo"], "allow": ["mcp__t__*"]})])  # the deny wins
        denied = await run(other, manager, calling("mcp__t__echo", {"text": "hi"}), rules)
        [complete] = [e for e in denied if isinstance(e, ToolCallComplete)]
        assert complete.denied and "denied by the rule mcp__t__echo" in complete.preview
    finally:
        await manager.close()
        await store.close()


async def test_a_server_that_fails_is_a_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    broken = ServerSpec(name="broken", transport="stdio", command="/nonexistent/server")
    manager = McpManager([broken, spec("t")])
    try:
        session = await Session.create(store, directory=str(tmp_path))
        rules = layered([("test", {"allow": ["mcp__*"]})])
        events = await run(session, manager, calling("mcp__t__echo", {"text": "fine"}), rules)
        warnings = [e for e in events if isinstance(e, Progress) and e.what == "mcp"]
        assert len(warnings) == 1 and "broken" in warnings[0].detail and "not offered" in warnings[0].detail
        assert [e for e in events if isinstance(e, Done)][-1].text.startswith("got: fine")
        marker = next(
            e.body for e in await session.entries() if isinstance(e.body, Marker) and e.body.name == MCP_MARKER
        )
        assert "broken" in marker.data["failed"]
    finally:
        await manager.close()
        await store.close()


async def test_a_resumed_session_says_when_a_servers_tools_changed(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    first = McpManager([spec("t")])
    session = await Session.create(store, directory=str(tmp_path))
    rules = layered([("test", {"allow": ["mcp__*"]})])
    try:
        events = await run(session, first, calling("mcp__t__noop", {}), rules)
        assert not [e for e in events if isinstance(e, Progress) and e.what == "mcp"]
        again = await run(session, first, calling("mcp__t__noop", {}), rules)
        assert not [e for e in again if isinstance(e, Progress) and e.what == "mcp"]  # same tools: nothing said
    finally:
        await first.close()
    second = McpManager([spec("t", "--tools", "2")])  # the same server, now with two more tools
    try:
        events = await run(session, second, calling("mcp__t__t001", {"value": "v"}), rules)
        [warning] = [e for e in events if isinstance(e, Progress) and e.what == "mcp"]
        assert "tools changed since this session last ran" in warning.detail and "added t000, t001" in warning.detail
        assert [e for e in events if isinstance(e, Done)][-1].text.startswith("got: tool 1: v")
        markers = [e.body for e in await session.entries() if isinstance(e.body, Marker) and e.body.name == MCP_MARKER]
        assert markers[-1].data["changed"] == {"t": {"added": ["t000", "t001"], "removed": []}}
    finally:
        await second.close()
        await store.close()


def test_servers_from_the_user_config_and_the_workspace(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "github": {"command": "github-mcp", "args": ["stdio"], "env": {"T": "${GH_TOKEN}"}},
                    "docs": {"type": "http", "url": "https://docs.example/mcp", "headers": {"A": "b"}},
                }
            }
        )
    )
    (tmp_path / ".tether").mkdir()
    (tmp_path / ".tether" / "config.toml").write_text('[mcp.local]\ncommand = "local-server"\n')
    config = parse_config(
        '[mcp.time]\ncommand = "mcp-server-time"\n[mcp.github]\nenabled = true\n[mcp.off]\nurl = "http://x/mcp"\nenabled = false\n'
    )
    servers = {c.spec.name: c for c in configured_servers(config, tmp_path)}
    assert set(servers) == {"time", "github", "docs", "local", "off"}
    assert servers["time"].enabled and servers["github"].enabled  # the user said yes to the workspace's github
    assert not servers["docs"].enabled and "enabled = true" in servers["docs"].why
    assert not servers["local"].enabled and not servers["off"].enabled
    assert servers["docs"].spec.transport == "http" and servers["github"].spec.args == ("stdio",)
    assert servers["github"].spec.source.endswith(".mcp.json")
    manager = open_mcp(config, tmp_path)
    assert manager is not None and sorted(manager.names()) == ["github", "time"]
    assert open_mcp(parse_config(""), tmp_path) is None


def test_bad_workspace_files_are_config_errors_naming_them(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"\.mcp\.json: not valid JSON"):
        configured_servers(parse_config(""), tmp_path)
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"old": {"type": "sse", "url": "http://x"}}}))
    with pytest.raises(ConfigError, match="old SSE transport"):
        configured_servers(parse_config(""), tmp_path)
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"x": {"args": ["a"]}}}))
    with pytest.raises(ConfigError, match="give a command"):
        configured_servers(parse_config(""), tmp_path)
    with pytest.raises(ConfigError):
        parse_config('[mcp.x]\ncommand = "a"\nunknown = 1\n')
    # for a run, a broken workspace file leaves its servers out and says why; the user's servers still run
    (tmp_path / ".mcp.json").write_text("{not json")
    manager = open_mcp(parse_config('[mcp.time]\ncommand = "mcp-server-time"\n'), tmp_path)
    assert manager is not None and manager.names() == ["time"]
    assert len(manager.notices) == 1 and "not valid JSON" in manager.notices[0]


def test_mcp_config_hides_its_secrets() -> None:
    config = parse_config('[mcp.x]\nurl = "https://a/mcp"\nheaders = { Authorization = "Bearer abcdefgh12345" }\n')
    assert "abcdefgh12345" not in repr(config.mcp["x"])
    from tether.redaction import config_secrets

    secrets = config_secrets(config)
    assert "Bearer abcdefgh12345" in secrets.values() and "abcdefgh12345" in secrets.values()


def searching(request: ModelRequest) -> Message | str:
    """A model that looks for a tool with `tool_search`, then calls what it found (offered only then)."""
    start = max(i for i, m in enumerate(request.messages) if m.role == "user")
    results = [r for m in request.messages[start:] for r in m.tool_results]
    offered = {t.name for t in request.tools}
    if not results:
        assert "tool_search" in offered and "mcp__many__t137" not in offered
        return Message.assistant(
            tool_calls=[ToolCallPart(id="s1", name="tool_search", arguments={"query": "select:mcp__many__t137"})]
        )
    if len(results) == 1:
        assert "mcp__many__t137" in offered  # loaded by the search, for this step on
        return Message.assistant(tool_calls=[ToolCallPart(id="s2", name="mcp__many__t137", arguments={"value": "x"})])
    return "found: " + results[-1].content


async def test_two_hundred_tools_go_behind_tool_search(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    manager = McpManager([spec("many", "--tools", "200")])
    try:
        session = await Session.create(store, directory=str(tmp_path))
        provider = ScriptedProvider([searching] * 3)
        rules = layered([("test", {"allow": ["mcp__many__*"]})])
        events = [
            e
            async for e in session.stream(
                "go",
                provider=provider,
                model="m",
                tools=ToolRegistry(),
                mcp=manager,
                rules=rules,
                config=parse_config(""),
            )
        ]
        assert [e for e in events if isinstance(e, Done)][-1].text == "found: tool 137: x"
        marker = next(
            e.body for e in await session.entries() if isinstance(e.body, Marker) and e.body.name == MCP_MARKER
        )
        search = marker.data["tool_search"]
        assert search["deferred"] >= 200 and search["tokens_saved"] > 0.8 * search["tokens_all"]
        first = provider.requests[0]
        assert len(first.tools) == 1  # tool_search alone: the 212 definitions stayed out
        view = await context_view(store, session.id, config=parse_config(""), model="openai/gpt-4.1")
        assert view.tool_tokens > 500  # the built-in tools' definitions
        # every definition was MCP's (the run had no built-in tool): all of them are the server's cost
        assert view.mcp_tools["many"]["tools"] >= 200 and view.mcp_tools["many"]["tokens"] == search["tokens_all"]
        assert view.mcp_tools["tool_search"]["tokens_saved"] == search["tokens_saved"]
    finally:
        await manager.close()
        await store.close()


async def test_tools_that_fit_are_all_offered(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    manager = McpManager([spec("t")])
    try:
        session = await Session.create(store, directory=str(tmp_path))
        provider = ScriptedProvider(["fine"])
        _ = [
            e
            async for e in session.stream(
                "go", provider=provider, model="m", tools=ToolRegistry(), mcp=manager, rules=Rules(), config=None
            )
        ]
        names = {t.name for t in provider.requests[0].tools}
        assert "mcp__t__echo" in names and "tool_search" not in names
    finally:
        await manager.close()
        await store.close()
