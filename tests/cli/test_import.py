"""`tether import`: paths and folders, each tool's own folder (found through CLAUDE_CONFIG_DIR and
CODEX_HOME), --dir, --since, --dry-run, --json, what it says of a file it cannot read, and its exit status."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tether.cli.importing import parse_since
from tether.cli.main import cli
from tether.importers.foreign_export import session_uuid

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
ROLLOUT = "rollout-2025-09-20T10-00-00-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.jsonl"


def claude_line(uuid: str, parent: str | None, text: str, cwd: str, sid: str) -> dict[str, Any]:
    return {
        "parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": sid,
        "version": "1.0.80", "type": "user", "uuid": uuid, "timestamp": "2025-08-01T10:00:00Z",
        "message": {"role": "user", "content": text},
    }  # fmt: skip


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    claude = tmp_path / "claude"
    codex = tmp_path / "codex"
    for sid, cwd in (
        ("11111111-1111-4111-8111-111111111111", "/work/app"),
        ("22222222-2222-4222-8222-222222222222", "/work/other"),
    ):
        project = claude / "projects" / cwd.replace("/", "-")
        project.mkdir(parents=True, exist_ok=True)
        (project / f"{sid}.jsonl").write_text(json.dumps(claude_line("u1", None, f"hello from {cwd}", cwd, sid)) + "\n")
    day = codex / "sessions" / "2025" / "09" / "20"
    day.mkdir(parents=True)
    shutil.copy(FIXTURES / ROLLOUT, day / ROLLOUT)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("CODEX_HOME", str(codex))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # no opencode here unless a test puts it
    return {"claude": claude, "codex": codex, "db": tmp_path / "t.db", "xdg": tmp_path / "xdg"}


def run(homes: dict[str, Path], *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(homes["db"]), "import", *args], env=dict(os.environ))


def test_all_imports_both_tools_and_again_nothing(homes: dict[str, Path]) -> None:
    first = run(homes, "--all", "--json")
    assert first.exit_code == 0, first.output
    report = json.loads(first.output)
    assert report["outcomes"] == {"imported": 3}
    assert sorted(f["format"] for f in report["files"]) == ["claude-code", "claude-code", "codex"]
    again = run(homes, "--all")
    assert again.exit_code == 0 and "3 files: 3 unchanged; wrote 0 entries." in again.output
    listed = CliRunner().invoke(cli, ["--store", str(homes["db"]), "sessions", "--all", "--json"])
    assert len(json.loads(listed.output)) == 3


def test_dir_since_and_dry_run(homes: dict[str, Path]) -> None:
    only = run(homes, "--from", "claude-code", "--dir", "/work/app", "--dry-run", "--json")
    assert only.exit_code == 0, only.output
    report = json.loads(only.output)
    assert [f["outcome"] for f in report["files"]] == ["would import"] and report["dry_run"] is True
    assert "/work/app" in report["files"][0]["path"].replace("-", "/")
    listed = CliRunner().invoke(cli, ["--store", str(homes["db"]), "sessions", "--all", "--json"])
    assert json.loads(listed.output) == []  # a dry run writes nothing
    codex_only = json.loads(run(homes, "--from", "codex", "--dir", "/home/dev/project", "--json").output)
    assert [f["format"] for f in codex_only["files"]] == ["codex"]
    old = time.time() - 10 * 86400
    for path in homes["claude"].rglob("*.jsonl"):
        os.utime(path, (old, old))
    recent = json.loads(run(homes, "--from", "claude-code", "--since", "2d", "--json").output)
    assert recent["files"] == []
    nothing = run(homes, "--from", "claude-code", "--since", "2d")
    assert "Nothing to import: no transcripts found in" in nothing.output


def test_paths_detect_each_format_and_report_bad_files(homes: dict[str, Path], tmp_path: Path) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"event": "something", "n": 1}\n')
    bad_line = tmp_path / "c.jsonl"
    good = claude_line("u1", None, "hi", "/work/app", "33333333-3333-4333-8333-333333333333")
    bad_line.write_text(json.dumps(good) + "\n{oops\n")
    result = run(homes, str(FIXTURES / ROLLOUT), str(odd), str(bad_line))
    assert result.exit_code == 1  # one file could not be imported at all
    assert "failed" in result.output and str(odd) in result.output
    assert "not a Claude Code transcript, a Codex rollout or a tether export" in result.output
    assert "line 1 is a JSON object with keys event, n" in result.output
    assert f"warning: {bad_line}:2: not JSON" in result.output
    assert "imported  codex" in result.output and "imported  claude-code" in result.output


def test_usage_errors(homes: dict[str, Path]) -> None:
    assert run(homes).exit_code == 2 and "say what to import" in run(homes).output
    both = run(homes, "--all", str(homes["claude"]))
    assert both.exit_code == 2 and "not both" in both.output
    assert run(homes, "--from", "tether").exit_code == 2
    assert run(homes, "--all", "--since", "yesterday-ish").exit_code == 2


def test_parse_since() -> None:
    assert parse_since("7d", now=1_000_000.0) == 1_000_000.0 - 7 * 86400
    assert parse_since("90m", now=1_000_000.0) == 1_000_000.0 - 5400
    assert parse_since("2025-06-01T00:00:00Z") == 1748736000.0


def test_help_explains_sources_and_reimport() -> None:
    out = CliRunner().invoke(cli, ["import", "--help"]).output
    assert "--from" in out and "~/.claude/projects" in out and "~/.codex/sessions" in out
    assert "Importing again is safe" in out


OPENCODE_DB = Path(__file__).resolve().parents[1] / "fixtures" / "opencode" / "opencode-1.18.33.db"


def test_opencode_from_its_data_folder_and_as_a_path(homes: dict[str, Path]) -> None:
    data = homes["xdg"] / "opencode"
    data.mkdir(parents=True)
    shutil.copy(OPENCODE_DB, data / "opencode.db")
    dry = run(homes, "--from", "opencode", "--dry-run", "--dir", "/tmp/oc/proj")
    assert dry.exit_code == 0, dry.output
    assert "7 sessions: 7 would import; would write 30 entries." in dry.output
    first = run(homes, "--all", "--json")
    report = json.loads(first.output)
    assert report["outcomes"] == {"imported": 10}  # two Claude Code files, a Codex rollout, 7 opencode sessions
    assert sum(f["format"] == "opencode" for f in report["files"]) == 7
    again = run(homes, str(data / "opencode.db"))  # the database as a path: its format detected
    assert again.exit_code == 0 and "7 sessions: 7 unchanged; wrote 0 entries." in again.output
    elsewhere = run(homes, "--from", "opencode", "--dir", "/nowhere")
    assert elsewhere.exit_code == 0 and "Nothing to import" in elsewhere.output


def test_a_database_that_is_not_opencodes_says_what_it_holds(homes: dict[str, Path], tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (id TEXT)")
    result = run(homes, str(other))
    assert result.exit_code == 1
    assert "is not opencode's database: it has no table session, message, part (tables: notes)" in result.output


def _entry_count(db: Path) -> int:
    import asyncio

    from tether.store import SqliteStore

    async def count() -> int:
        if not db.exists():
            return 0
        async with SqliteStore(db) as store:
            return sum(s.entry_count for s in (await store.list_sessions(limit=100)).items)

    return asyncio.run(count())


def _wait_for(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_watch_imports_what_is_appended_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    import tether

    folder = tmp_path / "sessions"
    folder.mkdir()
    transcript = folder / "11111111-1111-4111-8111-111111111111.jsonl"
    sid = "11111111-1111-4111-8111-111111111111"
    transcript.write_text(json.dumps(claude_line("u1", None, "first", "/work/app", sid)) + "\n")
    db = tmp_path / "t.db"
    env = {
        **os.environ,
        "TETHER_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(Path(tether.__file__).resolve().parents[1]),
    }
    argv = [sys.executable, "-m", "tether", "--store", f"sqlite:///{db}", "import", "--watch", "--interval", "0.2"]
    proc = subprocess.Popen(
        [*argv, str(folder)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: _entry_count(db) == 1, "the first import")
        line = json.dumps(claude_line("u2", "u1", "second", "/work/app", sid)) + "\n"
        with transcript.open("a") as f:
            f.write(line[:30])  # the tool is still writing this line
            f.flush()
            time.sleep(1.0)  # rounds pass while the line is cut: it must wait, not be lost or doubled
            assert _entry_count(db) == 1
            f.write(line[30:])
        _wait_for(lambda: _entry_count(db) == 2, "the appended line")
        with transcript.open("a") as f:
            f.write(json.dumps(claude_line("u3", "u2", "third", "/work/app", sid)) + "\n")
        _wait_for(lambda: _entry_count(db) == 3, "the second appended line")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "watching 1 source every 0.2s" in err and "stopped; 3 entries imported while watching" in err
    assert out.count("appended to") == 2 and "imported" in out
    assert "cut short" in err  # the half-written line was reported once, then imported whole
    assert _entry_count(db) == 3


def test_watch_refuses_dry_run(homes: dict[str, Path]) -> None:
    result = run(homes, "--watch", "--dry-run", "--all")
    assert result.exit_code == 2 and "--watch imports" in result.output


def test_an_opencode_export_is_detected(homes: dict[str, Path]) -> None:
    export = Path(__file__).resolve().parents[1] / "fixtures" / "opencode" / "export-1.18.33.json"
    result = run(homes, str(export))
    assert result.exit_code == 0, result.output
    assert "1 session: 1 imported; wrote 6 entries." in result.output


def test_an_installed_export_comes_back_as_what_the_tool_added(homes: dict[str, Path], tmp_path: Path) -> None:
    """`sessions export --install`, the session continued in Claude Code, then `import --all`: no copy; the
    turn is appended to the original; said in words and in --json."""
    import asyncio

    from tether import SqliteStore
    from tether.messages import Message

    async def make() -> str:
        async with SqliteStore(homes["db"]) as store:
            info = await store.create_session(directory=str(tmp_path / "proj"), title="the work")
            await store.append(info.id, [Message.user("start"), Message.assistant("started")])
            return info.id

    sid = asyncio.run(make())
    store_args = ["--store", str(homes["db"])]
    env = dict(os.environ)
    for fmt in ("claude-code", "codex"):
        exported = CliRunner().invoke(cli, [*store_args, "sessions", "export", sid, "-f", fmt, "--install"], env=env)
        assert exported.exit_code == 0, exported.output
    first = run(homes, "--all")
    assert first.exit_code == 0, first.output
    assert f"exported from tether session {sid}, unchanged" in first.output
    summary = first.output.splitlines()[-1]  # the fixtures, and no copy of the exports
    assert summary.startswith("5 files: ") and "3 imported" in summary and "2 unchanged" in summary
    (installed,) = (homes["claude"] / "projects").rglob(f"{session_uuid(sid)}.jsonl")
    last = [ln for ln in map(json.loads, installed.read_text().splitlines()) if "uuid" in ln][-1]  # not its title
    line = claude_line("u-new", last["uuid"], "go on in Claude Code", last["cwd"], last["sessionId"])
    with installed.open("a") as f:
        f.write(json.dumps(line) + "\n")
    preview = json.loads(run(homes, "--all", "--dry-run", "--json").output)
    (would,) = [f for f in preview["files"] if f["outcome"] != "unchanged"]
    assert would["outcome"] == "would append" and would["session_id"] == sid and would["entries"] == 1
    assert (
        would["note"] == f"exported from tether session {sid}, continued in Claude Code: 1 entry would append to {sid}"
    )
    second = run(homes, "--all")
    assert second.exit_code == 0, second.output
    assert f"continued in Claude Code: 1 entry appended to {sid}" in second.output
    summary = second.output.splitlines()[-1]
    assert "1 appended to" in summary and "4 unchanged" in summary and summary.endswith("wrote 1 entries.")
    listed = CliRunner().invoke(cli, [*store_args, "sessions", "--all", "--json"])
    assert len(json.loads(listed.output)) == 4  # three imported, and the original: no copies
    shown = CliRunner().invoke(cli, [*store_args, "sessions", "show", sid, "--json"])
    assert "go on in Claude Code" in shown.output
    assert "unchanged" in run(homes, "--all").output.splitlines()[-1]


def test_from_is_never_weaker_than_detection(homes: dict[str, Path], tmp_path: Path) -> None:
    """A folder of `opencode export` files with --from opencode; the first Codex CLI's JSON rollout by name
    and in a folder with --from codex; a file of another tool with --from codex says so and imports nothing."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    exports = tmp_path / "exports"
    exports.mkdir()
    shutil.copy(fixtures / "opencode" / "export-1.18.33.json", exports / "one.json")
    detected = run(homes, "--dry-run", str(exports))
    named = run(homes, "--from", "opencode", "--dry-run", str(exports))
    assert detected.exit_code == named.exit_code == 0, named.output
    assert "1 would import" in detected.output and "1 would import" in named.output
    rollouts = tmp_path / "sessions"
    rollouts.mkdir()
    json_rollout = "rollout-2025-04-22-7f3e9a10-4c2b-4d8e-9a1f-2b3c4d5e6f70.json"
    shutil.copy(fixtures / "codex" / json_rollout, rollouts / json_rollout)
    folder = run(homes, "--from", "codex", "--json", str(rollouts))
    assert folder.exit_code == 0, folder.output
    assert json.loads(folder.output)["outcomes"] == {"imported": 1}
    by_name = run(homes, str(rollouts / json_rollout))
    assert by_name.exit_code == 0 and "unchanged" in by_name.output
    wrong = run(homes, "--from", "codex", str(next((homes["claude"] / "projects").rglob("*.jsonl"))))
    assert wrong.exit_code != 0 and "not a Codex rollout" in wrong.output


