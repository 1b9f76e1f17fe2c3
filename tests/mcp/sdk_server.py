"""An MCP server written with the SDK's own server class, for the tests: `python sdk_server.py stdio` or
`python sdk_server.py http PORT`. Options: `--tools N` adds N numbered tools (`t000`...); `--name NAME`.

Its tools: echo, add, boom (raises), crash (the process exits mid-call), hang (never answers), picture
(an image), report (structured content), link (a resource link), environment (the names of its environment
variables), noop, pid (its process id), slow (sleeps the given seconds)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from collections.abc import Callable

import mcp_types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def build(name: str, extra: int) -> MCPServer:
    server = MCPServer(name, log_level="WARNING")

    @server.tool(annotations=mcp_types.ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def boom(message: str = "boom") -> str:
        """Always fails, saying `message`."""
        raise ToolError(message)

    @server.tool()
    def crash() -> str:
        """The server process exits in the middle of the call."""
        sys.stderr.write("about to crash on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool()
    async def hang() -> str:
        """Never answers (the whole server stops answering: it blocks its event loop)."""
        import time

        while True:
            time.sleep(1)

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers after `seconds` (the server keeps answering meanwhile)."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def picture() -> mcp_types.CallToolResult:
        """A one-pixel PNG and a caption."""
        return mcp_types.CallToolResult(
            content=[
                mcp_types.TextContent(text="a red pixel"),
                mcp_types.ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png"),
            ]
        )

    @server.tool()
    def report() -> mcp_types.CallToolResult:
        """Structured content only, with a resource link."""
        return mcp_types.CallToolResult(
            content=[
                mcp_types.ResourceLink(name="notes", uri="file:///tmp/notes.txt", mime_type="text/plain"),
            ],
            structured_content={"status": "green", "count": 3},
        )

    @server.tool()
    def environment() -> str:
        """The names of the environment variables this process has."""
        return " ".join(sorted(os.environ))

    @server.tool()
    def noop() -> str:
        """Does nothing."""
        return "ok"

    @server.tool()
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    @server.tool()
    def big(chars: int) -> str:
        """A long text of `chars` characters."""
        return ("0123456789abcdef" * (chars // 16 + 1))[:chars]

    def numbered_tool(i: int) -> Callable[[str], str]:
        def numbered(value: str = "") -> str:
            return f"tool {i}: {value}"

        return numbered

    for i in range(extra):
        server.add_tool(
            numbered_tool(i),
            name=f"t{i:03d}",
            description=f"Numbered tool {i} of the many-tools server: it looks up record {i} in the archive "
            f"of section {i % 7} and returns what it holds about topic {i * 13 % 101}.",
        )
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("port", nargs="?", type=int, default=0)
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--name", default="testserver")
    args = parser.parse_args()
    server = build(args.name, args.tools)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
