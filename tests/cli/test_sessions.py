"""`tether sessions` end to end: through click's test runner on a real SQLite file, and through a real
`python -m tether` subprocess. Bad ids, missing sessions and bad files must end in one clear line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from tether import Marker, Message, Session, SqliteStore, ThinkingPart, ToolCallPart, ToolResultPart
from tether.cli.main import cli
from tether.store import Store

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample-session.json"


def with_db(db: Path, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        async with SqliteStore(db) as store:
            return await fn(store)

    return asyncio.run(main())


def tether(db: Path, *args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args], input=input, env=env)


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def failed(result: Result, message: str, code: int = 1) -> str:
    """The command failed with `code` and one clear line, never a traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert message in result.output, result.output
    return result.output


def listed(db: Path, *args: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(ok(tether(db, "sessions", "--json", *args)))
    return rows


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tether.db"


async def coding_session(store: Store, directory: str = "/work/calc") -> Session:
    """A user turn, a tool call that works and one that fails, and a reverted detour."""
    session = await Session.create(store, directory=directory)
    await session.append(
        Message.user("fix the failing test"),
        Message(
            role="assistant",
            parts=[
                ThinkingPart(text="secret reasoning that stays collapsed"),
                ToolCallPart(id="c1", name="read", arguments={"path": "src/a.py"}),
                ToolCallPart(id="c2", name="bash", arguments={"command": "pytest"}),
            ],
        ),
        Message.tool(
            ToolResultPart(call_id="c1", content="def f():\n    return 1\n"),
            ToolResultPart(call_id="c2", content="collected 1 item\nE   AssertionError: 1 != 2", is_error=True),
        ),
        Message.assistant("a detour that gets reverted"),
    )
    await session.revert(3, reason="wrong idea")
    await session.append(Message.assistant("Fixed it."))
    return session


# --- the group ---------------------------------------------------------------------------------------------


def test_help_and_version() -> None:
    runner = CliRunner()
    assert "sessions" in ok(runner.invoke(cli, ["--help"]))
    assert "0.1.0" in ok(runner.invoke(cli, ["--version"]))
    help_text = ok(runner.invoke(cli, ["sessions", "--help"]))
    for name in ("show", "rm", "fork", "export", "import", "list"):
        assert name in help_text


def test_help_does_not_import_the_subcommands() -> None:
    code = (
        "import sys\n"
        "from tether.cli.main import cli\n"
        "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('loaded' if 'tether.cli.sessions' in sys.modules else 'lazy')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("lazy")


def test_store_comes_from_tether_store_env(db: Path) -> None:
    session = with_db(db, coding_session)
    result = CliRunner().invoke(cli, ["sessions", "--all", "--json"], env={"TETHER_STORE": f"sqlite:///{db}"})
    assert [row["id"] for row in json.loads(ok(result))] == [session.id]


# --- listing -----------------------------------------------------------------------------------------------


def test_empty_store(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with_db(db, lambda store: store.list_sessions())  # made, with nothing in it
    assert f"No sessions in {os.path.realpath(tmp_path)}" in ok(tether(db, "sessions"))
    assert "No sessions in any directory." in ok(tether(db, "sessions", "--all"))
    assert listed(db, "--all") == []


def test_listing_by_directory_most_recent_first(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()

    async def build(store: Store) -> list[str]:
        first = await Session.create(store, directory=a, title="first in a")
        other = await Session.create(store, directory=b, title="only one in b")
        second = await Session.create(store, directory=a, title="second in a")
        child = await Session.create(store, directory=a, title="a sub-agent", parent_id=first.id)
        await first.append(Message.user("bump"))  # now the most recent top-level session
        return [first.id, other.id, second.id, child.id]

    first, other, second, child = with_db(db, build)
    monkeypatch.chdir(a)
    assert [r["id"] for r in listed(db)] == [first, second]
    assert [r["id"] for r in listed(db, "--dir", str(b))] == [other]
    assert {r["id"] for r in listed(db, "--all")} == {first, second, other}
    assert child in {r["id"] for r in listed(db, "--all", "--children")}
    assert [r["id"] for r in json.loads(ok(tether(db, "--json", "sessions", "list")))] == [first, second]

    table = ok(tether(db, "sessions"))
    assert table.index(first) < table.index(second)
    assert "first in a" in table and "only one in b" not in table and "just now" in table
    limited = ok(tether(db, "sessions", "--limit", "1"))
    assert first in limited and second not in limited and "--limit N shows more" in limited
    assert str(b) in ok(tether(db, "sessions", "--all"))  # the directory column appears with --all
    failed(tether(db, "sessions", "--all", "--dir", str(b)), "not both", code=2)
    failed(tether(db, "sessions", "--limit", "0"), "Invalid value", code=2)


def test_list_json_has_every_field(db: Path) -> None:
    session = with_db(db, coding_session)
    (row,) = listed(db, "--all")
    assert row["id"] == session.id
    assert row["message_count"] == 5 and row["entry_count"] == 6 and row["parent_id"] is None
    assert row["title"] == "fix the failing test" and row["cost"] == "0"


# --- show --------------------------------------------------------------------------------------------------


def test_show_transcript(db: Path) -> None:
    session = with_db(db, coding_session)
    out = ok(tether(db, "sessions", "show", session.id))
    assert "fix the failing test" in out
    assert '→ read(path="src/a.py")  ✓ 2 lines' in out
    assert '→ bash(command="pytest")  ✗ E AssertionError: 1 != 2' in out
    assert "[thinking · 37 chars]" in out and "secret reasoning" not in out
    assert "↶ reverted to #3 (entry 4 hidden): wrong idea" in out
    assert "a detour" not in out and "Fixed it." in out
    assert "def f()" not in out  # tool output is summarized on the call's line, not printed

    raw = ok(tether(db, "sessions", "show", "--raw", session.id))
    assert "a detour that gets reverted" in raw and "[reverted]" in raw


def test_show_marks_an_interrupted_turn(db: Path) -> None:
    async def interrupted(store: Store) -> Session:
        session = await Session.create(store, directory="/work/calc")
        await session.append(
            Message.user("summarize the logs"),
            Marker(name="interrupted", data={"seq": 1}),
            Message.user("only the errors"),
            Message.assistant("Two errors."),
        )
        return session

    session = with_db(db, interrupted)
    out = ok(tether(db, "sessions", "show", session.id))
    assert "⚡ turn interrupted: entry 1 got no answer" in out
    markdown = ok(tether(db, "sessions", "export", session.id, "-f", "markdown"))
    assert "> ⚡ Turn interrupted: entry 1 got no answer" in markdown


def test_show_json(db: Path) -> None:
    session = with_db(db, coding_session)
    doc = json.loads(ok(tether(db, "sessions", "show", "--json", session.id)))
    assert doc["session"]["id"] == session.id
    assert [e["seq"] for e in doc["entries"]] == [1, 2, 3, 5, 6]  # 4 is hidden; the revert marker is not
    raw = json.loads(ok(tether(db, "--json", "sessions", "show", "--raw", session.id)))
    assert [(e["seq"], e["reverted"]) for e in raw["entries"]][3] == (4, True)


async def delegating_session(store: Store, directory: Path) -> Session:
    """A real run whose model hands one task to a sub-agent; the sub-agent answers in two steps."""
    from tether.config import Config
    from tether.providers.scripted import ScriptedProvider

    args = {"description": "count the tests", "prompt": "count the tests"}
    provider = ScriptedProvider(
        [
            Message.assistant("Delegating.", tool_calls=[ToolCallPart(id="t1", name="task", arguments=args)]),
            Message.assistant(tool_calls=[ToolCallPart(id="g1", name="glob", arguments={"pattern": "*.py"})]),
            "There are no tests here.",
            "The sub-agent found none.",
        ]
    )
    session = await Session.create(store, directory=directory)
    await session.prompt("how many tests?", provider=provider, model="test", config=Config())
    return session


def test_show_names_the_sub_agent_under_its_task_call_and_nests_it(db: Path, tmp_path: Path) -> None:
    session = with_db(db, lambda store: delegating_session(store, tmp_path))
    (child,) = [row for row in listed(db, "--all", "--children") if row["parent_id"] == session.id]
    assert child["agent"] == "build" and child["title"] == "count the tests"
    assert child["id"] not in [row["id"] for row in listed(db, "--all")]  # only with --children

    out = ok(tether(db, "sessions", "show", session.id))
    assert '→ task(description="count the tests"' in out
    assert f"↳ sub-agent {child['id']} (build) · completed, 2 steps" in out
    assert "There are no tests here." not in out  # the child's transcript only with --children

    nested = ok(tether(db, "sessions", "show", "--children", session.id))
    lines = nested.splitlines()
    call = next(i for i, line in enumerate(lines) if "↳ sub-agent" in line)
    assert lines[call + 1].startswith("    │ " + child["id"])  # the child's transcript, under the call
    assert any(line.startswith("    │ ") and 'glob(pattern="*.py")' in line for line in lines)
    assert any(line.startswith("    │ ") and "There are no tests here." in line for line in lines)
    assert lines.index(next(line for line in lines if "The sub-agent found none." in line)) > call

    doc = json.loads(ok(tether(db, "sessions", "show", "--json", "--children", session.id)))
    (kid,) = doc["children"]
    assert kid["session"]["id"] == child["id"] and kid["entries"][-1]["body"]["parts"][0]["text"] == (
        "There are no tests here."
    )
    shown = ok(tether(db, "sessions", "--all", "--children"))
    assert "↳ count the tests" in shown


def test_sessions_are_found_by_a_unique_prefix_or_suffix(db: Path) -> None:
    one, two = with_db(db, lambda s: asyncio.gather(coding_session(s), coding_session(s)))
    full = ok(tether(db, "sessions", "show", one.id))
    assert ok(tether(db, "sessions", "show", one.id[-6:])) == full
    assert ok(tether(db, "sessions", "show", one.id[-8:].lower())) == full
    # ids made in the same millisecond differ only at the end (monotonic ULIDs): take the shortest prefix
    # that tells the two apart, as a person would
    differs = next(i for i, (a, b) in enumerate(zip(one.id, two.id, strict=True)) if a != b)
    assert ok(tether(db, "sessions", "show", one.id[: max(differs + 1, 10)])) == full
    assert ok(tether(db, "sessions", one.id[-6:])) == full  # `tether sessions ID` is `show ID`
    failed(tether(db, "sessions", "show", "ses_01"), "matches 2 sessions")


def test_subcommand_names_win_over_session_ids(db: Path) -> None:
    with_db(db, coding_session)
    failed(tether(db, "sessions", "show"), "Missing argument 'ID'", code=2)
    failed(tether(db, "sessions", "import"), "Missing argument 'FILE'", code=2)
    assert "fix the failing test" in ok(tether(db, "sessions", "list", "--all"))
    failed(tether(db, "sessions", "shwo"), "No such command 'shwo'", code=2)


@pytest.mark.parametrize(
    "bad", ["../x", "a/b", "ses_0", "../../../../etc/passwd", "x" * 300, "ses_01JD8X3Q5T9N2C7KZ6W4M0R1Y!"]
)
@pytest.mark.parametrize("command", ["show", "rm", "fork", "export"])
def test_invalid_ids_are_one_clear_line(db: Path, command: str, bad: str) -> None:
    session = with_db(db, coding_session)
    out = failed(tether(db, "sessions", command, bad, *(["--yes"] if command == "rm" else [])), "invalid session id")
    assert out.count("\n") == 1
    assert [r["id"] for r in listed(db, "--all")] == [session.id]


@pytest.mark.parametrize("command", ["show", "rm", "fork", "export"])
def test_missing_sessions(db: Path, command: str) -> None:
    with_db(db, coding_session)
    extra = ["--yes"] if command == "rm" else []
    missing = "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"
    failed(tether(db, "sessions", command, missing, *extra), f"no session '{missing}'")
    failed(tether(db, "sessions", command, "ZZZZZZZZ", *extra), "no session 'ZZZZZZZZ'")


# --- rm, fork ----------------------------------------------------------------------------------------------


def test_rm_asks_and_says_how_many_children_go(db: Path) -> None:
    async def build(store: Store) -> tuple[str, str, str]:
        parent = await coding_session(store)
        child = await Session.create(store, directory="/work/calc", parent_id=parent.id)
        await Session.create(store, directory="/work/calc", parent_id=child.id)
        fork = await parent.fork(2)
        return parent.id, child.id, fork.id

    parent, child, fork = with_db(db, build)
    out = failed(tether(db, "sessions", "rm", parent, input="n\n"), "Aborted")
    assert "and its 2 child sessions?" in out
    assert len(listed(db, "--all", "--children")) == 4
    failed(tether(db, "sessions", "rm", parent), "Aborted")  # no stdin: no deletion
    assert len(listed(db, "--all", "--children")) == 4

    assert f"Deleted {parent} and 2 child sessions." in ok(tether(db, "sessions", "rm", parent, input="y\n"))
    assert [r["id"] for r in listed(db, "--all", "--children")] == [fork]  # forks are copies, and stay
    assert json.loads(ok(tether(db, "sessions", "rm", "--yes", "--json", fork))) == {"deleted": [fork]}
    assert listed(db, "--all", "--children") == []
    assert child not in ok(tether(db, "sessions", "--all", "--children"))


def test_fork(db: Path) -> None:
    session = with_db(db, coding_session)
    out = ok(tether(db, "sessions", "fork", session.id[-6:], "--at", "2"))
    assert out.startswith(f"Forked {session.id} at entry 2: ses_")
    new_id = out.strip().rsplit(" ", 1)[1]
    info = with_db(db, lambda s: s.get_session(new_id))
    assert (info.entry_count, info.forked_from, info.forked_at) == (2, session.id, 2)
    titled = json.loads(ok(tether(db, "sessions", "fork", session.id, "--title", "plan B", "--json")))
    assert titled["title"] == "plan B" and titled["entry_count"] == 6
    failed(tether(db, "sessions", "fork", session.id, "--at", "99"), "cannot fork")


# --- export, import ----------------------------------------------------------------------------------------


def test_export_import_round_trip(db: Path, tmp_path: Path) -> None:
    session = with_db(db, coding_session)
    to_stdout = tether(db, "sessions", "export", session.id)
    assert to_stdout.exit_code == 0
    path = tmp_path / "out" / "s.json"
    path.parent.mkdir()
    ok(tether(db, "sessions", "export", session.id, "-o", str(path)))
    assert path.read_bytes() == to_stdout.stdout_bytes
    assert [p.name for p in path.parent.iterdir()] == ["s.json"]  # no temporary file left behind

    other = tmp_path / "other.db"
    assert f"Imported {session.id} “fix the failing test” (6 entries)." in ok(
        tether(other, "sessions", "import", str(path))
    )
    assert tether(other, "sessions", "export", session.id).stdout_bytes == path.read_bytes()

    failed(
        tether(other, "sessions", "import", str(path)),
        "already exists in this store; import it under a new id (`--new-id`)",
    )
    copy = json.loads(ok(tether(other, "sessions", "import", "--new-id", "--json", str(path))))
    assert copy["id"] != session.id and copy["metadata"]["imported_from"] == session.id

    ok(tether(db, "sessions", "rm", "--yes", session.id))
    ok(tether(db, "sessions", "import", "-", input=path.read_bytes()))
    assert tether(db, "sessions", "export", session.id).stdout_bytes == path.read_bytes()


def test_export_markdown(db: Path, tmp_path: Path) -> None:
    session = with_db(db, coding_session)
    md = ok(tether(db, "sessions", "export", session.id, "--format", "markdown"))
    assert md.startswith("# fix the failing test\n") and '→ `read(path="src/a.py")`' in md
    assert "a detour" not in md
    assert "a detour" in ok(tether(db, "sessions", "export", session.id, "-f", "markdown", "--raw"))


def test_export_html_writes_one_self_contained_page(db: Path, tmp_path: Path) -> None:
    session = with_db(db, coding_session)
    out = tmp_path / "session.html"
    ok(tether(db, "sessions", "export", session.id, "--format", "html", "-o", str(out)))
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "fix the failing test" in page and "AssertionError: 1 != 2" in page and "✗ error" in page
    assert '<details class="thinking">' in page and "a detour" not in page
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "a detour" in ok(tether(db, "sessions", "export", session.id, "-f", "html", "--raw"))
    failed(tether(db, "sessions", "export", session.id, "-f", "markdown", "--children"), "goes with --format html", 2)


def test_export_to_an_unwritable_place_is_a_clear_error(db: Path, tmp_path: Path) -> None:
    session = with_db(db, coding_session)
    failed(
        tether(db, "sessions", "export", session.id, "-o", str(tmp_path / "no" / "such" / "dir.json")),
        "Could not open file",
    )
    failed(
        tether(db, "sessions", "export", "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "-o", str(tmp_path / "x.json")), "no session"
    )
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (SAMPLE.read_bytes()[:-200], "truncated"),
        (b'{"type":"user","message":{"role":"user","content":"hi"}}\n{"type":"assistant"}\n', "JSON Lines"),
        (b'{"sessions": []}', "not a tether session export"),
        (b"\x7fELF\x02\x01\x01\x00" + bytes(200), "binary"),
    ],
    ids=["empty", "truncated", "jsonl", "foreign", "binary"],
)
def test_import_of_a_bad_file_writes_nothing(db: Path, tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    out = failed(tether(db, "sessions", "import", str(path)), message)
    assert out.startswith(f"error: cannot import {path}: ") and out.count("\n") == 1
    assert listed(db, "--all") == []


def test_import_of_a_missing_file(db: Path, tmp_path: Path) -> None:
    failed(tether(db, "sessions", "import", str(tmp_path / "nope.json")), "No such file or directory")


# --- a real process ----------------------------------------------------------------------------------------


def run_tether(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    env.pop("TETHER_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL
    )


def test_the_sample_session_through_a_real_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sample_id = json.loads(SAMPLE.read_bytes())["session"]["id"]

    imported = run_tether("sessions", "import", str(SAMPLE), home=home)
    assert imported.returncode == 0, imported.stderr
    assert f"Imported {sample_id}" in imported.stdout
    assert (home / "tether.db").exists()  # the default store lives under TETHER_HOME

    listing = run_tether("sessions", "--all", "--json", home=home)
    assert [row["id"] for row in json.loads(listing.stdout)] == [sample_id]
    shown = run_tether("sessions", "show", sample_id[-6:], home=home)
    assert shown.returncode == 0 and "Fix divide() for a zero divisor" in shown.stdout
    exported = run_tether("sessions", "export", sample_id, home=home)
    assert exported.stdout == SAMPLE.read_text()

    bad = run_tether("sessions", "show", "../x", home=home)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("error: invalid session id '../x'") and bad.stderr.count("\n") == 1
    refused = run_tether("sessions", "rm", sample_id, home=home)  # stdin closed: nothing is deleted
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    usage = run_tether("sessions", "--limit", "x", home=home)
    assert usage.returncode == 2


def test_show_marks_approved_denied_and_pending_calls(tmp_path: Path) -> None:
    db = tmp_path / "t.db"

    async def build(store: Store) -> str:
        session = await Session.create(store, directory=tmp_path)
        calls = [ToolCallPart(id=f"c{i}", name="bash", arguments={"command": f"step {i}"}) for i in range(3)]
        await session.append(
            Message.user("go"),
            Message.assistant(tool_calls=calls),
            Marker(name="approval_request", data={"call_id": "c0", "tool": "bash", "reason": "asks by default"}),
            Marker(name="approval_decision", data={"call_id": "c0", "approved": True, "by": "user", "scope": "once"}),
            Message.tool(ToolResultPart(call_id="c0", name="bash", content="ok", metadata={"approval": "approved"})),
            Marker(name="approval_request", data={"call_id": "c1", "tool": "bash", "reason": "asks by default"}),
            Marker(
                name="approval_decision",
                data={"call_id": "c1", "approved": False, "by": "user", "message": "not now"},
            ),
            Message.tool(
                ToolResultPart(
                    call_id="c1",
                    name="bash",
                    content="bash: not run: the user did not allow it, and said: not now",
                    is_error=True,
                    metadata={"error": "denied", "approval": "denied"},
                )
            ),
            Marker(name="approval_request", data={"call_id": "c2", "tool": "bash", "reason": "asks by default"}),
        )
        return session.id

    sid = with_db(db, build)
    out = ok(tether(db, "sessions", "show", sid))
    assert '→ bash(command="step 0")  ✓ approved · ok' in out
    assert '→ bash(command="step 1")  ✗ denied · bash: not run: the user did not allow it, and said: not now' in out
    assert '→ bash(command="step 2")  ⏳ waiting for approval' in out
    assert "? approval asked for bash: asks by default" in out
    assert "✓ approved by user" in out and "✗ denied by user: not now" in out


@pytest.mark.slow
def test_sessions_at_80_columns_a_row_a_session_and_the_id_whole(db: Path, terminal80: Any) -> None:
    long = "Please find out why the parser drops the last line of every file it reads, then fix it with a test"

    async def make(store: Store) -> list[str]:
        ids = []
        for i in range(3):
            session = await Session.create(store, directory="/work/a", title=f"{long} ({i})")
            await session.append(Message.user("hi"), Message.assistant("hello"))
            ids.append(session.id)
        return ids

    ids = with_db(db, make)
    screen = terminal80.run("--store", str(db), "sessions", "--all")
    lines = screen.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for sid in ids:
        (row,) = [line for line in lines if sid in line]  # one line each, its id whole
        assert "Please find out why" in row and "…" in row  # the title cut to its line, not wrapped


def test_sessions_retitle_asks_a_real_server_for_a_title(db: Path, cut_model: Any) -> None:
    """`tether sessions retitle ID` against an OpenAI-compatible server on loopback, configured as the README
    says: the session's own model writes the title from its first exchange."""
    cut_model.configure(Path(os.environ["TETHER_HOME"]))

    async def make(store: Store) -> str:
        session = await Session.create(store, directory="/work/a", model="lab/m")
        await store.append(session.id, [Message.user("fix the parser"), Message.assistant("Fixed.")])
        return session.id

    sid = with_db(db, make)
    result = tether(db, "sessions", "retitle", sid[-8:], "--json")
    assert result.exit_code == 0, result.output
    title = "The parser drops the last line because the slice ends one short of"
    assert json.loads(result.stdout) == {"session_id": sid, "title": title}
    assert with_db(db, lambda store: store.get_session(sid)).title == title
    nothing = tether(db, "sessions", "retitle", with_db(db, lambda store: Session.create(store, directory="/w")).id)
    assert nothing.exit_code == 1 and "no exchange to title yet" in nothing.output


# --- revert, and edits under a run ---------------------------------------------------------------------------


def test_revert_hides_what_came_after_and_says_how_to_undo(db: Path) -> None:
    session = with_db(db, coding_session)
    before = with_db(db, lambda s: s.get_session(session.id)).entry_count
    out = ok(tether(db, "sessions", "revert", session.id[-6:], "2", "--reason", "wrong turn"))
    revert_seq = before + 1
    assert f"entry {revert_seq} reverts to entry 2" in out
    undo = f"tether sessions revert {session.id} {revert_seq - 1}"
    assert undo in out
    shown = ok(tether(db, "sessions", "show", session.id))
    assert "wrong turn" in shown and "fix the failing test" in shown and "Fixed it." not in shown
    payload = json.loads(ok(tether(db, "sessions", "revert", session.id, str(revert_seq - 1), "--json")))
    assert payload == {"session_id": session.id, "seq": revert_seq + 1, "to_seq": revert_seq - 1, "reason": None}
    assert "Fixed it." in ok(tether(db, "sessions", "show", session.id))  # back
    failed(tether(db, "sessions", "revert", session.id, "99"), f"has no entry 99 (it has {revert_seq + 1})")
    failed(tether(db, "sessions", "revert", session.id, "-1"), "No such option", code=2)
    failed(tether(db, "sessions", "revert", "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "1"), "no session")


def test_an_archived_session_is_not_reverted(db: Path) -> None:
    """Its journal is in the bucket: a revert journaled into the stub left here would be lost on restore."""
    from tether.runtime.archive import ARCHIVED

    session = with_db(db, coding_session)
    marker = {"bucket": "b", "key": f"sessions/{session.id}.jsonl"}
    with_db(db, lambda s: s.update_session(session.id, metadata={ARCHIVED: marker}))
    failed(tether(db, "sessions", "revert", session.id, "1"), "is archived in s3://b/")
    assert with_db(db, lambda s: s.get_session(session.id)).entry_count == 6


def test_edits_are_refused_while_a_run_holds_the_session(db: Path, tmp_path: Path) -> None:
    """Deleting, reverting or compacting a session under a run (the server's answer is 409): the run would
    go on writing to a session that is gone, or under a history changed beneath it."""
    import socket

    session = with_db(db, coding_session)
    holds = lambda s: s.acquire_lease(session.id, "run_live", ttl=600, pid=os.getpid(), host=socket.gethostname())  # noqa: E731
    with_db(db, holds)
    for args in (
        ("sessions", "rm", "--yes", session.id),
        ("sessions", "revert", session.id, "1"),
        ("compact", session.id, "--mechanical"),
        ("compact", session.id, "--undo"),
    ):
        failed(tether(db, *args), "is busy: run run_live")
    info = with_db(db, lambda s: s.get_session(session.id))
    assert info.entry_count == 6 and (with_db(db, lambda s: s.get_lease(session.id))).holder == "run_live"
    with_db(db, lambda s: s.release_lease(session.id, "run_live"))
    assert "Deleted" in ok(tether(db, "sessions", "rm", "--yes", session.id))


@pytest.mark.parametrize(
    "args",
    [
        ("sessions",),
        ("sessions", "show", "abcdef"),
        ("sessions", "export", "abcdef"),
        ("recall", "x"),
        ("context", "abcdef"),
    ],
)
def test_a_read_of_a_named_database_that_is_not_there_makes_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A typo in --store (or TETHER_STORE) made its folders and a new empty database, and said "No sessions":
    it looked like lost data. A command that only reads now says there is none; a run still makes it."""
    named = tmp_path / "typo" / "dir" / "t.db"
    failed(tether(named, *args), f"there is no tether database at {named}")
    from_env = CliRunner().invoke(cli, list(args), env={"TETHER_STORE": str(named)})
    failed(from_env, f"there is no tether database at {named}")
    assert not (tmp_path / "typo").exists()
