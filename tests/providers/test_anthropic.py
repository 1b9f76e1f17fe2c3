"""The Anthropic adapter, driven through the real `anthropic` SDK at a loopback server that plays recorded
wire data (tests/fixtures/anthropic/). No Anthropic-compatible server runs here, so these transcripts,
written to the documented streaming format, stand in for the API; everything from the SDK down is real."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tether.errors import AuthError, ContextOverflow, RateLimited, TransientError
from tether.messages import ImagePart, Message, TextPart, ThinkingPart, ToolCallPart, ToolResultPart, ToolSpec
from tether.providers import (
    ModelRequest,
    RetryPolicy,
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
from tether.providers.anthropic import AnthropicProvider, to_anthropic_messages

pytest.importorskip("anthropic", reason="needs the `anthropic` extra: pip install 'tether[anthropic]'")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "anthropic"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+vSGz/Xm0kvN3EDs3Q5P7NlYFoyqU9CMWIcJqyVGD2iLbSU0Q=="
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB5URj2pWmy5xCgT5lMvtTA="
)
READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file of the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}},
)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def provider_for(server: Any, **kw: Any) -> AnthropicProvider:
    kw.setdefault("sleep", Sleeps())
    return AnthropicProvider(base_url=server.url, api_key="sk-ant-loopback", **kw)


def first_request(**kw: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-haiku-4-5",
        system="You are a careful coding agent.",
        messages=[Message.user("The tests fail. Fix them.")],
        tools=[READ_FILE],
        **kw,
    )


async def test_thinking_text_and_tool_use_stream_and_assemble(server: Any) -> None:
    server.answer_sse(fixture("thinking_tool_use.sse"))
    provider = provider_for(server)
    events: list[StreamEvent] = [e async for e in provider.stream(first_request(thinking_budget=2048))]
    await provider.aclose()

    thinking = "".join(e.text for e in events if isinstance(e, ThinkingPartDelta))
    assert thinking == "The user wants the tests fixed. I should read the failing test first."
    assert "".join(e.text for e in events if isinstance(e, TextPartDelta)) == "Let me look at the test file."
    started = [e for e in events if isinstance(e, ToolCallPartStart)]
    assert [(e.id, e.name) for e in started] == [("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "read_file")]
    pieces = [e.arguments_delta for e in events if isinstance(e, ToolCallPartDelta)]
    assert pieces == ['{"path": "tests/te', 'st_app.py", "limit"', ": 200}"]
    ready = [e.part for e in events if isinstance(e, ToolCallPartReady)]
    assert ready == [
        ToolCallPart(
            id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="read_file", arguments={"path": "tests/test_app.py", "limit": 200}
        )
    ]

    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.finish_reason == "tool_calls"
    parts = done.message.parts
    assert parts[0] == ThinkingPart(text=thinking, signature=SIGNATURE, provider="anthropic")
    assert parts[1] == TextPart(text="Let me look at the test file.")
    assert parts[2] == ready[0]
    assert (done.message.model, done.message.provider) == ("claude-haiku-4-5", "anthropic")

    # Usage: Anthropic's input_tokens leave out the cache; ours include it.
    usage = done.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        472 + 12040 + 1830,
        12040,
        1830,
        89,
    )
    # Claude Haiku 4.5: $1 input, $0.10 cache read, $1.25 cache write, $5 output per million tokens.
    expected_cost = (472 * Decimal(1) + 12040 * Decimal("0.10") + 1830 * Decimal("1.25") + 89 * Decimal(5)) / 10**6
    assert usage.cost == expected_cost
    assert done.message.usage == usage
    assert [e.usage for e in events if isinstance(e, UsageUpdate)][-1] == usage


async def test_the_request_on_the_wire(server: Any) -> None:
    server.answer_sse(fixture("thinking_tool_use.sse"))
    await complete(provider_for(server), first_request(thinking_budget=4000, stop=["\nEND"], temperature=0.3))
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    # The key travels in a header only (x-api-key, or a bearer token in newer SDKs).
    assert "sk-ant-loopback" in (
        sent.headers.get("x-api-key"),
        sent.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert "anthropic-version" in sent.headers
    body = sent.json()
    assert body["model"] == "claude-haiku-4-5" and body["stream"] is True
    # Prompt caching: one breakpoint on the system prompt, one on the last message.
    assert body["system"] == [
        {"type": "text", "text": "You are a careful coding agent.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "The tests fail. Fix them.", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    assert body["tools"] == [
        {"name": "read_file", "description": READ_FILE.description, "input_schema": READ_FILE.parameters}
    ]
    assert body["tool_choice"] == {"type": "auto"}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert body["max_tokens"] > 4000
    assert body["stop_sequences"] == ["\nEND"]
    assert "temperature" not in body  # extended thinking refuses a temperature
    assert b"sk-ant-loopback" not in sent.body


async def test_thinking_is_replayed_unchanged_in_the_next_request(server: Any) -> None:
    server.answer_sse(fixture("thinking_tool_use.sse"))
    server.answer_sse(fixture("redacted_thinking_text.sse"))
    server.answer_sse(fixture("redacted_thinking_text.sse"))
    provider = provider_for(server)
    history = [Message.user("The tests fail. Fix them.")]

    first = await complete(provider, ModelRequest(model="claude-haiku-4-5", messages=history, tools=[READ_FILE]))
    call = first.message.tool_calls[0]
    history += [
        first.message,
        Message.tool(ToolResultPart(call_id=call.id, content="def test_add(): assert add(1, 2) == 3")),
    ]
    second = await complete(provider, ModelRequest(model="claude-haiku-4-5", messages=history, tools=[READ_FILE]))
    assert second.message.parts[0] == ThinkingPart(redacted=REDACTED, provider="anthropic")
    assert second.message.text == "The test expected 3 but add() returned 4; fixed."
    assert second.finish_reason == "stop"
    assert second.usage.cache_read_tokens == 14342 and second.usage.cache_write_tokens == 0

    body = server.requests[1].json()
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == [
        {
            "type": "thinking",
            "thinking": "The user wants the tests fixed. I should read the failing test first.",
            "signature": SIGNATURE,
        },
        {"type": "text", "text": "Let me look at the test file."},
        {"type": "tool_use", "id": call.id, "name": "read_file", "input": {"path": "tests/test_app.py", "limit": 200}},
    ]
    results = body["messages"][2]
    assert results["role"] == "user"
    assert results["content"][0]["type"] == "tool_result"
    assert results["content"][0]["tool_use_id"] == call.id
    assert results["content"][0]["cache_control"] == {"type": "ephemeral"}

    history += [second.message, Message.user("Thanks.")]
    await complete(provider, ModelRequest(model="claude-haiku-4-5", messages=history))
    third = server.requests[2].json()["messages"]
    assert third[3]["content"][0] == {"type": "redacted_thinking", "data": REDACTED}


async def test_overloaded_529_is_retried(server: Any) -> None:
    server.answer_json(529, _json("error_overloaded_529.json"))
    server.answer_sse(fixture("redacted_thinking_text.sse"))
    sleeps = Sleeps()
    response = await complete(provider_for(server, sleep=sleeps), first_request())
    assert response.message.text.startswith("The test expected 3")
    assert len(server.requests) == 2 and len(sleeps.waits) == 1


async def test_overloaded_529_classified(server: Any) -> None:
    server.answer_json(529, _json("error_overloaded_529.json"))
    with pytest.raises(TransientError, match="Overloaded") as caught:
        await complete(provider_for(server, retry=RetryPolicy(max_attempts=1)), first_request())
    assert caught.value.status == 529 and caught.value.retryable


async def test_rate_limit_carries_retry_after_and_is_waited_for(server: Any) -> None:
    server.answer_json(429, _json("error_rate_limit_429.json"), {"retry-after": "13"})
    with pytest.raises(RateLimited) as caught:
        await complete(provider_for(server, retry=RetryPolicy(max_attempts=1)), first_request())
    assert caught.value.retry_after == 13.0
    assert "rate limit" in str(caught.value)

    server.answer_json(429, _json("error_rate_limit_429.json"), {"retry-after": "13"})
    server.answer_sse(fixture("redacted_thinking_text.sse"))
    sleeps = Sleeps()
    await complete(provider_for(server, sleep=sleeps), first_request())
    assert sleeps.waits == [13.0]


@pytest.mark.parametrize(
    ("fixture_name", "status", "expected"),
    [("error_prompt_too_long_400.json", 400, ContextOverflow), ("error_authentication_401.json", 401, AuthError)],
)
async def test_client_errors_are_classified_and_not_retried(
    server: Any, fixture_name: str, status: int, expected: type[Exception]
) -> None:
    server.answer_json(status, _json(fixture_name))
    sleeps = Sleeps()
    with pytest.raises(expected):
        await complete(provider_for(server, sleep=sleeps), first_request())
    assert len(server.requests) == 1 and sleeps.waits == []


async def test_an_error_event_before_any_content_is_retried(server: Any) -> None:
    server.answer_sse(fixture("overloaded_midstream.sse"))
    server.answer_sse(fixture("redacted_thinking_text.sse"))
    response = await complete(provider_for(server), first_request())
    assert response.message.text.endswith("fixed.")
    assert len(server.requests) == 2

    server.answer_sse(fixture("overloaded_midstream.sse"))
    with pytest.raises(TransientError, match="Overloaded"):
        await complete(provider_for(server, retry=RetryPolicy(max_attempts=1)), first_request())


async def test_closing_the_stream_closes_the_connection(server: Any) -> None:
    # A long answer, one event every 50 ms; the consumer walks away after the first text.
    start, _, _ = fixture("redacted_thinking_text.sse").partition(
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":1}'
    )
    delta = {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "."}}
    text = start + f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n" * 400
    server.answer_sse(text, chunk_delay=0.05)
    provider = provider_for(server)
    stream = provider.stream(first_request())
    async for event in stream:
        if isinstance(event, TextPartDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    # The server notices the closed socket on its next writes.
    assert await asyncio.to_thread(server.disconnected.wait, 10)


def _json(name: str) -> Any:
    return json.loads(fixture(name))


# --- conversion ----------------------------------------------------------------------------------------


def test_consecutive_turns_merge_and_tool_results_lead_the_user_turn() -> None:
    messages = [
        Message.system("Project rules: run the tests."),
        Message.user("look"),
        Message.user("and fix"),
        Message(
            role="assistant",
            parts=[ToolCallPart(id="a", name="ls", arguments={}), ToolCallPart(id="b", name="ls", arguments={})],
        ),
        Message.tool(ToolResultPart(call_id="a", content="x.py")),
        Message.user("also b?"),
        Message.tool(ToolResultPart(call_id="b", content="failed", is_error=True)),
        Message.system("You are running low on budget."),
        Message(role="assistant", parts=[ThinkingPart(text="unsigned, from another model")]),
    ]
    system, out = to_anthropic_messages(messages, cache_last=False)
    assert system == ["Project rules: run the tests."]
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert [b["text"] for b in out[0]["content"]] == ["look", "and fix"]
    user = out[2]["content"]
    assert [b["type"] for b in user] == ["tool_result", "tool_result", "text", "text"]
    assert user[1] == {"type": "tool_result", "tool_use_id": "b", "content": "failed", "is_error": True}
    assert user[3]["text"] == "<system>\nYou are running low on budget.\n</system>"


def test_images_malformed_arguments_and_the_cache_breakpoint() -> None:
    messages = [
        Message(
            role="user", parts=[TextPart(text="what is this?"), ImagePart(media_type="image/png", data=b"\x89PNG")]
        ),
        Message(role="assistant", parts=[ToolCallPart.from_raw("c", "run", "{oops")]),
        Message.tool(ToolResultPart(call_id="c", content="bad arguments", is_error=True)),
    ]
    _system, out = to_anthropic_messages(messages)
    assert out[0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="},
    }
    assert out[1]["content"][0]["input"] == {"_raw_arguments": "{oops"}
    assert out[2]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in out[0]["content"][-1]


def test_a_missing_key_is_a_config_error() -> None:
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicProvider()
    assert "sk-ant-x" not in repr(AnthropicProvider(api_key="sk-ant-x"))


def test_forcing_a_tool_turns_extended_thinking_off() -> None:
    provider = AnthropicProvider(api_key="sk-ant-x")
    body = provider.request_body(first_request(thinking_budget=2048, tool_choice="read_file"))
    assert body["tool_choice"] == {"type": "tool", "name": "read_file"}
    assert "thinking" not in body
    body = provider.request_body(first_request(thinking_budget=100, tool_choice="required", temperature=0.2))
    assert body["tool_choice"] == {"type": "any"} and "thinking" not in body
    assert body["extra_body"] == {"temperature": 0.2}
    assert provider.request_body(first_request(thinking_budget=100))["thinking"]["budget_tokens"] == 1024


@pytest.mark.parametrize("serialized", [True, False], ids=["content-bytes", "dict-body"])
async def test_the_request_goes_out_exactly_as_request_body_built_it(
    server: Any, monkeypatch: pytest.MonkeyPatch, serialized: bool
) -> None:
    """`messages.create` hands its dict body to the SDK, which walks (copies) all of it on every call; the
    adapter posts its body as built instead, with `extra_body` merged in as `create` would. Both ways of
    posting (serialized bytes, and a dict body for SDKs without `content=`) must send the same request."""
    prepare = pytest.importorskip("anthropic._utils._prepare")
    walked: list[Any] = []
    original = prepare.copy_tree

    def spy(data: Any, **kw: Any) -> Any:
        if isinstance(data, dict) and "messages" in data:
            walked.append(data)
        return original(data, **kw)

    monkeypatch.setattr(prepare, "copy_tree", spy)
    server.answer_sse(fixture("redacted_thinking_text.sse"))
    server.answer_sse(fixture("redacted_thinking_text.sse"))
    provider = provider_for(server, headers={"x-team": "bench"})
    client = provider._sdk()
    assert provider._sends_bytes  # this SDK's `post` takes `content=`
    if not serialized:
        provider._sends_bytes = False  # as on an SDK whose `post` has none
    request = ModelRequest(
        model="claude-haiku-4-5",
        system="You are a careful coding agent.",
        messages=[Message.user("Répare les tests ✓")],
        tools=[READ_FILE],
        temperature=0.3,
        stop=["\nEND"],
    )
    response = await complete(provider, request)
    assert response.message.text.startswith("The test expected 3")

    sent = server.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["x-team"] == "bench"
    body = provider.request_body(request)
    extra = body.pop("extra_body")
    assert extra == {"temperature": 0.3}
    assert sent.json() == {**body, **extra}
    if serialized:
        # (This SDK walks a dict body too; the dict path is for older SDKs, whose `post` only encodes it.)
        assert walked == []

    # The spy does see the SDK's own path: were the adapter to go back to `create`, this test would know.
    stream = await client.messages.create(**provider.request_body(request))
    async for _ in stream:
        pass
    assert walked and server.requests[1].json() == {**body, **extra}
    await provider.aclose()
