"""The approvals flow of a run: a call that the rules (or a program's own check) ask about is journaled as
an approval request, whose `ApprovalRequested` event goes out; the run waits for its `Approver`; the answer
is journaled as a decision (`ApprovalResolved`) before the call runs or comes back to the model as a
refusal. A request without a decision outlives its process: the next run of the session asks again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .. import markers
from ..errors import ConfigError
from ..messages import Entry, Message, ToolCallPart
from ..store.protocols import Journal
from ..store.reverts import ActiveWalk
from ..tools.base import ToolContext
from . import audit
from .configuration import save_project_rules
from .permission import ALLOWED, Answer, ApprovalRequest, Approver, Permission, strictest
from .rules import SESSION_RULES_KEY, allow_hint, parse_rules
from .state import RunState
from .toolset import batch_kind

log = logging.getLogger("tether.runtime")

NOBODY = "nobody is here to answer (no terminal)"


async def verdict(state: RunState, call: ToolCallPart, ctx: ToolContext) -> Permission:
    """What the program's check and the rules say of `call`, the strictest of the two. A call that cannot
    run at all (an unknown tool, arguments that are not JSON) is let through: the runner refuses it."""
    if not call.arguments_ok or call.name not in state.tools:
        return ALLOWED
    decisions: list[Permission] = []
    check = state.options.permission
    if check is not None:
        try:
            decisions.append(await check(call, ctx))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken check refuses: a tool never runs without a decision
            log.warning("the permission check failed on %s", call.name, exc_info=True)
            return Permission(False, f"the permission check failed ({type(exc).__name__}: {exc})")
    rules = state.rules
    if rules is not None:
        read_only = state.tools.is_read_only(call.name)
        decisions.append(rules.decide(call.name, call.arguments, read_only=read_only, workspace=ctx.workspace))
    if not decisions:
        return ALLOWED
    decision = strictest(*decisions)
    if decision.ask and rules is not None and rules.mode == "never-ask":  # the program's check asked
        return Permission(False, f"{decision.reason}, and the permission mode never-ask denies what would ask")
    return decision


def _suggestion(state: RunState, call: ToolCallPart, ctx: ToolContext) -> list[str]:
    if state.rules is None:
        return []
    read_only = state.tools.is_read_only(call.name)
    return state.rules.suggestion(call.name, call.arguments, read_only=read_only, workspace=ctx.workspace)


@dataclass(frozen=True)
class Decision:
    """What was decided on one call, and whether someone was asked (`asked`: a person answered, or the
    wait for one timed out)."""

    permission: Permission
    asked: bool = False
    by: str = ""
    """Who answered, when someone was asked (`Answer.by`)."""


def decided_by(state: RunState, decision: Decision) -> str:
    """Who decided on a call, for the audit trail: a person (who answered), a rule, the program's check, the
    mode (its built-in defaults)."""
    if decision.asked:
        return f"person: {decision.by}" if decision.by else "person"
    if decision.permission.rule:
        return f"rule: {decision.permission.rule}"
    if state.options.permission is not None and state.rules is None:
        return "check: the program's permission check"
    if state.rules is not None:
        return f"mode: {state.rules.mode}"
    return "none: no rules (a program's own loop)"


async def decide(state: RunState, call: ToolCallPart, ctx: ToolContext) -> Decision:
    """Decide on `call`. An ask is journaled as a request (its `ApprovalRequested` goes out at once: the
    journal's `reported` wakes the loop), waits for the approver, and its answer is journaled as a decision
    before this returns. An ask with no approver is a no whose reason says how to allow such a call."""
    decision = await verdict(state, call, ctx)
    if not decision.ask:
        return Decision(decision)
    suggested = _suggestion(state, call, ctx)
    approver = state.options.approver
    if approver is None:
        reason = f"{decision.reason}; it needs a yes, and {NOBODY}{allow_hint(suggested)}"
        return Decision(Permission(False, reason, rule=decision.rule))
    request = ApprovalRequest(
        session_id=state.session_id,
        call_id=call.id,
        tool=call.name,
        arguments=call.arguments,
        reason=decision.reason,
        suggestion=tuple(suggested),
        workspace=str(ctx.workspace),
    )
    asked = markers.ApprovalRequest(
        call_id=call.id, tool=call.name, arguments=call.arguments, reason=decision.reason, suggestion=suggested
    )
    await state.append(markers.to_marker(asked))
    data = {"call_id": call.id, "tool": call.name, "arguments": call.arguments, "reason": decision.reason}
    state.journal.reported.set()
    await audit.record(state.session.store, "approval.requested", session_id=state.session_id, detail=data)
    timeout = state.options.approval_timeout
    answer = await _wait(approver, request, timeout)
    decided = markers.ApprovalDecision(
        call_id=call.id, approved=answer.approved, by=answer.by, message=answer.message or None
    )
    if answer.approved and answer.scope != "once" and suggested:
        decided.scope, note = await _remember(state, answer, suggested, ctx.workspace)
        decided.rules = list(suggested)
        decided.note = note or None
    decision_entry = markers.to_marker(decided)
    record = decision_entry.data
    await state.append(decision_entry)
    state.journal.reported.set()
    outcome = "approved" if answer.approved else "denied"
    await audit.record(
        state.session.store, "approval.answered", session_id=state.session_id, outcome=outcome, detail=record
    )
    if answer.approved:
        return Decision(Permission(True, f"approved by {answer.by}"), asked=True, by=answer.by)
    return Decision(Permission(False, _denied(answer, timeout)), asked=True, by=answer.by)


async def _wait(approver: Approver, request: ApprovalRequest, timeout: float | None) -> Answer:
    try:
        return await asyncio.wait_for(approver(request), timeout)
    except TimeoutError:
        return Answer(False, by="timeout")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # an approver that fails says no: a tool never runs without a yes
        log.warning("the approver failed on %s", request.tool, exc_info=True)
        return Answer(False, by="error", message=f"the approval could not be asked ({type(exc).__name__}: {exc})")


def _denied(answer: Answer, timeout: float | None) -> str:
    if answer.by == "timeout":
        return f"nobody answered the approval request within {timeout:g} s" if timeout else "the approval timed out"
    if answer.by == "error":
        return answer.message
    who = "the user" if answer.by == "user" else answer.by
    return f"{who} did not allow it, and said: {answer.message}" if answer.message else f"{who} did not allow it"


async def _remember(state: RunState, answer: Answer, rules: Sequence[str], workspace: Path) -> tuple[str, str]:
    """Keep an "always": as the session's own rules, or saved to the workspace's config (which, when it
    cannot be written, falls back to the session). Returns the scope kept and a note on what happened."""
    note = ""
    scope = answer.scope
    if scope == "project":
        try:
            path = await asyncio.to_thread(save_project_rules, workspace, rules)
            if state.rules is not None:
                state.rules = state.rules.adding(parse_rules(rules, "allow", str(path)))
            return "project", f"saved to {path}"
        except (ConfigError, OSError) as exc:
            note = f"not saved to the workspace ({exc}); kept for this session"
            scope = "session"
    info = state.session.info
    kept = info.metadata.get(SESSION_RULES_KEY)
    lists = dict(kept) if isinstance(kept, dict) else {}
    allow = [r for r in lists.get("allow", []) if isinstance(r, str)] if isinstance(lists.get("allow"), list) else []
    lists["allow"] = [*allow, *(r for r in rules if r not in allow)]
    await state.session.update(metadata={**info.metadata, SESSION_RULES_KEY: lists})
    if state.rules is not None:
        state.rules = state.rules.adding(parse_rules(rules, "allow", "this session"))
    return scope, note


def undecided(entries: Sequence[Entry], session_id: str = "") -> list[ApprovalRequest]:
    """The approval requests at the end of `entries` (after the last model answer) that have neither a
    decision nor a result: what a run, or a person, must still answer. Latest request of a call wins."""
    decided: set[str] = set()
    found: dict[str, ApprovalRequest] = {}
    for entry in reversed(entries):
        body = entry.body
        if isinstance(body, Message):
            if body.role == "tool":
                decided.update(r.call_id for r in body.tool_results)
                continue
            if body.role != "system":
                break
            continue
        marker = markers.parse(body)
        if isinstance(marker, markers.ApprovalDecision):
            decided.add(marker.call_id)
        elif isinstance(marker, markers.ApprovalRequest) and marker.call_id not in decided | found.keys():
            found[marker.call_id] = ApprovalRequest(
                session_id=session_id,
                call_id=marker.call_id,
                tool=marker.tool,
                arguments=marker.arguments,
                reason=marker.reason,
                suggestion=tuple(marker.suggestion),
            )
    return list(reversed(found.values()))


def awaiting(state: RunState, calls: Sequence[ToolCallPart]) -> list[ToolCallPart]:
    """Of the calls without a result (a run stopped), those that never started because one waited for a
    decision: from the first call with an undecided request on, with the calls of its batch just before it
    (they run together with it, after every decision). The next run decides on them again."""
    waiting = {r.call_id for r in undecided(state.entries)}
    first = next((i for i, call in enumerate(calls) if call.id in waiting), None)
    if first is None:
        return []
    kind = batch_kind(state.tools, calls[first])
    while first > 0 and kind is not None and batch_kind(state.tools, calls[first - 1]) == kind:
        first -= 1
    return list(calls[first:])


PENDING_TAIL = 200
"""Entries read at most from a session's end to find its pending approval requests (they follow its last
answer, where the reading stops)."""
PENDING_CHUNK = 8
"""Entries read at a time on the way back."""


async def journaled_requests(store: Journal, session_id: str) -> list[ApprovalRequest]:
    """The approval requests of `session_id` that wait for a decision, as its journal says: those of a run
    that stopped (a cancel, a crash, a restart) while it waited, which its next run asks again."""
    # `undecided` looks no further back than the last answer: read back to it, a few entries at a time (an
    # idle session's status asks this; reading and decoding a fixed 200 entries was most of its cost)
    info = await store.get_session(session_id)
    last_seq = info.entry_count
    newest_first: list[Entry] = []
    async for entry in ActiveWalk(store, session_id, last_seq, chunk=PENDING_CHUNK):
        newest_first.append(entry)
        body = entry.body
        if (isinstance(body, Message) and body.role not in ("tool", "system")) or len(newest_first) >= PENDING_TAIL:
            break
    newest_first.reverse()
    # where the call would run, as the run's own request said (it was "" once its run had stopped)
    return [replace(r, workspace=info.directory or "") for r in undecided(newest_first, session_id)]
