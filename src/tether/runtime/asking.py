"""The manager's room for approvals: a call that needs a person's yes waits until `answer` (from any task)
gives one; the requests waiting are listed, with those a journal holds from a run that stopped while it
waited (another process's, one killed, one before a restart), found through the store's change feed; an
answer to such a request resumes its session, whose run asks again and takes it."""

from __future__ import annotations

import asyncio

from ..errors import SessionNotFound, UnknownName
from .activity import ApprovalPending, ApprovalSettled, StatusChanged
from .approvals import journaled_requests
from .lease import live_lease
from .manager_base import ManagerBase, RunHandle, _Asked
from .permission import Answer, ApprovalRequest

ASKED_WINDOW = 10_000
"""How many of the store's latest changes `approvals` looks through for requests other processes made."""


class Asking(ManagerBase):
    """Approval requests and their answers (see the module docstring)."""

    async def _ask(self, request: ApprovalRequest, root: str) -> Answer:
        key = (request.session_id, request.call_id)
        given = self._given.pop(key, None)
        if given is not None:  # answered while no run waited (left by a stopped run): settled now, on /events too
            await self.activity.publish(
                ApprovalSettled(session_id=request.session_id, call_id=request.call_id, approved=given.approved)
            )
            return given
        asked = _Asked(request, root, asyncio.get_running_loop().create_future())
        self._asked[key] = asked
        pending = ApprovalPending(request=request, root_id=root)
        if self.mesh is not None:
            self.mesh.approval(pending)
        await self.activity.publish(pending)
        await self.activity.publish(StatusChanged(session_id=root, status="waiting_for_approval"))
        given_answer: Answer | None = None
        try:
            given_answer = await asked.answer
            return given_answer
        finally:
            if self._asked.get(key) is asked:
                del self._asked[key]
            approved = given_answer.approved if given_answer is not None else None
            settled = ApprovalSettled(session_id=request.session_id, call_id=request.call_id, approved=approved)
            if self.mesh is not None:
                self.mesh.approval(settled)  # this process's run waits no more (an answer goes to the journal's)
            if given_answer is not None or not self._stopping(root):
                await self.activity.publish(settled)
            # else: the run stopped (cancelled, the server stopping) while it waited: the request stays in the
            # journal, listed by `approvals` and asked again by the next run; /events must not say it settled
            entry = self._sessions.get(root)
            if entry is not None and entry.run is not None:
                await self.activity.publish(StatusChanged(session_id=root, status=await self.status(root)))

    def _stopping(self, root: str) -> bool:
        """Whether the run of `root` here is being cancelled (not a timeout: that one is answered no)."""
        entry = self._sessions.get(root)
        worker = entry.worker if entry is not None else None
        return worker is not None and (worker.cancelling() > 0 or worker.done())

    async def approvals(self, session_id: str | None = None) -> list[ApprovalRequest]:
        """The approval requests that wait for an answer: those the runs of this manager wait on (of every
        session, or of `session_id` and its sub-agents), in the order they were made; and those a journal
        holds from a run that stopped while it waited (another process's, one killed, or one before a
        restart), when no run here or elsewhere has the session now: of `session_id`, or, with none, of
        every session whose request the store's change feed recorded (its last `ASKED_WINDOW` changes)."""
        waiting = [
            a.request
            for a in self._asked.values()
            if session_id is None or session_id in (a.root, a.request.session_id)
        ]
        if self.mesh is not None:
            waiting += self.mesh.requests(session_id)  # those the runs of the other processes wait on now
        if session_id is None:
            asked = {(r.session_id, r.call_id) for r in waiting}
            for sid in await self._asked_elsewhere():
                try:
                    left = await self.approvals(sid)
                except SessionNotFound:
                    continue  # deleted since
                waiting += [r for r in left if (r.session_id, r.call_id) not in asked]
                asked |= {(r.session_id, r.call_id) for r in left}
            return waiting
        if waiting:
            return waiting
        entry = self._sessions.get(session_id)
        if entry is not None and (entry.run is not None or entry.waiting):
            return []
        if await live_lease(self.store, session_id) is not None:
            return []
        return await journaled_requests(self.store, session_id)

    async def _asked_elsewhere(self) -> list[str]:
        """The sessions whose runs asked for a person's answer lately, as the store's change feed recorded it
        (any process of the store), which no run of this manager has now: where a request may be left."""
        last = await self.store.last_change_id()
        after, roots = max(0, last - ASKED_WINDOW), dict[str, None]()
        while after < last:
            changes = await self.store.changes_after(after, 500)
            if not changes:
                break
            for change in changes:
                if change.kind != "approval_pending":
                    continue
                request = change.data.get("request")
                for sid in (
                    change.data.get("root_id"),
                    request.get("session_id") if isinstance(request, dict) else None,
                ):
                    here = self._sessions.get(sid) if isinstance(sid, str) else None
                    if isinstance(sid, str) and (here is None or here.run is None):
                        roots[sid] = None
            after = changes[-1].id
        return list(roots)

    async def answer(self, session_id: str, call_id: str, answer: Answer) -> RunHandle | None:
        """Answer the approval request of tool call `call_id` in `session_id` (a sub-agent's session for its
        requests), from any task. A run of this manager waiting on it goes on (None is returned); a request
        that a stopped run left in the journal is answered by resuming the session, whose run asks again
        and takes this answer (its handle is returned). `UnknownName` when no such request waits;
        `SessionBusy` when another process runs the session (answer it there)."""
        if self.answer_here(session_id, call_id, answer):
            return None
        if self.mesh is not None and self.mesh.waits_elsewhere(session_id, call_id):
            await self.mesh.answer(session_id, call_id, answer)  # the process whose run waits takes it
            return None
        await self.store.get_session(session_id)  # SessionNotFound first
        journaled = [r.call_id for r in await self.approvals(session_id)]
        if call_id not in journaled:
            entry = self._sessions.get(session_id)
            lease = await live_lease(self.store, session_id)
            if lease is not None and (entry is None or entry.run is None):
                if self.mesh is not None and call_id in [
                    r.call_id for r in await journaled_requests(self.store, session_id)
                ]:
                    await self.mesh.answer(session_id, call_id, answer)  # asked before this process joined
                    return None
                raise lease.busy()
            raise UnknownName(f"no approval request for the call {call_id} waits in session {session_id}")
        self._given[(session_id, call_id)] = answer
        return await self.start(session_id, None)

    def answer_here(self, session_id: str, call_id: str, answer: Answer) -> bool:
        """Give `answer` to a run of this manager that waits on the request; False when none does."""
        asked = self._asked.get((session_id, call_id))
        if asked is None:
            return False
        if not asked.answer.done():
            asked.answer.set_result(answer)
        return True
