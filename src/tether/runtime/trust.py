"""A workspace's own permissions take effect only once its user accepted them, as direnv's ``allow`` does for
an ``.envrc``: what a project's ``.tether/config.toml`` grants (its ``allow`` rules, ``mode =
"accept-edits"``) is compared with what this user last accepted for that workspace, kept in
``trusted-projects.json`` under the tether home. A grant that is new since then is a `ProjectChange`: the run
applies the file's ``deny`` and ``ask`` rules (which only ever restrict) and leaves the new grants out until
a person accepts them (a terminal's yes, `tether trust`). So a cloned repository, or a model that wrote the
file, grants nothing by itself. What tether writes there on a person's answer ("always, in this project")
is accepted as it is written."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import PermissionsConfig
from ..paths import tether_home
from . import audit

TRUST_FILE = "trusted-projects.json"
LOOSER_MODES = frozenset({"accept-edits"})
"""Modes a project may set that let more run without asking (``bypass`` it cannot set at all)."""


def trust_path() -> Path:
    return tether_home() / TRUST_FILE


def _record_of(permissions: PermissionsConfig) -> dict[str, Any]:
    """What is accepted of a project's ``[permissions]``: its rules of every kind and its mode."""
    return {
        "allow": sorted(set(permissions.allow)),
        "ask": sorted(set(permissions.ask)),
        "deny": sorted(set(permissions.deny)),
        "mode": permissions.mode,
    }


def grants(permissions: PermissionsConfig) -> dict[str, Any]:
    """What a project's ``[permissions]`` lets run without asking: its allow rules and a looser mode."""
    mode = permissions.mode if permissions.mode in LOOSER_MODES else None
    return {"allow": sorted(set(permissions.allow)), "mode": mode}


@dataclass(frozen=True)
class ProjectChange:
    """A workspace's permissions grant more, or hold back less, than this user last accepted there."""

    workspace: str
    path: Path
    accepted: dict[str, Any]
    """What was accepted last (every list empty and no mode when nothing ever was)."""
    current: dict[str, Any]

    @property
    def new_rules(self) -> list[str]:
        return [r for r in self.current["allow"] if r not in self.accepted["allow"]]

    def diff(self) -> list[str]:
        """The change, a line each: ``+ allow bash(make *)``, ``- deny bash(git push*)``, the mode."""
        lines = [f"+ allow {rule}" for rule in self.new_rules]
        for kind in ("deny", "ask"):
            lines += [f"- {kind} {rule}" for rule in self.accepted[kind] if rule not in self.current[kind]]
        lines += [f"- allow {rule}" for rule in self.accepted["allow"] if rule not in self.current["allow"]]
        if self.current["mode"] != self.accepted["mode"]:
            lines.append(f"  mode: {self.accepted['mode'] or 'default'} -> {self.current['mode'] or 'default'}")
        return lines

    def describe(self) -> str:
        return f"{self.path} lets more through than you last accepted here: " + "; ".join(self.diff())


ConfirmProject = Callable[[ProjectChange], bool]
"""Asked when a workspace's permissions changed: True accepts them (and records it)."""


def _load() -> dict[str, Any]:
    try:
        data = json.loads(trust_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def accepted(workspace: str) -> dict[str, Any]:
    record = _load().get(workspace)
    record = record if isinstance(record, dict) else {}
    out: dict[str, Any] = {}
    for kind in ("allow", "ask", "deny"):
        rules = record.get(kind)
        out[kind] = [r for r in rules if isinstance(r, str)] if isinstance(rules, list) else []
    mode = record.get("mode")
    out["mode"] = mode if isinstance(mode, str) else None
    return out


def _withheld(current: dict[str, Any], before: dict[str, Any]) -> bool:
    """Whether `current` lets more through than `before` did: a new allow, a looser mode, a dropped deny or
    ask, a stricter mode given up."""
    if any(r not in before["allow"] for r in current["allow"]):
        return True
    if any(r not in current[kind] for kind in ("deny", "ask") for r in before[kind]):
        return True
    return current["mode"] != before["mode"] and (current["mode"] in LOOSER_MODES or before["mode"] is not None)


def pending_change(workspace: str, path: Path, permissions: PermissionsConfig) -> ProjectChange | None:
    """The change to accept before `permissions` (of `path`, in `workspace`) apply as written; None when
    they let through nothing more than what was accepted (or than no file at all, the first time)."""
    current = _record_of(permissions)
    before = accepted(workspace)
    if not _withheld(current, before):
        return None
    return ProjectChange(workspace, path, before, current)


def accept(workspace: str, permissions: PermissionsConfig) -> None:
    """Record that this user accepts `permissions` in `workspace`."""
    _record(workspace, _record_of(permissions))


def accept_rules(workspace: str, rules: list[str]) -> None:
    """Add `rules` to what this user accepted in `workspace` (and nothing else the file may hold): what a
    person's "always, in this project" answer wrote there."""
    before = accepted(workspace)
    _record(workspace, {**before, "allow": sorted({*before["allow"], *rules})})


def _record(workspace: str, granted: dict[str, Any]) -> None:
    path = trust_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _load()
    data[workspace] = {**granted, "accepted_at": time.time()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".trusted.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    audit.note("config.accepted", detail={"workspace": workspace, **granted})  # written with the next record


def withheld(change: ProjectChange, permissions: PermissionsConfig) -> PermissionsConfig:
    """What of `permissions` applies while `change` waits for its user: the allow rules accepted before
    and still there, every deny and ask rule of the file and of what was accepted, and the accepted mode."""
    before = change.accepted
    allow = [r for r in permissions.allow if r in before["allow"]]
    ask = sorted({*permissions.ask, *before["ask"]})
    deny = sorted({*permissions.deny, *before["deny"]})
    mode = before["mode"] if change.current["mode"] != before["mode"] else permissions.mode
    return PermissionsConfig(allow=allow, ask=ask, deny=deny, mode=mode, timeout=permissions.timeout)
