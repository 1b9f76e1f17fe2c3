"""How a run looks in a terminal: text as it streams, a spinner per running tool, RLM and compaction progress,
a summary line at the end; who holds a busy session; and how the `question` tool asks the person at the
terminal."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from ..errors import SessionBusy
from ..events import (
    CheckpointReached,
    CompactionCompleted,
    CompactionFailed,
    CompactionStarted,
    Error,
    Event,
    Progress,
    RlmFinished,
    RlmProgress,
    RunStarted,
    TextComplete,
    TextDelta,
    ThinkingDelta,
    ToolCallComplete,
    ToolCallStart,
    UsageReport,
)
from ..messages import Usage
from ..tools.base import AskFn
from .sanitize import escape_controls

LOCAL_NOTICE = (
    "Using the embedded local model (SmolLM2-135M): it is tiny and runs offline, so expect weak answers. "
    "For real work set a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, OPENROUTER_API_KEY, ...) "
    "or pass --model provider/model; `tether models` lists what is configured."
)


def shown(text: str) -> str:
    """Stored or model-produced text ready for rich markup: controls escaped (rich would pass ESC through and
    silently drop BEL, BS and CR), then brackets, so that neither the terminal nor rich obeys it."""
    return escape(escape_controls(text))


class StreamEscaper:
    """`escape_controls` for text that arrives in pieces: a CR at the end of a piece is held back until the
    next one says whether it ends a line (CR LF) or would overwrite one (shown as ``\\r``)."""

    def __init__(self) -> None:
        self.held = ""

    def feed(self, text: str) -> str:
        text = self.held + text
        self.held = "\r" if text.endswith("\r") else ""
        return escape_controls(text[: len(text) - len(self.held)])

    def flush(self) -> str:
        text, self.held = self.held, ""
        return escape_controls(text)


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


class Waiting:
    """The spinner's label while the model works: the seconds since it began, redrawn as the spinner is."""

    def __init__(self, since: float) -> None:
        self.since = since

    def __rich__(self) -> str:
        return f"[dim]thinking… {time.monotonic() - self.since:.0f}s[/dim]"


