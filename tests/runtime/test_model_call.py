"""One step's model call: an answer that goes on past what a step allows (more tokens than its limit, or
nothing for too long) is cut, what it said journaled and marked, the run ended with a clear error that
`--continue` picks up. The providers here are loopback models that never stop, or go quiet."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether import Message, Session, ToolCallPart
from tether.config import Config, RuntimeConfig
from tether.context.derive import GO_ON_NOTE, LIMIT_NOTE
from tether.context.tokens import get_counter
from tether.events import CheckpointReached, Done, Error, Event, TextDelta
from tether.messages import Checkpoint
from tether.providers.base import (
    EventStream,
    ModelRequest,
    ResponseBuilder,
    StreamEvent,
    ToolCallPartDelta,
    ToolCallPartReady,
    ToolCallPartStart,
)
from tether.providers.catalog import ModelInfo
from tether.providers.scripted import ScriptedProvider
from tether.runtime.model_call import OUTPUT_SLACK
from tether.store import Store
from tether.tools.base import ToolRegistry, function_tool

INFO = ModelInfo(provider="loopback", model="m", context_window=32_000, max_output_tokens=200)


class Endless:
    """A model that never stops: `before` first (ready tool calls, say), then words for ever, or, with
    `quiet_after`, that many words and then nothing at all (a hung server)."""

    name = "loopback"

    def __init__(self, *, before: list[StreamEvent] | None = None, quiet_after: int | None = None) -> None:
        self.before = before or []
        self.quiet_after = quiet_after
        self.sent = 0
        self.requests: list[ModelRequest] = []
        self.closed = False

    async def stream(self, request: ModelRequest) -> EventStream:
        self.requests.append(request)
        builder = ResponseBuilder(provider=self.name, model=request.model)
        try:
            for event in self.before:
                yield event
            for n in itertools.count():
                if self.quiet_after is not None and n == self.quiet_after:
                    await asyncio.Event().wait()
                delta = builder.text(f"word{n} ")
                assert delta is not None
                self.sent += 1
                yield delta
                await asyncio.sleep(0)
        finally:
            self.closed = True  # the stream (an HTTP response) is closed however the call ends


async def run(session: Session, provider: object, **options: object) -> list[Event]:
    async def go() -> list[Event]:
        return [e async for e in session.stream("tell me everything", provider=provider, model="m", **options)]  # type: ignore[arg-type]

    return await asyncio.wait_for(go(), timeout=60)


@pytest.fixture
async def session(store: Store, tmp_path: Path) -> Session:
    return await Session.create(store, directory=tmp_path)


async def test_an_answer_that_never_ends_is_cut_at_the_models_output_limit_and_kept(session: Session) -> None:
    provider = Endless()
    events = await run(session, provider, model_info=INFO, max_steps=1)
    limit = INFO.max_output_tokens + int(INFO.max_output_tokens * OUTPUT_SLACK)
    error = events[-1]
    assert isinstance(error, Error) and error.code == "answer_cut" and not error.retryable
    assert f"past the {limit:,} a step allows" in error.message and "--continue" in error.message
    assert provider.closed
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    messages = await session.messages()
    answer = messages[-1]
    assert answer.role == "assistant" and answer.text == streamed  # everything shown is kept, nothing more
    assert answer.finish_reason == "length" and answer.metadata["partial"] is True
    cut = answer.metadata["cut"]
    assert cut["reason"] == "length" and cut["limit"] == limit and limit < cut["tokens"] <= limit + 5
    tokens = get_counter(model="m").count(streamed)
    assert limit - 20 < tokens <= limit + 5, tokens  # counted as the text it is: cut near the limit, not far past
    assert provider.sent < 400
    assert any(isinstance(e, CheckpointReached) and e.reason == "answer_cut" for e in events)


async def test_the_configured_limit_holds_and_continue_goes_on(session: Session) -> None:
    config = Config(runtime=RuntimeConfig(max_answer_tokens=40))
    provider = Endless()
    events = await run(session, provider, model_info=INFO, config=config)
    assert isinstance(events[-1], Error) and events[-1].code == "answer_cut"
    assert "past the 40 a step allows" in events[-1].message
    cut = (await session.messages())[-1]
    assert 40 < cut.metadata["cut"]["tokens"] <= 45
    entries = await session.entries()
    assert isinstance(entries[-1].body, Checkpoint) and entries[-1].body.reason == "answer_cut"
    # --continue: the checkpoint is work to do; the model reads what it had said, marked cut, and is asked
    # to go on (a request that ended on its own partial turn was a prefill some providers refuse)
    then = ScriptedProvider(["And that is all."])
    done = [e async for e in session.stream(None, provider=then, model="m", model_info=INFO, config=config)]
    assert isinstance(done[-1], Done) and done[-1].text == "And that is all."
    said, asked = then.requests[0].messages[-2:]
    assert said.role == "assistant" and said.text == cut.text + LIMIT_NOTE
    assert asked.role == "user" and asked.text == GO_ON_NOTE


async def test_a_model_that_goes_quiet_is_cut_after_the_stall_timeout(session: Session) -> None:
    config = Config(runtime=RuntimeConfig(stall_timeout=0.3))
    provider = Endless(quiet_after=3)
    events = await run(session, provider, model_info=INFO, config=config)
    error = events[-1]
    assert isinstance(error, Error) and error.code == "answer_cut" and error.retryable
    assert "sent nothing for 0.3 s" in error.message and "stall_timeout" in error.message
    assert provider.closed
    answer = (await session.messages())[-1]
    assert answer.text == "word0 word1 word2 " and answer.finish_reason == "stalled"
    assert answer.metadata["cut"] == {"reason": "stalled", "seconds": 0.3}


async def test_a_model_quiet_from_the_start_leaves_the_prompt_and_a_checkpoint(session: Session) -> None:
    config = Config(runtime=RuntimeConfig(stall_timeout=0.2))
    events = await run(session, Endless(quiet_after=0), model_info=INFO, config=config)
    assert isinstance(events[-1], Error) and events[-1].code == "answer_cut"
    messages = await session.messages()
    assert [m.role for m in messages] == ["user"]  # nothing was said: no empty answer is made up
    assert isinstance((await session.entries())[-1].body, Checkpoint)


async def test_calls_finished_before_the_cut_are_kept_but_not_run(session: Session) -> None:
    ran: list[str] = []

    @function_tool
    async def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "noted"

    ready = ToolCallPart(id="c1", name="note", arguments={"text": "one"})
    provider = Endless(
        before=[
            ToolCallPartReady(part=ready),
            ToolCallPartStart(id="c2", name="note"),
            ToolCallPartDelta(id="c2", arguments_delta='{"text": "ha'),  # never finished: not journaled
        ]
    )
    events = await run(session, provider, model_info=INFO, tools=ToolRegistry([note]))
    assert isinstance(events[-1], Error) and events[-1].code == "answer_cut"
    assert ran == []
    messages = await session.messages()
    answer, result = messages[-2], messages[-1]
    assert [c.id for c in answer.tool_calls] == ["c1"]
    (part,) = result.tool_results
    assert part.call_id == "c1" and part.is_error and part.content.startswith("not run: the model's answer was cut")


async def test_tool_call_arguments_that_never_end_count_too(session: Session) -> None:
    async def endless_arguments(request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield ToolCallPartStart(id="c1", name="note")
        while True:
            yield ToolCallPartDelta(id="c1", arguments_delta="aaaa bbbb ")
            await asyncio.sleep(0)

    class Arguments:
        name = "loopback"

        def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
            return endless_arguments(request)

    config = Config(runtime=RuntimeConfig(max_answer_tokens=100))
    events = await run(session, Arguments(), model_info=INFO, config=config)
    assert isinstance(events[-1], Error) and events[-1].code == "answer_cut"
    # a half call is never journaled as a call: the answer, if kept, holds no tool call (what streamed of it
    # is in its metadata only, as the durable stream keeps it)
    messages = await session.messages()
    assert messages[0].role == "user"
    assert all(not m.tool_calls for m in messages)
    assert not [r for m in messages for r in m.tool_results]


async def test_an_answer_within_the_limits_is_untouched(session: Session) -> None:
    config = Config(runtime=RuntimeConfig(max_answer_tokens=60, stall_timeout=5))
    text = "a fine answer " * 12  # about 36 tokens
    events = await run(session, ScriptedProvider([text]), model_info=INFO, config=config)
    assert isinstance(events[-1], Done) and events[-1].text == text
    answer = (await session.messages())[-1]
    assert "cut" not in answer.metadata and answer.finish_reason == "stop"
    assert Message.assistant(text).text == answer.text
