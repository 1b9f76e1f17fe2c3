"""The guard's pacing of streamed bodies: a second chunk written in the same pass of the event loop waits for
the next pass (so that a client that went away is seen before a whole replay goes into its closed socket), a
chunk that comes a pass or more after the last is written at once (a live stream's events)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from tether.server.guard import _PASSES, Guard
from tether.server.settings import ServerSettings


class Passes:
    """Counts the passes of the running loop (a callback that schedules itself for the next one)."""

    def __init__(self) -> None:
        self.n = 0
        self.stopped = False
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        if not self.stopped:
            self.n += 1
            asyncio.get_running_loop().call_soon(self._tick)


async def test_a_pass_has_one_number_and_the_next_a_greater_one() -> None:
    first = _PASSES.now()
    assert _PASSES.now() == first  # the same pass
    await asyncio.sleep(0)
    second = _PASSES.now()
    assert second > first
    for _ in range(3):  # nobody asks in these passes: the number need not follow them
        await asyncio.sleep(0)
    assert _PASSES.now() > second


def _scope() -> dict[str, Any]:
    return {
        "type": "http",
        "method": "GET",
        "path": "/sessions/x/events",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 5),
    }


async def _stream(between: int) -> tuple[list[int], int]:
    """Five chunks with `between` passes between them (0: written one after another); the pass each went out
    in, and the passes the whole took."""
    sent: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(5):
            for _ in range(between):
                await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": b"x", "more_body": i < 4})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(passes.n)

    guard = Guard(app, ServerSettings())
    passes = Passes()
    start = passes.n
    await guard(_scope(), receive, send)
    passes.stopped = True
    return [n - start for n in sent], passes.n - start


async def test_chunks_written_one_after_another_take_a_pass_each() -> None:
    sent, _ = await _stream(between=0)
    assert sent == sorted(set(sent))  # never two in one pass
    assert len(sent) == 5


async def test_chunks_a_pass_apart_are_written_without_waiting_more() -> None:
    sent, took = await _stream(between=1)
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert gaps == [1, 1, 1, 1]  # each goes out in the pass it was made in: no extra pass per chunk
    unpaced, _ = await _stream(between=2)
    assert [b - a for a, b in itertools.pairwise(unpaced)] == [2, 2, 2, 2]
    assert took <= 6
