"""Retries: the policy's arithmetic, error classification, and the real OpenAI adapter driven at a loopback
server that answers 429 with retry-after, 500, hangs past the timeout, and finally streams an answer."""

from __future__ import annotations

import email.utils
import json
from typing import Any

import pytest

from tether.errors import (
    AuthError,
    BadRequest,
    ContextOverflow,
    ProviderError,
    RateLimited,
    TransientError,
)
from tether.messages import Message
from tether.providers import (
    ModelRequest,
    RetryingProvider,
    RetryPolicy,
    ScriptedProvider,
    ScriptedResponse,
    TextPartDelta,
    classify_http_error,
    complete,
    parse_retry_after,
)
from tether.providers.openai import OpenAIProvider

NOW = 1_800_000_000.0


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    date = email.utils.formatdate(NOW + 30, usegmt=True)
    assert parse_retry_after(date, now=NOW) == pytest.approx(30.0)
    assert parse_retry_after(email.utils.formatdate(NOW - 30, usegmt=True), now=NOW) == 0.0
    for junk in (None, "", "soon", "Mon, 99 Foo 2020"):
        assert parse_retry_after(junk) is None


def test_backoff_grows_with_jitter_and_retry_after_is_honoured_but_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, max_retry_after=60.0)
    plain = TransientError("boom")
    for retry, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        for _ in range(50):
            assert ceiling / 2 <= policy.delay(retry, plain) <= ceiling
    assert policy.delay(1, RateLimited("slow", retry_after=12.0)) == 12.0
    assert policy.delay(1, RateLimited("slow", retry_after=3600.0)) == 60.0
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


@pytest.mark.parametrize(
    ("status", "message", "kw", "expected", "retryable"),
    [
        (401, "invalid api key", {}, AuthError, False),
        (403, "forbidden", {}, AuthError, False),
        (429, "slow down", {}, RateLimited, True),
        (429, "You exceeded your current quota", {"code": "insufficient_quota"}, RateLimited, False),
        (400, "This model's maximum context length is 8192 tokens", {}, ContextOverflow, False),
        (400, "too long", {"code": "context_length_exceeded"}, ContextOverflow, False),
        (400, "prompt is too long: 210000 tokens > 200000 maximum", {}, ContextOverflow, False),
        (413, "payload too large", {}, ContextOverflow, False),
        (400, "bad tool schema", {}, BadRequest, False),
        (404, "model not found", {}, BadRequest, False),
        (500, "internal", {}, TransientError, True),
        (503, "unavailable", {}, TransientError, True),
        (529, "Overloaded", {"type": "overloaded_error"}, TransientError, True),
        (None, "Overloaded", {"type": "overloaded_error"}, TransientError, True),
        (None, "weird", {}, ProviderError, False),
    ],
)
def test_classification(
    status: int | None, message: str, kw: dict[str, str], expected: type[ProviderError], retryable: bool
) -> None:
    error = classify_http_error(status, message, provider="p", **kw)
    assert type(error) is expected
    assert error.retryable is retryable
    assert error.status == status and error.provider == "p"
    assert message in str(error)


def test_rate_limit_reads_retry_after_ms_before_retry_after() -> None:
    error = classify_http_error(429, "slow", headers={"retry-after-ms": "1500", "retry-after": "9"})
    assert isinstance(error, RateLimited) and error.retry_after == 1.5
    error = classify_http_error(429, "slow", headers={"retry-after": "9"})
    assert isinstance(error, RateLimited) and error.retry_after == 9.0


