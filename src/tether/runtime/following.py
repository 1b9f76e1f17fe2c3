"""The manager's room for subscriptions and catch-up: any number of subscribers follow a session's events,
each through a bounded buffer; one that falls behind, or that comes with an `after`, reads the journal
(`replay_events`) with the latest run starts and ends in their places, then joins live again; while no run of
this manager has a followed session, its journal is looked at every `WATCH_INTERVAL` for what another
process appended."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator

from ..errors import SessionNotFound, TetherError
from ..events import Done, Error, Event, RunStarted, event_number
from .journal import replay_events
from .manager_base import ManagerBase, _Session, _Subscriber

log = logging.getLogger("tether.runtime")

SUBSCRIBER_BATCH = 256
"""The most events `subscribe_batches` gives at once."""

WATCH_INTERVAL = 0.5
"""How often a followed session that no run of this manager has is looked at for what another process
appended (`_watch`)."""


RECENT_RELAYED = 256
"""Sessions let go of that are remembered, at most, when another process's run of one that nothing here
follows is relayed (as `queueing.RECENT_SESSIONS`)."""


class Following(ManagerBase):
    """Subscribers of sessions (see the module docstring)."""

    def _publish(self, entry: _Session, event: Event, *, relay: bool = True) -> None:
        if relay and self.mesh is not None:
            self.mesh.event(entry.session_id, event)
        if event.session_id != entry.session_id:
            # a sub-agent's event, passed on by the run: its numbers are its own session's; those who
            # follow the child itself get it too
            child = self._sessions.get(event.session_id)
            if child is not None:
                self._publish(child, event, relay=False)
        else:
            entry.last_n = max(entry.last_n, event.n)
            if isinstance(event, RunStarted | Done | Error):
                entry.boundaries.append(event)
        for subscriber in entry.subscribers:
            subscriber.offer(event)

    def relayed(self, session_id: str, event: Event) -> None:
        """An event that another process's run published to the followers of `session_id` (`mesh`): this
        process's followers get it as they get a run's here."""
        entry = self._sessions.get(session_id) or self._recent.get(session_id)
        if entry is None:  # kept as a session let go of is: a follower that comes next catches up with it
            entry = self._recent[session_id] = _Session(session_id)
            while len(self._recent) > RECENT_RELAYED:
                self._recent.popitem(last=False)
        if entry.run is None or entry.run.state is None:
            # (a run here that holds the lease publishes its own events; a worker between runs, or a prompt
            # here waiting for the lease, must not swallow those of the run that holds it elsewhere)
            self._publish(entry, event, relay=False)

    async def subscribe(self, session_id: str, after: int | None = None) -> AsyncIterator[Event]:
        """The session's events as they come. With `after`, first the durable events numbered after it,
        from the journal; a subscriber that falls more than the buffer behind is brought back the same way:
        no durable event is missed or repeated, and nothing waits on a slow subscriber. The events of the
        session's sub-agents (`task`) come as they happen, with their own `session_id` and numbers; a
        replay brings back only the session's own (the children's are in their own journals)."""
        batches = self.subscribe_batches(session_id, after)
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await batches.aclose()  # now, not when the collector finds it: it takes the subscriber off

    async def subscribe_batches(
        self, session_id: str, after: int | None = None, *, most: int = SUBSCRIBER_BATCH
    ) -> AsyncGenerator[list[Event], None]:
        """`subscribe`, in batches: each one the events ready at once (one, or those queued behind it;
        a replay from the journal `most` at a time), so that a follower that writes to a socket writes
        what piled up in one go instead of one write per event."""
        await self.store.get_session(session_id)  # SessionNotFound before anything else
        entry = self._entry(session_id)
        subscriber = _Subscriber(self.subscriber_buffer)
        entry.subscribers.add(subscriber)
        if entry.watcher is None or entry.watcher.done():
            entry.watcher = asyncio.create_task(self._watch(entry), name=f"tether-watch-{session_id}")
        if after is None and self.mesh is not None:
            # "from now" is from what the other processes posted before now: what the relay still holds of
            # a run that ended elsewhere is read first, and not given to this subscriber as if it were live
            try:
                await self.mesh.sync()
            except TetherError:
                log.warning("could not read the relay before following session %s", session_id, exc_info=True)
        last = entry.last_n if after is None else after
        try:
            replay = after is not None
            while True:
                if replay or subscriber.overflowed:
                    subscriber.overflowed = False  # from here on it queues again; the journal fills the gap
                    replay = False
                    batch: list[Event] = []
                    async for event in self._catch_up(entry, last):
                        last = event.n
                        batch.append(event)
                        if len(batch) >= most:
                            yield batch
                            batch = []
                    if batch:
                        yield batch
                    continue
                queued = await subscriber.queue.get()
                batch = []
                while True:
                    if subscriber.closed:
                        return
                    if queued is not None:  # None: a wake-up to catch up
                        if queued.session_id != session_id:  # a sub-agent's, numbered in its own session
                            batch.append(queued)
                        elif queued.n > last:  # else already given (a replay overtook the queue)
                            last = queued.n
                            batch.append(queued)
                    if len(batch) >= most or subscriber.overflowed or subscriber.queue.empty():
                        break
                    queued = subscriber.queue.get_nowait()
                if batch:
                    yield batch
        finally:
            entry.subscribers.discard(subscriber)
            if entry.worker is None or entry.worker.done():
                self._let_go(entry)

    def _runs_here(self, entry: _Session) -> bool:
        return entry.run is not None or bool(entry.waiting) or (entry.worker is not None and not entry.worker.done())

    async def _watch(self, entry: _Session) -> None:
        """While the session has subscribers, look at its journal every `WATCH_INTERVAL` when no run of this
        manager has it: a run of another process (a `tether run` beside a server) appends there, and the
        subscribers read what it appended (its durable events: messages, tool calls and results; the live
        ones, text deltas and run boundaries, stay in that process)."""
        seen: int | None = None
        while entry.subscribers and not self._closing:
            if self._runs_here(entry):
                seen = None  # this manager's run publishes its own events
            else:
                try:
                    last_seq = (await self.store.get_session(entry.session_id)).last_seq
                except SessionNotFound:  # deleted by another process (or worker): its streams end
                    self.followers_end(entry.session_id)
                    return
                except TetherError:
                    return  # the store is closing
                changed = seen is not None and last_seq > seen and not self._runs_here(entry)
                mesh = self.mesh
                if changed and mesh is not None:
                    # a run of another process over the store: what it posted to the relay comes first, in
                    # order, live events too; the journal is read only for what the relay did not bring
                    # (a process with no relay: `tether run`), never ahead of it
                    await mesh.sync()
                    relayed = mesh.relays(entry.session_id) or await mesh.claimed_elsewhere(entry.session_id)
                    changed = not relayed and entry.last_n < event_number(last_seq, 0)
                if changed:
                    for subscriber in list(entry.subscribers):
                        subscriber.read_journal()
                seen = last_seq
            await asyncio.sleep(WATCH_INTERVAL)

    def followers_end(self, session_id: str) -> None:
        """The session is gone (deleted): its subscribers' streams end (an SSE follower sees the stream close
        rather than pings for ever), and nothing watches it any more."""
        entry = self._sessions.pop(session_id, None) or self._recent.pop(session_id, None)
        if entry is None:
            return
        for subscriber in list(entry.subscribers):
            subscriber.close()
        if entry.watcher is not None and entry.watcher is not asyncio.current_task():
            entry.watcher.cancel()

    async def _catch_up(self, entry: _Session, after: int) -> AsyncIterator[Event]:
        """The durable events after `after` from the journal, with the run starts and ends since (live
        events, kept apart for this) in their places. The boundaries are looked at again before each event:
        a run that goes on while the journal is read publishes its start before it appends what follows."""
        given = after
        async for event in replay_events(self.store, entry.session_id, after):
            for boundary in sorted((b for b in entry.boundaries if given < b.n < event.n), key=lambda b: b.n):
                yield boundary
            yield event
            given = event.n
        for boundary in sorted((b for b in entry.boundaries if b.n > given), key=lambda b: b.n):
            yield boundary
