"""`Session`: the handle on one stored session (`tether.runtime.handle.SessionHandle`: create, open, append,
read the active history, fork, revert) with the agent loop on it: `stream` yields a run's events, `prompt`
runs it to the end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import msgspec

from .errors import TetherError
from .events import Done, Error, Event
from .messages import Message, Usage
from .providers.registry import resolve_provider
from .runtime.configuration import load_config
from .runtime.handle import SessionHandle
from .runtime.launch import run_options
from .runtime.loop import AgentRun
from .runtime.state import RunOptions

if TYPE_CHECKING:
    from .providers.base import Provider


class RunResult(msgspec.Struct, kw_only=True):
    """What `Session.prompt` returns: the final text, where it was recorded, and what it cost."""

    text: str
    session_id: str
    usage: Usage
    steps: int
    reason: str


class Session(SessionHandle):
    """A handle on one stored session that runs the agent loop: see `SessionHandle` for the journal."""

    # --- running the agent loop ------------------------------------------------------------------------

    def stream(
        self,
        prompt: str | Message | None,
        *,
        provider: Provider | None = None,
        model: str | None = None,
        **options: Any,
    ) -> AsyncIterator[Event]:
        """Run the agent loop on this session and yield its events. `prompt=None` continues where the
        session stopped (a step limit, a cancel, a crash). With no `provider`, `model` (``provider/model``;
        default: the session's model, else the configured default) is resolved as `tether run` does; with
        one, `model` is that provider's own model id. The user's configuration is read unless `options`
        gives one (``config=``). `options` are `tether.runtime.RunOptions` fields. The events of the run's
        sub-agents (`task`) come too, with their own `session_id`: this run's end is its own `Done` or `Error`.
        No approval rules apply unless `options` gives them (``rules=Rules()`` for the built-in defaults, or
        `tether.runtime.configuration.permission_rules` for the user's) with an ``approver``: a program that
        drives its own loop decides what its tools may do (``permission=``)."""
        if "config" not in options:
            options["config"] = load_config()
        if provider is None:
            resolved = resolve_provider(model or self.info.model, config=options["config"])
            return AgentRun(self, resolved.provider, run_options(resolved, **options)).events(prompt)
        run = AgentRun(self, provider, RunOptions(model=model or self.info.model or "default", **options))
        return run.events(prompt)

    async def prompt(
        self,
        prompt: str | Message | None,
        *,
        provider: Provider | None = None,
        model: str | None = None,
        **options: Any,
    ) -> RunResult:
        """Run the loop to its end; raise on a run that ends in error."""
        outcome: Done | Error | None = None
        # read to the stream's end, so that the run has given its session back when this returns; a
        # sub-agent's events come too, and its end is not this run's
        async for event in self.stream(prompt, provider=provider, model=model, **options):
            if isinstance(event, Done | Error) and event.session_id == self.id:
                outcome = event
        if isinstance(outcome, Done):
            return RunResult(
                text=outcome.text, session_id=self.id, usage=outcome.usage, steps=outcome.steps, reason=outcome.reason
            )
        if isinstance(outcome, Error):
            raise TetherError(f"run failed ({outcome.code}): {outcome.message}")
        raise TetherError("the run ended without a result")