class Sleeps:
    """Stands in for asyncio.sleep between retries: records each wait instead of waiting."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def request(**kw: Any) -> ModelRequest:
    return ModelRequest(model="gpt-4o-mini", messages=[Message.user("hi")], **kw)


async def test_retrying_provider_retries_only_before_the_first_event() -> None:
    sleeps = Sleeps()
    inner = ScriptedProvider([TransientError("blip"), RateLimited("slow", retry_after=2.0), "fine"])
    provider = RetryingProvider(inner, RetryPolicy(max_attempts=3), sleep=sleeps)
    assert (await complete(provider, request())).message.text == "fine"
    assert len(inner.requests) == 3
    assert sleeps.waits[1] == 2.0

    # A failure after a forwarded token is not retried: the caller already has half an answer.
    inner = ScriptedProvider([ScriptedResponse("half", error=TransientError("dropped")), "whole"])
    provider = RetryingProvider(inner, RetryPolicy(max_attempts=3), sleep=sleeps)
    with pytest.raises(TransientError):
        await complete(provider, request())
    assert len(inner.requests) == 1


async def test_retrying_gives_up_after_max_attempts_and_never_retries_bad_requests() -> None:
    sleeps = Sleeps()
    inner = ScriptedProvider([TransientError("a"), TransientError("b"), "never reached"])
    with pytest.raises(TransientError, match="b"):
        await complete(RetryingProvider(inner, RetryPolicy(max_attempts=2), sleep=sleeps), request())
    inner = ScriptedProvider([BadRequest("no"), "never reached"])
    with pytest.raises(BadRequest):
        await complete(RetryingProvider(inner, RetryPolicy(max_attempts=5), sleep=sleeps), request())
    assert len(inner.requests) == 1


# --- the real OpenAI adapter against a loopback server ------------------------------------------------


def chat_stream(*pieces: str, usage: dict[str, Any] | None = None) -> str:
    """A Chat Completions SSE stream in the wire format: a role chunk, content chunks, a finish chunk, a
    usage chunk with no choices, then [DONE]."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini"}
    chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    chunks += [{**head, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage is not None:
        chunks.append({**head, "choices": [], "usage": usage})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def error_body(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def adapter(server: Any, sleeps: Sleeps, **kw: Any) -> OpenAIProvider:
    return OpenAIProvider("openai", base_url=f"{server.url}/v1", api_key="sk-loopback", sleep=sleeps, **kw)


async def test_429_500_and_a_timeout_are_retried_then_the_answer_streams(server: Any) -> None:
    server.answer_json(429, error_body("Rate limit reached", "requests", "rate_limit_exceeded"), {"retry-after": "7"})
    server.answer_json(500, error_body("The server had an error", "server_error"))
    server.answer_hang()
    server.answer_sse(chat_stream("Hel", "lo"))
    sleeps = Sleeps()
    provider = adapter(server, sleeps, timeout=0.5, retry=RetryPolicy(max_attempts=4))

    events = [e async for e in provider.stream(request())]
    await provider.aclose()

    assert "".join(e.text for e in events if isinstance(e, TextPartDelta)) == "Hello"
    assert len(server.requests) == 4
    assert sleeps.waits[0] == 7.0  # the server's retry-after, to the second
    assert all(0 < w <= RetryPolicy().max_delay for w in sleeps.waits[1:])
    assert len(sleeps.waits) == 3
    # The key went out as a bearer token, and only there.
    assert server.requests[0].headers["authorization"] == "Bearer sk-loopback"
    assert b"sk-loopback" not in server.requests[0].body


async def test_a_retry_after_http_date_is_honoured(server: Any) -> None:
    in_five = email.utils.formatdate(usegmt=True)  # "now": the wait is at most a second or so
    server.answer_json(429, error_body("slow", "requests"), {"retry-after": in_five})
    server.answer_sse(chat_stream("ok"))
    sleeps = Sleeps()
    response = await complete(adapter(server, sleeps), request())
    assert response.message.text == "ok"
    assert len(sleeps.waits) == 1 and 0 <= sleeps.waits[0] <= 1.0


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, error_body("Invalid 'messages[0].role'", "invalid_request_error"), BadRequest),
        (401, error_body("Incorrect API key provided", "invalid_request_error", "invalid_api_key"), AuthError),
        (
            400,
            error_body(
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
            ContextOverflow,
        ),
    ],
)
async def test_client_errors_are_not_retried(
    server: Any, status: int, body: dict[str, Any], expected: type[ProviderError]
) -> None:
    server.answer_json(status, body)
    server.answer_sse(chat_stream("must not be reached"))
    sleeps = Sleeps()
    with pytest.raises(expected) as caught:
        await complete(adapter(server, sleeps), request())
    assert caught.value.status == status
    assert len(server.requests) == 1 and sleeps.waits == []


async def test_attempts_run_out(server: Any) -> None:
    for _ in range(3):
        server.answer_json(503, error_body("unavailable", "server_error"))
    sleeps = Sleeps()
    with pytest.raises(TransientError):
        await complete(adapter(server, sleeps, retry=RetryPolicy(max_attempts=3)), request())
    assert len(server.requests) == 3 and len(sleeps.waits) == 2


async def test_a_stream_that_breaks_after_a_token_is_not_retried(server: Any) -> None:
    # The first response stops mid-stream (no finish, no [DONE]) and then the connection hangs.
    text = chat_stream("partial").split("data: [DONE]")[0]
    first_chunk_only = "\n\n".join(text.split("\n\n")[:2]) + "\n\n"
    server.answer_chunks([first_chunk_only, ": keep-alive\n\n"], chunk_delay=5)
    server.answer_sse(chat_stream("second answer"))
    sleeps = Sleeps()
    provider = adapter(server, sleeps, timeout=0.5)
    seen: list[Any] = []
    with pytest.raises(TransientError):
        async for event in provider.stream(request()):
            seen.append(event)
    assert [e.text for e in seen if isinstance(e, TextPartDelta)] == ["partial"]
    assert len(server.requests) == 1 and sleeps.waits == []


async def test_an_overloaded_server_s_retry_after_is_honoured(server: Any) -> None:
    server.answer_json(
        529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, {"retry-after": "7"}
    )
    server.answer_json(503, error_body("busy", "server_error"), {"retry-after": "2"})
    server.answer_sse(chat_stream("ok"))
    sleeps = Sleeps()
    response = await complete(adapter(server, sleeps), request())
    assert response.message.text == "ok"
    assert sleeps.waits == [7.0, 2.0]


async def test_each_retry_logs_one_short_line_and_the_dump_only_at_debug(
    server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    dump = "validation failed:\n" + "\n".join(f"  field {i}: bad" for i in range(12))
    for _ in range(2):
        server.answer_json(500, error_body(dump, "server_error"))
    server.answer_sse(chat_stream("ok"))
    with caplog.at_level("WARNING", logger="tether.providers"):
        await complete(adapter(server, Sleeps()), request())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and all("\n" not in w and "field 3" not in w for w in warnings)
    assert all("validation failed:" in w and "retrying in" in w for w in warnings)
