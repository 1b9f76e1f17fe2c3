"""`tether run --server URL`: the same run, on a tether server instead of in this process. The prompt goes to
the server (a new session in the workspace, the one named, or the last of the workspace); its events come
back over SSE and are shown as a local run's are; Ctrl-C cancels the run on the server."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import click
from rich.console import Console

from ..errors import ConfigError, ConfirmationRequired, InvalidInput, NotFound, SessionBusy, TetherError
from ..events import (
    DURABLE_TYPES,
    ApprovalRequested,
    Done,
    Error,
    Event,
    RunStarted,
    TextComplete,
    TextDelta,
    event_json,
    first_live,
)
from ..runtime.launch import RunRequest
from .render import BUSY_EXIT, TerminalRenderer, busy_line, shown
from .sanitize import escape_json_controls
from .state import cli_state


def run_remote(server: str, request: RunRequest, *, as_json: bool) -> int:
    """Run `request` on `server` (the same `RunRequest` a local run takes: its wire fields are sent, its
    directory is one on the server, `wait` set queues behind a run in progress) and show the events; returns
    the exit status (0 done, 1 error, 2 bad option, 3 busy, 130 cancelled)."""
    prompt = request.prompt if isinstance(request.prompt, str) or request.prompt is None else request.prompt.text
    session_ref, cont, directory = request.session, request.continue_last, request.directory
    wait = request.wait is not None
    from ..client import TetherClient
    from ..runtime.permission import ApprovalRequest
    from .approval import terminal_approver

    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    renderer = None if as_json else TerminalRenderer(out, err, debug=cli_state().debug)
    workspace = os.path.abspath(os.fspath(directory) if directory is not None else os.getcwd())
    interactive = not as_json and sys.stdin.isatty()

    async def approve(client: TetherClient, event: ApprovalRequested) -> None:
        """A call of the run (or of a sub-agent's) waits for a yes: ask here when there is a terminal, else
        say where it can be answered (the run waits for whoever answers, up to its approval timeout)."""
        if not interactive:
            where = f"{server.rstrip('/')}/sessions/{event.session_id}/approvals/{event.call_id}"
            err.print(
                f"[yellow]waiting for approval:[/yellow] {shown(event.name)} in session {event.session_id} "
                f"({shown(event.reason)}); answer it with POST {shown(where)}, or run this at a terminal",
                highlight=False,
            )
            return
        request = ApprovalRequest(
            session_id=event.session_id,
            call_id=event.call_id,
            tool=event.name,
            arguments=event.arguments,
            reason=event.reason,
            suggestion=tuple(event.suggestion),
        )
        answer = await terminal_approver(err, renderer)(request)
        try:
            await client.answer(
                event.session_id, event.call_id, approved=answer.approved, scope=answer.scope, message=answer.message
            )
        except TetherError as exc:  # answered meanwhile by someone else, or the run ended
            err.print(f"[yellow]the answer was not taken:[/yellow] {shown(str(exc))}", highlight=False)

    async def main() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        cancelled = False
        session_id = ""

        def on_sigint() -> None:
            nonlocal cancelled
            cancelled = True
            if task is not None:
                task.cancel()

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError):
            pass
        async with TetherClient(server) as client:
            try:
                try:
                    if session_ref is None and cont:
                        page = await client.list_sessions(directory=workspace, limit=1)
                        if not page.items:
                            raise NotFound(f"no earlier session in {workspace} to continue")
                        target: str | None = page.items[0].id
                    else:
                        target = session_ref
                    if target is None:
                        assert prompt is not None
                        created = await client.create_session(workspace, prompt=prompt, request=request)
                        assert created.run is not None
                        run = created.run
                    elif prompt is None:
                        run = await client.resume(target, request=request)
                    else:
                        run = await client.prompt(target, prompt, queue=wait, request=request)
                except (InvalidInput, NotFound, ConfigError) as exc:  # as a local run: exit 2
                    click.echo(f"error: {' '.join(str(exc).split())}", err=True)
                    return 2
                except ConfirmationRequired as exc:
                    click.echo(f"error: {' '.join(str(exc).split())}; not run (pass --yes to run it)", err=True)
                    return 2
                except SessionBusy as busy:
                    err.print(f"[red]error:[/red] {shown(busy_line(busy))}", highlight=False)
                    return BUSY_EXIT
                session_id = run.session_id
                text = _TextFill(session_id)
                code = 1
                async for event in client.events(session_id, after=run.after, until_done=True):
                    if as_json:
                        sys.stdout.buffer.write(escape_json_controls(event_json(event)) + b"\n")
                        sys.stdout.flush()
                    elif renderer is not None:
                        for shown_event in text.fill(event):
                            renderer.handle(shown_event)
                    if isinstance(event, ApprovalRequested):
                        await approve(client, event)
                    if event.session_id != session_id:
                        continue
                    if isinstance(event, Done):
                        if renderer is not None:
                            renderer.summary(session_id, event.steps, event.usage)
                        code = 0
                    elif isinstance(event, Error):
                        code = 1
                return code
            except asyncio.CancelledError:
                if not cancelled:
                    raise
                if session_id:
                    await client.cancel(session_id)
                if renderer is not None:
                    renderer.close()
                    err.print(
                        "\n[yellow]Cancelled on the server.[/yellow] The partial answer is saved; continue with "
                        f"`tether run --server {server} --continue --session {session_id}`."
                    )
                else:
                    click.echo('{"type": "error", "code": "cancelled", "message": "cancelled by the user"}')
                return 130
            finally:
                if renderer is not None:
                    renderer.close()
                try:
                    loop.remove_signal_handler(signal.SIGINT)
                except (NotImplementedError, RuntimeError):
                    pass

    return asyncio.run(main())


class _TextFill:
    """The text deltas a follower missed, filled in. Following a run over SSE can start after its first deltas
    went out (the stream opens after the prompt is taken), and the journal gives back only the completed
    text. Live numbers have no gaps, so a delta that does not follow the last event seen means some were
    missed: deltas are shown while they follow on, and a completed text shows what they did not."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.expected: int | None = None
        self.shown = ""
        self.broken = False

    def fill(self, event: Event) -> list[Event]:
        if event.session_id != self.session_id:
            return [event]
        if isinstance(event, DURABLE_TYPES):
            self.expected = first_live(event.n)  # live numbers restart there (unless a run before reserved some)
            self.broken = False
            if isinstance(event, TextComplete):
                shown, self.shown = self.shown, ""
                rest = event.text[len(shown) :] if event.text.startswith(shown) else "\n" + event.text
                if rest:
                    return [TextDelta(session_id=event.session_id, n=event.n, text=rest), event]
            return [event]
        if isinstance(event, RunStarted):  # a run's first event: what follows it is all there is
            self.broken = False
        else:
            self.broken = self.broken or self.expected is None or event.n != self.expected
        self.expected = event.n + 1
        if isinstance(event, TextDelta):
            if self.broken:
                return []  # some before it were missed: the completed text will show it all
            self.shown += event.text
        return [event]