class TerminalRenderer:
    """Events for people: text as it streams, a spinner per running tool, a summary line at the end."""

    def __init__(self, console: Console, status_console: Console, *, debug: bool = False) -> None:
        self.out = console
        self.err = status_console
        self.debug = debug
        """Print an error whole (``--debug``); else its first line and what to do."""
        self.status: Status | None = None
        self.running: dict[str, str] = {}
        self.at_line_start = True
        self.thinking = False
        self.text_stream = StreamEscaper()
        self.thinking_stream = StreamEscaper()
        self.session = ""
        """The run's own session (its first event's); events of other sessions are its sub-agents'."""
        self.child_calls: dict[tuple[str, str], str] = {}
        self.waiting: float | None = None
        """Since when the run waits for the model (nothing shown yet): the spinner says for how long."""

    def _write(self, text: str) -> None:
        self.out.file.write(text)
        self.out.file.flush()
        if text:
            self.at_line_start = text.endswith("\n")

    def _end_streams(self) -> None:
        self._write(self.text_stream.flush())
        if held := self.thinking_stream.flush():
            self.err.print(held, style="dim italic", end="", soft_wrap=True, highlight=False, markup=False)

    def _newline(self) -> None:
        self._end_streams()
        if not self.at_line_start:
            self._write("\n")

    def _spin(self) -> None:
        # The calls of a step start in the model's order; the first not yet complete is the one at work
        # (or the first of a batch of reads running together).
        labels = list(self.running.values())
        label = labels[0] + (f" (+{len(labels) - 1} more)" if len(labels) > 1 else "")
        if not self.err.is_terminal:
            return
        if self.status is None:
            self.status = self.err.status(label, spinner="dots")
            self.status.start()
        else:
            self.status.update(label)

    def _stop_spin(self) -> None:
        self.waiting = None
        if self.status is not None and not self.running:
            self.status.stop()
            self.status = None

    def _wait_for_model(self) -> None:
        """The model is at work and nothing shows yet (a local model may take a minute before its first
        token): a spinner with the seconds so far, on a terminal only."""
        if not self.err.is_terminal or self.running:
            return
        self.waiting = time.monotonic()
        label = Waiting(self.waiting)
        if self.status is None:
            self.status = self.err.status(label, spinner="dots")
            self.status.start()
        else:
            self.status.update(label)

    def _model_spoke(self) -> None:
        if self.waiting is not None:
            self._stop_spin()

    def interrupt(self) -> None:
        """Make way for a question to the person: the streams end their line, the spinner stops (the next
        tool event starts it again)."""
        self._newline()
        if self.status is not None:
            self.status.stop()
            self.status = None

    def handle(self, event: Event) -> None:
        self.session = self.session or event.session_id
        if event.session_id == self.session and not isinstance(event, RunStarted | UsageReport):
            self._model_spoke()
        if event.session_id != self.session:
            self._child(event)
        elif isinstance(event, RunStarted):
            self._wait_for_model()
        elif isinstance(event, Progress) and event.what == "task":
            child = shown(str(event.data.get("child_id", "")))
            self.err.print(f"[dim]↳ sub-agent {child}: {shown(event.detail)}[/dim]", highlight=False)
        elif isinstance(event, ThinkingDelta):
            if not self.thinking:
                self._newline()
                self.thinking = True
            text = self.thinking_stream.feed(event.text)
            self.err.print(text, style="dim italic", end="", soft_wrap=True, highlight=False, markup=False)
        elif isinstance(event, TextDelta):
            if self.thinking:
                self._end_streams()
                self.err.print()
                self.thinking = False
            self._write(self.text_stream.feed(event.text))
        elif isinstance(event, TextComplete):
            self._newline()
            if event.cut is not None:
                self.err.print(f"[yellow]{shown(f'[{event.cut}]')}[/yellow]", highlight=False)
        elif isinstance(event, ToolCallStart):
            self._newline()
            # escaped here once: the label is shown by the spinner and the completion line, both markup
            label = shown(f"{event.name}({_format_args(event.arguments)})")
            self.running[event.call_id] = label
            if not self.err.is_terminal:
                self.err.print(f"→ {label}", highlight=False)
            self._spin()
        elif isinstance(event, ToolCallComplete):
            label = self.running.pop(event.call_id, "") or shown(event.name)
            self._stop_spin()
            mark = "[green]✓[/green]" if event.success else "[red]✗[/red]"
            detail = "" if event.denied else f" [dim]{event.duration_ms:.0f} ms[/dim]"
            if not event.success and event.preview:
                detail += f" [red]{shown(event.preview)}[/red]"
            elif event.truncated:
                detail += " [yellow](output cut; full text kept as an artifact)[/yellow]"
            self.err.print(f"{mark} {label}{detail}", highlight=False)
            if self.running:
                self._spin()
            else:
                self._wait_for_model()  # the results go back to the model: it is at work again
        elif isinstance(event, CompactionStarted):
            self.err.print(
                f"[dim]compacting the context ({shown(event.reason)}, {event.tokens_before:,} tokens)…[/dim]"
            )
        elif isinstance(event, CompactionCompleted):
            self.err.print(
                f"[dim]compacted: {event.tokens_before:,} → {event.tokens_after:,} tokens ({shown(event.strategy)})[/dim]"
            )
        elif isinstance(event, CompactionFailed):
            self.err.print(f"[yellow]compaction failed: {shown(event.error)}[/yellow]")
        elif isinstance(event, RlmProgress):
            line = rlm_progress_line(event)
            if line is not None:
                self.err.print(f"[dim]{shown(line)}[/dim]")
        elif isinstance(event, RlmFinished):
            how = f"map-reduce ({shown(event.fallback_reason or '')})" if event.fallback else "RLM"
            self.err.print(
                f"[dim]rlm: done in {event.duration_s:.1f} s ({how}, {event.iterations} steps, "
                f"{event.sub_calls} sub-calls)[/dim]"
            )
        elif isinstance(event, Progress):
            done = f" {event.done}/{event.total}" if event.total else ""
            self.err.print(f"[dim]{shown(event.what)}{done} {shown(event.detail)}[/dim]")
        elif isinstance(event, CheckpointReached):
            self._newline()
            why = {"paused": "Paused, as asked", "answer_cut": "The answer was cut short (see below)"}.get(
                event.reason, f"Stopped at the step limit ({event.steps} steps)"
            )
            self.err.print(
                f"[yellow]{why}. A checkpoint was saved; continue with "
                f"`tether run --continue --session {shown(event.session_id)}`.[/yellow]"
            )
        elif isinstance(event, Error):
            self._newline()
            self.running.clear()
            self._stop_spin()
            message = event.message if self.debug else short_error(event.code, event.message)
            self.err.print(f"[red]error ({shown(event.code)}):[/red] {shown(message)}", highlight=False)

    def _child(self, event: Event) -> None:
        """A sub-agent's event: a line per finished tool call and per error, marked with the end of its
        session id; its text is left to the task call's result (several run at once)."""
        mark = f"[dim]  ↳ …{shown(event.session_id[-6:])}[/dim]"
        if isinstance(event, ToolCallStart):
            self.child_calls[(event.session_id, event.call_id)] = shown(
                f"{event.name}({_format_args(event.arguments)})"
            )
        elif isinstance(event, ToolCallComplete):
            label = self.child_calls.pop((event.session_id, event.call_id), "") or shown(event.name)
            done = "[green]✓[/green]" if event.success else "[red]✗[/red]"
            self.err.print(f"{mark} {done} [dim]{label}[/dim]", highlight=False)
        elif isinstance(event, Error):
            message = event.message if self.debug else short_error(event.code, event.message)
            self.err.print(f"{mark} [red]error ({shown(event.code)}):[/red] {shown(message)}", highlight=False)

    def summary(self, session_id: str, steps: int, usage: Usage) -> None:
        self._newline()
        self.running.clear()
        self._stop_spin()
        line = summary_line(session_id, steps, usage, self.err.width if self.err.is_terminal else None)
        self.err.print(f"[dim]{line}[/dim]", highlight=False)

    def close(self) -> None:
        self.running.clear()
        self._stop_spin()


