"""`tether chat`: an interactive session. Each message is one run of the agent loop; Ctrl-C cancels the
run in progress (the partial answer is kept) and not the program; Ctrl-D or /exit leaves."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

import click
from rich.console import Console

from ..events import Done
from ..paths import canonical_directory
from ..runtime.launch import RunRequest
from .approval import terminal_approver
from .common import find_session
from .render import TerminalRenderer, shown, terminal_ask
from .run import checked, launched_events, permission_options, project_confirmer, terminal_confirm
from .sanitize import escape_controls
from .state import cli_state

HELP = """Type a message and press Enter; for several lines, end a line with \\ or wrap
them in \"\"\" lines. Ctrl-C cancels the answer in progress; Ctrl-D or /exit
quits; /help lists the commands."""

COMMANDS: list[tuple[str, str]] = [
    ("/help", "this list"),
    ("/model [PROVIDER/MODEL]", "the next messages' model (alone: which it is)"),
    ("/compact", "compact the session now (a summary of its start)"),
    ("/session", "the session's id"),
    ("/new", "start a new session with the next message"),
    ("/exit, /quit", "leave (Ctrl-D too)"),
    ("//TEXT", "send a message that starts with /"),
]
"""The chat's slash commands: read here, never sent to the model."""


def command_help() -> str:
    width = max(len(name) for name, _ in COMMANDS)
    return "\n".join(f"  {name:<{width}}  {what}" for name, what in COMMANDS)


def read_message(prompt: str = "› ") -> str | None:
    """One message from the terminal: a line, lines joined by a trailing backslash, or a \"\"\" block.
    None at end of input."""
    try:
        first = input(prompt)
    except EOFError:
        return None
    if first.strip() == '"""':
        lines: list[str] = []
        while True:
            try:
                line = input("… ")
            except EOFError:
                break
            if line.strip() == '"""':
                break
            lines.append(line)
        return "\n".join(lines)
    lines = [first]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        try:
            lines.append(input("… "))
        except EOFError:
            break
    return "\n".join(lines)


