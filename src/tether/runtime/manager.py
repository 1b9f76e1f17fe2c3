"""`SessionManager`: many sessions driven by one process, in rooms by job: `queueing.py` (prompts queued or
steered, a worker per session running them one after another, each run holding the session's lease),
`following.py` (subscribers through bounded buffers, brought back through the journal rather than held in
memory), `asking.py` (approvals: a call that needs a person's yes waits until `answer` gives one; a request a
stopped process left is answered by resuming its session), `watching.py` (status, leases, the activity feed
with what other processes do), on what they share (`manager_base.py`). Here: making one, and the controls:
cancel, pause, `exclusive` (an idle session held for an edit outside a run), delete, `shutdown`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import OrderedDict
from collections.abc import AsyncIterator

from ..config import Config
from ..errors import TetherError
from ..providers.clients import SharedClients
from ..providers.registry import resolve_provider
from ..store.protocols import Store
from .activity import ActivityFeed, SessionDeleted
from .asking import Asking
from .configuration import load_config
from .following import Following
from .launch import Resolver, RunRequest
from .lease import held_for_edit
from .manager_base import SUBSCRIBER_BUFFER, RunHandle, Status, _Asked, _Session
from .mcp import ProcessServers
from .pacing import Pacer
from .permission import Answer
from .queueing import Queueing
from .watching import Watching

__all__ = ["RunHandle", "SessionManager", "Status"]


class SessionManager(Queueing, Following, Asking, Watching):
    """Drives many sessions in one process over one store (see the module docstring). `request` gives the
    defaults of every run (tools, step limit, workspace); `config` is read from the tether home unless
    given; `resolve` turns a model name into a provider (the registry's, with the SDK clients of the
    manager's runs shared, unless a test or a server gives its own). Its runs share a `Pacer` unless `pace` is False: when many are ready at once, a few go on per
    pass of the event loop, which keeps serving requests and streams meanwhile."""

    def __init__(
        self,
        store: Store,
        *,
        config: Config | None = None,
        defaults: RunRequest | None = None,
        resolve: Resolver | None = None,
        subscriber_buffer: int = SUBSCRIBER_BUFFER,
        pace: bool = True,
    ) -> None:
        self.store = store
        self.config = config if config is not None else load_config()
        self.defaults = defaults or RunRequest(None)
        self.clients = SharedClients()
        """The SDK clients of this manager's runs (`providers.clients`): a run's provider takes its
        connections from the runs before it, rather than a new connection (and TLS handshake) per prompt.
        Closed by `shutdown`."""
        self.resolve: Resolver = resolve or functools.partial(resolve_provider, clients=self.clients)
        self.subscriber_buffer = subscriber_buffer
        self._sessions: dict[str, _Session] = {}
        self._recent: OrderedDict[str, _Session] = OrderedDict()
        self._closing = False
        self._asked: dict[tuple[str, str], _Asked] = {}
        self._given: dict[tuple[str, str], Answer] = {}
        """Answers given for requests that no run of this manager waited on (a stopped run's): the run that
        resumes the session takes them when it asks again."""
        self.activity = ActivityFeed(store)
        """What happens to the sessions this manager touches: followed by a server's `/events` through
        `follow_activity`, which adds what other processes do to the store."""
        self._store_watch: asyncio.Task[None] | None = None
        self._known: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """Each session's row as last told to the feed (`updated_at`, `last_seq`): the store watcher tells
        only what changed since."""
        self.mcp = ProcessServers(self.config)
        """The process's MCP servers, shared by its runs; looked at, added and removed while they go on."""
        self.pacer = Pacer() if pace else None
        """Turns for this manager's runs, so that many at once do not stall the loop they share with a
        server's requests and streams (`pacing`)."""
        self.mesh = None
        self._forwarded = {}
        self._ran = OrderedDict()

    async def cancel(self, session_id: str) -> bool:
        """Stop the session's run now, and drop the prompts waiting behind it: the partial answer is kept, its
        unfinished tool calls marked aborted (their commands killed), the lease released. A run in another
        process is asked through the store. False when nothing was running."""
        entry = self._sessions.get(session_id)
        if entry is not None and entry.worker is not None and not entry.worker.done():
            entry.worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await entry.worker
            with contextlib.suppress(TetherError):  # what waited, queued durably by any process, goes too
                for item in await self.store.queued_prompts(session_id):
                    await self.store.drop_prompt(session_id, item.id)
            await self._announce(session_id)  # the cancelled worker could not: the feed said "running" still
            return True
        placed = self.mesh.cancel_placed(session_id) if self.mesh is not None else []
        if placed:  # placed with another worker, not started there yet: its prompts go, their handles end
            await self._drop_placed(session_id, placed)
        asked = await self.store.request_lease(session_id, "cancel") is not None
        if (asked or placed) and self.mesh is not None:
            await self.mesh.control(session_id, "cancel")  # at once; the lease says it within half a second
        return asked or bool(placed)

    async def pause(self, session_id: str) -> bool:
        """Stop the session's run at its next step (a checkpoint; the session marked paused); `resume`, or
        any later prompt, goes on. A run in another process is asked through the store."""
        entry = self._sessions.get(session_id)
        if entry is not None and entry.run is not None:
            entry.run.pause()
            return True
        asked = await self.store.request_lease(session_id, "pause") is not None
        if asked and self.mesh is not None:
            await self.mesh.control(session_id, "pause")  # at once; the lease says it within half a second
        return asked

    @contextlib.asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[None]:
        """Hold an idle session for an edit outside a run (a revert, a title, a compaction, a delete): its
        lease is taken for the edit, so that no run starts meanwhile, here or in another process. A session
        that a run holds or waits for is refused with `SessionBusy`, naming the holder."""
        busy = await self._busy(session_id)
        if busy is not None:
            raise busy
        async with held_for_edit(self.store, session_id):
            yield

    async def delete(self, session_id: str) -> list[str]:
        """Delete an idle session and its child sessions (`SessionBusy` while a run holds it)."""
        async with self.exclusive(session_id):
            deleted = await self.store.delete_session(session_id)
        for sid in deleted:
            self.followers_end(sid)
        await self.activity.publish(SessionDeleted(session_id=session_id, deleted=deleted))
        return deleted

    async def shutdown(self, *, wait: float = 0.0) -> None:
        """Take no more prompts; give the runs in progress `wait` seconds to finish, then cancel them (each
        keeps what it did and releases its lease); drop what is still waiting; then end every subscription
        (each has had the runs' last events) and the activity feed's followers."""
        self._closing = True
        workers = [e.worker for e in self._sessions.values() if e.worker is not None and not e.worker.done()]
        if workers and wait > 0:
            await asyncio.wait(workers, timeout=wait)
        for worker in workers:
            if not worker.done():
                worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        for entry in self._sessions.values():
            for subscriber in entry.subscribers:
                subscriber.close()
            if entry.watcher is not None:
                entry.watcher.cancel()
        if self._store_watch is not None:
            self._store_watch.cancel()
        await self.mcp.close()
        await self.clients.aclose()
        self.activity.close()
