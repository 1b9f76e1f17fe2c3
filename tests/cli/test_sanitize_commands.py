"""Escape sequences stored in a session, sent by a model or a provider, or written in config.toml, through
every command that prints them: click's runner on a real SQLite store (and a scripted provider for the
live view), then a real terminal, tmux, whose screen, title, clipboard and bell must be as they were."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import tether
from tether.cli.main import cli
from tether.errors import ProviderError
from tether.messages import (
    Checkpoint,
    FilePart,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
)
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.store import SqliteStore

# --- what a hostile transcript carries, and what a person must see instead --------------------------------

SEQUENCES = {
    "csi clear": ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
    "csi colour": ("\x1b[31mred", "\\x1b[31mred"),
    "osc 8 link": ("\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", "\\x1b]8;;http://evil\\x1b\\click\\x1b]8;;\\x1b\\"),
    "osc 52 clipboard": ("\x1b]52;c;ZXZpbA==\x07", "\\x1b]52;c;ZXZpbA==\\x07"),
    "osc 0 title": ("\x1b]0;EVIL TITLE\x07", "\\x1b]0;EVIL TITLE\\x07"),
    "bell": ("ding\x07", "ding\\x07"),
    "backspace": ("abc\x08\x08XY", "abc\\x08\\x08XY"),
    "carriage return": ("progress 10%\rDONE", "progress 10%\\rDONE"),
    "c1": ("\x9b2J\x9d0;c1title\x9c", "\\x9b2J\\x9d0;c1title\\x9c"),
}
HOSTILE = "\n".join(raw for raw, _ in SEQUENCES.values())
"""Every sequence, one a line (so that no line is long enough for the renderer to wrap it)."""
SHOWN = [shown for _, shown in SEQUENCES.values()]
OSC0, OSC0_SHOWN = SEQUENCES["osc 0 title"]
CSI, CSI_SHOWN = SEQUENCES["csi clear"]
OSC52, OSC52_SHOWN = SEQUENCES["osc 52 clipboard"]
C1, C1_SHOWN = SEQUENCES["c1"]

# C0 but \n and \t, DEL, C1: what no text for people may hold once printed
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """`text` holds no control character a terminal would obey; returns it for further checks."""
    found = RAW_CONTROL.search(text)
    assert found is None, (
        f"raw {found.group()!r} at {found.start()}: {text[max(0, found.start() - 60) : found.end() + 60]!r}"
    )
    return text


def shows_all(text: str) -> None:
    missing = [s for s in SHOWN if s not in text]
    assert not missing, f"not shown escaped: {missing}\n{text}"


def tether_cli(db: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args], input=input, env={"COLUMNS": "200"})


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


async def _hostile_session(db: Path) -> str:
    async with SqliteStore(db) as store:
        info = await store.create_session(directory=f"/work/{OSC0}proj", model=f"scripted/m{CSI}")
        await store.append(
            info.id,
            [
                Message(
                    role="user", parts=[TextPart(text=HOSTILE), FilePart(media_type="text/plain", name=f"f{OSC0}")]
                ),
                Message(
                    role="assistant",
                    model=f"model{OSC52}",
                    parts=[
                        ThinkingPart(text=HOSTILE),
                        TextPart(text=HOSTILE),
                        ToolCallPart(id="c1", name=f"read{CSI}", arguments={"path": f"a{C1}"}),
                        ToolCallPart(id="c2", name="bash", arguments={"command": "make"}),
                    ],
                ),
                Message.tool(
                    ToolResultPart(call_id="c1", content=f"ok {C1}"),
                    ToolResultPart(call_id="c2", content=f"collected\nE {OSC52}", is_error=True),
                    ToolResultPart(call_id="elsewhere", name=f"orphan{OSC0}", content="fine"),
                ),
                Message.assistant(f"a detour {CSI}"),
            ],
        )
        await store.append(
            info.id,
            [
                Revert(to_seq=3, reason=f"undo {OSC0}"),
                Checkpoint(objective="goal", next_action=f"next {OSC52}", steps=3),
                Marker(name=f"mark{C1}"),
                TitleChange(title=f"{OSC0}t"),
            ],
        )
        return info.id


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tether.db"


@pytest.fixture
def sid(db: Path) -> str:
    return asyncio.run(_hostile_session(db))


# --- sessions ----------------------------------------------------------------------------------------------


def test_sessions_list_escapes_titles_and_directories(db: Path, sid: str) -> None:
    out = inert(ok(tether_cli(db, "sessions", "--all")).stdout)
    assert f"{OSC0_SHOWN}t" in out and f"/work/{OSC0_SHOWN}proj" in out


def test_sessions_show_escapes_every_part(db: Path, sid: str) -> None:
    out = inert(ok(tether_cli(db, "sessions", "show", sid)).stdout)
    shows_all(out)  # the user's text and the assistant's
    assert f"{OSC0_SHOWN}t" in out and f"/work/{OSC0_SHOWN}proj" in out  # title, directory
    assert f"model{OSC52_SHOWN}" in out  # the answer's model
    assert f"f{OSC0_SHOWN}" in out  # an attachment's name
    assert f"read{CSI_SHOWN}" in out and C1_SHOWN in out  # a tool call, its argument, its result
    assert f"E {OSC52_SHOWN}" in out  # an error result's last line
    assert f"orphan{OSC0_SHOWN}" in out  # a result without its call
    assert f"undo {OSC0_SHOWN}" in out and f"next {OSC52_SHOWN}" in out and f"mark{C1_SHOWN}" in out  # markers
    assert f"title → {OSC0_SHOWN}t" in out


def test_sessions_show_raw_shows_reverted_entries_escaped(db: Path, sid: str) -> None:
    out = inert(ok(tether_cli(db, "sessions", "show", sid, "--raw")).stdout)
    assert f"a detour {CSI_SHOWN}" in out and "[reverted]" in out


def test_sessions_show_json_keeps_the_original_characters(db: Path, sid: str) -> None:
    out = ok(tether_cli(db, "sessions", "show", sid, "--json")).stdout
    inert(out)  # every control is a JSON escape: \u001b, and \u009b for C1
    data = json.loads(out)
    assert data["session"]["title"] == f"{OSC0}t" and data["session"]["directory"] == f"/work/{OSC0}proj"
    texts = [
        p["text"] for e in data["entries"] if e["body"]["kind"] == "message" for p in e["body"]["parts"] if "text" in p
    ]
    assert texts[:3] == [HOSTILE, HOSTILE, HOSTILE]  # the user's text, the thinking, the answer: exact
    assert "\\u001b]0;EVIL TITLE\\u0007" in out and "\\u009b2J" in out


def test_sessions_export_to_a_file_or_pipe_keeps_the_bytes(db: Path, sid: str, tmp_path: Path) -> None:
    target = tmp_path / "t.md"
    ok(tether_cli(db, "sessions", "export", sid, "-f", "markdown", "-o", str(target)))
    assert HOSTILE in target.read_bytes().decode()  # (read_text would turn the \r into \n)
    piped = ok(tether_cli(db, "sessions", "export", sid, "-f", "markdown")).stdout  # not a terminal: exact
    assert HOSTILE in piped
    exported = json.loads(ok(tether_cli(db, "sessions", "export", sid)).stdout)
    assert exported["session"]["title"] == f"{OSC0}t"


def test_rm_and_import_name_the_title_escaped(db: Path, sid: str, tmp_path: Path) -> None:
    result = tether_cli(db, "sessions", "rm", sid, input="n\n")
    assert result.exit_code == 1  # declined
    assert f"{OSC0_SHOWN}t" in inert(result.output)
    dump = tmp_path / "s.json"
    ok(tether_cli(db, "sessions", "export", sid, "-o", str(dump)))
    out = inert(ok(tether_cli(db, "sessions", "import", str(dump), "--new-id")).stdout)
    assert f"{OSC0_SHOWN}t" in out


# --- recall, context, compact, models, the error line ------------------------------------------------------


def test_recall_escapes_excerpts_titles_and_neighbours(db: Path, sid: str) -> None:
    out = inert(ok(tether_cli(db, "recall", "--all", "--context", "2", "progress clipboard")).stdout)
    assert "progress 10%" in out  # the excerpt (whitespace folded: the CR became a space where it split)
    assert OSC52_SHOWN in out and f"{OSC0_SHOWN}t" in out and f"/work/{OSC0_SHOWN}proj" in out


def test_context_previews_are_escaped(db: Path, sid: str) -> None:
    out = inert(ok(tether_cli(db, "context", sid, "--all", "--model", "openai/gpt-4.1")).stdout)
    assert CSI_SHOWN in out and f"ok {C1_SHOWN}" in out  # the user's turn, a tool result


@pytest.fixture
def failing_summarizer(monkeypatch: pytest.MonkeyPatch) -> ScriptedProvider:
    """The model a compaction asks: named with an escape sequence, and failing with one in its error."""
    provider = ScriptedProvider(name="scripted")
    provider.add(ProviderError(f"overloaded {OSC0}", provider="scripted"))

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider=provider, model=f"summ{CSI}", info=unknown_model("scripted", "summ"))

    monkeypatch.setattr("tether.runtime.operations.resolve_provider", resolve)
    return provider


def test_compact_escapes_the_summarizer_and_its_error(db: Path, sid: str, failing_summarizer: ScriptedProvider) -> None:
    result = tether_cli(db, "compact", sid, "--keep", "1", "--model", "openai/gpt-4.1")
    out = inert(result.output)
    assert f"with scripted/summ{CSI_SHOWN}" in out and f"overloaded {OSC0_SHOWN}" in out, out


def test_models_escapes_names_from_the_config(tmp_path: Path) -> None:
    config = Path(os.environ["TETHER_HOME"]) / "config.toml"
    config.write_text(
        'default_model = "openai/evil\\u001b]0;T\\u0007[bold]x"\n'
        '[models."openai/evil\\u001b]0;T\\u0007[bold]x"]\ncontext_window = 1000\nmax_output_tokens = 100\n'
    )
    out = inert(ok(tether_cli(tmp_path / "x.db", "models", "-p", "openai")).stdout)
    # shown escaped, and the brackets not taken for rich markup
    assert "openai/evil\\x1b]0;T\\x07[bold]x" in out
    assert "default: openai/evil\\x1b]0;T\\x07[bold]x" in out
    data = json.loads(ok(tether_cli(tmp_path / "x.db", "models", "--json")).stdout)
    assert data["default"] == "openai/evil\x1b]0;T\x07[bold]x"


def test_the_error_line_escapes_what_it_quotes(tmp_path: Path) -> None:
    missing = tmp_path / f"gone{OSC0}" / "deeper"
    result = tether_cli(tmp_path / "x.db", "run", "--dir", str(missing), "hi")
    assert result.exit_code == 2
    assert f"gone{OSC0_SHOWN}" in inert(result.stderr) and result.stderr.startswith("error: ")


# --- run and chat: the live view ---------------------------------------------------------------------------


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedProvider:
    provider = ScriptedProvider(name="scripted")

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider=provider, model=model or "test", info=unknown_model("scripted", "test"))

    monkeypatch.setattr("tether.runtime.launch.resolve_provider", resolve)
    return provider


def hostile_turns(provider: ScriptedProvider) -> None:
    """An answer thinking and saying every sequence and calling tools named and argued with them, then a
    provider error that quotes one."""
    provider.add(
        Message(
            role="assistant",
            parts=[
                ThinkingPart(text=HOSTILE + "\n[bold]not markup[/bold]"),
                TextPart(text=HOSTILE),
                ToolCallPart(id="c1", name="read", arguments={"path": f"missing{OSC0}"}),
                ToolCallPart(id="c2", name=f"nosuch{CSI}", arguments={f"k{OSC52}": 1}),
            ],
        ),
        ProviderError(f"the provider says {OSC52}", provider="scripted"),
    )


def test_run_live_view_escapes_text_thinking_tools_and_errors(tmp_path: Path, scripted: ScriptedProvider) -> None:
    hostile_turns(scripted)
    result = tether_cli(tmp_path / "x.db", "run", "--dir", str(tmp_path), "hi")
    assert result.exit_code == 1  # the provider's error ends it
    out, err = inert(result.stdout), inert(result.stderr)
    shows_all(out)  # the text deltas
    shows_all(err)  # the thinking deltas
    assert "[bold]not markup[/bold]" in err
    assert f"missing{OSC0_SHOWN}" in err  # read's label, and its error preview
    assert f"nosuch{CSI_SHOWN}" in err and f"k{OSC52_SHOWN}" in err  # an unknown tool's label
    assert f"the provider says {OSC52_SHOWN}" in err


def test_run_json_keeps_the_original_characters(tmp_path: Path, scripted: ScriptedProvider) -> None:
    hostile_turns(scripted)
    result = tether_cli(tmp_path / "x.db", "run", "--json", "--dir", str(tmp_path), "hi")
    inert(result.stdout)  # controls as JSON escapes, C1 included
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == HOSTILE
    assert any(e.get("name") == f"nosuch{CSI}" for e in events)
    assert events[-1]["type"] == "error" and OSC52 in events[-1]["message"]


def test_a_line_ending_split_across_deltas_stays_a_line_ending(tmp_path: Path, scripted: ScriptedProvider) -> None:
    scripted.chunk_size = 8
    scripted.add("1234567\r\nabc\rxyz")  # the first chunk ends between \r and \n
    out = inert(ok(tether_cli(tmp_path / "x.db", "run", "--dir", str(tmp_path), "hi")).stdout)
    assert "1234567\nabc\\rxyz" in out


def test_chat_escapes_the_answer(tmp_path: Path, scripted: ScriptedProvider) -> None:
    scripted.add(HOSTILE)
    result = tether_cli(tmp_path / "x.db", "chat", "--dir", str(tmp_path), input="hello\n/exit\n")
    assert result.exit_code == 0, result.output
    shows_all(inert(result.stdout))
    inert(result.stderr)


def test_rlm_answer_into_a_pipe_stays_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = ScriptedProvider(lambda request: f"answer {OSC0}")
    monkeypatch.setattr(
        "tether.providers.registry.resolve_provider",
        lambda model=None, **_: ResolvedModel(provider=provider, model="m", info=unknown_model("scripted", "m")),
    )
    source = tmp_path / "notes.txt"
    source.write_text("some notes\n" * 50)
    result = CliRunner().invoke(cli, ["rlm", str(source), "what?", "--mode", "map-reduce"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"answer {OSC0}\n"  # the document this command makes, into a pipe: exact
    inert(result.stderr)


# --- a real terminal ---------------------------------------------------------------------------------------

DRIVER = """
import sys
import tether.providers.registry
import tether.runtime.launch
from tether.cli.main import cli
from tether.messages import Message, TextPart, ThinkingPart, ToolCallPart
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider

