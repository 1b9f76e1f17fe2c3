"""How `tether run` and `tether chat` ask the person at the terminal to approve a tool call: what the call
would do and why it asks, then one line: y (once), a (always, in this session), p (always, saved to the
project), n (no), or any other text (no, and the text is what the model reads). A `write` or `edit` shows the
change it would make first, as a diff."""

from __future__ import annotations

import asyncio
import difflib
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..runtime.permission import Answer, ApprovalRequest, Approver
from .render import TerminalRenderer, shown
from .sanitize import escape_controls

YES = ("y", "yes")
NO = ("n", "no")
ALWAYS = ("a", "always", "s", "session")
PROJECT = ("p", "project")


def parse_answer(line: str, request: ApprovalRequest) -> Answer | None:
    """A typed line as an answer; None for an empty one (ask again)."""
    text = line.strip()
    word = text.lower()
    if not text:
        return None
    if word in YES:
        return Answer(True)
    if word in NO:
        return Answer(False)
    if word in ALWAYS and request.suggestion:
        return Answer(True, scope="session")
    if word in PROJECT and request.suggestion:
        return Answer(True, scope="project")
    if word in ALWAYS + PROJECT:  # nothing to remember it by (a command known only when it runs): once
        return Answer(True)
    return Answer(False, message=text)


def describe(request: ApprovalRequest) -> str:
    """What the call would do, on one line (markup-safe)."""
    args: Any = request.arguments
    if isinstance(args, dict):
        if request.tool == "bash" and isinstance(args.get("command"), str):
            return f"bash: {shown(args['command'])}"
        if isinstance(args.get("path"), str):
            return f"{shown(request.tool)} {shown(args['path'])}"
        text = ", ".join(f"{k}={v!r}" for k, v in args.items())
    else:
        text = "" if args is None else repr(args)
    text = " ".join(text.split())
    return f"{shown(request.tool)}({shown(text if len(text) <= 300 else text[:297] + '...')})"


DIFF_LINES = 40
"""The most lines of a proposed change shown before the question (the rest are counted)."""
READ_LIMIT = 1 << 20
"""A file larger than this is not read to show what a `write` would change (the new content is shown)."""


def proposed_diff(request: ApprovalRequest) -> list[str]:
    """What a `write` or `edit` would change, as unified diff lines (``+``, ``-``, ``@@``): against the file as
    it is now when it can be read (a new file is all ``+``), else the edit's old text against its new one.
    Empty for any other call, or arguments that are not a change."""
    args: Any = request.arguments
    if request.tool not in ("write", "edit") or not isinstance(args, dict) or not isinstance(args.get("path"), str):
        return []
    path = Path(request.workspace or ".") / args["path"]
    current: str | None = None
    try:
        if path.is_file() and path.stat().st_size <= READ_LIMIT:
            current = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        current = None
    if request.tool == "write":
        if not isinstance(args.get("content"), str):
            return []
        before, after = current or "", args["content"]
    else:
        old, new = args.get("old_string"), args.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str):
            return []
        if current is not None and old and old in current:
            before = current
            after = current.replace(old, new) if args.get("replace_all") is True else current.replace(old, new, 1)
        else:
            before, after = old, new
    name = args["path"]
    diff = difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"{name} (now)", f"{name} (after)", n=2, lineterm=""
    )
    return list(diff)[2:]  # the two file lines say nothing the question does not


def show_diff(console: Console, lines: list[str]) -> None:
    """The change, coloured as diffs are, every line's controls escaped; cut at `DIFF_LINES`."""
    from rich.text import Text

    for line in lines[:DIFF_LINES]:
        style = (
            "green" if line.startswith("+") else "red" if line.startswith("-") else "cyan" if line[:2] == "@@" else ""
        )
        console.print(Text("  " + escape_controls(line), style=style), highlight=False, soft_wrap=True)
    if len(lines) > DIFF_LINES:
        console.print(f"  [dim]… {len(lines) - DIFF_LINES} more lines of the change[/dim]")


async def read_line(console: Console, prompt: str) -> str | None:
    """One line from standard input without a thread (a timed-out approval must not leave a read behind);
    None at end of input."""
    console.print(prompt, end="", markup=False, highlight=False)
    loop = asyncio.get_running_loop()
    try:
        fd = sys.stdin.fileno()
        done: asyncio.Future[str] = loop.create_future()

        def ready() -> None:
            if not done.done():
                done.set_result(sys.stdin.readline())

        loop.add_reader(fd, ready)
    except (NotImplementedError, OSError, ValueError):  # no selectable stdin (Windows): a thread it is
        try:
            return await asyncio.to_thread(input)
        except EOFError:
            return None
    try:
        line = await done
    finally:
        loop.remove_reader(fd)
    return line if line else None


def terminal_approver(console: Console, renderer: TerminalRenderer | None = None) -> Approver:
    """Ask at this terminal (`console`: standard error). The renderer's spinner stops while it asks."""

    async def approve(request: ApprovalRequest) -> Answer:
        if renderer is not None:
            renderer.interrupt()
        own = renderer is None or not renderer.session or renderer.session == request.session_id
        who = "" if own else f" [dim](sub-agent …{shown(request.session_id[-6:])})[/dim]"
        console.print(f"\n[bold yellow]?[/bold yellow] approve {describe(request)}{who}", highlight=False)
        show_diff(console, proposed_diff(request))
        console.print(f"  [dim]{shown(request.reason)}[/dim]", highlight=False)
        choices = "[y] yes  [n] no"
        if request.suggestion:
            rules = ", ".join(escape_controls(r) for r in request.suggestion)
            choices = f"[y] yes  [a] always ({rules}) in this session  [p] always, saved to the project  [n] no"
        console.print(f"  {escape(choices)}", highlight=False)
        console.print("  [dim]or type what the agent should do instead[/dim]")
        while True:
            line = await read_line(console, "approve› ")
            if line is None:
                console.print()
                return Answer(False, message="")
            answer = parse_answer(line, request)
            if answer is not None:
                break
        if answer.approved:
            scope = {"once": "once", "session": "for this session", "project": "saved to the project"}[answer.scope]
            console.print(f"[green]✓ allowed {scope}[/green]")
        else:
            told = " [dim](the agent reads your message)[/dim]" if answer.message else ""
            console.print(f"[red]✗ not allowed[/red]{told}")
        return answer

    return approve
