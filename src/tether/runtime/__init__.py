"""The runtime: the agent loop by phase (`loop`, `prepare`, `model_call`, `tool_calls`, `condense`), the
journal a run writes through (`journal`), what a run is told and knows (`state`), its tools (`toolset`),
the configuration it is given (`configuration`), and `launch.launch`, which the CLI and a server call to
start a run. The one layer that wires engines together. Names load on first use, so importing one room does not
import the rest."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .configuration import context_settings, load_config
    from .handle import SessionHandle
    from .journal import RunJournal, replay_events
    from .launch import LaunchedRun, LaunchPlan, RunRequest, check_request, open_run, run_options
    from .lookup import find_session
    from .loop import AgentRun
    from .manager import RunHandle, SessionManager
    from .permission import Permission, PermissionCheck
    from .state import RunOptions
    from .toolset import default_registry, select_tools

_EXPORTS = {
    "AgentRun": "loop",
    "LaunchPlan": "launch",
    "LaunchedRun": "launch",
    "check_request": "launch",
    "open_run": "launch",
    "run_options": "launch",
    "Permission": "permission",
    "PermissionCheck": "permission",
    "RunJournal": "journal",
    "RunOptions": "state",
    "RunRequest": "launch",
    "RunHandle": "manager",
    "SessionManager": "manager",
    "SessionHandle": "handle",
    "context_settings": "configuration",
    "default_registry": "toolset",
    "find_session": "lookup",
    "load_config": "configuration",
    "replay_events": "journal",
    "select_tools": "toolset",
}

__all__ = [
    "AgentRun",
    "LaunchPlan",
    "LaunchedRun",
    "Permission",
    "PermissionCheck",
    "RunHandle",
    "RunJournal",
    "RunOptions",
    "RunRequest",
    "SessionHandle",
    "SessionManager",
    "check_request",
    "context_settings",
    "default_registry",
    "find_session",
    "load_config",
    "open_run",
    "replay_events",
    "run_options",
    "select_tools",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