if "rlm" in sys.argv:  # every call of the map-reduce answers the same
    provider = ScriptedProvider(lambda request: {hostile!r})
else:
    provider = ScriptedProvider([
        Message(role="assistant", parts=[
            ThinkingPart(text={hostile!r}),
            TextPart(text={hostile!r}),
            ToolCallPart(id="c1", name="read", arguments={{"path": {missing!r}}}),
        ]),
        {hostile!r},
    ])


def resolve(model=None, **_):
    return ResolvedModel(provider=provider, model="test", info=unknown_model("scripted", "test"))


tether.runtime.launch.resolve_provider = tether.providers.registry.resolve_provider = resolve
cli(sys.argv[1:], prog_name="tether")
"""
"""`tether` with its provider swapped for a scripted one, as a program a terminal can run."""


class Terminal:
    """A tmux server of its own: window 0 idle (so that a bell in window 1 raises its flag), window 1 runs
    a script, with everything the terminal receives copied to a file by `pipe-pane`."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.socket = str(where / "tmux.sock")
        # tall enough that nothing scrolls away, and a cleared screen is not kept in the history
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "150", "-s", "t", "sh")
        # tmux 3.3 added scroll-on-clear (keep a cleared screen in the history); before it, nothing is kept
        subprocess.run(["tmux", "-S", self.socket, "set", "-g", "scroll-on-clear", "off"], capture_output=True)
        self.tmux("set", "-g", "set-clipboard", "on")  # an OSC 52 write would make a paste buffer
        self.tmux("set", "-g", "monitor-bell", "on")
        self.tmux("set", "-g", "bell-action", "any")

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, check=True).stdout

    def run(self, *commands: str) -> tuple[str, bytes]:
        """Run `commands` (shell lines) in window 1 after printing a marker line; return the screen and
        the bytes the terminal received."""
        start, raw = self.where / "start", self.where / "raw"
        script = self.where / "go.sh"
        body = "\n".join(commands)
        # COLUMNS and LINES, when the test's environment has them, would fix rich's width instead of the pane's
        script.write_text(
            f"unset COLUMNS LINES\nwhile [ ! -e {start} ]; do sleep 0.05; done\necho MARKER-BEFORE\n{body}\n"
            "echo __DONE__\nexec sleep 600\n"
        )
        self.tmux("new-window", "-d", "-t", "t:1", f"sh {script}")
        self.title = self.pane("#{pane_title}")
        self.tmux("pipe-pane", "-o", "-t", "t:1", f"cat >> {raw}")
        start.touch()
        deadline = time.monotonic() + 120
        while not (raw.exists() and b"__DONE__" in raw.read_bytes()):
            assert time.monotonic() < deadline, f"the command did not finish:\n{self.screen()}"
            time.sleep(0.1)
        return self.screen(), raw.read_bytes()

    def pane(self, fmt: str) -> str:
        return self.tmux("display", "-p", "-t", "t:1", fmt).strip()

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-e", "-S", "-", "-t", "t:1")

    def check_untouched(self, screen: str, raw: bytes) -> None:
        """Nothing the command printed was obeyed: the screen was not cleared, the title, clipboard and bell
        are as they were, and no OSC, BEL, BS, screen clear or C1 reached the terminal at all."""
        assert "MARKER-BEFORE" in screen, f"the screen was cleared:\n{screen}"
        assert self.pane("#{pane_title}") == self.title, "the window title was changed"
        assert self.tmux("list-buffers") == "", "the clipboard was written (OSC 52)"
        assert self.pane("#{window_bell_flag}") == "0", "the bell rang"
        for bad in (b"\x1b]", b"\x07", b"\x08", b"\x1b[2J", b"\x1b[H", b"\r" + b"DONE"):
            assert bad not in raw, f"{bad!r} reached the terminal"
        assert re.search(b"\xc2[\x80-\x9f]", raw) is None, "a C1 control reached the terminal"

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for the real-terminal tests: install it (apt-get install -y tmux)")
    term = Terminal(tmp_path)
    try:
        yield term
    finally:
        term.close()