@click.command("chat")
@click.option("--session", "-s", "session_ref", metavar="ID", help="Chat in this session.")
@click.option("--continue", "-c", "cont", is_flag=True, help="Continue the last session of this directory.")
@click.option("--model", "-m", "model_spec", metavar="PROVIDER/MODEL")
@click.option("--max-steps", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--dir", "directory", type=click.Path(file_okay=False), help="The workspace (default: here).")
@click.option("--tools", "tools", metavar="LIST", help="Tools the model may use: a comma list, or none.")
@click.option("--agent", "agent", metavar="NAME", help="Work as this agent: build (default), plan, or [agents.NAME].")
@permission_options
@click.option("--yes", "-y", "yes", is_flag=True, help="Chat in an imported session without asking first.")
def chat(
    session_ref: str | None,
    cont: bool,
    model_spec: str | None,
    max_steps: int,
    directory: str | None,
    tools: str | None,
    agent: str | None,
    permission_mode: str | None,
    allow: tuple[str, ...],
    deny: tuple[str, ...],
    sandbox: str | None,
    yes: bool,
) -> None:
    """Talk with the agent, one run per message, all in one session.

    A call that the approval rules ask about is asked here: y (once), a (always, in this session), p (always,
    saved to the project's .tether/config.toml), n (no), or type what the agent should do instead."""
    from ..runtime.configuration import load_config
    from ..runtime.mcp import open_mcp
    from ..store import open_store

    workspace = canonical_directory(directory)
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if sys.stdin.isatty():
        err.print(f"[dim]{HELP}[/dim]")

    chosen: dict[str, str | None] = {"model": model_spec}

    async def command(store: Any, text: str, session_id: str | None) -> tuple[bool, str | None]:
        """A slash command, done here: (whether to leave, the session from now on)."""
        name, _, arg = text.strip().partition(" ")
        arg = arg.strip()
        if name in ("/exit", "/quit"):
            return True, session_id
        if name == "/help":
            err.print(command_help(), markup=False)
        elif name == "/session":
            err.print(session_id or "(no session yet)")
        elif name == "/new":
            err.print("[dim]the next message starts a new session[/dim]")
            return False, None
        elif name == "/model":
            if not arg:
                err.print(escape_controls(chosen["model"] or "the session's own model (or the default)"), markup=False)
            else:
                from ..errors import ConfigError
                from ..providers.registry import resolve_provider
                from ..runtime.configuration import load_config

                try:
                    resolved = resolve_provider(arg, config=load_config())
                except ConfigError as exc:
                    err.print(f"[red]error:[/red] {shown(str(exc))}", highlight=False)
                else:
                    chosen["model"] = resolved.id
                    err.print(f"[dim]the next messages go to {shown(resolved.id)}[/dim]")
        elif name == "/compact":
            if session_id is None:
                err.print("[dim]nothing to compact yet: no message has been sent[/dim]")
            else:
                from ..errors import SessionBusy
                from ..runtime.configuration import load_config
                from ..runtime.lease import held_for_edit
                from ..runtime.operations import compact_now

                try:  # an edit, as `tether compact`: never under a run of the session elsewhere
                    async with held_for_edit(store, session_id, what="compact"):
                        result = await compact_now(store, session_id, config=load_config())
                except SessionBusy as busy:
                    err.print(f"not compacted: {shown(str(busy))}", highlight=False)
                    return False, session_id
                if result.entry is None:
                    err.print(f"not compacted: {shown(str(result.error))}", highlight=False)
                else:
                    err.print(
                        f"[dim]compacted: {result.tokens_before:,} -> {result.tokens_after:,} tokens "
                        f"(`tether compact {session_id} --undo` takes it back)[/dim]"
                    )
        else:
            err.print(f"unknown command {shown(name)}: /help lists them (//{shown(text.strip()[1:])} sends it)")
        return False, session_id

    # the MCP servers are started once, by the first message that needs them, and serve the whole chat
    servers = None if tools == "none" else open_mcp(load_config(), workspace)

    async def turn(store: Any, text: str, session_id: str | None, first: bool) -> str | None:
        renderer = TerminalRenderer(out, err, debug=cli_state().debug)
        current = session_id
        try:
            request = RunRequest(
                text,
                session=current,
                continue_last=cont and first and current is None,
                model=chosen["model"],
                max_steps=max_steps,
                directory=directory,
                tools=tools,
                agent=agent,
                ask=terminal_ask(err),
                permission_mode=permission_mode,
                allow=allow,
                deny=deny,
                sandbox=sandbox,
                confirm_project=project_confirmer(err, sys.stdin.isatty()) if first else None,
                approver=terminal_approver(err, renderer) if sys.stdin.isatty() else None,
                confirmed=yes,
                mcp=servers,
            )
            notice = (lambda msg: err.print(f"[dim]{msg}[/dim]")) if first else (lambda msg: None)
            confirm = terminal_confirm(err) if sys.stdin.isatty() else None
            own = ""
            async for event in launched_events(store, checked(False, request), notice, confirm):
                own = own or event.session_id  # the run's own session; its sub-agents' events follow
                current = own or current
                renderer.handle(event)
                if isinstance(event, Done) and event.session_id == own:
                    renderer.summary(event.session_id, event.steps, event.usage)
        finally:
            renderer.close()
        return current

    async def main() -> None:
        store = open_store(cli_state().store_url)
        session_id = session_ref
        first = True
        running: asyncio.Task[str | None] | None = None
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            # Ctrl-C cancels the answer in progress, never the program.
            if running is not None and not running.done():
                running.cancel()
            else:
                err.print("\n[dim](Ctrl-D or /exit to quit)[/dim]")

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            if session_ref is not None:  # now, not after the first message (which an unknown id then lost)
                session_id = (await find_session(store, session_ref)).id
            while True:
                text = await asyncio.to_thread(read_message)
                if text is None:
                    break
                if not text.strip():
                    continue
                if text.lstrip().startswith("//"):
                    text = text.lstrip()[1:]  # a message that starts with a slash
                elif text.lstrip().startswith("/"):
                    leave, now = await command(store, text, session_id)
                    if leave:
                        break
                    if (now is None and session_id is not None) or text.split()[0] == "/new":
                        first = False  # /new: a session of its own, not the directory's last one again
                    session_id = now
                    continue
                running = asyncio.create_task(turn(store, text, session_id, first))
                try:
                    session_id = await running
                except asyncio.CancelledError:
                    if asyncio.current_task() is not None and asyncio.current_task().cancelling():  # type: ignore[union-attr]
                        raise
                    err.print("\n[yellow]Cancelled.[/yellow] [dim]The partial answer is kept.[/dim]")
                    if session_id is None:
                        last = await store.last_session(workspace)
                        session_id = last.id if last is not None else None
                running = None
                first = False
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            if servers is not None:
                await servers.close()
            await store.close()
        if session_id:
            err.print(f"[dim]session {session_id} — resume with `tether chat --session {session_id}`[/dim]")

    asyncio.run(main())
