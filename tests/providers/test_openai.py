"""The OpenAI-compatible adapter: message conversion, the wire details of streamed chunks (tool-call deltas,
reasoning_content, cached and reasoning tokens) from a loopback server, cancellation, and a real
OpenAI-compatible server (llama.cpp's, running SmolLM2) for the `local_model` tests."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tether.errors import ConfigError
from tether.messages import FilePart, ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart, ToolSpec
from tether.providers import (
    ModelRequest,
    StreamDone,
    StreamEvent,
    TextPartDelta,
    ThinkingPartDelta,
    ToolCallPartDelta,
    ToolCallPartReady,
    ToolCallPartStart,
    UsageUpdate,
    complete,
)
from tether.providers.openai import OpenAIProvider, from_openai_message, to_openai_messages

pytest.importorskip("openai", reason="needs the `openai` extra: pip install 'tether[openai]'")

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file of the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def sse(chunks: list[dict[str, Any]], *, done: bool = True) -> str:
    head = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    text = "".join(f"data: {json.dumps({**head, **c})}\n\n" for c in chunks)
    return text + ("data: [DONE]\n\n" if done else "")


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def provider_for(server: Any, name: str = "openai", **kw: Any) -> OpenAIProvider:
    return OpenAIProvider(name, base_url=f"{server.url}/v1", api_key="sk-loopback", **kw)


# --- conversion ----------------------------------------------------------------------------------------


def test_messages_to_the_wire() -> None:
    messages = [
        Message.user("list the files"),
        Message(
            role="assistant",
            parts=[
                ThinkingPart(text="I will call ls", signature="s"),
                TextPart(text="Sure."),
                ToolCallPart(id="call_1", name="ls", arguments={"path": "."}),
                ToolCallPart.from_raw("call_2", "grep", "{broken"),
            ],
        ),
        Message.tool(
            ToolResultPart(call_id="call_1", content="a.py\nb.py"),
            ToolResultPart(call_id="call_2", content="invalid arguments", is_error=True),
        ),
        Message(role="user", parts=[TextPart(text="and this?"), ImagePart(media_type="image/png", data=b"\x89PNG")]),
        Message(role="user", parts=[FilePart(media_type="text/plain", data=b"hello", name="notes.txt")]),
        Message(role="assistant", parts=[ThinkingPart(text="only thoughts")]),
    ]
    out = to_openai_messages(messages, system="be brief")
    assert out[0] == {"role": "system", "content": "be brief"}
    assert out[1] == {"role": "user", "content": "list the files"}
    assert out[2] == {
        "role": "assistant",
        "content": "Sure.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}},
            {"id": "call_2", "type": "function", "function": {"name": "grep", "arguments": "{broken"}},
        ],
    }
    assert out[3] == {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"}
    assert out[4] == {"role": "tool", "tool_call_id": "call_2", "content": "Error: invalid arguments"}
    assert out[5] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "and this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}},
        ],
    }
    assert out[6] == {"role": "user", "content": "[notes.txt]\nhello"}
    assert len(out) == 7  # the thoughts-only assistant turn is left out


def test_tool_calls_without_text_go_with_an_empty_content_never_null() -> None:
    """llama.cpp's server answers 500 to ``"content": null`` beside tool calls; every server takes ``""``."""
    call = ToolCallPart(id="call_1", name="ls", arguments={"path": "."})
    (entry,) = to_openai_messages([Message.assistant(tool_calls=[call])])
    assert entry["content"] == "" and entry["tool_calls"][0]["id"] == "call_1"


def test_messages_from_the_wire_round_trip() -> None:
    original = [
        Message.user("hi"),
        Message.assistant("calling", tool_calls=[ToolCallPart(id="c", name="ls", arguments={"a": 1})]),
        Message.tool(ToolResultPart(call_id="c", content="done")),
    ]
    back = [from_openai_message(m) for m in to_openai_messages(original)]
    assert back == original
    image = from_openai_message(
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}]}
    )
    assert image.parts == [ImagePart(media_type="image/png", data=b"\x89PNG")]