def _shell(*args: str) -> str:
    """A shell line that runs `python -m tether ARGS` on this checkout's sources."""
    src = Path(tether.__file__).resolve().parents[1]
    return " ".join(
        [f"PYTHONPATH={_quote(str(src))}", _quote(sys.executable), "-m", "tether", *(_quote(a) for a in args)]
    )


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"


TERMINAL_CASES: dict[str, tuple[list[str], list[str]]] = {
    # name: (the tether arguments, after --store DB; what must be on the screen)
    "sessions show": (["sessions", "show", "{sid}"], [*SHOWN, f"{OSC0_SHOWN}t"]),
    "sessions list": (["sessions", "--all"], [f"{OSC0_SHOWN}t", f"/work/{OSC0_SHOWN}proj"]),
    "export markdown": (["sessions", "export", "{sid}", "-f", "markdown"], SHOWN),
    # JSON keeps its value: controls as \u escapes, C1 included, whatever the terminal makes of raw C1
    "export json": (["sessions", "export", "{sid}"], ["\\u001b]0;EVIL TITLE\\u0007", "\\u009b2J"]),
    "show json": (["sessions", "show", "{sid}", "--json"], ["\\u001b]0;EVIL TITLE\\u0007", "\\u009b2J"]),
    "recall": (["recall", "--all", "progress"], [OSC52_SHOWN, f"{OSC0_SHOWN}t"]),
    "context": (["context", "{sid}", "--model", "openai/gpt-4.1"], [CSI_SHOWN]),
    "error line": (["run", "--dir", f"/nowhere/{OSC0}", "hi"], [f"/nowhere/{OSC0_SHOWN}"]),
}


