"""`Pacer`: a few runs go on per pass of the event loop, the others wait in the order they asked, off the
ready list, so that what is not a run (a request, a stream) is served in every pass; the turns per pass
follow how long the passes take. Passes are counted by a callback that runs once in each."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.messages import Message, Usage
from tether.providers.scripted import ScriptedProvider, ScriptedResponse
from tether.runtime.pacing import Pacer
from tether.store import SqliteStore

from .test_manager import manager, steps


class Passes:
    """Counts the passes of the running loop (a callback that schedules itself for the next one)."""

    def __init__(self) -> None:
        self.n = 0
        self._stopped = False

    def __enter__(self) -> Passes:
        asyncio.get_running_loop().call_soon(self._tick)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True

    def _tick(self) -> None:
        if not self._stopped:
            self.n += 1
            asyncio.get_running_loop().call_soon(self._tick)


def fixed(turns: int, clock: Callable[[], float] | None = None, *, openings: int | None = None) -> Pacer:
    """A pacer whose turns per pass do not change (and as many openings a pass, unless said)."""
    return Pacer(turns=turns, max_turns=turns, openings=openings or turns, **({"clock": clock} if clock else {}))


async def test_a_turn_is_given_at_once_while_few_ask() -> None:
    pacer = fixed(2)
    with Passes() as passes:
        await pacer.turn()
        await pacer.turn()
        assert passes.n == 0  # neither waited a pass
    assert pacer.waited == 0


async def test_runs_past_the_turns_of_a_pass_wait_and_go_first_come_first_served() -> None:
    pacer = fixed(2)
    went: list[tuple[int, int]] = []

    async def run(i: int) -> None:
        await pacer.turn()
        went.append((i, passes.n))

    with Passes() as passes:
        await asyncio.gather(*(run(i) for i in range(7)))
    assert [i for i, _ in went] == list(range(7))
    assert pacer.waited == 5
    per_pass: dict[int, int] = {}
    for _, n in went:
        per_pass[n] = per_pass.get(n, 0) + 1
    assert max(per_pass.values()) <= 2
    assert len(per_pass) >= 4  # 7 runs, 2 a pass


async def test_a_run_cancelled_while_it_waits_gives_its_turn_to_the_next() -> None:
    async def scenario(cancel: bool) -> tuple[dict[int, int], Pacer]:
        """Four runs ask at once with one turn a pass; the pass in which each went (from when they asked)."""
        pacer = fixed(1)
        went: dict[int, int] = {}

        async def run(i: int) -> None:
            await pacer.turn()
            went[i] = passes.n - start

        with Passes() as passes:
            start = passes.n
            tasks = [asyncio.create_task(run(i)) for i in range(4)]
            await asyncio.sleep(0)  # all four asked: 0 went, 1 to 3 wait
            if cancel:
                tasks[1].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if cancel:
                assert tasks[1].cancelled()
        return went, pacer

    control, _ = await scenario(cancel=False)
    went, pacer = await scenario(cancel=True)
    assert sorted(went) == [0, 2, 3]
    assert went[2] == control[1] and went[3] == control[2]  # the cancelled run's turn went to the next at once
    assert pacer.waiting == 0


async def test_other_work_is_served_in_every_pass_while_many_runs_are_ready() -> None:
    """Thirty runs of five stretches each; a request that needs five passes is done after a few stretches,
    not after every run's (unpaced, each pass would hold a stretch of all thirty)."""
    pacer = fixed(3)
    stretches = 0

    async def run() -> None:
        nonlocal stretches
        for _ in range(5):
            await pacer.turn()
            stretches += 1
            await asyncio.sleep(0)  # the run waits on something (a model, a tool)

    async def request() -> int:
        for _ in range(5):
            await asyncio.sleep(0)
        return stretches

    runs = [asyncio.create_task(run()) for _ in range(30)]
    await asyncio.sleep(0)
    seen = await request()
    await asyncio.gather(*runs)
    assert stretches == 150
    assert seen <= 6 * 3 * 2  # at most twice the turns per pass (let go + granted at once), in six passes


async def test_turns_follow_the_length_of_the_passes() -> None:
    now = 0.0
    pacer = Pacer(budget=0.010, turns=4, max_turns=8, clock=lambda: now)

    async def run(cost: float) -> None:
        nonlocal now
        for _ in range(4):
            await pacer.turn()
            now += cost  # the stretch's own time
            await asyncio.sleep(0)

    await asyncio.gather(*(run(0.004) for _ in range(20)))  # 4 ms stretches: 2 a pass fit 10 ms
    assert pacer.turns <= 3
    await asyncio.gather(*(run(0.0001) for _ in range(40)))  # short stretches: the turns grow to the most
    assert pacer.turns == 8