def test_request_body_applies_tool_choice_limits_and_catalog_preferences() -> None:
    openai = OpenAIProvider("openai", api_key="sk-x")
    body = openai.request_body(
        ModelRequest(
            model="o3",
            messages=[Message.user("x")],
            tools=[READ_FILE],
            tool_choice="read_file",
            temperature=0.5,
            max_output_tokens=99,
        )
    )
    assert body["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    assert body["max_completion_tokens"] == 99 and "max_tokens" not in body
    assert "temperature" not in body  # o3 accepts none
    assert body["stream_options"] == {"include_usage": True}

    moonshot = OpenAIProvider("moonshot", api_key="ms-x")
    body = moonshot.request_body(
        ModelRequest(model="kimi-k2-0905-preview", messages=[Message.user("x")], max_output_tokens=5)
    )
    assert body["temperature"] == 0.6 and body["max_tokens"] == 5  # the maker's recommended temperature
    body = moonshot.request_body(ModelRequest(model="kimi-k2-0905-preview", messages=[Message.user("x")], stop=["##"]))
    assert body["stop"] == ["##"] and "tools" not in body and "tool_choice" not in body


def test_keys_are_required_where_the_service_needs_one_and_never_shown() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIProvider("openai")
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIProvider("my-lab")
    provider = OpenAIProvider("groq", api_key="gsk-very-secret")
    assert "gsk-very-secret" not in repr(provider)
    request = ModelRequest(model="llama-3.3-70b-versatile", messages=[Message.user("x")])
    assert "gsk-very-secret" not in json.dumps(provider.request_body(request))


# --- wire details against a loopback server -----------------------------------------------------------


async def test_tool_call_deltas_reasoning_and_cached_usage(server: Any) -> None:
    call_start = {"index": 0, "id": "call_abc", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    second = {
        "index": 1,
        "id": "call_def",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path":'},
    }
    server.answer_sse(
        sse(
            [
                delta(role="assistant", content=None, reasoning_content="Need the file. "),
                delta(reasoning_content="Two of them."),
                delta(content="Reading both."),
                delta(tool_calls=[call_start]),
                delta(tool_calls=[{"index": 0, "function": {"arguments": '{"path": "a'}}]),
                delta(tool_calls=[{"index": 0, "function": {"arguments": '.py"}'}}, second]),
                delta(tool_calls=[{"index": 1, "function": {"arguments": ' "b.py"}'}}]),
                delta("tool_calls"),
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 2000,
                        "completion_tokens": 300,
                        "total_tokens": 2300,
                        "prompt_tokens_details": {"cached_tokens": 1500},
                        "completion_tokens_details": {"reasoning_tokens": 120},
                    },
                },
            ]
        )
    )
    provider = provider_for(server, "deepseek")
    request = ModelRequest(model="deepseek-reasoner", messages=[Message.user("read a and b")], tools=[READ_FILE])
    events: list[StreamEvent] = [e async for e in provider.stream(request)]
    await provider.aclose()

    assert "".join(e.text for e in events if isinstance(e, ThinkingPartDelta)) == "Need the file. Two of them."
    assert [e.text for e in events if isinstance(e, TextPartDelta)] == ["Reading both."]
    assert [(e.id, e.name) for e in events if isinstance(e, ToolCallPartStart)] == [
        ("call_abc", "read_file"),
        ("call_def", "read_file"),
    ]
    assert (
        "".join(e.arguments_delta for e in events if isinstance(e, ToolCallPartDelta) and e.id == "call_abc")
        == '{"path": "a.py"}'
    )
    ready = [e.part for e in events if isinstance(e, ToolCallPartReady)]
    assert [(p.id, p.arguments) for p in ready] == [("call_abc", {"path": "a.py"}), ("call_def", {"path": "b.py"})]

    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.finish_reason == "tool_calls"
    assert [type(p) for p in done.message.parts] == [ThinkingPart, TextPart, ToolCallPart, ToolCallPart]
    usage = done.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        2000,
        1500,
        300,
        120,
    )
    # deepseek-reasoner: $0.28 per million uncached input, $0.028 cached, $0.42 output.
    assert usage.cost == (500 * Decimal("0.28") + 1500 * Decimal("0.028") + 300 * Decimal("0.42")) / 10**6
    assert isinstance(events[-2], UsageUpdate) and events[-2].usage == usage

    body = server.requests[0].json()
    assert body["stream"] is True and body["tools"][0]["function"]["name"] == "read_file"
    assert server.requests[0].headers["authorization"] == "Bearer sk-loopback"


async def test_malformed_arguments_are_kept_raw_and_a_server_without_usage_is_tolerated(server: Any) -> None:
    server.answer_sse(
        sse(
            [
                delta(
                    tool_calls=[
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "run", "arguments": "{'cmd': ls"},
                        }
                    ]
                ),
                delta("stop"),  # some servers say "stop" after a call
            ]
        )
    )
    response = await complete(provider_for(server), ModelRequest(model="gpt-4o", messages=[Message.user("x")]))
    call = response.message.tool_calls[0]
    assert call.arguments is None and call.raw_arguments == "{'cmd': ls"
    assert response.finish_reason == "tool_calls"
    assert response.usage.input_tokens == 0 and response.usage.cost is None


