"""The run's journal: one append path whose entries come out as numbered durable events, the same ones a
replay of the journal gives; live events numbered between them; and a steady step that costs the store one
append per entry and nothing else."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tether import Message, Session, ToolCallPart
from tether.events import DURABLE_TYPES, Done, Event, RunStarted, TextDelta
from tether.providers.base import ModelRequest
from tether.providers.scripted import ScriptedProvider
from tether.runtime.journal import replay_events
from tether.store import Store
from tether.tools.base import ToolRegistry, function_tool


@function_tool(read_only=True)
async def look(what: str) -> str:
    """Look at something."""
    return f"{what} looks fine"


class CountingStore:
    """A store that counts the calls made on it, by method name, and passes them on."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted


def stepper(steps: int) -> Callable[[ModelRequest], Message]:
    """A model that looks at something different `steps - 1` times, then answers."""

    def respond(request: ModelRequest) -> Message:
        since_prompt = [m for m in request.messages[-2 * steps :] if m.role == "tool"]
        n = len(request.messages)
        if len(since_prompt) >= steps - 1:
            return Message.assistant("All seen.")
        return Message.assistant(
            f"Step {n}.", tool_calls=[ToolCallPart(id=f"c{n}", name="look", arguments={"what": f"#{n}"})]
        )

    return respond


async def test_live_durable_events_are_exactly_what_a_replay_gives(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(stepper(3))
    live = [e async for e in session.stream("look around", provider=provider, model="m", tools=ToolRegistry([look]))]
    assert isinstance(live[0], RunStarted) and isinstance(live[-1], Done)
    numbers = [e.n for e in live]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # increasing in emission order
    assert all(e.session_id == session.id for e in live)
    durable = [e for e in live if isinstance(e, DURABLE_TYPES)]
    replayed = [e async for e in replay_events(store, session.id)]
    assert replayed == durable and len(durable) >= 3 * 2
    # a reconnect after any event gets the durable events after it, no gap and no repeat
    for cut in live:
        after = [e async for e in replay_events(store, session.id, after=cut.n)]
        assert after == [e for e in durable if e.n > cut.n]


async def test_a_second_run_continues_the_numbering(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(["one", "two"])
    first = [e async for e in session.stream("hi", provider=provider, model="m", tools=ToolRegistry())]
    second = [e async for e in session.stream("again", provider=provider, model="m", tools=ToolRegistry())]
    assert second[0].n > first[-1].n
    deltas = [e for e in second if isinstance(e, TextDelta)]
    assert deltas and all(e.n // 1_000_000 == session.info.entry_count - 1 for e in deltas)  # after the prompt


@pytest.mark.parametrize("history", [0, 600])
async def test_a_steady_step_costs_one_append_per_entry_and_no_reads(
    store: Store, tmp_path: Path, history: int
) -> None:
    counting = CountingStore(store)
    session = await Session.create(counting, directory=tmp_path)  # type: ignore[arg-type]
    for i in range(history // 2):
        await session.append(Message.user(f"question {i}"), Message.assistant(f"answer {i}"))
    marks: list[Counter[str]] = []
    respond = stepper(5)

    def model(request: ModelRequest) -> Message:
        marks.append(Counter(counting.calls))  # the store calls made before this step's model call
        return respond(request)

    events: list[Event] = [
        e async for e in session.stream("look", provider=ScriptedProvider(model), model="m", tools=ToolRegistry([look]))
    ]
    assert isinstance(events[-1], Done) and events[-1].steps == 5
    for before, after in itertools.pairwise(marks[1:]):
        # between two model calls: the answer with its call, then the call's result; nothing read back
        assert after - before == Counter({"append": 2})


async def test_runs_on_new_handles_never_repeat_a_number(store: Store, tmp_path: Path) -> None:
    """The CLI and a server open a new handle per run; a run that appends nothing before its events (a
    continue with nothing to do) still numbers after the last run of this process."""
    first = await Session.create(store, directory=tmp_path)
    ran = [e async for e in first.stream("hi", provider=ScriptedProvider(["one"]), model="m", tools=ToolRegistry())]
    seen = [e.n for e in ran]
    for _ in range(2):
        again = await Session.open(store, first.id)
        events = [e async for e in again.stream(None, provider=ScriptedProvider([]), model="m", tools=ToolRegistry())]
        assert isinstance(events[-1], Done) and events[-1].reason == "nothing_to_do"
        assert min(e.n for e in events) > max(seen)
        seen += [e.n for e in events]


async def test_a_compaction_after_another_writer_is_a_conflict(store: Store, tmp_path: Path) -> None:
    from tether.errors import SeqConflict
    from tether.runtime.handle import SessionHandle
    from tether.runtime.journal import RunJournal

    handle = await SessionHandle.create(store, directory=tmp_path)
    journal = RunJournal(handle)
    await journal.append(Message.user("mine"))
    await store.append(handle.id, [Message.user("another writer's")])
    with pytest.raises(SeqConflict):  # the engine read the session after the intruder: it may not cut there
        await journal.append_for_engine([Message.assistant("summary")], expect_seq=3)
    assert (await store.get_session(handle.id)).entry_count == 2
