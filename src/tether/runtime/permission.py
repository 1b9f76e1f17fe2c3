"""The permission decision on a tool call: the one hook where approval rules (allow, ask, deny) decide
before a tool runs. A `PermissionCheck` is the low-level hook a program may pass; the layered rules
(`rules`) and the approvals flow (`approvals`) are built on the same `Permission`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..messages import ToolCallPart
from ..tools.base import ToolContext


@dataclass(frozen=True)
class Permission:
    """A decision on one tool call: run it, or not (the model then reads `reason` as the call's error), or
    `ask` a person (the run waits for an answer; `allowed` is False until one comes). `rule` is the rule
    that decided, when one did."""

    allowed: bool
    reason: str = ""
    ask: bool = False
    rule: str = ""

    @property
    def action(self) -> str:
        return "allow" if self.allowed else "ask" if self.ask else "deny"


ALLOWED = Permission(True)

PermissionCheck = Callable[[ToolCallPart, ToolContext], Awaitable[Permission]]
"""Decides whether a tool call may run, before it runs (or that a person must be asked)."""


def strictest(*decisions: Permission) -> Permission:
    """The strictest of several decisions on one call: deny, then ask, then allow."""
    order = {"allow": 0, "ask": 1, "deny": 2}
    return max(decisions, key=lambda p: order[p.action])


Scope = Literal["once", "session", "project"]
"""How far a yes reaches: this call; every call like it in this session (a session rule); or every call
like it in this workspace, saved to its ``.tether/config.toml``."""


@dataclass(frozen=True)
class ApprovalRequest:
    """A call that waits for a person: what it would do, why it asks (`reason`), and the rules that an
    "always" would add (`suggestion`, ``bash(git push*)``)."""

    session_id: str
    call_id: str
    tool: str
    arguments: Any
    reason: str
    suggestion: tuple[str, ...] = ()
    workspace: str = ""


@dataclass(frozen=True)
class Answer:
    """A person's answer: yes (`scope` says how far it reaches) or no, with `message` for the model (what to
    do instead). `by` says who answered (``user``, ``timeout``, a server's user name)."""

    approved: bool
    scope: Scope = "once"
    message: str = ""
    by: str = "user"


Approver = Callable[[ApprovalRequest], Awaitable[Answer]]
"""Who answers an approval request: the terminal's prompt, a server waiting for `SessionManager.answer`.
The run waits for it (up to `RunOptions.approval_timeout`)."""