def test_opencodes_older_storage_is_found_at_each_of_its_depths(homes: dict[str, Path], tmp_path: Path) -> None:
    """The JSON folder of opencode 1.1.65 placed as a project's older storage (`project/<name>/storage`),
    named by the data folder, the `project` folder, the project's folder or the storage folder itself."""
    data = tmp_path / "share" / "opencode"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "opencode" / "storage-1.1.65",
                    data / "project" / "app" / "storage")  # fmt: skip
    want = None
    for where in (data, data / "project", data / "project" / "app", data / "project" / "app" / "storage"):
        result = run(homes, "--dry-run", "--json", str(where))
        assert result.exit_code == 0, (where, result.output)
        got = json.loads(result.output)["outcomes"]
        want = want or got
        assert got == want and got.get("would import", 0) >= 5, (where, got)
        assert run(homes, "--from", "opencode", "--dry-run", "--json", str(where)).output == result.output


def test_errors_and_images_show_in_show_and_in_the_exports(homes: dict[str, Path], tmp_path: Path) -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code" / "projects" / "-home-dev-app"
    imported = run(homes, "--json", str(fixtures))
    assert imported.exit_code == 0, imported.output
    sid = json.loads(imported.output)["files"][0]["session_id"]
    store = ["--store", str(homes["db"])]
    show = CliRunner().invoke(cli, [*store, "sessions", "show", sid], env=dict(os.environ))
    assert show.exit_code == 0, show.output
    assert "✗ error: API error 529: overloaded_error: Overloaded (retry 1 of 10 in 1.1 s)" in show.output
    assert '✗ error: API Error: 529 {"type":"error"' in show.output
    assert "✓ 1 image" in show.output
    for fmt, says in (("markdown", "> ✗ **Error**: API error 529"), ("html", "✗ Error: API error 529")):
        out = tmp_path / f"page.{fmt}"
        export = CliRunner().invoke(cli, [*store, "sessions", "export", sid, "-f", fmt, "-o", str(out)])
        assert export.exit_code == 0, export.output
        assert says in out.read_text(), fmt
