"""What happens to the sessions of one process, as a feed: sessions created, updated and deleted, and where
each one's runs stand (`StatusChanged`), and the approval requests that wait for a person
(`ApprovalPending`, then `ApprovalSettled`). Numbered in the order they happened (`n`, this process's own count),
the latest few thousand kept so that a follower who dropped out can catch up; one who fell further behind
is told to read the list again (`Resync`). A follower's buffer is bounded, as a session subscriber's is."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Literal

import msgspec

from ..store.records import SessionInfo
from .permission import ApprovalRequest

ActivityStatus = Literal["idle", "queued", "running", "waiting_for_approval", "paused", "busy_elsewhere"]
"""As `SessionManager.status` says (its `Status`)."""


class _Activity(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    n: int = 0
    """The activity's number in this process's feed (increasing; not a session event number)."""


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
    """The follower missed more than the feed keeps: read the session list again, then go on from `n`."""


Activity = SessionCreated | SessionUpdated | SessionDeleted | StatusChanged | ApprovalPending | ApprovalSettled | Resync

KEPT = 4096
"""Activities kept for followers who catch up after a reconnect."""
FOLLOWER_BUFFER = 1024
"""Activities a follower may fall behind by before it catches up from what the feed keeps."""


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
    """The feed (see the module docstring): `publish` numbers and hands out, `follow` yields."""

    def __init__(self, *, kept: int = KEPT, buffer: int = FOLLOWER_BUFFER) -> None:
        self.last_n = 0
        self._kept: deque[Activity] = deque(maxlen=kept)
        self._followers: set[_Follower] = set()
        self._buffer = buffer

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

    def publish(self, activity: Activity) -> Activity:
        self.last_n += 1
        activity.n = self.last_n
        self._kept.append(activity)
        for follower in self._followers:
            follower.offer(activity)
        return activity

    def _since(self, after: int) -> list[Activity]:
        """What the feed keeps after `after`, preceded by a `Resync` when some of it is gone."""
        kept = [a for a in self._kept if a.n > after]
        first = kept[0].n if kept else self.last_n + 1
        if after < first - 1:
            return [Resync(n=first - 1), *kept]
        return kept

    async def follow(self, after: int | None = None) -> AsyncIterator[Activity]:
        """The activities after `after` (None: from now on), then new ones as they come, each once. An
        `after` this feed never reached (a number from before the process restarted) gets a `Resync`."""
        follower = _Follower(self._buffer)
        self._followers.add(follower)
        pending: list[Activity] = []
        if after is None:
            last = self.last_n
        elif after > self.last_n:
            last = self.last_n
            pending = [Resync(n=self.last_n)]
        else:
            last = after
            pending = self._since(after)
        try:
            while True:
                for activity in pending:
                    if activity.n > last or isinstance(activity, Resync):
                        last = max(last, activity.n)
                        yield activity
                if follower.overflowed:
                    follower.overflowed = False
                    pending = self._since(last)
                    continue
                queued = await follower.queue.get()
                if follower.closed:
                    return
                pending = [] if queued is None else [queued]
        finally:
            self._followers.discard(follower)