async def test_openings_past_a_pass_s_quota_go_before_the_runs_that_wait_in_their_order() -> None:
    """A burst of prompts while runs wait for turns: the openings past the pass's quota are let go in the
    next passes, before the runs, keeping their order."""
    pacer = fixed(1)
    went: list[str] = []

    async def turn(name: str, first: bool = False) -> None:
        await pacer.turn(first=first)
        went.append(name)

    with Passes():
        tasks = [asyncio.create_task(turn(f"run {i}")) for i in range(4)]
        # in the same pass: run 0 takes the pass's one turn, runs 1-3 wait; opening 0 takes the pass's one
        # opening, 1 and 2 wait
        tasks += [asyncio.create_task(turn(f"open {i}", first=True)) for i in range(3)]
        await asyncio.gather(*tasks)
    assert went[:2] == ["run 0", "open 0"]
    assert [w for w in went if w.startswith("open")] == ["open 0", "open 1", "open 2"]
    assert [w for w in went if w.startswith("run")] == ["run 0", "run 1", "run 2", "run 3"]
    assert went.index("open 1") < went.index("run 1") and went.index("open 2") < went.index("run 2")
    assert pacer.waiting == 0


async def test_an_opening_goes_at_once_though_runs_took_the_pass_s_turns() -> None:
    """A prompt that comes alone is opened in the pass it comes in, however many runs wait for turns."""
    pacer = fixed(2)
    went: list[str] = []

    async def turn(name: str, first: bool = False) -> None:
        await pacer.turn(first=first)
        went.append(name)

    with Passes() as passes:
        runs = [asyncio.create_task(turn(f"run {i}")) for i in range(5)]
        await asyncio.sleep(0)  # runs 0 and 1 went; 2-4 wait (both turns of the pass are taken)
        start = passes.n
        await turn("open", first=True)
        assert passes.n == start  # not a pass waited
        await asyncio.gather(*runs)
    assert went[:3] == ["run 0", "run 1", "open"]
    assert pacer.waited == 3


async def test_while_openings_wait_the_runs_go_one_a_pass() -> None:
    """A burst of prompts is opened ahead of the runs; the runs still go on, one a pass, meanwhile."""
    pacer = fixed(3)
    went: list[tuple[str, int]] = []

    async def turn(name: str, first: bool = False) -> None:
        await pacer.turn(first=first)
        went.append((name, passes.n))

    with Passes() as passes:
        tasks = [asyncio.create_task(turn(f"run {i}")) for i in range(6)]
        tasks += [asyncio.create_task(turn(f"open {i}", first=True)) for i in range(9)]
        await asyncio.gather(*tasks)
    by_pass: dict[int, list[str]] = {}
    for name, n in went:
        by_pass.setdefault(n, []).append(name)
    passes_in_order = [by_pass[n] for n in sorted(by_pass)]
    assert passes_in_order[0] == ["run 0", "run 1", "run 2", "open 0", "open 1", "open 2"]
    assert passes_in_order[1] == ["open 3", "open 4", "open 5", "run 3"]  # openings still wait: one run
    assert passes_in_order[2] == ["open 6", "open 7", "open 8", "run 4", "run 5"]  # none wait now: the turns


async def test_a_pass_far_over_its_budget_cuts_the_turns_in_proportion() -> None:
    """After a quiet spell the turns may be many; a burst whose pass takes ten times the budget must not be
    let go that many at a time for as many passes again."""
    now = 0.0
    pacer = Pacer(budget=0.002, turns=32, max_turns=32, clock=lambda: now)

    async def run() -> None:
        nonlocal now
        for _ in range(4):
            await pacer.turn()
            now += 0.002  # each stretch takes the whole budget: 32 of them, a pass of 64 ms
            await asyncio.sleep(0)

    await asyncio.gather(*(run() for _ in range(64)))
    assert pacer.turns <= 2  # one fewer a pass, it would still be over 20


async def test_openings_go_several_a_pass_however_few_the_runs_turns() -> None:
    pacer = fixed(1, openings=3)
    went: list[tuple[str, int]] = []

    async def turn(name: str) -> None:
        await pacer.turn(first=True)
        went.append((name, passes.n))

    with Passes() as passes:
        await asyncio.gather(*(turn(f"open {i}") for i in range(7)))
    per_pass: dict[int, int] = {}
    for _, n in went:
        per_pass[n] = per_pass.get(n, 0) + 1
    assert [name for name, _ in went] == [f"open {i}" for i in range(7)]
    assert sorted(per_pass.values(), reverse=True) == [3, 3, 1]


