"""The permission decision on a tool call: the one hook where approval rules (allow, ask, deny) decide
before a tool runs. A run without a `PermissionCheck` lets every call run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..messages import ToolCallPart
from ..tools.base import ToolContext


@dataclass(frozen=True)
class Permission:
    """A decision on one tool call: run it, or not (the model then reads `reason` as the call's error)."""

    allowed: bool
    reason: str = ""


ALLOWED = Permission(True)

PermissionCheck = Callable[[ToolCallPart, ToolContext], Awaitable[Permission]]
"""Decides whether a tool call may run, before it runs."""