@pytest.mark.parametrize("case", TERMINAL_CASES)
def test_a_real_terminal_obeys_nothing_a_command_prints(
    case: str, terminal: Terminal, db: Path, sid: str, tmp_path: Path
) -> None:
    args, expected = TERMINAL_CASES[case]
    home = tmp_path / "home"
    home.mkdir()
    line = f"TETHER_HOME={_quote(str(home))} " + _shell("--store", str(db), *(a.format(sid=sid) for a in args))
    screen, raw = terminal.run(line)
    terminal.check_untouched(screen, raw)
    missing = [e for e in expected if e not in screen]
    assert not missing, f"not on the screen: {missing}\n{screen}"


@pytest.mark.parametrize("command", ["run", "rlm"])
def test_a_real_terminal_obeys_nothing_a_model_says(command: str, terminal: Terminal, tmp_path: Path) -> None:
    """The live view of `run` (text, thinking, a tool's label and its error) and the answer of `rlm`."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(hostile=HOSTILE, missing=f"missing{OSC0}"))
    src = Path(tether.__file__).resolve().parents[1]
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("some notes\n" * 50)
    args = ["run", "--dir", str(work), "hi"] if command == "run" else ["rlm", str(work / "notes.txt"), "what?"]
    line = (
        f"TETHER_HOME={_quote(str(tmp_path))} PYTHONPATH={_quote(str(src))} {_quote(sys.executable)} "
        f"{_quote(str(driver))} --store {_quote(str(tmp_path / 'run.db'))} " + " ".join(_quote(a) for a in args)
    )
    if command == "rlm":
        line += " --mode map-reduce"
    screen, raw = terminal.run(line)
    terminal.check_untouched(screen, raw)
    expected = [*SHOWN, f"missing{OSC0_SHOWN}"] if command == "run" else SHOWN
    missing = [e for e in expected if e not in screen]
    assert not missing, f"not on the screen: {missing}\n{screen}"
