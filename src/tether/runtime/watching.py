"""The manager's room for leases and the store: where a session stands (`status`: a run here, prompts
waiting, another process's lease, a request left waiting), who holds a session (`_busy`), and the activity
feed with what other processes do to the store's sessions, told once (`announce`, `_watch_store`)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator

from ..errors import SessionBusy, SessionNotFound, TetherError
from ..store.records import UNSET
from .activity import Activity, SessionCreated, SessionUpdated, StatusChanged
from .approvals import journaled_requests
from .lease import live_lease
from .manager_base import ManagerBase, Status

STORE_WATCH_INTERVAL = 1.0
"""How often the store is looked at for sessions other processes changed, while the activity feed is
followed (`follow_activity`)."""

WATCHED_FOR = 5.0
"""Seconds a session changed by another process is looked at for its status after its last change."""


class Watching(ManagerBase):
    """Leases, status and the store's sessions as the activity feed tells them (see the module docstring)."""

    async def status(self, session_id: str) -> Status:
        entry = self._sessions.get(session_id)
        if entry is not None and entry.run is not None:
            waits = any(a.root == session_id or a.request.session_id == session_id for a in self._asked.values())
            return "waiting_for_approval" if waits else "running"
        if entry is not None and entry.waiting:
            return "queued"
        info = await self.store.get_session(session_id)
        if await live_lease(self.store, session_id) is not None:
            if self.mesh is not None and self.mesh.waits_for_approval(session_id):
                return "waiting_for_approval"
            # a sibling worker's or node's run is the service's own: running, as its own process says (its
            # events relayed here, or its claim in the relay: a run that began before this peer joined);
            # elsewhere is a process outside the service (a `tether run` beside the server)
            mesh = self.mesh
            sibling = mesh is not None and (mesh.relays(session_id) or await mesh.claimed_elsewhere(session_id))
            return "running" if sibling else "busy_elsewhere"
        if await journaled_requests(self.store, session_id):
            return "waiting_for_approval"  # a run stopped while it waited: resuming it asks again
        return "paused" if info.state == "paused" else "idle"

    async def _last_change(self) -> int:
        try:
            return await self.store.last_change_id()
        except TetherError:
            return 0

    async def _told_elsewhere(self, after: int) -> int:
        """Read the feed's changes after `after` (any process's): the sessions they told are known as told.
        Returns where the reading stopped."""
        while True:
            changes = await self.store.changes_after(after, 500)
            for change in changes:
                row = change.data.get("session")
                if change.kind in ("session_created", "session_updated") and isinstance(row, dict):
                    sid, updated, last = row.get("id"), row.get("updated_at"), row.get("entry_count", 0)  # (last_seq)
                    mark = (
                        (float(updated), last) if isinstance(updated, int | float) and isinstance(last, int) else None
                    )
                    if isinstance(sid, str) and mark is not None and self._known.get(sid, (0.0, 0)) < mark:
                        self._known[sid] = mark
                        self._known.move_to_end(sid)
            if len(changes) < 500:
                return changes[-1].id if changes else after
            after = changes[-1].id

    async def _busy(self, session_id: str) -> SessionBusy | None:
        """Who holds the session, as the error to give someone who wants it now; None when it is free."""
        lease = await live_lease(self.store, session_id)
        if lease is not None:
            return lease.busy()
        entry = self._sessions.get(session_id)
        if entry is not None and (entry.run is not None or entry.waiting):
            return SessionBusy(session_id, "a run starting in this process", pid=os.getpid(), host=socket.gethostname())
        return None

    async def announce(self, activity: Activity) -> Activity:
        """Tell the activity feed what this process did to a session (once: the store watcher does not tell
        it again)."""
        if isinstance(activity, SessionCreated | SessionUpdated):
            self._known[activity.session.id] = (activity.session.updated_at, activity.session.last_seq)
            self._known.move_to_end(activity.session.id)
        return await self.activity.publish(activity)

    def follow_activity(self, after: int | None = None) -> AsyncIterator[Activity]:
        """The activity feed (`ActivityFeed.follow`), with what other processes do to the store's sessions
        (a `tether run` beside a server, an import) told as it is seen (`_watch_store`)."""
        if self._store_watch is None or self._store_watch.done():
            watch = self._watch_store(since=time.time())
            self._store_watch = asyncio.create_task(watch, name="tether-watch-store")
        return self.activity.follow(after)

    async def _watch_store(self, since: float) -> None:
        """While the feed has followers, look at the most recently updated sessions every
        `STORE_WATCH_INTERVAL`: a session changed by no run of this manager is told (`SessionCreated` or
        `SessionUpdated`, then its `StatusChanged`), and a session another process runs is looked at until its
        run ends (the lease is given back with no change to the session's row). What this manager did
        itself is not told again (`announce`); a deletion by another process is not seen (its listing is)."""
        known = self._known
        told: dict[str, Status] = {}
        watched: dict[str, float] = {}
        """Sessions whose status is looked at on every look: those changed lately (a run elsewhere takes the
        lease just after it creates or appends) and those run elsewhere (until the lease is given back)."""
        first = True
        feed_read = await self._last_change()
        while not self._closing:
            if not first:
                await asyncio.sleep(STORE_WATCH_INTERVAL)
                if not self.activity.followed:
                    return
            now = time.time()
            try:
                # what the service's other members (workers, nodes) told the feed themselves is not told
                # again: with 2 workers a session one made came twice, the second time as made anew
                feed_read = await self._told_elsewhere(feed_read)
                page = await self.store.list_sessions(parent_id=UNSET, limit=50)
                for info in reversed(page.items):  # oldest change first
                    mark = (info.updated_at, info.last_seq)
                    if known.get(info.id) == mark:
                        continue
                    if self.mesh is not None and now - info.updated_at < STORE_WATCH_INTERVAL:
                        continue  # a member may be about to tell it (its row is written before its change)
                    is_new = info.id not in known
                    known[info.id] = mark
                    known.move_to_end(info.id)
                    entry = self._sessions.get(info.id)
                    if (first and info.updated_at < since) or (entry is not None and self._runs_here(entry)):
                        continue
                    created = is_new and info.created_at >= since
                    await self.activity.publish(
                        SessionCreated(session=info) if created else SessionUpdated(session=info)
                    )
                    watched[info.id] = now
                for sid, changed in list(watched.items()):
                    entry = self._sessions.get(sid)
                    if entry is not None and self._runs_here(entry):
                        del watched[sid]  # this manager tells its own run's statuses
                        continue
                    status = await self.status(sid)
                    if status != told.get(sid):
                        told[sid] = status
                        await self.activity.publish(StatusChanged(session_id=sid, status=status))
                    if status == "busy_elsewhere":
                        watched[sid] = now
                    elif now - changed > WATCHED_FOR:
                        del watched[sid]
                        told.pop(sid, None)
            except SessionNotFound as gone:
                watched.pop(gone.session_id, None)  # deleted while looked at: the next look does not list it
            except TetherError:
                return  # the store is closing
            while len(known) > 1000:
                known.popitem(last=False)
            first = False
