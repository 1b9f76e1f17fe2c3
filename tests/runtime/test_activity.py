"""The activity feed: numbered in order, a follower gets each activity once, one that reconnects catches up
from what the feed keeps, and one that missed more (or comes from before a restart) is told to resync."""

from __future__ import annotations

import asyncio

from tether.runtime.activity import Activity, ActivityFeed, Resync, SessionDeleted, StatusChanged


def status(sid: str) -> StatusChanged:
    return StatusChanged(session_id=sid, status="running")


async def take(feed: ActivityFeed, after: int | None, count: int) -> list[Activity]:
    out: list[Activity] = []
    async for activity in feed.follow(after):
        out.append(activity)
        if len(out) == count:
            break
    return out


async def test_a_follower_from_now_gets_what_comes_next_once() -> None:
    feed = ActivityFeed()
    feed.publish(status("ses_a"))
    task = asyncio.create_task(take(feed, None, 2))
    await asyncio.sleep(0)
    feed.publish(status("ses_b"))
    feed.publish(SessionDeleted(session_id="ses_c", deleted=["ses_c"]))
    got = await task
    assert [a.n for a in got] == [2, 3] and isinstance(got[1], SessionDeleted)


async def test_a_reconnect_catches_up_from_what_is_kept() -> None:
    feed = ActivityFeed(kept=10)
    for i in range(5):
        feed.publish(status(f"ses_{i}"))
    got = await take(feed, 2, 3)
    assert [a.n for a in got] == [3, 4, 5]


async def test_a_follower_that_missed_more_than_is_kept_is_told_to_resync() -> None:
    feed = ActivityFeed(kept=3)
    for i in range(10):
        feed.publish(status(f"ses_{i}"))
    got = await take(feed, 2, 4)
    assert isinstance(got[0], Resync) and got[0].n == 7
    assert [a.n for a in got[1:]] == [8, 9, 10]


async def test_a_number_from_before_a_restart_is_a_resync() -> None:
    feed = ActivityFeed()
    feed.publish(status("ses_a"))
    task = asyncio.create_task(take(feed, 500, 2))
    await asyncio.sleep(0)
    feed.publish(status("ses_b"))
    first, second = await task
    assert isinstance(first, Resync) and first.n == 1 and second.n == 2


async def test_a_slow_follower_is_bounded_and_loses_nothing_the_feed_keeps() -> None:
    feed = ActivityFeed(kept=100, buffer=4)
    follower = feed.follow(0)
    for i in range(30):
        feed.publish(status(f"ses_{i}"))
    got = [await anext(follower) for _ in range(30)]
    await follower.aclose()
    assert [a.n for a in got] == list(range(1, 31))
