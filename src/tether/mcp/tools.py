"""An MCP server's tool as a tether `Tool` (``mcp__server__tool``), and its results as a `ToolOutput`: the
text blocks in order; an image, audio or binary resource saved as an artifact and named in a line; a
resource link as a line; the structured content as JSON (and in the metadata when small). An oversized
result is cut and saved by the runner, as any tool's.

A server's hints (read-only, destructive) are shown in the description and the metadata, never trusted:
an MCP tool is not read-only to tether, so the approval rules ask about it unless a rule says otherwise."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types

from ..tools.base import ToolContext, ToolOutput

PREFIX = "mcp__"
STRUCTURED_METADATA_CHARS = 4_000
"""Structured content up to this size is also kept in the result's metadata (for programs)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")

CallFn = Callable[[str, str, dict[str, Any]], Awaitable[mcp_types.CallToolResult]]
"""How a tool reaches its server: ``call(server, tool, arguments)``."""


def tool_name(server: str, tool: str) -> str:
    """``mcp__server__tool`` in the characters every provider takes, at most 64 of them (a longer one keeps
    its start and gets a short hash of the whole, so two long names stay two)."""
    name = f"{PREFIX}{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"
    if len(name) <= 64:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[:55]}_{digest}"


def hints(tool: mcp_types.Tool) -> dict[str, bool]:
    """The server's own hints about a tool, as it gave them."""
    a = tool.annotations
    if a is None:
        return {}
    out = {
        "read_only": a.read_only_hint,
        "destructive": a.destructive_hint,
        "idempotent": a.idempotent_hint,
        "open_world": a.open_world_hint,
    }
    return {k: v for k, v in out.items() if v is not None}


@dataclass
class McpTool:
    """One tool of one MCP server. `read_only` is False whatever the server says (its hint is in `hints`)."""

    name: str
    server: str
    remote: str
    description: str
    parameters: dict[str, Any]
    call: CallFn
    hints: dict[str, bool] = field(default_factory=dict)
    read_only: bool = False
    bulk: bool = False

    @classmethod
    def of(cls, server: str, tool: mcp_types.Tool, call: CallFn, name: str | None = None) -> McpTool:
        said = hints(tool)
        notes = [f"MCP tool {tool.name!r} of server {server!r}"]
        if said.get("read_only"):
            notes.append("the server says it changes nothing")
        elif said.get("destructive"):
            notes.append("the server says it may change or delete things")
        description = (tool.description or tool.title or tool.name).strip()
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
        if schema.get("type") != "object":
            schema = {"type": "object", "properties": {}}
        return cls(
            name=name or tool_name(server, tool.name),
            server=server,
            remote=tool.name,
            description=f"{description}\n({'; '.join(notes)})",
            parameters=schema,
            call=call,
            hints=said,
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        result = await self.call(self.server, self.remote, args)
        output = await render_result(result, ctx)
        output.metadata.update({"mcp_server": self.server, "mcp_tool": self.remote})
        if self.hints:
            output.metadata["mcp_hints"] = self.hints
        return output


async def render_result(result: mcp_types.CallToolResult, ctx: ToolContext) -> ToolOutput:
    """A tool result as text the model reads, every block kept: binaries go to artifacts (the line names
    the artifact), so nothing the server sent is lost."""
    lines: list[str] = []
    saved: list[dict[str, Any]] = []
    texts: set[str] = set()

    async def save(data_b64: str, media_type: str, what: str) -> None:
        try:
            data = base64.b64decode(data_b64, validate=True)
        except (binascii.Error, ValueError):
            lines.append(f"[{what} {media_type}: not valid base64, left out]")
            return
        artifact = await ctx.store.put_artifact(data, media_type)
        saved.append({"kind": what, "media_type": media_type, "bytes": len(data), "artifact": artifact})
        lines.append(f"[{what} {media_type}, {len(data):,} bytes, saved as artifact://{artifact}]")

    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            lines.append(block.text)
            texts.add(block.text.strip())
        elif isinstance(block, mcp_types.ImageContent):
            await save(block.data, block.mime_type, "image")
        elif isinstance(block, mcp_types.AudioContent):
            await save(block.data, block.mime_type, "audio")
        elif isinstance(block, mcp_types.ResourceLink):
            extra = ", ".join(x for x in (block.mime_type, block.description) if x)
            lines.append(f"[resource link: {block.name} <{block.uri}>{f' ({extra})' if extra else ''}]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            if isinstance(res, mcp_types.TextResourceContents):
                lines.append(f"[resource {res.uri}]\n{res.text}")
            else:
                await save(res.blob, res.mime_type or "application/octet-stream", f"resource {res.uri}")
        else:
            lines.append(f"[a {getattr(block, 'type', type(block).__name__)} block tether does not show]")
    metadata: dict[str, Any] = {}
    if saved:
        metadata["mcp_artifacts"] = saved
    if result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, indent=1, default=str)
        if not _covered(result.structured_content, texts):
            lines.append(f"[structured content]\n{text}")
        if len(text) <= STRUCTURED_METADATA_CHARS:
            metadata["structured"] = result.structured_content
    content = "\n".join(lines) if lines else "(the tool returned nothing)"
    return ToolOutput(content, is_error=bool(result.is_error), metadata=metadata)


def _covered(structured: Any, texts: set[str]) -> bool:
    """Whether the text blocks already say what the structured content holds (the SDK's servers send both:
    a value as text, and as ``{"result": value}``)."""
    if not texts:
        return False
    shown = {_compact(t) for t in texts}
    if _compact(json.dumps(structured, default=str)) in shown:
        return True
    if isinstance(structured, dict) and len(structured) == 1:
        [value] = structured.values()
        as_text = value if isinstance(value, str) else json.dumps(value, default=str)
        return as_text.strip() in texts or _compact(as_text) in shown
    return False


def _compact(text: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return text
