"""Facts read mechanically from journal entries: the user's goal and constraints, files touched, commands
run, errors and whether they were followed by success. The deterministic compaction writes them; relevance
selection scores messages by them. No model, no I/O: the same entries always give the same facts."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ..messages import Entry, Message, ToolCallPart

MAX_CONSTRAINTS = 40
MAX_FILES = 60
MAX_COMMANDS = 25
MAX_ERRORS = 20
LINE_CHARS = 240

PATH_KEYS = frozenset(
    {"path", "paths", "file", "files", "file_path", "filepath", "filename", "target", "source", "dir", "directory"}
)
COMMAND_KEYS = ("command", "cmd", "script")

_PATH = re.compile(
    r"(?<![\w/:.@-])"  # not inside a word, a URL or an e-mail address
    r"((?:\.{1,2}/|/|~/)?(?:[\w.+-]+/)+[\w.+-]+|[\w+-]+\.(?:py|pyi|js|jsx|ts|tsx|go|rs|rb|java|kt|c|h|cc|cpp|hpp|cs"
    r"|md|rst|txt|json|jsonl|yaml|yml|toml|ini|cfg|sql|sh|html|css|scss|vue|svelte|lock|csv|xml|proto|tf))"
    r"(?![\w/])"
)
_CONSTRAINT = re.compile(
    r"\b(must|mustn't|never|always|don't|do not|dont|avoid|prefer|make sure|ensure|should not|shouldn't|"
    r"required|requirement|constraint|important|only use|not allowed|no more than|at most|at least)\b",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_EXCEPTION = re.compile(r"\b[A-Z]\w*(Error|Exception|Exit|Interrupt):")
_ERRORISH = re.compile(r"(Error|Exception|Traceback|FAILED|FAIL:|error:|fatal:|panic)", re.IGNORECASE)


class Fact(msgspec.Struct, frozen=True, array_like=True):
    """A line of text and the seq of the entry it came from."""

    seq: int
    text: str


class Command(msgspec.Struct, frozen=True, array_like=True):
    seq: int
    command: str
    outcome: str
    """``ok``, ``error: <first line>``, or ``no result``."""


class ErrorFact(msgspec.Struct, frozen=True, array_like=True):
    seq: int
    tool: str
    text: str
    state: str
    """``open`` (the last call of that tool failed), or ``followed by a successful <tool> call``."""


class Facts(msgspec.Struct, kw_only=True):
    constraints: list[Fact] = msgspec.field(default_factory=list)
    files: list[str] = msgspec.field(default_factory=list)
    commands: list[Command] = msgspec.field(default_factory=list)
    errors: list[ErrorFact] = msgspec.field(default_factory=list)
    tools: list[str] = msgspec.field(default_factory=list)

    def merged(self, newer: Facts) -> Facts:
        """These facts followed by `newer`'s, deduplicated and cut to their bounds (newest kept, except
        constraints, where the first said are kept: they were the user's terms from the start)."""
        seen: set[str] = set()
        constraints = []
        for fact in [*self.constraints, *newer.constraints]:
            if fact.text not in seen:
                seen.add(fact.text)
                constraints.append(fact)
        newer_tools = set(newer.tools)
        errors = [
            # an error an older summary called open is settled if the same tool was used again since
            msgspec.structs.replace(e, state=f"followed by a later {e.tool} call")
            if e.state == "open" and e.tool in newer_tools
            else e
            for e in self.errors
        ]
        return Facts(
            constraints=constraints[:MAX_CONSTRAINTS],
            files=_last_unique([*self.files, *newer.files], MAX_FILES),
            commands=[*self.commands, *newer.commands][-MAX_COMMANDS:],
            errors=[*errors, *newer.errors][-MAX_ERRORS:],
            tools=_last_unique([*self.tools, *newer.tools], 50),
        )