def token_counts(usage: Usage) -> str:
    """``1,234 in / 56 out tokens``; counted by tether rather than reported: ``~1,234 in / ~56 out tokens
    (estimated)``."""
    mark = "~" if usage.estimated else ""
    text = f"{mark}{usage.input_tokens:,} in / {mark}{usage.output_tokens:,} out tokens"
    return text + (" (estimated)" if usage.estimated else "")


def summary_line(session_id: str, steps: int, usage: Usage, width: int | None = None) -> str:
    """The run's last line: steps, tokens, cost, and its session. Wider than `width`, the session goes on a
    line of its own, whole (a terminal that folds a line would split the id, the one thing to copy)."""
    cost = format_cost(usage.cost)
    if usage.estimated and usage.cost is not None:
        cost = f"~{cost} (estimated)"
    pieces = [f"── {steps} step{'s' if steps != 1 else ''}", token_counts(usage), cost, f"session {session_id}"]
    if width is None:
        return " · ".join(pieces)
    lines = [pieces[0]]
    for piece in pieces[1:]:  # whole pieces, as many a line as fit; the next line starts indented
        if len(lines[-1]) + 3 + len(piece) <= width:
            lines[-1] += " · " + piece
        else:
            lines.append("   " + piece)
    return "\n".join(lines)


ERROR_LINE = 200
"""The most characters of an error's first line printed without ``--debug``."""

_NEXT_STEP = {
    "auth_error": "check the provider's key (`tether doctor` says which is missing)",
    "rate_limited": "wait a little, then `tether run --continue`",
    "provider_error": "`tether run --continue` tries the step again; `tether doctor` checks the provider",
    "transient_error": "`tether run --continue` tries the step again; `tether doctor` checks the provider",
    "context_overflow": "`tether compact` shrinks the session's context; then `tether run --continue`",
}


def short_error(code: str, message: str) -> str:
    """An error for a person, once: its first line (a server's validation dump can run to pages), and what
    to do next; the whole of it with ``--debug``."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = lines[0] if lines else message.strip()
    more = len(lines) > 1 or len(first) > ERROR_LINE
    if len(first) > ERROR_LINE:
        first = first[: ERROR_LINE - 1].rstrip() + "…"
    hint = _NEXT_STEP.get(code)
    text = first + (f". Next: {hint}" if hint else "")
    return text + (" (--debug prints the whole error)" if more else "")


def rlm_progress_line(event: RlmProgress) -> str | None:
    tokens = f"{event.input_tokens:,} in / {event.output_tokens:,} out"
    if event.stage == "input":
        return f"rlm: processing {event.detail}"
    if event.stage == "started":
        return f"rlm: {event.detail}"
    if event.stage == "iteration":
        return f"rlm: step {event.iteration} · {event.sub_calls} sub-calls · {tokens} · {event.elapsed_s:.1f} s"
    if event.stage == "block":
        return f"rlm:   running {event.detail}"
    if event.stage == "sub_calls":
        return f"rlm:   sub-model calls: {event.detail} ({event.sub_calls} in all)"
    if event.stage == "repl_restart":
        return f"rlm:   REPL restarted: {event.detail}"
    if event.stage == "fallback":
        return f"rlm: falling back to map-reduce: {event.detail}"
    if event.stage == "map":
        return f"rlm:   read part {event.done} of {event.total} · {tokens}"
    if event.stage == "reduce":
        return f"rlm:   combining notes · {tokens}"
    return None


def terminal_ask(console: Console) -> AskFn:
    """How the `question` tool reaches a person at this terminal."""

    async def ask(question: str) -> str:
        console.print(f"\n[bold cyan]?[/bold cyan] {shown(question)}")
        return await asyncio.to_thread(input, "answer› ")

    return ask


BUSY_EXIT = 3
"""The exit status of a run refused because another run holds its session."""


def busy_line(busy: SessionBusy, *, waiting: bool = False) -> str:
    """Who holds the session, since when, and what to do about it, on one line."""
    since = f" since {time.strftime('%H:%M:%S', time.localtime(busy.since))}" if busy.since else ""
    where = ", ".join(x for x in (f"pid {busy.pid}" if busy.pid is not None else "", busy.host or "") if x)
    holder = f"run {busy.holder}" + (f" ({where})" if where else "") + since
    if waiting:
        return f"session {busy.session_id} is busy: {holder}; waiting for it to finish (Ctrl-C to stop)"
    return (
        f"session {busy.session_id} is busy: {holder} holds it; wait for it with --wait, or stop it with "
        f"`tether sessions cancel {busy.session_id}`"
    )
