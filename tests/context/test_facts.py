"""Mechanical facts: paths, commands, constraints verbatim, errors and whether they were settled, merged
across compactions within their bounds."""

from __future__ import annotations

from tether.context.facts import (
    MAX_COMMANDS,
    Command,
    ErrorFact,
    Fact,
    Facts,
    call_command,
    call_paths,
    constraints_in,
    error_line,
    extract_facts,
    paths_in,
)
from tether.messages import Entry, EntryBody, Message, ToolCallPart, ToolResultPart


def journal(*bodies: EntryBody) -> list[Entry]:
    return [Entry(i + 1, 0.0, b) for i, b in enumerate(bodies)]


def test_paths_in_text() -> None:
    text = "Edit src/app/main.py and ./scripts/run.sh, see README.md, not https://example.com/a/b or a@b.io"
    assert paths_in(text) == ["src/app/main.py", "./scripts/run.sh", "README.md"]
    assert paths_in("no paths here, just words.") == []


def test_paths_and_commands_from_calls() -> None:
    read = ToolCallPart(id="1", name="read", arguments={"path": "src/a.py", "limit": 20})
    many = ToolCallPart(id="2", name="edit", arguments={"files": ["a.py", "b.py"], "content": "x\ny"})
    bash = ToolCallPart(id="3", name="bash", arguments={"command": "pytest -x tests/"})
    argv = ToolCallPart(id="4", name="exec", arguments={"cmd": ["git", "status"]})
    raw = ToolCallPart.from_raw("5", "read", '{"path": "src/broken.py"')
    assert call_paths(read) == ["src/a.py"]
    assert call_paths(many) == ["a.py", "b.py"]
    assert call_paths(raw) == ["src/broken.py"]
    assert call_command(bash) == "pytest -x tests/"
    assert call_command(argv) == "git status"
    assert call_command(read) is None


def test_constraints_are_quoted_verbatim() -> None:
    text = "Fix the bug. Never touch the migrations folder! Use tabs.\nAlways run ruff before committing."
    assert constraints_in(text) == ["Never touch the migrations folder!", "Always run ruff before committing."]


def test_error_line_prefers_the_exception() -> None:
    out = "collected 3 items\nE   KeyError: 'total'\nFAILED tests/test_a.py::test_x - KeyError\n1 failed"
    assert error_line(out) == "E   KeyError: 'total'"  # not the summary line after it
    assert error_line("Traceback...\n  File x\nValueError: bad\nexit status 1") == "ValueError: bad"
    assert error_line("make: *** [all] error: 2") == "make: *** [all] error: 2"
    assert error_line("nothing telling\nat all") == "nothing telling"


def test_extract_facts_follows_errors_to_their_resolution() -> None:
    history = journal(
        Message.user("Port the parser to src/parse.py. You must keep the public API."),
        Message.assistant(tool_calls=[ToolCallPart(id="a", name="bash", arguments={"command": "pytest"})]),
        Message.tool(ToolResultPart(call_id="a", name="bash", content="ImportError: no module x", is_error=True)),
        Message.assistant(tool_calls=[ToolCallPart(id="b", name="read", arguments={"path": "src/x.py"})]),
        Message.tool(ToolResultPart(call_id="b", name="read", content="...", is_error=True)),
        Message.assistant(tool_calls=[ToolCallPart(id="c", name="bash", arguments={"command": "pytest -q"})]),
        Message.tool(ToolResultPart(call_id="c", name="bash", content="3 passed")),
        Message.assistant("Done; the helpers now live in src/helpers.py."),
    )
    facts = extract_facts(history)
    assert facts.constraints == [Fact(1, "You must keep the public API.")]
    assert facts.files == ["src/parse.py", "src/x.py", "src/helpers.py"]
    assert facts.commands == [
        Command(2, "pytest", "error: ImportError: no module x"),
        Command(6, "pytest -q", "ok"),
    ]
    assert facts.errors[0] == ErrorFact(3, "bash", "ImportError: no module x", "followed by a successful bash call")
    assert facts.errors[1].tool == "read" and facts.errors[1].state == "open"


def test_merge_keeps_first_constraints_and_newest_commands() -> None:
    old = Facts(
        constraints=[Fact(1, "Never X.")],
        commands=[Command(i, f"cmd {i}", "ok") for i in range(MAX_COMMANDS)],
        errors=[ErrorFact(5, "bash", "boom", "open")],
        files=["a.py", "b.py"],
    )
    new = Facts(
        constraints=[Fact(90, "Never X."), Fact(91, "Always Y.")],
        commands=[Command(100, "latest", "ok")],
        files=["a.py"],
        tools=["bash"],
    )
    merged = old.merged(new)
    assert [c.text for c in merged.constraints] == ["Never X.", "Always Y."]
    assert merged.constraints[0].seq == 1
    assert len(merged.commands) == MAX_COMMANDS and merged.commands[-1].command == "latest"
    assert merged.files == ["b.py", "a.py"]  # ordered by last mention
    assert merged.errors[0].state == "followed by a later bash call"
