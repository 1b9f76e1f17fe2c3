"""`tether run PROMPT`: one agent run, streamed to the terminal (or as JSON lines), on the chosen model and
the session of this directory. Ctrl-C cancels the run cleanly; `--continue` picks it up again."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import click
from rich.console import Console
from rich.status import Status

from ..errors import InvalidInput, SessionNotFound
from ..events import (
    CheckpointReached,
    CompactionCompleted,
    CompactionFailed,
    CompactionStarted,
    Done,
    Error,
    Event,
    Progress,
    RunStarted,
    TextComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallStart,
    event_json,
)
from ..messages import Usage
from ..session import Session, canonical_directory
from ..store import Store
from ..tools.base import AskFn, ToolRegistry, default_registry
from .common import cli_state, resolve_session, wants_json

LOCAL_NOTICE = (
    "Using the embedded local model (SmolLM2-135M): it is tiny and runs offline, so expect weak answers. "
    "For real work set a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, OPENROUTER_API_KEY, ...) "
    "or pass --model provider/model; `tether models` lists what is configured."
)


def _format_args(arguments: Any, limit: int = 80) -> str:
    if isinstance(arguments, dict):
        text = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    elif arguments is None:
        text = ""
    else:
        text = repr(arguments)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_cost(cost: Decimal | None) -> str:
    if cost is None:
        return "cost unknown"
    if cost == 0:
        return "$0"
    return f"${cost:.4f}" if cost >= Decimal("0.0001") else f"${cost:.2e}"


class TerminalRenderer:
    """Events for people: text as it streams, a spinner per running tool, a summary line at the end."""

    def __init__(self, console: Console, status_console: Console) -> None:
        self.out = console
        self.err = status_console
        self.status: Status | None = None
        self.running: dict[str, str] = {}
        self.at_line_start = True
        self.thinking = False

    def _write(self, text: str) -> None:
        self.out.file.write(text)
        self.out.file.flush()
        if text:
            self.at_line_start = text.endswith("\n")

    def _newline(self) -> None:
        if not self.at_line_start:
            self._write("\n")

    def _spin(self) -> None:
        label = ", ".join(self.running.values())
        if not self.err.is_terminal:
            return
        if self.status is None:
            self.status = self.err.status(label, spinner="dots")
            self.status.start()
        else:
            self.status.update(label)

    def _stop_spin(self) -> None:
        if self.status is not None and not self.running:
            self.status.stop()
            self.status = None

    def handle(self, event: Event) -> None:
        if isinstance(event, ThinkingDelta):
            if not self.thinking:
                self._newline()
                self.thinking = True
            self.err.print(event.text, style="dim italic", end="", soft_wrap=True, highlight=False)
        elif isinstance(event, TextDelta):
            if self.thinking:
                self.err.print()
                self.thinking = False
            self._write(event.text)
        elif isinstance(event, TextComplete):
            self._newline()
        elif isinstance(event, ToolCallStart):
            self._newline()
            label = f"{event.name}({_format_args(event.arguments)})"
            self.running[event.call_id] = label
            if not self.err.is_terminal:
                self.err.print(f"→ {label}", highlight=False)
            self._spin()
        elif isinstance(event, ToolCallComplete):
            label = self.running.pop(event.call_id, event.name)
            self._stop_spin()
            mark = "[green]✓[/green]" if event.success else "[red]✗[/red]"
            detail = f" [dim]{event.duration_ms:.0f} ms[/dim]"
            if not event.success and event.preview:
                detail += f" [red]{_escape(event.preview)}[/red]"
            elif event.truncated:
                detail += " [yellow](output cut; full text kept as an artifact)[/yellow]"
            self.err.print(f"{mark} {_escape(label)}{detail}", highlight=False)
            if self.running:
                self._spin()
        elif isinstance(event, CompactionStarted):
            self.err.print(f"[dim]compacting the context ({event.reason}, {event.tokens_before:,} tokens)…[/dim]")
        elif isinstance(event, CompactionCompleted):
            self.err.print(
                f"[dim]compacted: {event.tokens_before:,} → {event.tokens_after:,} tokens ({event.strategy})[/dim]"
            )
        elif isinstance(event, CompactionFailed):
            self.err.print(f"[yellow]compaction failed: {_escape(event.error)}[/yellow]")
        elif isinstance(event, Progress):
            done = f" {event.done}/{event.total}" if event.total else ""
            self.err.print(f"[dim]{_escape(event.what)}{done} {_escape(event.detail)}[/dim]")
        elif isinstance(event, CheckpointReached):
            self._newline()
            self.err.print(
                f"[yellow]Stopped at the step limit ({event.steps} steps). A checkpoint was saved; "
                "continue with `tether run --continue`.[/yellow]"
            )
        elif isinstance(event, Error):
            self._newline()
            self.running.clear()
            self._stop_spin()
            self.err.print(f"[red]error ({event.code}):[/red] {_escape(event.message)}", highlight=False)

    def summary(self, session_id: str, steps: int, usage: Usage) -> None:
        self._newline()
        self.running.clear()
        self._stop_spin()
        self.err.print(
            f"[dim]── {steps} step{'s' if steps != 1 else ''} · {usage.input_tokens:,} in / "
            f"{usage.output_tokens:,} out tokens · {format_cost(usage.cost)} · session {session_id}[/dim]",
            highlight=False,
        )

    def close(self) -> None:
        self.running.clear()
        self._stop_spin()


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def select_tools(spec: str | None) -> ToolRegistry:
    """The built-in tools, all of them (None), none ("none"), or the ones named ("read,grep")."""
    registry = default_registry()
    if spec is None:
        return registry
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if names == ["none"]:
        return ToolRegistry()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise InvalidInput(f"unknown tool {', '.join(unknown)}; the tools are: {', '.join(registry.names())}")
    return registry.subset(names)


def terminal_ask(console: Console) -> AskFn:
    """How the `question` tool reaches a person at this terminal."""

    async def ask(question: str) -> str:
        console.print(f"\n[bold cyan]?[/bold cyan] {_escape(question)}")
        return await asyncio.to_thread(input, "answer› ")

    return ask


async def open_run_session(
    store: Store, *, session_ref: str | None, cont: bool, directory: str, model_label: str | None
) -> tuple[Session, bool]:
    """The session a run works in: the one named, the last of this directory (--continue), or a new one.
    Returns it and whether it already existed."""
    if session_ref is not None:
        info = await resolve_session(store, session_ref)
        return Session(store, info), True
    if cont:
        last = await Session.last(store, directory)
        if last is None:
            raise SessionNotFound(f"no earlier session in {directory} to continue")
        return last, True
    return await Session.create(store, directory=directory, model=model_label), False


async def run_events(
    store: Store,
    prompt: str | None,
    *,
    session_ref: str | None,
    cont: bool,
    model_spec: str | None,
    max_steps: int,
    directory: str,
    system_prompt: str | None,
    notice: Any,
    ask: AskFn | None = None,
    tools: str | None = None,
) -> AsyncIterator[Event]:
    from ..providers import resolve_provider

    resolved = resolve_provider(model_spec)
    session, existed = await open_run_session(
        store, session_ref=session_ref, cont=cont, directory=directory, model_label=resolved.id
    )
    if resolved.provider.name == "local":
        notice(LOCAL_NOTICE)
    if existed and model_spec is not None and session.info.model != resolved.id:
        await session.update(model=resolved.id)
    options: dict[str, Any] = {
        "max_steps": max_steps,
        "ask": ask,
        "tools": select_tools(tools),
        "model_info": resolved.info,  # the context budget is the model's own window, not a guess
    }
    if system_prompt is not None:
        options["system_prompt"] = system_prompt
    if resolved.info.temperature is not None and resolved.info.supports_temperature:
        options["temperature"] = resolved.info.temperature
    async for event in session.stream(prompt, provider=resolved.provider, model=resolved.model, **options):
        yield event


@click.command("run")
@click.argument("prompt", required=False)
@click.option("--session", "-s", "session_ref", metavar="ID", help="Run in this session (an id or a unique piece).")
@click.option(
    "--continue", "-c", "cont", is_flag=True, help="Continue the last session of this directory (or --session)."
)
@click.option("--model", "-m", "model_spec", metavar="PROVIDER/MODEL", help="e.g. openai/gpt-5.5, local/smollm2.")
@click.option("--max-steps", default=50, show_default=True, type=click.IntRange(1, 10_000), help="Model steps at most.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    help="The workspace the tools work in (default: the current directory).",
)
@click.option("--system", "system_prompt", metavar="TEXT", help="A system prompt for this run.")
@click.option(
    "--tools", "tools", metavar="LIST", help="Tools the model may use: a comma list (read,grep,glob), or none."
)
@click.option("--json", "json_flag", is_flag=True, help="One JSON object per event per line.")
def run(
    prompt: str | None,
    session_ref: str | None,
    cont: bool,
    model_spec: str | None,
    max_steps: int,
    directory: str | None,
    system_prompt: str | None,
    tools: str | None,
    json_flag: bool,
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
    """
    if prompt == "-":
        prompt = sys.stdin.read()
    if prompt is not None and not prompt.strip():
        raise InvalidInput("the prompt is empty")
    if prompt is None and not cont and session_ref is None:
        raise click.UsageError("give a PROMPT, or --continue to pick up the last run")
    as_json = wants_json(json_flag)
    workspace = canonical_directory(directory)
    if not os.path.isdir(workspace):
        raise InvalidInput(f"the workspace {workspace} is not a directory")
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    renderer = None if as_json else TerminalRenderer(out, err)

    def notice(text: str) -> None:
        if not as_json:
            err.print(f"[dim]{text}[/dim]")
        else:
            click.echo(text, err=True)

    from ..store import open_store

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
            async for event in run_events(
                store,
                prompt,
                session_ref=session_ref,
                cont=cont,
                model_spec=model_spec,
                max_steps=max_steps,
                directory=workspace,
                system_prompt=system_prompt,
                notice=notice,
                ask=terminal_ask(err) if sys.stdin.isatty() and not as_json else None,
                tools=tools,
            ):
                if isinstance(event, RunStarted):
                    last_session = event.session_id
                if as_json:
                    sys.stdout.buffer.write(event_json(event) + b"\n")
                    sys.stdout.flush()
                else:
                    assert renderer is not None
                    renderer.handle(event)
                if isinstance(event, Done):
                    if renderer is not None:
                        renderer.summary(event.session_id, event.steps, event.usage)
                        if event.reason == "nothing_to_do":
                            err.print("[dim]Nothing to continue: the last run had finished.[/dim]")
                    code = 0
                elif isinstance(event, Error):
                    code = 1
        except asyncio.CancelledError:
            if not cancelled:
                raise
            if renderer is not None:
                renderer.close()
                err.print(
                    "\n[yellow]Cancelled.[/yellow] The partial answer is saved; continue with "
                    f"`tether run --continue`{f' --session {last_session}' if last_session else ''}."
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
