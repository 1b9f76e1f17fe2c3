"""Turns for many runs on one event loop, so that the loop keeps answering while they work.

asyncio runs every callback that is ready, in order, once per pass of its loop. Fifty runs whose model
answers at once (a fast local model, a scripted one, a burst of replies) are fifty callbacks of a millisecond
or more in every pass: a request that needs five passes (read it, route it, start a run, publish, write to the
stream) then waits a quarter of a second behind work that could have waited. A `Pacer` shared by those runs
gives at most `turns` of them a turn per pass, in the order they asked; the others wait off the loop's ready
list, so a pass stays short and what is not a run (a request, a stream, a timer) is served in each one.
`turns` follows the passes: fewer after a pass longer than `budget` (in proportion, at least one), one more
after one under half of it, so the same pacer fits a fast machine and a slow one, and work that is not a
run's is counted too.

A run's opening (a prompt's route, up to the run's first event) asks too, with a quota of its own: a burst of
prompts (a round of them sent together, or sent as a round of runs ends together) is opened `turns` a pass,
so that the first events of the first ones go out in the next pass rather than after the whole burst; a
prompt that comes alone is opened at once, whatever the runs that wait.

A run asks for a turn where a stretch of its own work begins (a step, the handling of a model's answer),
never while it waits on anything, so a turn is not held and nothing can wait on a run that waits for one.
When few runs are ready at once, as with real models whose answers take seconds, every turn is granted at once
and the pacer costs a function call."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import Callable

PASS_BUDGET = 0.002
"""Seconds a pass of a busy loop should take. Fifty scripted runs and 200 streams on one core (bench/server.py):
POST prompt -> first event at its streams p50 14 ms at 1 ms, 15 ms at 2, 23 ms at 3 and 4; 84 to 116 ms unpaced.
The runs take about a tenth longer than unpaced at 2 ms (shorter passes write the streams in smaller
batches); the loop is never idle while runs wait."""
MAX_TURNS = 32
"""The most runs let go in one pass, however short the passes."""
OPENINGS = 4
"""Runs' openings let go in one pass at least. An opening is a millisecond or two of work, and a pass's
other work (streams, the runs' going on) comes with it whatever the number: under a burst of prompts, one a
pass cleared them at a third of the rate of four a pass, and the later ones' first events waited for it."""


class _Turns:
    """A pacer's state on one event loop: who waits, how many went in this pass, when the last pass was."""

    def __init__(self) -> None:
        self.given = 0
        self.opened = 0
        """Openings let go in this pass: up to `turns` of them, beside the runs' turns."""
        self.openings: deque[asyncio.Future[None]] = deque()
        """Runs' openings waiting for a turn (more came in a pass than its turns)."""
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.pass_due = False
        self.last_pass: float | None = None


class Pacer:
    """Turns for the runs of one event loop (see the module). `turn()` returns at once unless `turns` runs
    already began a stretch in this pass or others are waiting; then it waits, first come first served.
    While runs wait, the turns per pass follow the length of the passes: fewer when a pass takes longer than
    `budget` seconds, more when it takes under half of it. Each event loop that uses it has its own queue (a
    manager kept past the loop it ran on, or used from two, never strands a run)."""

    def __init__(
        self,
        budget: float = PASS_BUDGET,
        *,
        turns: int = 4,
        max_turns: int = MAX_TURNS,
        openings: int = OPENINGS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if budget <= 0 or not 1 <= turns <= max_turns or openings < 1:
            raise ValueError("a pacer needs a positive budget, 1 <= turns <= max_turns and an opening a pass")
        self.budget = budget
        self.clock = clock
        self.turns = turns
        self.max_turns = max_turns
        self.openings = openings
        """Openings let go a pass at least, however few the runs' turns."""
        self.waited = 0
        """Turns that had to wait (a sign the loop was busy)."""
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns] = weakref.WeakKeyDictionary()

    @property
    def waiting(self) -> int:
        """Runs waiting for a turn now, on every loop."""
        return sum(1 for state in list(self._loops.values()) for f in (*state.openings, *state.waiting) if not f.done())

    async def turn(self, *, first: bool = False) -> None:
        """Wait, if the loop is busy with other runs, for this run's turn to go on. `first`: a run's opening
        (a prompt just received, whose first event its followers wait for): up to `turns` of them go in each
        pass whatever the runs took, and those past that wait their turn in the order they came, let go
        before the runs that wait."""
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            state = self._loops[loop] = _Turns()
        openings, waiting = state.openings, state.waiting
        while openings and openings[0].done():  # cancelled while they waited
            openings.popleft()
        while waiting and waiting[0].done():
            waiting.popleft()
        if first:
            if not openings and state.opened < max(self.turns, self.openings):  # a quota of its own
                state.opened += 1
                self._next_pass_soon(loop, state)
                return
        elif not waiting and state.given < self.turns:
            state.given += 1
            self._next_pass_soon(loop, state)
            return
        future: asyncio.Future[None] = loop.create_future()
        (openings if first else waiting).append(future)
        self.waited += 1
        self._next_pass_soon(loop, state)
        try:
            await future
        except asyncio.CancelledError:
            if not future.done():
                future.cancel()  # skipped when its turn comes
            raise

    def _next_pass_soon(self, loop: asyncio.AbstractEventLoop, state: _Turns) -> None:
        if not state.pass_due:
            state.pass_due = True
            loop.call_soon(self._pass, loop, state)

    def _pass(self, loop: asyncio.AbstractEventLoop, state: _Turns) -> None:
        """Once per pass of the loop while runs ask: a new count, and the next waiting runs let go (the
        openings first)."""
        state.pass_due = False
        now = self.clock()
        if (state.waiting or state.openings) and state.last_pass is not None:
            took = now - state.last_pass
            if took > self.budget:  # in proportion: a burst after a quiet spell is not let go 32 at a time
                self.turns = max(1, min(self.turns - 1, int(self.turns * self.budget / took)))
            elif took < self.budget / 2:
                self.turns = min(self.max_turns, self.turns + 1)
        state.given = state.opened = 0
        while state.openings and state.opened < max(self.turns, self.openings):
            future = state.openings.popleft()
            if not future.done():
                future.set_result(None)
                state.opened += 1
        turns = 1 if state.openings else self.turns  # a burst of prompts first; the runs do not stop meanwhile
        while state.waiting and state.given < turns:
            future = state.waiting.popleft()
            if not future.done():
                future.set_result(None)
                state.given += 1
        if state.waiting or state.openings or state.given or state.opened:
            state.last_pass = now
            self._next_pass_soon(loop, state)
        else:
            state.last_pass = None
