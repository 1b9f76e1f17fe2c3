"""The `tether` group (`cli/main.py`) against every store fault, through real processes of each command:
each ends in one line `error: ...` that names the database and what to do, exit 1, never a traceback
(`--debug` shows one); commands that do not need the store (`models`) are not held up by it."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from tether.errors import StoreCorrupt
from tether.store import SqliteStore


def _load_faults() -> ModuleType:
    path = Path(__file__).parents[1] / "store" / "faults.py"
    spec = importlib.util.spec_from_file_location("tether_store_test_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _load_faults()

TETHER = [sys.executable, "-m", "tether"]


def commands(session: str) -> dict[str, tuple[list[str], str | None]]:
    """name: (arguments, stdin) of every command that reads or writes the store, and `models`."""
    return {
        "sessions": (["sessions", "--all"], None),
        "sessions show": (["sessions", "show", session], None),
        "run": (["run", "--session", session, "--model", "openai/gpt-4o-mini", "--tools", "none", "say hi"], None),
        "recall": (["recall", "--all", "lighthouses"], None),
        "context": (["context", session], None),
        "compact": (["compact", session], None),
        "chat": (["chat", "--session", session, "--model", "openai/gpt-4o-mini"], "hello\n/exit\n"),
        "backup": (["backup", "backup.db"], None),
        "models": (["models"], None),
    }


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    def problems(self, expect: str | None) -> list[str]:
        """What is wrong with this outcome: a traceback, an exit other than 0, 1 or 2 (a bad option, such as
        a configuration file that cannot be read), an error that is not one line, or (with `expect`) an error
        without those words."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        found = []
        if "Traceback" in self.stderr:
            found.append("a traceback")
        if self.code not in (0, 1, 2):
            found.append(f"exit {self.code}")
        if self.code in (1, 2):
            if len(lines) != 1 or not lines[0].startswith("error: "):
                found.append(f"not one error line: {lines}")
            elif expect is not None and expect not in lines[0]:
                found.append(f"{expect!r} not in {lines[0]!r}")
        elif expect is not None:
            found.append(f"exit {self.code}, expected the error {expect!r}")
        return found


def run_all(
    argvs: dict[str, tuple[list[str], str | None]], env: dict[str, str], cwd: Path, wrap: Sequence[str] = ()
) -> dict[str, Outcome]:
    """Run the commands side by side (each its own process) and collect what each did."""
    procs = {
        name: subprocess.Popen(
            [*wrap, *TETHER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )
        for name, (args, _) in argvs.items()
    }
    outcomes = {}
    for name, proc in procs.items():
        out, err = proc.communicate(argvs[name][1] or "", timeout=120)
        outcomes[name] = Outcome(proc.returncode, out, err)
    return outcomes


def environment(home: Path) -> dict[str, str]:
    # A key and an endpoint nobody listens on: the model resolves, and no test reaches a network.
    return {
        **os.environ,
        "TETHER_HOME": str(home),
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "COLUMNS": "200",
    }


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def check(outcomes: dict[str, Outcome], expect: str, *, store_free: Sequence[str] = ("models",)) -> None:
    report = {}
    for name, outcome in outcomes.items():
        problems = outcome.problems(None if name in store_free else expect)
        if name in store_free and outcome.code != 0:
            problems.append(f"exit {outcome.code}: {outcome.stderr.strip()}")
        if problems:
            report[name] = problems
    assert not report, report


FAULTS = {
    "truncated": (faults.truncate, "is damaged"),
    "garbage": (faults.garbage, "is not a database or is damaged"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_command_on_a_damaged_database(home: Path, tmp_path: Path, fault: str) -> None:
    ids = faults.build_database(home / "tether.db")
    make, words = FAULTS[fault]
    make(home / "tether.db")
    before = faults.fingerprint(home / "tether.db")
    outcomes = run_all(commands(ids[0]), environment(home), tmp_path)
    check(outcomes, words)
    assert "restore it from a backup" in outcomes["sessions"].stderr
    assert faults.fingerprint(home / "tether.db") == before
    assert not (tmp_path / "backup.db").exists()


def damaged_session(db: Path, ids: list[str]) -> str:
    async def find() -> str:
        async with SqliteStore(db) as store:
            for sid in ids:
                try:
                    await store.read(sid)
                except StoreCorrupt:
                    return sid
        raise AssertionError("no session's entries were damaged")

    return asyncio.run(find())


def test_every_command_on_damaged_pages(home: Path, tmp_path: Path) -> None:
    """The file opens; a command that reads the damaged pages fails with the one line, the others work."""
    ids = faults.build_database(home / "tether.db")
    faults.damage_pages(home / "tether.db")
    sid = damaged_session(home / "tether.db", ids)
    every = commands(sid)
    # compact holds the session for its edit, as a run does: side by side, one of them would meet the other
    compact = {"compact": every.pop("compact")}
    outcomes = run_all(every, environment(home), tmp_path) | run_all(compact, environment(home), tmp_path)
    report = {name: o.problems(None) for name, o in outcomes.items() if o.problems(None)}
    assert not report, report
    for name in ("sessions show", "run", "chat", "context", "compact", "backup"):
        assert outcomes[name].code == 1 and "is damaged" in outcomes[name].stderr, (name, outcomes[name])
    assert outcomes["sessions"].code == 0 and outcomes["models"].code == 0


@pytest.mark.parametrize("with_database", [True, False], ids=["database", "empty"])
def test_every_command_in_a_read_only_home(home: Path, tmp_path: Path, with_database: bool) -> None:
    home.mkdir()
    ids = faults.build_database(home / "tether.db") if with_database else ["ses_01JX0000000000000000000000"]
    with faults.read_only(home):
        outcomes = run_all(commands(ids[0]), environment(home), tmp_path)
    check(outcomes, f"check the permissions of {home}")


def test_every_command_with_a_home_that_is_a_file(home: Path, tmp_path: Path) -> None:
    home.write_text("not a directory")
    outcomes = run_all(commands("ses_01JX0000000000000000000000"), environment(home), tmp_path)
    # `models`, `run` and `chat` read config.toml, under the home, first: they say that in one line (run and
    # chat, as for any unusable option, exit 2)
    check(outcomes, str(home), store_free=())
    assert f"{home} is a file, not a directory" in outcomes["sessions"].stderr
    assert "cannot read config" in outcomes["models"].stderr
    assert home.read_text() == "not a directory"


def test_every_command_on_a_full_disk(tmp_path: Path) -> None:
    faults.needs_small_disk()
    source = tmp_path / "source.db"
    ids = faults.build_database(source, sessions=2, messages=10)
    home = tmp_path / "home"
    home.mkdir()
    setup = f'cp "{source}" tether.db && (cat /dev/zero > filler 2>/dev/null; true)'
    outcomes = run_all(
        commands(ids[0]), environment(home), tmp_path, wrap=faults.small_disk(home, 600, [], setup=setup)
    )
    check(outcomes, "no space left for the database")


def test_debug_shows_the_traceback_and_the_line(home: Path, tmp_path: Path) -> None:
    faults.build_database(home / "tether.db")
    faults.garbage(home / "tether.db")
    proc = subprocess.run(
        [*TETHER, "--debug", "sessions"], capture_output=True, text=True, env=environment(home), cwd=tmp_path
    )
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "sqlite3.DatabaseError: file is not a database" in proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1].startswith("error: the database ")