def test_a_pacer_needs_a_budget_and_a_turn() -> None:
    with pytest.raises(ValueError):
        Pacer(openings=0)
    with pytest.raises(ValueError):
        Pacer(budget=0)
    with pytest.raises(ValueError):
        Pacer(turns=0)
    with pytest.raises(ValueError):
        Pacer(turns=5, max_turns=4)


async def test_the_runs_of_a_manager_share_its_pacer_and_answer_as_unpaced_ones_do(
    tmp_path: Path, store: SqliteStore
) -> None:
    async def run_all(pace: bool) -> tuple[list[str], int]:
        provider = ScriptedProvider(lambda _: ScriptedResponse(message=steps(3)(_)))
        m = manager(store, tmp_path, provider, pace=pace)
        if pace:
            assert m.pacer is not None
            m.pacer = fixed(1)
        handles = [await m.start(None, f"task {i}") for i in range(12)]
        outcomes = [await h.result() for h in handles]
        texts = [getattr(o, "text", repr(o)) for o in outcomes]
        waited = m.pacer.waited if m.pacer is not None else 0
        await m.shutdown()
        return texts, waited

    paced, waited = await run_all(True)
    unpaced, none = await run_all(False)
    assert paced == unpaced
    assert all(t.startswith("done after 3: ") for t in paced), paced
    assert waited > 0 and none == 0


def test_a_pacer_goes_on_working_in_a_new_event_loop() -> None:
    """A manager kept past the loop it ran on, which ended with runs waiting and a pass due: the next loop
    must not wait for that pass, nor serve the dead loop's runs."""
    pacer = fixed(1)
    went: list[str] = []

    async def run(name: str) -> None:
        await pacer.turn()
        went.append(name)

    async def busy() -> None:
        for i in range(3):
            asyncio.get_running_loop().create_task(run(f"old {i}"))
        await asyncio.sleep(0)  # one went, two wait, a pass is due

    old = asyncio.new_event_loop()
    old.run_until_complete(busy())
    old.close()  # the waiting runs and the pass die with it

    async def again() -> None:
        await asyncio.wait_for(asyncio.gather(*(run(f"new {i}") for i in range(4))), 5)

    asyncio.run(again())
    assert went == ["old 0", "new 0", "new 1", "new 2", "new 3"]


async def test_a_pacer_shared_by_two_loops_at_once_strands_no_run() -> None:
    """One pacer used from a second loop (a thread of its own) while this one has runs waiting."""
    pacer = fixed(1)
    here: list[int] = []

    async def run(i: int) -> None:
        await pacer.turn()
        here.append(i)

    async def elsewhere() -> int:
        await asyncio.gather(*(pacer.turn() for _ in range(3)))
        return 3

    tasks = [asyncio.create_task(run(i)) for i in range(4)]
    await asyncio.sleep(0)  # one went, three wait on this loop
    result: list[int] = []
    other = threading.Thread(target=lambda: result.append(asyncio.run(elsewhere())))
    other.start()
    other.join()  # this loop stands still meanwhile: its runs are still waiting when the other loop asks
    assert result == [3]
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert here == [0, 1, 2, 3]


class StopsAt(Pacer):
    """A pacer whose `at`-th turn of a run's own work never comes (a run cancelled while it waits there); the
    turns of runs' openings are not counted."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.asked = at, 0
        self.reached = asyncio.Event()

    async def turn(self, *, first: bool = False) -> None:
        if not first:
            self.asked += 1
            if self.asked == self.at:
                self.reached.set()
                await asyncio.Event().wait()
        await super().turn(first=first)


async def test_a_run_cancelled_while_it_waits_after_an_answer_keeps_the_answer_whole(
    tmp_path: Path, store: SqliteStore
) -> None:
    """The turn after a model's answer comes once the answer is journaled, with its usage: a cancel there
    does not turn it into a partial answer."""
    usage = Usage(input_tokens=120, output_tokens=7)
    provider = ScriptedProvider([ScriptedResponse(message="all done here", usage=usage)])
    m = manager(store, tmp_path, provider)
    # 1: after the run's opening, 2: the step, 3: the answer's first part, 4: after the answer
    pacer = m.pacer = StopsAt(4)
    handle = await m.start(None, "finish up")
    await asyncio.wait_for(pacer.reached.wait(), 5)
    assert await m.cancel(handle.session_id)
    entries = await store.read(handle.session_id, 1, 100)
    answers = [e.body for e in entries if isinstance(e.body, Message) and e.body.role == "assistant"]
    assert [(a.text, a.usage) for a in answers] == [("all done here", usage)]
    await m.shutdown()
