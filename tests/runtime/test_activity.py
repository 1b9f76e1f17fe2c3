"""The activity feed over the store's change feed (every backend: the `store` fixture): numbered by the
store in order, a follower gets each activity once, one that reconnects (to this feed, or to one made after
a restart on the same store) replays what it missed from the store, and a number the store never gave is
told to resync."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tether.ids import new_session_id
from tether.runtime.activity import Activity, ActivityFeed, Resync, SessionCreated, SessionDeleted, StatusChanged
from tether.store import SqliteStore, Store

IDS: dict[str, str] = {}


def sid_of(name: str) -> str:
    return IDS.setdefault(name, new_session_id())


def status(name: str) -> StatusChanged:
    return StatusChanged(session_id=sid_of(name), status="running")


async def take(feed: ActivityFeed, after: int | None, count: int) -> list[Activity]:
    out: list[Activity] = []
    async for activity in feed.follow(after):
        out.append(activity)
        if len(out) == count:
            break
    return out


async def until_followed(feed: ActivityFeed) -> None:
    while not feed.followed:
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)  # past its look at the store's last id


async def test_a_follower_from_now_gets_what_comes_next_once(store: Store) -> None:
    feed = ActivityFeed(store)
    first = await feed.publish(status("ses_a"))
    task = asyncio.create_task(take(feed, None, 2))
    await until_followed(feed)
    await feed.publish(status("ses_b"))
    await feed.publish(SessionDeleted(session_id=sid_of("c"), deleted=[sid_of("c")]))
    got = await task
    assert [a.n for a in got] == [first.n + 1, first.n + 2] and isinstance(got[1], SessionDeleted)
    assert got[1] == SessionDeleted(session_id=sid_of("c"), deleted=[sid_of("c")], n=first.n + 2)


async def test_a_reconnect_replays_from_the_store(store: Store) -> None:
    feed = ActivityFeed(store)
    made = [await feed.publish(status(f"ses_{i}")) for i in range(5)]
    got = await take(feed, made[1].n, 3)
    assert got == made[2:]


async def test_a_reconnect_after_a_restart_replays_what_it_missed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with SqliteStore(path) as store:
        feed = ActivityFeed(store)
        seen = await feed.publish(status("ses_a"))
        info = await store.create_session()
        missed = [await feed.publish(SessionCreated(session=info)), await feed.publish(status("ses_b"))]
    async with SqliteStore(path) as store:  # a new process on the same store
        feed = ActivityFeed(store)
        task = asyncio.create_task(take(feed, seen.n, 3))
        await until_followed(feed)
        after = await feed.publish(status("ses_c"))
        got = await task
    assert got == [*missed, after]
    assert isinstance(got[0], SessionCreated) and got[0].session == info


async def test_a_number_the_store_never_gave_is_a_resync(store: Store) -> None:
    feed = ActivityFeed(store)
    first = await feed.publish(status("ses_a"))
    task = asyncio.create_task(take(feed, first.n + 500, 2))
    await until_followed(feed)
    second = await feed.publish(status("ses_b"))
    resync, got = await task
    assert isinstance(resync, Resync) and resync.n == first.n and got == second


async def test_a_slow_follower_is_bounded_and_loses_nothing(store: Store) -> None:
    feed = ActivityFeed(store, buffer=4)
    follower = feed.follow(0)
    task = asyncio.ensure_future(anext(follower))
    await until_followed(feed)
    made = [await feed.publish(status(f"ses_{i}")) for i in range(30)]
    got = [await task] + [await anext(follower) for _ in range(29)]
    await follower.aclose()
    assert got == made
