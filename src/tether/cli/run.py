"""`tether run PROMPT`: one agent run, streamed to the terminal (or as JSON lines), on the chosen model and
the session of this directory. Ctrl-C cancels the run cleanly; `--continue` picks it up again."""

from __future__ import annotations

import asyncio
import math
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import get_args

import click
from rich.console import Console

from ..config import PermissionMode
from ..errors import (
    ConfigError,
    ConfirmationRequired,
    InvalidInput,
    MissingExtra,
    NotFound,
    SessionBusy,
    TetherError,
)
from ..events import Done, Error, Event, event_json
from ..runtime.launch import LaunchPlan, RunRequest, check_request, open_run
from ..runtime.trust import ConfirmProject, ProjectChange
from ..store import Store
from ..tools.sandbox import SANDBOX_MODES
from .approval import terminal_approver
from .render import BUSY_EXIT, LOCAL_NOTICE, TerminalRenderer, busy_line, shown, terminal_ask
from .sanitize import escape_json_controls
from .state import OptionError, cli_state, wants_json

Confirm = Callable[[ConfirmationRequired], Awaitable[bool]]
"""Asks a person whether a run that needs their yes may start."""


def terminal_confirm(console: Console) -> Confirm:
    """Show what an imported session would run with, and ask at the terminal."""

    async def confirm(needed: ConfirmationRequired) -> bool:
        console.print(f"[yellow]{shown(str(needed))}.[/yellow]")
        console.print(f"  directory: {shown(needed.directory or '(none)')}")
        if needed.system_prompt:
            prompt = needed.system_prompt if len(needed.system_prompt) <= 600 else needed.system_prompt[:600] + " [...]"
            console.print(f"  system prompt: {shown(prompt)}")
        answer = await asyncio.to_thread(input, "Run it? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    return confirm


def permission_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--permission-mode``, ``--allow RULE``, ``--deny RULE`` and ``--sandbox MODE``, as `run` and `chat`
    take them."""
    command = click.option(
        "--sandbox",
        "sandbox",
        type=click.Choice(SANDBOX_MODES),
        help="Where commands run: workspace-write (the default: only the workspace and a private /tmp are "
        "writable, .git and .tether stay read-only, no network), read-only, or off (your full permissions). "
        "[sandbox] in config.toml sets the default, the network allow-list and more writable paths.",
    )(command)
    command = click.option(
        "--deny", "deny", multiple=True, metavar="RULE", help="Deny what RULE matches, in this run. Repeatable."
    )(command)
    command = click.option(
        "--allow",
        "allow",
        multiple=True,
        metavar="RULE",
        help="Allow what RULE matches without asking, in this run: a tool (read), or a tool and a pattern "
        "(bash(git status*), edit(src/**)). Repeatable.",
    )(command)
    return click.option(
        "--permission-mode",
        "permission_mode",
        type=click.Choice(get_args(PermissionMode)),
        help="default: ask before edits, commands and unknown tools; accept-edits: edits in the workspace run "
        "without asking; plan: read-only tools only; never-ask: deny what would ask (for CI); bypass: ask "
        "nothing (deny rules still hold).",
    )(command)


def project_confirmer(err: Console, interactive: bool) -> ConfirmProject:
    """How a run at a terminal accepts a workspace's new permissions: the change, then yes or no. With no
    terminal: one line saying how to accept them, and no."""

    def confirm(change: ProjectChange) -> bool:
        if not interactive:
            err.print(f"[yellow]{shown(change.describe())}: not applied; `tether trust` accepts them[/yellow]")
            return False
        err.print(
            f"[yellow]{shown(str(change.path))} lets more through than you last accepted in this workspace:[/yellow]"
        )
        for line in change.diff():
            err.print(f"  {shown(line)}")
        answer = input("Apply these permissions (and remember that you did)? [y/N] ")
        return answer.strip().lower() in ("y", "yes")

    return confirm


def say_event(event: Event) -> None:
    """One event as a line of JSON on stdout, where a program reads the run (`--json`)."""
    sys.stdout.buffer.write(escape_json_controls(event_json(event)) + b"\n")
    sys.stdout.flush()


def checked(as_json: bool, request: RunRequest) -> LaunchPlan:
    """`request` checked before any store is opened: an option that cannot be used is an `OptionError`
    (exit 2), and leaves nothing behind, not even an empty database. With `as_json` it is also said as an
    ``error`` event (code ``invalid_input``, no session) on stdout, where a program reads the run."""
    try:
        return check_request(request)
    except (InvalidInput, ConfigError, MissingExtra) as exc:
        message = " ".join(str(exc).split())
        if as_json:
            say_event(Error(session_id="", n=0, code="invalid_input", message=message))
        raise OptionError(message) from exc


async def launched_events(
    store: Store, plan: LaunchPlan, notice: Callable[[str], None], ask: Confirm | None = None
) -> AsyncIterator[Event]:
    """Open or create the session of a checked request and run it (a session that is not there: exit 2). An
    imported session runs once `ask` (a person at a terminal) says yes; without one, `--yes` is needed."""
    try:
        try:
            launched = await open_run(store, plan)
        except ConfirmationRequired as exc:
            if ask is None or not await ask(exc):
                raise OptionError(f"{exc}; not run (pass --yes to run it, or --dir to run it elsewhere)") from exc
            launched = await open_run(store, replace(plan, request=replace(plan.request, confirmed=True)))
    except (InvalidInput, NotFound) as exc:
        raise OptionError(" ".join(str(exc).split())) from exc
    if launched.resolved.provider.name == "local":
        notice(LOCAL_NOTICE)  # (a model offered no tools says so in the run's own first events, as on every face)
    async for event in launched.events():
        yield event


@click.command("run")
@click.argument("prompt", required=False)
@click.option("--session", "-s", "session_ref", metavar="ID", help="Run in this session (an id or a unique piece).")
@click.option(
    "--continue", "-c", "cont", is_flag=True, help="Continue the last session of this directory (or --session)."
)
@click.option("--model", "-m", "model_spec", metavar="PROVIDER/MODEL", help="e.g. openai/gpt-5.5, local/smollm2-135m.")
@click.option("--max-steps", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Model steps at most.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    help="The workspace the tools work in (default: the current directory; with --session, the session's own, "
    "and a --dir moves the session there).",
)
@click.option("--system", "system_prompt", metavar="TEXT", help="A system prompt for this run.")
@click.option(
    "--tools", "tools", metavar="LIST", help="Tools the model may use: a comma list (read,grep,glob), or none."
)
@click.option("--agent", "agent", metavar="NAME", help="Work as this agent: build (default), plan, or [agents.NAME].")
@permission_options
@click.option("--yes", "-y", "yes", is_flag=True, help="Run an imported session without asking first.")
@click.option("--wait", "wait", is_flag=True, help="If another run holds the session, wait for it (else: exit 3).")
@click.option("--json", "json_flag", is_flag=True, help="One JSON object per event per line.")
@click.option(
    "--server",
    metavar="URL",
    envvar="TETHER_SERVER",
    help="Run on this tether server (`tether serve`) instead of in this process; its token is read from "
    "TETHER_SERVER_TOKEN. --dir is then a directory on the server. [env: TETHER_SERVER]",
)
def run(
    prompt: str | None,
    session_ref: str | None,
    cont: bool,
    model_spec: str | None,
    max_steps: int,
    directory: str | None,
    system_prompt: str | None,
    tools: str | None,
    agent: str | None,
    permission_mode: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    sandbox: str | None,
    yes: bool,
    wait: bool,
    json_flag: bool,
    server: str | None,
) -> None:
    """Run the agent on PROMPT until it is done (or the step limit is reached).

    PROMPT "-" reads it from standard input. With --continue and no PROMPT, the last run of this directory
    is picked up where it stopped (a step limit, Ctrl-C, a crash). Everything is journaled as it happens.

    \b
    Examples:
      tether run "why does test_parse fail?"
      tether run --continue
      tether run -m anthropic/claude-sonnet-5-5 "add type hints to utils.py"
      tether run --json "list the TODOs" | jq .type
      tether run --agent plan "how would you split parser.py?"
      tether run --allow 'bash(pytest*)' --allow 'edit(src/**)' "make the tests pass"
      tether run --permission-mode never-ask "lint the code"   # in CI: what would ask is denied

    A call that the approval rules ask about is asked at the terminal (y, n, always, or a message for the
    agent); with no terminal it is denied, and the denial says which --allow would let it run.
    """
    as_json = wants_json(json_flag)
    if prompt == "-":
        # bytes, read as they are: what is not UTF-8 is kept (as lone surrogates) for the check to refuse
        prompt = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
    if prompt is None and not cont and session_ref is None:
        raise click.UsageError("give a PROMPT, or --continue to pick up the last run")
    # one request, whether this process runs it or a server does (which gets its wire fields)
    request = RunRequest(
        prompt,
        session=session_ref,
        continue_last=cont,
        model=model_spec,
        max_steps=max_steps,
        directory=directory,
        system_prompt=system_prompt,
        tools=tools,
        agent=agent,
        permission_mode=permission_mode,
        allow=allow,
        deny=deny,
        sandbox=sandbox,
        confirmed=yes,
        wait=math.inf if wait else None,
    )
    if server:
        from .remote import run_remote

        if sandbox is not None:
            raise click.UsageError("--sandbox is the server's to set: its [sandbox] configuration applies")
        sys.exit(run_remote(server, request, as_json=as_json))
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    renderer = None if as_json else TerminalRenderer(out, err, debug=cli_state().debug)

    def notice(text: str) -> None:
        if not as_json:
            err.print(f"[dim]{text}[/dim]")
        else:
            click.echo(text, err=True)

    from ..store import open_store

    plan = checked(
        as_json,
        replace(
            request,
            ask=terminal_ask(err) if sys.stdin.isatty() and not as_json else None,
            confirm_project=project_confirmer(err, sys.stdin.isatty() and not as_json),
            approver=terminal_approver(err, renderer) if sys.stdin.isatty() and renderer is not None else None,
            on_lease_wait=lambda busy: err.print(f"[dim]{shown(busy_line(busy, waiting=True))}[/dim]"),
        ),
    )

    async def main() -> int:
        store = open_store(cli_state().store_url)
        last_session = ""
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        cancelled = False

        def on_sigint() -> None:
            nonlocal cancelled
            cancelled = True
            if task is not None:
                task.cancel()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError):  # not the main thread, or a platform without it
            pass
        code = 1
        try:
            confirm = terminal_confirm(err) if sys.stdin.isatty() and not as_json else None
            async for event in launched_events(store, plan, notice, confirm):
                last_session = last_session or event.session_id  # the run's own; its sub-agents' follow it
                if as_json:
                    say_event(event)
                else:
                    assert renderer is not None
                    renderer.handle(event)
                if event.session_id != last_session:
                    continue  # a sub-agent's event: its end is not the run's
                if isinstance(event, Done):
                    if renderer is not None and event.reason == "nothing_to_do":
                        err.print(
                            f"[dim]Nothing to continue: the last run of session {event.session_id} had finished.[/dim]"
                        )
                    elif renderer is not None:
                        renderer.summary(event.session_id, event.steps, event.usage)
                    code = 0
                elif isinstance(event, Error):
                    code = 1
        except SessionBusy as busy:
            err.print(f"[red]error:[/red] {shown(busy_line(busy))}", highlight=False)
            if as_json:  # said where a program reads the run too
                say_event(Error(session_id=busy.session_id, n=0, code=busy.code, message=busy_line(busy)))
            code = BUSY_EXIT
        except OptionError as refused:  # the session named is not there, an imported one not confirmed...
            if as_json:  # said where a program reads the run, as `checked` says a bad option
                cause = refused.__cause__
                kind = cause.code if isinstance(cause, TetherError) else "invalid_input"
                say_event(Error(session_id="", n=0, code=kind, message=str(refused)))
            raise
        except asyncio.CancelledError:
            if not cancelled:
                raise
            if renderer is not None:
                renderer.close()
                err.print(
                    "\n[yellow]Cancelled.[/yellow] The partial answer is saved; continue with "
                    f"`tether run --continue{f' --session {last_session}' if last_session else ''}`."
                )
            else:
                click.echo('{"type": "error", "code": "cancelled", "message": "cancelled by the user"}')
            code = 130
        finally:
            if renderer is not None:
                renderer.close()
            try:
                loop.remove_signal_handler(signal.SIGINT)
            except (NotImplementedError, RuntimeError):
                pass
            await store.close()
        return code

    sys.exit(asyncio.run(main()))
