"""Titles written by a model (`tether.runtime.titles`): after a session's first exchange the title model
writes a short title off the run's path (the run says it is done first), never over a person's title, never
by the embedded model unless named; `retitle` writes one again on demand, from the CLI too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from tether import Session
from tether.config import parse_config
from tether.events import Done
from tether.messages import Message, TitleChange, Usage
from tether.providers.base import ModelRequest, StreamDone, StreamEvent, TextPartDelta
from tether.providers.catalog import unknown_model
from tether.providers.local import LocalProvider
from tether.providers.openai import OpenAIProvider
from tether.providers.registry import ResolvedModel
from tether.runtime.titles import TITLE_SYSTEM, clean_title, retitle, title_model
from tether.store import Store
from tether.tools.base import ToolRegistry

SERVED = parse_config('[providers.lab]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n')


class Lab(OpenAIProvider):
    """A served model (an OpenAI-compatible adapter, its HTTP left out): titles when asked for one, answers
    otherwise."""

    def __init__(self, title: str = '"Fixing the parser."', title_delay: float = 0.0) -> None:
        super().__init__("lab", base_url="http://127.0.0.1:9/v1")
        self.title = title
        self.title_delay = title_delay
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:  # type: ignore[override]
        self.requests.append(request)
        if request.system == TITLE_SYSTEM:
            await asyncio.sleep(self.title_delay)
            text = self.title
        else:
            text = "The slice drops the last line; I fixed it."
        yield TextPartDelta(text=text)
        yield StreamDone(
            message=Message.assistant(text), usage=Usage(input_tokens=9, output_tokens=5), finish_reason="stop"
        )


def test_a_reply_becomes_a_short_clean_title() -> None:
    assert clean_title('"Fixing the parser."\n') == "Fixing the parser"
    assert clean_title("Title: **Parser   fix**") == "Parser fix"
    assert clean_title("\n\n  \n") is None
    long = clean_title("word " * 40)
    assert long is not None and len(long) == 80 and long.endswith("…")


def test_who_titles() -> None:
    from tether.providers.scripted import ScriptedProvider

    lab = Lab()
    assert title_model(SERVED, lab, "m") == (lab, "m")  # a served model titles its own sessions
    assert title_model(SERVED, ScriptedProvider([], name="anthropic"), "m") is None  # a program's own does not
    assert title_model(parse_config(""), LocalProvider(), "smollm2-135m") is None  # not the embedded one
    assert title_model(parse_config('[runtime]\ntitle_model = "off"\n'), lab, "m") is None
    named = parse_config('[runtime]\ntitle_model = "local/smollm2-135m"\n')
    chosen = title_model(named, lab, "m")
    assert chosen is not None and chosen[0].name == "local" and chosen[1] == "smollm2-135m"
    asked: list[str] = []  # the run's resolver (a manager's, whose SDK clients its runs share) when it has one

    def resolve(spec: str) -> ResolvedModel:
        asked.append(spec)
        return ResolvedModel(lab, "theirs", unknown_model("lab", "theirs"))

    assert title_model(named, LocalProvider(), "smollm2-135m", resolve) == (lab, "theirs")
    assert asked == ["local/smollm2-135m"]


async def run(session: Session, provider: Lab, prompt: str) -> list[object]:
    return [e async for e in session.stream(prompt, provider=provider, model="m", tools=ToolRegistry(), config=SERVED)]


async def test_the_first_exchange_is_titled_after_the_run_says_it_is_done(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    provider = Lab(title_delay=0.3)
    events = await run(session, provider, "why does the parser drop the last line?")
    assert any(isinstance(e, Done) for e in events)
    bodies = [e.body for e in await store.read(session.id)]
    assert isinstance(bodies[-1], TitleChange) and bodies[-1].title == "Fixing the parser"
    assert (await store.get_session(session.id)).title == "Fixing the parser"
    asked = provider.requests[-1]
    assert asked.system == TITLE_SYSTEM and "why does the parser drop the last line?" in asked.messages[0].text
    assert "The slice drops the last line" in asked.messages[0].text
    # a second exchange is not titled again
    await run(session, provider, "thanks")
    assert sum(isinstance(e.body, TitleChange) for e in await store.read(session.id)) == 1
    assert len(provider.requests) == 3


async def test_a_person_s_title_is_never_replaced(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    await session.set_title("My own title")
    provider = Lab()
    await run(session, provider, "hello")
    assert (await store.get_session(session.id)).title == "My own title"
    assert all(r.system != TITLE_SYSTEM for r in provider.requests)


async def test_a_title_model_that_fails_costs_the_run_nothing(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    provider = Lab(title="")  # nothing usable
    events = await run(session, provider, "hello")
    assert isinstance(events[-1], Done) or any(isinstance(e, Done) for e in events)
    assert not any(isinstance(e.body, TitleChange) for e in await store.read(session.id))


async def test_retitle_writes_one_again(store: Store, tmp_path: Path) -> None:
    from tether.providers.catalog import unknown_model
    from tether.providers.registry import ResolvedModel

    session = await Session.create(store, directory=tmp_path, title="first words")
    await store.append(session.id, [Message.user("fix the parser"), Message.assistant("Fixed it.")])
    lab = Lab(title="Parser fix")
    title = await retitle(
        store,
        session.id,
        config=SERVED,
        resolve=lambda name, **_: ResolvedModel(lab, "m", unknown_model("lab", "m")),
    )
    assert title == "Parser fix" and (await store.get_session(session.id)).title == "Parser fix"