async def test_a_server_error_event_inside_the_stream(server: Any) -> None:
    from tether.errors import ProviderError

    server.answer_sse(sse([delta(content="par"), {"error": {"message": "upstream failed", "code": "502"}}], done=False))
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError, match="upstream failed") as caught:
        async for event in provider_for(server).stream(ModelRequest(model="gpt-4o", messages=[Message.user("x")])):
            seen.append(event)
    assert caught.value.retryable  # a 502 in the error's code
    assert len(server.requests) == 1  # but a token had gone out: no retry


async def test_closing_the_stream_closes_the_http_response(server: Any) -> None:
    server.answer_sse(sse([delta(content=f"tok{i} ") for i in range(400)]), chunk_delay=0.05)
    provider = provider_for(server)
    stream = provider.stream(ModelRequest(model="gpt-4o", messages=[Message.user("x")]))
    first = await anext(stream)  # type: ignore[call-overload]
    assert isinstance(first, TextPartDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await asyncio.to_thread(server.disconnected.wait, 10)
    await provider.aclose()


# --- a real OpenAI-compatible server: llama.cpp serving SmolLM2 ----------------------------------------


@pytest.mark.local_model
async def test_llama_server_streams_text(llama_server: str) -> None:
    provider = OpenAIProvider("llamacpp", base_url=llama_server)
    request = ModelRequest(
        model="smollm2-135m", messages=[Message.user("Say hello.")], max_output_tokens=12, temperature=0
    )
    events = [e async for e in provider.stream(request)]
    await provider.aclose()
    deltas = [e.text for e in events if isinstance(e, TextPartDelta)]
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert len(deltas) > 1 and "".join(deltas) == done.message.text
    assert done.finish_reason in ("stop", "length")
    usage = done.usage
    # llama.cpp's server may ignore stream_options; when it reports usage it must be consistent.
    assert usage.input_tokens == usage.output_tokens == 0 or (usage.input_tokens > 0 and 0 < usage.output_tokens <= 12)


@pytest.mark.local_model
async def test_llama_server_forced_tool_call(llama_server: str) -> None:
    provider = OpenAIProvider("llamacpp", base_url=llama_server)
    request = ModelRequest(
        model="smollm2-135m",
        messages=[Message.user("Read the file README.md")],
        tools=[READ_FILE],
        tool_choice="read_file",
        max_output_tokens=120,
        temperature=0,
    )
    events = [e async for e in provider.stream(request)]
    await provider.aclose()
    assert [e.name for e in events if isinstance(e, ToolCallPartStart)] == ["read_file"]
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.finish_reason == "tool_calls"
    (call,) = done.message.tool_calls
    assert call.name == "read_file"
    # The server held the output to the tool's schema: a JSON object with a string path.
    assert call.arguments_ok, call.raw_arguments
    assert isinstance(call.arguments["path"], str)


async def test_calls_without_an_index_are_told_apart_by_id(server: Any) -> None:
    def whole(id_: str, path: str) -> dict[str, Any]:
        return {
            "id": id_,
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
        }

    server.answer_sse(sse([delta(tool_calls=[whole("c1", "a"), whole("c2", "b")]), delta("tool_calls")]))
    response = await complete(provider_for(server, "ollama"), ModelRequest(model="qwen3", messages=[Message.user("x")]))
    assert [(c.id, c.arguments) for c in response.message.tool_calls] == [("c1", {"path": "a"}), ("c2", {"path": "b"})]


# --- the request goes out as built, without the SDK's per-message transform ----------------------------


@pytest.mark.parametrize("serialized", [True, False], ids=["content-bytes", "dict-body"])
async def test_the_request_goes_out_exactly_as_request_body_built_it(
    server: Any, monkeypatch: pytest.MonkeyPatch, serialized: bool
) -> None:
    """`chat.completions.create` walked every message through the SDK's typed transform on every call (a turn
    grew by 0.75 ms per turn of history); the adapter posts its body as built instead. Both ways of posting
    (serialized bytes, and a dict body for SDKs without `content=`) must send the same request."""
    import openai._utils._transform as transform

    walked: list[Any] = []
    original = transform._async_transform_recursive

    async def spy(data: Any, **kw: Any) -> Any:
        walked.append(data)
        return await original(data, **kw)

    monkeypatch.setattr(transform, "_async_transform_recursive", spy)
    server.answer_sse(sse([delta(content="done, café ✓"), delta("stop")]))
    server.answer_sse(sse([delta(content="again"), delta("stop")]))
    provider = provider_for(server, "groq", headers={"x-team": "bench"})
    client = provider._sdk()
    assert provider._sends_bytes  # this SDK's `post` takes `content=`
    if not serialized:
        provider._sends_bytes = False  # as on an SDK whose `post` has none
    history = [
        Message.user("Lis le fichier « notes » ✓"),
        Message.assistant("Reading.", tool_calls=[ToolCallPart(id="c1", name="read_file", arguments={"path": "n"})]),
        Message.tool(ToolResultPart(call_id="c1", content="héllo")),
    ]
    request = ModelRequest(
        model="llama-3.3-70b-versatile",
        system="be brief",
        messages=history,
        tools=[READ_FILE],
        temperature=0.2,
        max_output_tokens=64,
        stop=["##"],
    )
    response = await complete(provider, request)
    assert response.message.text == "done, café ✓"

    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["authorization"] == "Bearer sk-loopback"
    assert sent.headers["x-team"] == "bench"
    assert sent.json() == provider.request_body(request)
    assert walked == []

    # The spy does see the SDK's own path: were the adapter to go back to `create`, this test would know.
    body = provider.request_body(request)
    stream = await client.chat.completions.create(**body)
    async for _ in stream:
        pass
    assert walked and server.requests[1].json() == body
    await provider.aclose()


def _tether(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(TETHER_HOME=str(home), PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("TETHER_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env, cwd=home, timeout=300
    )


@pytest.mark.local_model
@pytest.mark.slow
async def test_llama_server_a_run_a_continue_over_a_tool_call_and_the_usage_estimate(
    llama_server: str, tmp_path: Path
) -> None:
    """`tether run` against the real `python -m llama_cpp.server`, configured as the README says: it streams
    no usage, so the summary, the events and the session carry tether's own count, marked estimated; then
    `--continue` over a history that holds a tool call (an assistant message with no text beside it, which
    the server refuses with a 500 when its content is null) runs on the session's own model although the
    configuration's default is another."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'default_model = "local/smollm2-135m"\n[providers.llama]\nkind = "openai"\nbase_url = "{llama_server}"\n'
        '[models."llama/smollm2-135m"]\ncontext_window = 2048\nmax_output_tokens = 64\n'
    )
    first = _tether(
        home, "run", "--json", "--tools", "none", "-m", "llama/smollm2-135m", "What is the capital of France?"
    )
    assert first.returncode == 0, first.stderr
    events = [json.loads(line) for line in first.stdout.splitlines()]
    assert events[0]["type"] == "run_started" and events[0]["provider"] == "llama"
    done = events[-1]
    assert done["type"] == "done" and done["usage"]["estimated"] is True
    assert done["usage"]["input_tokens"] > 10 and done["usage"]["output_tokens"] > 0
    sid = done["session_id"]

    # a tool call and its result in the history, as a run with tools would have left them
    from tether.store import SqliteStore

    async with SqliteStore(home / "tether.db") as store:
        call = ToolCallPart(id="call_1", name="read", arguments={"path": "capitals.txt"})
        await store.append(
            sid,
            [
                Message.user("Check the file too."),
                Message.assistant(tool_calls=[call]),
                Message.tool(ToolResultPart(call_id="call_1", name="read", content="France: Paris\nGermany: Berlin")),
                Message.assistant("The file agrees: Paris."),
            ],
        )
    second = _tether(home, "run", "--tools", "read", "--session", sid, "And of Germany?")
    assert second.returncode == 0, second.stderr
    assert second.stderr.count("error") == 0
    assert "(estimated)" in second.stderr and f"session {sid}" in second.stderr  # the summary line
    shown = _tether(home, "sessions", "show", sid)
    assert shown.returncode == 0 and "assistant · smollm2-135m" in shown.stdout
    assert "tokens (estimated)" in shown.stdout
    async with SqliteStore(home / "tether.db") as store:
        info = await store.get_session(sid)
        messages = [e.body for e in await store.read(sid) if isinstance(e.body, Message)]
    assert info.model == "llama/smollm2-135m"  # kept: the default (local) was not taken
    last = messages[-1]
    assert last.role == "assistant" and last.provider == "llama" and last.usage is not None and last.usage.estimated
