"""Usage never reads zero (`tether.runtime.usage`): a provider that reports none gets tether's own count,
marked estimated in the message, the run's total, the session and the summary; priced when the model has
prices, "cost unknown" when it has none; a provider's own usage is kept as it came."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

from tether import Session
from tether.cli.render import summary_line
from tether.events import Done
from tether.messages import Message, Usage
from tether.providers.base import ModelRequest, StreamDone, StreamEvent, TextPartDelta
from tether.providers.catalog import ModelInfo
from tether.runtime.usage import USAGE_ESTIMATED
from tether.store import Store
from tether.tools.base import ToolRegistry


class Silent:
    """A model behind a server that streams no usage."""

    name = "silent"

    def __init__(self, answer: str, usage: Usage | None = None) -> None:
        self.answer = answer
        self.usage = usage or Usage()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield TextPartDelta(text=self.answer)
        yield StreamDone(message=Message.assistant(self.answer), usage=self.usage, finish_reason="stop")


async def run(session: Session, provider: Silent, **options: object) -> Done:
    events = [
        e
        async for e in session.stream(
            "What is the capital of France?", provider=provider, model="m", tools=ToolRegistry(), **options
        )
    ]
    done = events[-1]
    assert isinstance(done, Done)
    return done


async def test_no_usage_from_the_server_is_counted_by_tether_and_marked(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    done = await run(session, Silent("The capital of France is Paris, a city on the Seine."))
    assert done.usage.estimated and done.usage.input_tokens > 10 and 8 <= done.usage.output_tokens <= 20
    assert done.usage.cost is None  # an unknown model has no prices
    answer = (await session.messages())[-1]
    assert answer.usage is not None and answer.usage.estimated and answer.usage == done.usage
    info = await store.get_session(session.id)
    assert info.input_tokens == done.usage.input_tokens and info.output_tokens == done.usage.output_tokens
    assert info.metadata[USAGE_ESTIMATED] is True
    line = summary_line(session.id, 1, done.usage)
    assert f"~{done.usage.input_tokens:,} in / ~{done.usage.output_tokens:,} out tokens (estimated)" in line
    assert "cost unknown" in line and line.endswith(session.id)


async def test_a_priced_model_s_estimate_is_priced_and_says_so(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    priced = ModelInfo(
        provider="lab",
        model="m",
        context_window=32_000,
        max_output_tokens=4_000,
        input_price=Decimal("1"),
        output_price=Decimal("2"),
    )
    done = await run(session, Silent("Paris."), model_info=priced)
    expected = (Decimal(done.usage.input_tokens) * 1 + Decimal(done.usage.output_tokens) * 2) / 1_000_000
    assert done.usage.estimated and done.usage.cost == expected
    assert "(estimated)" in summary_line(session.id, 1, done.usage).split("tokens", 1)[1]


async def test_a_provider_s_own_usage_is_kept_as_it_came(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    done = await run(session, Silent("Paris.", Usage(input_tokens=30, output_tokens=2, cache_read_tokens=20)))
    assert done.usage == Usage(input_tokens=30, output_tokens=2, cache_read_tokens=20)
    assert USAGE_ESTIMATED not in (await store.get_session(session.id)).metadata
    assert "~" not in summary_line(session.id, 1, done.usage)
