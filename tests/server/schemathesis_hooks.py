"""Schemathesis hooks for `test_openapi.test_schemathesis_with_every_check_finds_nothing`: an MCP server that
the fuzzer adds runs this Python with no script (it exits at once, and the server reports it failed), never a
generated command; a url server points at a closed port on loopback. A session's event stream never ends on
its own (it goes live after the replay): its reading stops after `STREAM_SECONDS` (the answer's status,
headers and the frames so far are checked), not at the run's `--request-timeout`, which is for answers that
end (ten seconds a stream, ten of them, were most of the run's time)."""

from __future__ import annotations

import sys
from typing import Any

import schemathesis

STREAM_SECONDS = 1.0


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: Any) -> None:
    if case.method.upper() == "GET" and case.path.endswith("/events"):
        kwargs["timeout"] = STREAM_SECONDS
    if case.method.upper() == "POST" and case.path == "/mcp/servers" and isinstance(case.body, dict):
        body = dict(case.body)
        if body.get("command") is not None:
            body["command"], body["args"] = sys.executable, ["-c", ""]
        elif body.get("url") is not None:
            body["url"] = "http://127.0.0.1:9/mcp"
        case.body = body
