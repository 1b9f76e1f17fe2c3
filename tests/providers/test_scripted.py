"""ScriptedProvider and the stream contract every provider keeps: deltas, then one StreamDone whose message
holds the parts in order."""

from __future__ import annotations

import asyncio
import contextlib
from decimal import Decimal

import pytest

from tether.errors import ProviderError, RateLimited
from tether.messages import Message, TextPart, ThinkingPart, ToolCallPart, ToolSpec, Usage
from tether.providers import (
    ModelRequest,
    Provider,
    ScriptedProvider,
    ScriptedResponse,
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


def request(text: str = "hi", **kw: object) -> ModelRequest:
    return ModelRequest(model="test-model", messages=[Message.user(text)], **kw)  # type: ignore[arg-type]


async def collect(provider: Provider, req: ModelRequest) -> list[StreamEvent]:
    return [event async for event in provider.stream(req)]


async def test_text_streams_in_chunks_and_ends_with_the_whole_message() -> None:
    provider = ScriptedProvider(["Hello there, world!"], chunk_size=5)
    events = await collect(provider, request())

    deltas = [e.text for e in events if isinstance(e, TextPartDelta)]
    assert deltas == ["Hello", " ther", "e, wo", "rld!"]
    assert isinstance(events[-2], UsageUpdate)
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.message.role == "assistant"
    assert done.message.parts == [TextPart(text="Hello there, world!")]
    assert (done.message.model, done.message.provider) == ("test-model", "scripted")
    assert done.finish_reason == "stop" and done.message.finish_reason == "stop"
    assert done.message.usage == done.usage
    assert done.usage.output_tokens == 5  # 19 characters at about four a token
    assert done.usage.cost == Decimal(0)
    assert isinstance(provider, Provider)


async def test_a_message_with_thinking_and_tool_calls_streams_each_part_in_order() -> None:
    scripted = Message(
        role="assistant",
        parts=[
            ThinkingPart(text="look at the dir first", signature="sig-1"),
            TextPart(text="Listing."),
            ToolCallPart(id="c1", name="ls", arguments={"path": "."}),
            ToolCallPart.from_raw("c2", "grep", "{not json"),
        ],
    )
    events = await collect(ScriptedProvider([scripted], chunk_size=4), request())
    kinds = [type(e) for e in events]
    assert kinds.index(ThinkingPartDelta) < kinds.index(TextPartDelta) < kinds.index(ToolCallPartStart)
    started = [e for e in events if isinstance(e, ToolCallPartStart)]
    assert [(e.id, e.name) for e in started] == [("c1", "ls"), ("c2", "grep")]
    assert (
        "".join(e.arguments_delta for e in events if isinstance(e, ToolCallPartDelta) and e.id == "c1")
        == '{"path": "."}'
    )
    ready = [e.part for e in events if isinstance(e, ToolCallPartReady)]
    assert ready[0].arguments == {"path": "."}
    assert ready[1].arguments is None and ready[1].raw_arguments == "{not json"

    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.finish_reason == "tool_calls"
    assert done.message.parts[0] == ThinkingPart(text="look at the dir first", signature="sig-1", provider="scripted")
    assert done.message.parts[1:] == scripted.parts[1:]


async def test_requests_are_recorded_as_they_were_sent() -> None:
    provider = ScriptedProvider(["one", "two"])
    history = [Message.user("first")]
    tools = [ToolSpec(name="ls", description="list files")]
    await complete(provider, ModelRequest(model="m", messages=history, system="be brief", tools=tools))
    history.append(Message.assistant("one"))  # the caller's list moves on; the record must not
    await complete(provider, ModelRequest(model="m", messages=history))

    assert [len(r.messages) for r in provider.requests] == [1, 2]
    assert provider.requests[0].system == "be brief"
    assert provider.requests[0].tools == tools
    assert provider.remaining == 0


async def test_a_function_answers_from_the_request() -> None:
    provider = ScriptedProvider(lambda req: f"you said {req.messages[-1].text}")
    response = await complete(provider, request("ping"))
    assert response.message.text == "you said ping"
    assert provider.remaining is None


async def test_an_exception_in_the_script_is_raised_before_any_event() -> None:
    provider = ScriptedProvider([RateLimited("slow down", retry_after=2.0), "ok"])
    stream = provider.stream(request())
    with pytest.raises(RateLimited) as caught:
        await anext(stream)
    assert caught.value.retry_after == 2.0
    assert (await complete(provider, request())).message.text == "ok"


async def test_an_error_after_the_content_models_a_dropped_stream() -> None:
    provider = ScriptedProvider([ScriptedResponse("partial answer", error=ConnectionResetError("gone"))])
    seen: list[StreamEvent] = []
    with pytest.raises(ConnectionResetError):
        async for event in provider.stream(request()):
            seen.append(event)
    assert "".join(e.text for e in seen if isinstance(e, TextPartDelta)) == "partial answer"
    assert not any(isinstance(e, StreamDone) for e in seen)


async def test_a_script_that_runs_out_says_so() -> None:
    provider = ScriptedProvider(["only one"])
    await complete(provider, request())
    with pytest.raises(ProviderError, match="no response left"):
        await complete(provider, request())
    provider.add("another")
    assert (await complete(provider, request())).message.text == "another"


async def test_given_usage_and_finish_reason_are_reported_as_given() -> None:
    usage = Usage(input_tokens=100, output_tokens=7, cost=Decimal("0.001"))
    provider = ScriptedProvider([ScriptedResponse("cut", usage=usage, finish_reason="length")])
    response = await complete(provider, request())
    assert response.usage == usage
    assert response.finish_reason == "length"


async def test_closing_the_stream_stops_a_slow_answer() -> None:
    provider = ScriptedProvider([ScriptedResponse("a" * 400, chunk_delay=0.05)])
    stream = provider.stream(request())
    first = await anext(stream)
    assert isinstance(first, TextPartDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_cancelling_the_consumer_cancels_the_delay() -> None:
    provider = ScriptedProvider([ScriptedResponse("late", delay=30)])

    async def consume() -> None:
        async for _ in provider.stream(request()):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
    assert task.cancelled()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        ScriptedProvider(chunk_size=0)
    with pytest.raises(ValueError):
        ScriptedProvider(lambda r: "x").add("y")


async def test_complete_without_a_final_message_is_an_error() -> None:
    class Truncated:
        name = "truncated"

        async def stream(self, request: ModelRequest):  # type: ignore[no-untyped-def]
            yield TextPartDelta(text="half")

    with pytest.raises(ProviderError, match="without a final message"):
        await complete(Truncated(), request())
