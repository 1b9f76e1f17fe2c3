"""`tether sessions export --format claude-code | codex`: to a file, to stdout, or into the tool's own folder
(`--install`, honouring CLAUDE_CONFIG_DIR and CODEX_HOME) with the command that resumes it; what the format
left out said on one line; bad input (an unknown format, a missing session, clashing options, a file there
that differs) in one clear line. Through click's runner on a real SQLite file, then `tether import` of what
was installed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from tether import Message, Session, SqliteStore, ThinkingPart, ToolCallPart, ToolResultPart
from tether.cli.main import cli
from tether.importers.foreign_export import encode_claude_project, session_uuid
from tether.store import Store

T = TypeVar("T")


def with_db(db: Path, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        async with SqliteStore(db) as store:
            return await fn(store)

    return asyncio.run(main())


def tether(db: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args], env=env)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def failed(result: Result, message: str, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert message in result.output, result.output
    return result.output


async def coding_session(store: Store, directory: str) -> Session:
    session = await Session.create(store, directory=directory, model="claude-sonnet-4-5")
    await session.append(
        Message.user("fix the failing test"),
        Message(
            role="assistant",
            model="claude-sonnet-4-5",
            parts=[
                ThinkingPart(text="unsigned reasoning", provider="local"),
                ToolCallPart(id="c1", name="read", arguments={"path": "src/a.py"}),
                ToolCallPart(id="c2", name="bash", arguments={"command": "pytest"}),
            ],
        ),
        Message.tool(
            ToolResultPart(call_id="c1", content="def f():\n    return 1\n", name="read"),
            ToolResultPart(call_id="c2", content="E   AssertionError: 1 != 2", is_error=True, name="bash"),
        ),
        Message.assistant("a detour that gets reverted"),
    )
    await session.revert(3, reason="wrong idea")
    await session.append(Message.assistant("Fixed it."))
    return session


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tether.db"


@pytest.fixture
def homes(tmp_path: Path) -> dict[str, str]:
    return {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude"), "CODEX_HOME": str(tmp_path / "codex")}


def test_to_a_file_and_to_stdout(db: Path, tmp_path: Path) -> None:
    session = with_db(db, lambda s: coding_session(s, str(tmp_path / "calc")))
    out = tmp_path / "s.jsonl"
    result = ok(tether(db, "sessions", "export", session.id, "--format", "claude-code", "-o", str(out)))
    lines = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert lines[0]["message"] == {"role": "user", "content": "fix the failing test"}
    assert "a detour" not in out.read_text()
    said = result.stderr
    assert f"Exported {session.id} (4 entries) as a Claude Code session to {out}" in said
    assert (
        "Claude Code cannot carry everything: left out: reverted entries: 1, "
        "thinking blocks without an Anthropic signature: 1" in said
    )
    uid = session_uuid(session.id)
    assert f"export with --install, then: cd {tmp_path / 'calc'} && claude --resume {uid}" in said
    piped = ok(tether(db, "sessions", "export", session.id[-6:], "-f", "codex"))
    rollout = [json.loads(line) for line in piped.stdout_bytes.splitlines()]
    assert rollout[0]["type"] == "session_meta" and rollout[0]["payload"]["id"] == uid
    assert "as a Codex session" in piped.stderr and f"codex resume {uid}" in piped.stderr


def test_install_puts_it_where_claude_code_looks(db: Path, tmp_path: Path, homes: dict[str, str]) -> None:
    directory = str(tmp_path / "my.app")
    session = with_db(db, lambda s: coding_session(s, directory))
    uid = session_uuid(session.id)
    result = ok(tether(db, "sessions", "export", session.id, "-f", "claude-code", "--install", env=homes))
    target = Path(homes["CLAUDE_CONFIG_DIR"]) / "projects" / encode_claude_project(directory) / f"{uid}.jsonl"
    assert target.is_file() and encode_claude_project(directory).endswith("-my-app")
    assert f"Continue it there: cd {directory} && claude --resume {uid}" in result.stderr
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary file left
    again = ok(tether(db, "sessions", "export", session.id, "-f", "claude-code", "--install", env=homes))
    assert "Already exported, unchanged" in again.stderr
    # continued in Claude Code since: not overwritten without --force, and nothing lost
    with open(target, "ab") as f:
        f.write(b'{"type":"user","message":{"role":"user","content":"more"}}\n')
    grown = target.read_bytes()
    failed(
        tether(db, "sessions", "export", session.id, "-f", "claude-code", "--install", env=homes),
        "exists and differs",
    )
    assert target.read_bytes() == grown
    ok(tether(db, "sessions", "export", session.id, "-f", "claude-code", "--install", "--force", env=homes))
    assert target.read_bytes() != grown and b'"more"' not in target.read_bytes()


def test_install_puts_it_where_codex_looks_and_imports_back(db: Path, tmp_path: Path, homes: dict[str, str]) -> None:
    session = with_db(db, lambda s: coding_session(s, str(tmp_path / "calc")))
    uid = session_uuid(session.id)
    result = ok(tether(db, "sessions", "export", session.id, "-f", "codex", "--install", env=homes))
    (target,) = (Path(homes["CODEX_HOME"]) / "sessions").rglob(f"rollout-*-{uid}.jsonl")
    assert len(target.relative_to(Path(homes["CODEX_HOME"]) / "sessions").parts) == 4  # YYYY/MM/DD/file
    assert f"codex resume {uid}" in result.stderr
    index = [json.loads(line) for line in (Path(homes["CODEX_HOME"]) / "session_index.jsonl").read_text().splitlines()]
    assert index[-1]["id"] == uid and index[-1]["thread_name"] == "fix the failing test"
    other = tmp_path / "other.db"
    ok(tether(other, "import", "--from", "codex", str(target), env=homes))

    async def messages(store: Store) -> list[Any]:
        (info,) = (await store.list_sessions()).items
        return [e.body for e in await store.read(info.id) if isinstance(e.body, Message)]

    got = with_db(other, messages)
    assert [m.role for m in got] == ["user", "assistant", "tool", "tool", "assistant"]
    assert got[-1].text == "Fixed it." and got[3].tool_results[0].is_error


def test_bad_input_says_what_is_wrong(db: Path, tmp_path: Path, homes: dict[str, str]) -> None:
    session = with_db(db, lambda s: coding_session(s, str(tmp_path / "calc")))
    out = failed(tether(db, "sessions", "export", session.id, "-f", "cursor"), "Invalid value for '--format'", 2)
    assert all(name in out for name in ("json", "markdown", "claude-code", "codex"))
    failed(tether(db, "sessions", "export", "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "-f", "codex"), "no session")
    failed(
        tether(db, "sessions", "export", session.id, "-f", "codex", "--install", "-o", str(tmp_path / "x")),
        "either --install or -o FILE",
        2,
    )
    failed(tether(db, "sessions", "export", session.id, "--install"), "go with --format claude-code or codex", 2)
    failed(tether(db, "sessions", "export", session.id, "-f", "codex", "--force"), "--force goes with --install", 2)

    async def homeless(store: Store) -> str:
        info = await store.create_session()
        await store.update_session(info.id, directory=None)
        return info.id

    sid = with_db(db, homeless)
    failed(
        tether(db, "sessions", "export", sid, "-f", "claude-code", "--install", env=homes),
        "Claude Code files sessions by directory",
    )
