"""tether as an MCP server (`tether mcp serve`): read-only tools over every session a store holds, so that
Claude Code, Codex or opencode (or anything that speaks MCP) can search their own imported history and each
other's. Tools: `recall` (the ranked turns that answer a question), `list_sessions` (recent, or matching
words), `show_session` (a session's entries, a range at a time). Nothing offered writes to the store; what
is shown is redacted of the secrets tether knows, as everything it shows is. Over stdio, or streamable HTTP
on loopback. Built on the official SDK's server class (the ``mcp`` extra)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from ..config import Config
from ..errors import TetherError
from ..messages import Message, ToolCallPart
from ..providers.registry import KEY_ENVS
from ..recall import recall as recall_turns
from ..recall.render import render_evidence, when
from ..redaction import Redactor, SecretPolicy, config_secrets
from ..runtime.lookup import find_session
from ..runtime.operations import search_sessions
from ..store import Store
from ..transcript import call_signature, result_outcome

SHOW_DEFAULT = 40
"""Entries `show_session` gives when no range is asked for (the last ones)."""
SHOW_MAX = 200
ENTRY_CHARS = 4_000
"""Characters of one entry's text shown; the rest is counted."""
READ_ONLY = mcp_types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


@dataclass
class Sessions:
    """The read side the tools use: a store and the redactor of what they show."""

    store: Store
    redactor: Redactor

    def clean(self, text: str) -> str:
        return self.redactor.text(text) if self.redactor else text


def default_redactor(config: Config) -> Redactor:
    """The secrets of this environment and configuration, as `tether run`'s journal knows them."""
    return SecretPolicy.from_config(config, KEY_ENVS.values()).redactor(os.environ, config_secrets(config))


def build_server(sessions: Sessions) -> MCPServer:
    """The MCP server of `sessions`: three read-only tools."""
    server = MCPServer(
        "tether",
        instructions=(
            "Read-only access to the agent sessions tether holds (its own, and those imported from Claude Code, "
            "Codex and opencode): recall what was said, list sessions, show one."
        ),
        log_level="WARNING",
    )

    @server.tool(annotations=READ_ONLY)
    async def recall(query: str, directory: str | None = None, session: str | None = None, limit: int = 8) -> str:
        """Find what was said in earlier agent sessions: the turns that best answer `query`, best first, each
        with its session id, position (#seq), role, time and neighbours. Narrow by `directory` (the project's
        absolute path) or one `session` (an id or a unique piece of one)."""
        try:
            session_id = (await find_session(sessions.store, session)).id if session else None
            result = await recall_turns(
                sessions.store, query, directory=directory, session_id=session_id, limit=max(1, min(limit, 30))
            )
        except TetherError as exc:
            raise ToolError(str(exc)) from None
        if not result.hits:
            return f"no results for {query!r}"
        text, _ = render_evidence(result, budget=12_000)
        return sessions.clean(text)

    @server.tool(annotations=READ_ONLY)
    async def list_sessions(
        directory: str | None = None, query: str | None = None, limit: int = 20, cursor: str | None = None
    ) -> str:
        """List sessions, most recently updated first: id, title, project directory, model, size, and where an
        imported one came from. `query` lists those whose messages match its words instead; `cursor` is the
        `next` of an earlier answer."""
        limit = max(1, min(limit, 100))
        try:
            if query:
                found, next_cursor = (
                    await search_sessions(sessions.store, query, directory=directory, limit=limit),
                    None,
                )
            else:
                page = await sessions.store.list_sessions(
                    directory=directory, parent_id=None, limit=limit, cursor=cursor
                )
                found, next_cursor = page.items, page.next_cursor
        except TetherError as exc:
            raise ToolError(str(exc)) from None
        if not found:
            return "no sessions"
        lines = [_session_line(info) for info in found]
        if next_cursor:
            lines.append(f"(more: list_sessions with cursor={next_cursor!r})")
        return sessions.clean("\n".join(lines))

    @server.tool(annotations=READ_ONLY)
    async def show_session(session: str, start: int | None = None, end: int | None = None) -> str:
        """Show a session's entries (messages, tool calls and their outcomes), `start` to `end` (entry
        numbers, inclusive); without a range, its last 40. At most 200 entries an answer."""
        try:
            info = await find_session(sessions.store, session)
        except TetherError as exc:
            raise ToolError(str(exc)) from None
        last = info.entry_count
        if start is None and end is None:
            start = max(1, last - SHOW_DEFAULT + 1)
        first = max(1, start or 1)
        stop = min(end if end is not None else last, first + SHOW_MAX - 1)
        if first > stop:
            raise ToolError(f"no entries in {first}..{stop}: the session has {last}")
        entries = await sessions.store.read(info.id, first, stop)
        lines = [_session_line(info), f"entries {first}-{stop} of {last}:"]
        for entry in entries:
            lines.extend(_entry_lines(entry.seq, entry.body, entry.created_at))
        if stop < last:
            lines.append(f"(more: show_session with start={stop + 1})")
        return sessions.clean("\n".join(lines))

    return server


def _session_line(info: Any) -> str:
    imported = info.metadata.get("imported")
    source = f" imported from {imported.get('source')}" if isinstance(imported, dict) and imported.get("source") else ""
    title = f' "{info.title}"' if info.title else ""
    return (
        f"{info.id}{title} dir={info.directory or '-'} model={info.model or '-'} "
        f"entries={info.entry_count} updated={when(info.updated_at)}{source}"
    )


def _clip(text: str) -> str:
    if len(text) <= ENTRY_CHARS:
        return text
    return text[:ENTRY_CHARS] + f"… ({len(text) - ENTRY_CHARS:,} more characters)"


def _entry_lines(seq: int, body: Any, created_at: float) -> list[str]:
    head = f"#{seq} {when(created_at)}"
    if isinstance(body, Message):
        out: list[str] = []
        if body.text:
            out.append(f"{head} {body.role}: {_clip(body.text)}")
        for part in body.parts:
            if isinstance(part, ToolCallPart):
                out.append(f"{head} {body.role} calls {call_signature(part)}")
        for result in body.tool_results:
            out.append(f"{head} result of {result.name or result.call_id}: {result_outcome(result)}")
        return out or [f"{head} {body.role}: (no text)"]
    kind = getattr(body, "kind", type(body).__name__)
    name = getattr(body, "name", "") or getattr(body, "title", "")
    return [f"{head} [{kind}{' ' + str(name) if name else ''}]"]


LOOPBACK = ("127.0.0.1", "localhost", "::1")


async def serve_stdio(sessions: Sessions) -> None:
    await build_server(sessions).run_stdio_async()


async def serve_http(sessions: Sessions, host: str = "127.0.0.1", port: int = 7478) -> None:
    """Streamable HTTP at ``http://HOST:PORT/mcp``, on loopback only (the SDK checks the Host and Origin of
    each request there, against DNS rebinding)."""
    if host not in LOOPBACK:
        raise TetherError(f"tether mcp serve listens on loopback only (127.0.0.1, localhost, ::1), not {host!r}")
    await build_server(sessions).run_streamable_http_async(host=host, port=port)
