"""What happens to the sessions, as a feed: sessions created, updated and deleted, where each one's runs
stand (`StatusChanged`), and the approval requests that wait for a person (`ApprovalPending`, then
`ApprovalSettled`). Each activity is first recorded in the store's global change feed (`Store.append_change`)
and numbered by it (`n` is the change's id), then handed to this process's followers: a follower who
reconnects, to this process or to one started after it, replays what it missed from the store; a number the
store never gave (another store's, one from before it was replaced) is told to read the list again
(`Resync`). A follower's buffer is bounded, as a session subscriber's is; one that falls behind catches up
from the store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Literal

import msgspec

from ..errors import TetherError
from ..store.protocols import Changes
from ..store.records import Change, SessionInfo
from .permission import ApprovalRequest

ActivityStatus = Literal["idle", "queued", "running", "waiting_for_approval", "paused", "busy_elsewhere"]
"""As `SessionManager.status` says (its `Status`)."""


class _Activity(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    n: int = 0
    """The activity's number: the id of its change in the store's feed (increasing, never reused; not a
    session event number)."""


class SessionCreated(_Activity, tag="session_created"):
    session: SessionInfo


class SessionUpdated(_Activity, tag="session_updated"):
    """The session's row changed: a run ended, a title, a state, a revert or a compaction."""

    session: SessionInfo


class SessionDeleted(_Activity, tag="session_deleted"):
    session_id: str
    deleted: list[str]
    """Every session deleted with it (its child sessions)."""


class StatusChanged(_Activity, tag="status_changed"):
    session_id: str
    status: ActivityStatus


class ApprovalPending(_Activity, tag="approval_pending"):
    """A tool call waits for a person's answer (`SessionManager.answer`); `root_id` is the session whose run
    waits (the request's own session, or the parent of the sub-agent that asks)."""

    request: ApprovalRequest
    root_id: str


class ApprovalSettled(_Activity, tag="approval_settled"):
    """An approval request no longer waits: answered (`approved`), or its run stopped waiting (cancelled,
    timed out, ended: `approved` is None)."""

    session_id: str
    call_id: str
    approved: bool | None = None


class Resync(_Activity, tag="resync"):
    """The follower's number is not one this store's feed gave: read the session list again, then go on
    from `n`."""


Activity = SessionCreated | SessionUpdated | SessionDeleted | StatusChanged | ApprovalPending | ApprovalSettled | Resync

log = logging.getLogger("tether.runtime")

FOLLOWER_BUFFER = 1024
"""Activities a follower may fall behind by before it catches up from the store."""
PAGE = 500
"""Changes read from the store at a time when a follower catches up."""


def activity_of(change: Change) -> Activity:
    """The activity a change of the store's feed records, numbered by it."""
    item: dict[str, object] = {**change.data, "type": change.kind, "n": change.id}
    return msgspec.json.decode(msgspec.json.encode(item), type=Activity)  # type: ignore[no-any-return]


class _Follower:
    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[Activity | None] = asyncio.Queue(maxsize=size)
        self.overflowed = False
        self.closed = False

    def offer(self, activity: Activity) -> None:
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(activity)
        except asyncio.QueueFull:
            self.overflowed = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


class ActivityFeed:
    """The feed (see the module docstring) over `store`'s change feed: `publish` records and hands out,
    `follow` yields."""

    def __init__(self, store: Changes, *, buffer: int = FOLLOWER_BUFFER) -> None:
        self.store = store
        self.last_n = 0
        """The id of the last change this process published."""
        self._followers: set[_Follower] = set()
        self._buffer = buffer
        self._order = asyncio.Lock()
        self.on_publish: Callable[[Activity], None] | None = None
        """Told of each activity this process recorded (`runtime/mesh.py`: the other processes over the
        store are woken to read it)."""

    @property
    def followed(self) -> bool:
        """Whether anyone follows the feed now."""
        return bool(self._followers)

    def close(self) -> None:
        """End every follower (the process stops)."""
        for follower in self._followers:
            follower.closed = True
            while not follower.queue.empty():
                follower.queue.get_nowait()
            follower.queue.put_nowait(None)

    async def publish(self, activity: Activity) -> Activity:
        """Record `activity` in the store's feed (its id becomes its number), then hand it to the followers,
        in the order of the ids."""
        data = msgspec.to_builtins(activity)
        kind = data.pop("type")
        data.pop("n", None)
        session_id = data.get("session_id") or data.get("root_id") or (data.get("session") or {}).get("id")
        async with self._order:
            try:
                change = await self.store.append_change(kind, session_id=session_id, data=data)
            except TetherError:  # a store that fails: the feed is a courtesy, never what stops a run
                log.warning("could not record a %s in the change feed", kind, exc_info=True)
                return activity
            activity.n = change.id
            self.last_n = max(self.last_n, change.id)
            for follower in self._followers:
                follower.offer(activity)
        if self.on_publish is not None:
            self.on_publish(activity)
        return activity

    def poke(self) -> None:
        """Another process recorded activities: every follower reads the store's feed from where it is."""
        for follower in self._followers:
            if not follower.overflowed and not follower.closed:
                follower.overflowed = True  # read at its next turn, before its queue
                if not follower.queue.full():
                    follower.queue.put_nowait(None)  # wakes it

    async def _since(self, after: int) -> AsyncIterator[Activity]:
        while True:
            changes = await self.store.changes_after(after, PAGE)
            for change in changes:
                after = change.id
                yield activity_of(change)
            if len(changes) < PAGE:
                return

    async def follow(self, after: int | None = None) -> AsyncIterator[Activity]:
        """The activities after `after` (None: from now on), read from the store, then new ones as they come,
        each once. An `after` the store's feed never reached gets a `Resync`."""
        follower = _Follower(self._buffer)
        self._followers.add(follower)
        try:
            last = await self.store.last_change_id()
            catch_up = False
            if after is not None and after > last:
                yield Resync(n=last)
            elif after is not None:
                last, catch_up = after, True
            while True:
                if catch_up or follower.overflowed:
                    follower.overflowed = catch_up = False
                    async for activity in self._since(last):
                        last = activity.n
                        yield activity
                    continue
                queued = await follower.queue.get()
                if follower.closed:
                    return
                if queued is not None and queued.n > last + 1:
                    # other processes recorded what lies between: read it from the store, in order
                    async for activity in self._since(last):
                        last = activity.n
                        yield activity
                elif queued is not None and queued.n > last:
                    last = queued.n
                    yield queued
        finally:
            self._followers.discard(follower)
