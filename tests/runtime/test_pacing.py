"""`Pacer`: a few runs go on per pass of the event loop, the others wait in the order they asked, off the
ready list, so that what is not a run (a request, a stream) is served in every pass; the turns per pass
follow how long the passes take. Passes are counted by a callback that runs once in each."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

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


def fixed(turns: int, clock: Callable[[], float] | None = None) -> Pacer:
    """A pacer whose turns per pass do not change."""
    return Pacer(turns=turns, max_turns=turns, **({"clock": clock} if clock else {}))


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
    pacer = fixed(1)
    went: list[int] = []

    async def run(i: int) -> None:
        await pacer.turn()
        went.append(i)

    tasks = [asyncio.create_task(run(i)) for i in range(4)]
    await asyncio.sleep(0)  # all four asked: 0 went, 1 to 3 wait
    tasks[1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert went == [0, 2, 3]
    assert tasks[1].cancelled()
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


def test_a_pacer_needs_a_budget_and_a_turn() -> None:
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
    must not wait for that pass."""
    pacer = fixed(1)

    async def run() -> None:
        await pacer.turn()

    async def busy() -> None:
        for _ in range(3):
            asyncio.get_running_loop().create_task(run())
        await asyncio.sleep(0)  # one went, two wait, a pass is due

    old = asyncio.new_event_loop()
    old.run_until_complete(busy())
    old.close()  # the waiting runs and the pass die with it

    async def again() -> int:
        await asyncio.wait_for(asyncio.gather(*(run() for _ in range(4))), 5)
        return pacer.waiting

    assert asyncio.run(again()) == 0
