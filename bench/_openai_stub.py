"""A small OpenAI-compatible Chat Completions server for benchmarks: loopback, stdlib only, deterministic and
quick, so that what a client spends on a turn is the client's own work. It streams ``chat.completion.chunk``
SSE events (or one JSON body when not asked to stream) and answers every other user turn with a tool call.

    python bench/_openai_stub.py [--port 0] [--tool NAME=ARGS ...]   # prints its base URL, then serves

``GET /v1/stats`` says how many requests and tool calls it answered and which tools the last request offered.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_TOOLS = {"noop": '{"n": %d}'}
"""Tool name -> its arguments. `%d` becomes the request's message count, so that arguments differ from
turn to turn and no client's guard against a model repeating itself fires."""


_PAD = re.compile(r"\bpad=(\d+)")
_FILLER = "the quick brown fox jumps over the lazy dog; "


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class Answers:
    """Decides what a request gets: a tool call when the request offers one of `tools` (the first offered
    wins), its last message is the user's and that user message is an even-numbered one; otherwise a short
    text, padded with N characters when the user's message says ``pad=N`` (for benches that need volume). A function of the request alone, so the same conversation always gets the same answers."""

    def __init__(self, tools: Mapping[str, str] | None = None) -> None:
        self.tools = dict(DEFAULT_TOOLS if tools is None else tools)
        self.lock = threading.Lock()
        self.requests = 0
        self.tool_calls = 0
        self.offered: list[str] = []  # the tools the last request offered, to see what a client sends

    def answer(self, body: dict[str, Any]) -> tuple[str, str | None, str]:
        """(text, tool name or None, tool arguments JSON) for one request body."""
        messages = body.get("messages") or []
        users = sum(1 for m in messages if m.get("role") == "user")
        last = messages[-1].get("role") if messages else None
        offered = {(t.get("function") or {}).get("name") for t in body.get("tools") or []}
        with self.lock:
            self.requests += 1
            self.offered = sorted(str(name) for name in offered)
            tool = next((name for name in self.tools if name in offered), None)
            if tool is not None and last == "user" and users % 2 == 0:
                self.tool_calls += 1
                template = self.tools[tool]
                return "", tool, template % len(messages) if "%d" in template else template
        text = f"Done: turn {users}, {len(messages)} messages."
        pad = _PAD.search(_text(messages[-1])) if messages and last == "user" else None
        if pad:
            size = int(pad.group(1))
            text += " " + (_FILLER * (size // len(_FILLER) + 1))[:size]
        return text, None, ""


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse_body(
    model: str, text: str, tool: str | None, args: str, prompt_tokens: int, usage: bool, call_id: str = "call_stub"
) -> bytes:
    """The whole event stream of one answer: a role chunk, the text in a few pieces (or a tool call whose
    arguments come in two pieces), the finish chunk, usage when asked, then ``[DONE]``."""
    chunks = [_chunk(model, {"role": "assistant", "content": ""})]
    if tool is not None:
        half = len(args) // 2
        call = {"index": 0, "id": call_id, "type": "function", "function": {"name": tool, "arguments": args[:half]}}
        chunks.append(_chunk(model, {"tool_calls": [call]}))
        chunks.append(_chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}))
        chunks.append(_chunk(model, {}, "tool_calls"))
    else:
        head, pad = (text[:200], text[200:]) if len(text) > 200 else (text, "")
        words = head.split(" ")
        for i in range(0, len(words), 3):
            piece = " ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "")
            chunks.append(_chunk(model, {"content": piece}))
        for i in range(0, len(pad), 1000):  # padding in pieces of 1,000 characters
            chunks.append(_chunk(model, {"content": pad[i : i + 1000]}))
        chunks.append(_chunk(model, {}, "stop"))
    completion = max(1, len(text or args) // 4)
    if usage:
        chunks.append(
            {
                "id": "chatcmpl-stub",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": model,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion,
                    "total_tokens": prompt_tokens + completion,
                },
            }
        )
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def json_body(
    model: str, text: str, tool: str | None, args: str, prompt_tokens: int, call_id: str = "call_stub"
) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool is not None:
        message["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": tool, "arguments": args}}]
    completion = max(1, len(text or args) // 4)
    return json.dumps(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if tool is not None else "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            },
        }
    ).encode()


def make_server(answers: Answers, port: int = 0) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:`port` (0: any free one). Keep-alive, and every answer has a Content-Length,
    so a client reuses one connection for the whole session, as it would with a real service."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are separate writes: with Nagle on, the body waits for the client's delayed ACK
        # (40 ms on Linux), which would swamp everything measured.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, content_type: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/stats"):
                with answers.lock:
                    stats = {"requests": answers.requests, "tool_calls": answers.tool_calls, "offered": answers.offered}
                self._send(200, "application/json", json.dumps(stats).encode())
            elif self.path.rstrip("/").endswith("/models"):
                self._send(200, "application/json", b'{"object":"list","data":[{"id":"bench","object":"model"}]}')
            else:
                self._send(404, "application/json", b'{"error":{"message":"not found"}}')

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, "application/json", b'{"error":{"message":"not found"}}')
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, "application/json", b'{"error":{"message":"body is not JSON"}}')
                return
            text, tool, args = answers.answer(body)
            model = str(body.get("model") or "bench")
            prompt_tokens = len(raw) // 4  # about right for English JSON; enough for clients that budget on it
            # a call id of its own per call (a function of the request, like the answer), as real services
            # give: a client that pairs calls with results by id must not see one id twice
            call_id = f"call_stub_{len(body.get('messages') or [])}"
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._send(200, "text/event-stream", sse_body(model, text, tool, args, prompt_tokens, usage, call_id))
            else:
                self._send(200, "application/json", json_body(model, text, tool, args, prompt_tokens, call_id))

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None, *, announce: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument(
        "--tool",
        action="append",
        metavar="NAME=ARGS",
        help="a tool to call every other user turn, with its JSON arguments (%%d: the message count); repeat for "
        'several (the first one a request offers is called); default: noop={"n": %%d}',
    )
    args = parser.parse_args(argv)
    tools = dict(spec.partition("=")[::2] for spec in args.tool) if args.tool else None
    server = make_server(Answers(tools), args.port)
    host, port = server.server_address[:2]
    announce(f"http://{host}:{port}/v1")
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