def _last_unique(items: Iterable[str], limit: int) -> list[str]:
    """Unique items in order of their last occurrence, the newest `limit` of them."""
    order: dict[str, None] = {}
    for item in items:
        order.pop(item, None)
        order[item] = None
    return list(order)[-limit:]


def first_line(text: str, limit: int = LINE_CHARS) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def paths_in(text: str) -> list[str]:
    """Path-like strings in `text`: ``src/app.py``, ``./build``, ``/etc/hosts``, ``README.md``."""
    return [m.group(1).rstrip(".") for m in _PATH.finditer(text)]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


def call_paths(call: ToolCallPart) -> list[str]:
    """Paths a tool call names in its arguments."""
    args = call.arguments
    if not isinstance(args, dict):
        return paths_in(call.raw_arguments or "")
    out: list[str] = []
    for key, value in args.items():
        if key.lower() in PATH_KEYS:
            out.extend(s for s in _strings(value) if s and len(s) < 500 and "\n" not in s)
    return out


def call_command(call: ToolCallPart) -> str | None:
    """The shell command a tool call runs, when it runs one."""
    args = call.arguments
    if not isinstance(args, dict):
        return None
    for key in COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = " ".join(value)
        if isinstance(value, str) and value.strip():
            return first_line(value, 300) if "\n" not in value.strip() else value.strip()[:300]
    return None


def constraints_in(text: str) -> list[str]:
    """The sentences of a user's message that state a rule or preference, verbatim."""
    out = []
    for sentence in _SENTENCE.split(text):
        sentence = sentence.strip()
        if sentence and len(sentence) <= 400 and _CONSTRAINT.search(sentence):
            out.append(sentence)
    return out


def error_line(text: str) -> str:
    """The most telling line of a failed tool's output: the last line naming an exception
    (``KeyError: 'x'``), else the last error-looking one (``FAILED ...``, ``error: ...``), else the first."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for pattern in (_EXCEPTION, _ERRORISH):
        for line in reversed(lines):
            if pattern.search(line):
                return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 3] + "..."
    return first_line(text)


def extract_facts(entries: Sequence[Entry]) -> Facts:
    """The facts of `entries` (message entries; others are skipped)."""
    constraints: list[Fact] = []
    files: list[str] = []
    commands: list[Command] = []
    errors: list[ErrorFact] = []
    tools: list[str] = []
    calls: dict[str, tuple[int, ToolCallPart]] = {}
    command_at: dict[str, int] = {}  # call id -> index in commands
    error_of_tool: dict[str, int] = {}  # tool name -> index in errors of its latest open error
    for entry in entries:
        message = entry.body
        if not isinstance(message, Message):
            continue
        if message.role == "user":
            text = message.text
            constraints.extend(Fact(entry.seq, s) for s in constraints_in(text))
            files.extend(paths_in(text))
            continue
        if message.role == "assistant":
            files.extend(paths_in(message.text))  # "I moved the fixtures to tests/fixtures/..."
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls[part.id] = (entry.seq, part)
                tools.append(part.name)
                files.extend(call_paths(part))
                command = call_command(part)
                if command is not None:
                    command_at[part.id] = len(commands)
                    commands.append(Command(entry.seq, command, "no result"))
        for result in message.tool_results:
            seq_call = calls.get(result.call_id)
            tool = result.name or (seq_call[1].name if seq_call else "tool")
            outcome = f"error: {error_line(result.content)}" if result.is_error else "ok"
            if result.call_id in command_at:
                i = command_at.pop(result.call_id)
                commands[i] = msgspec.structs.replace(commands[i], outcome=outcome)
            if result.is_error:
                error_of_tool[tool] = len(errors)
                errors.append(ErrorFact(entry.seq, tool, error_line(result.content), "open"))
            elif tool in error_of_tool:
                i = error_of_tool.pop(tool)
                errors[i] = msgspec.structs.replace(errors[i], state=f"followed by a successful {tool} call")
    empty = Facts()
    return empty.merged(Facts(constraints=constraints, files=files, commands=commands, errors=errors, tools=tools))
