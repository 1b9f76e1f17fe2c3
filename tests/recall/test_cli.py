"""`tether recall` end to end on a real SQLite file: human and --json output, directory and session scopes,
filters, bad input as one clear line, and --backfill of a file written before the index, with its
progress on stderr."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from tether.cli.main import cli
from tether.messages import Message
from tether.recall.keys import KeyIndex
from tether.store import SqliteStore, Store

T = TypeVar("T")


def with_db(db: Path, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        async with SqliteStore(db) as store:
            return await fn(store)

    return asyncio.run(main())


def tether(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args])


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "tether.db"

    async def seed(store: Store) -> None:
        for directory, words in (("/repo/a", "postgres migration failed on users"), ("/repo/b", "postgres is fine")):
            info = await store.create_session(directory=directory, title=f"work in {directory}")
            await store.append(info.id, [Message.user(words), Message.assistant("I will look at the migration")])

    with_db(path, seed)
    return path


def test_human_output_names_the_source(db: Path) -> None:
    result = tether(db, "recall", "postgres migration", "--dir", "/repo/a")
    assert result.exit_code == 0, result.output
    assert "postgres migration failed" in result.output and "work in /repo/a" in result.output
    assert "#1" in result.output and "/repo/b" not in result.output


def test_json_output_and_all_directories(db: Path) -> None:
    result = tether(db, "recall", "postgres", "--all", "--json", "--limit", "5", "--context", "0")
    assert result.exit_code == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    assert {h["directory"] for h in data["hits"]} == {"/repo/a", "/repo/b"}
    assert all(h["context"] == [] for h in data["hits"]) and data["backlog"] == 0


def test_role_session_and_time_filters(db: Path) -> None:
    sid = json.loads(tether(db, "recall", "postgres", "--all", "--json").stdout)["hits"][0]["session_id"]
    data = json.loads(tether(db, "recall", "migration", "--session", sid[-8:], "--role", "assistant", "--json").stdout)
    assert [(h["session_id"], h["role"]) for h in data["hits"]] == [(sid, "assistant")]
    data = json.loads(tether(db, "recall", "postgres", "--all", "--since", "2999-01-01", "--json").stdout)
    assert data["hits"] == []


def test_nothing_found_is_said_plainly(db: Path) -> None:
    result = tether(db, "recall", "kubernetes", "--dir", "/repo/a")
    assert result.exit_code == 0 and "Nothing in /repo/a matches 'kubernetes' (try --all)." in result.output


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        ((), "give a query", 2),
        (("x", "--all", "--dir", "/a"), "give --all or --dir", 2),
        (("x", "--since", "last tuesday"), "--since takes a date", 1),
        (("x", "--session", "../../x"), "invalid session id", 1),
        (("x", "--role", "system"), "Invalid value for '--role'", 2),
    ],
)
def test_bad_input_is_one_clear_line(db: Path, args: tuple[str, ...], message: str, code: int) -> None:
    result = tether(db, "recall", *args)
    assert result.exit_code == code
    assert message in result.output and "Traceback" not in result.output


def test_backfill_of_an_older_file_shows_progress_then_finds(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "recall_index_tests", Path(__file__).parent.parent / "store" / "test_searchindex.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    write_v1_file = module.write_v1_file

    path = tmp_path / "old.db"
    write_v1_file(path, sessions=3, entries=700)
    result = tether(path, "recall", "--backfill")
    assert result.exit_code == 0, result.stderr
    assert "indexed 2,100 entries of 3 sessions" in result.stdout
    # not a terminal: no progress redrawn in place (no \r in a pipe or a log), only the summaries
    assert "\r" not in result.stderr and "entries to go" not in result.stderr
    # recall's turn keys are built too, before any recall (one would catch up only SYNC_LIMIT entries)
    assert "turn keys: 2,100 entries read" in result.stderr
    keys = KeyIndex(str(path) + ".keys")
    try:
        assert keys.count() == 2100
    finally:
        keys.close()
    again = tether(path, "recall", "--backfill")
    assert "nothing to backfill" in again.stdout and "turn keys" not in again.stderr
    data = json.loads(tether(path, "recall", "heron", "--all", "--json", "--limit", "1000").stdout)
    assert len(data["hits"]) == 1000 and data["backlog"] == 0


def test_progress_is_redrawn_in_place_on_a_terminal_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from tether.cli import recall

    recall._live("indexed 5 entries")
    recall._end_live()
    assert capsys.readouterr().err == ""  # a pipe
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    recall._live("indexed 5 entries")
    recall._end_live()
    assert capsys.readouterr().err == "\rindexed 5 entries   \n"


def test_facts_are_built_with_progress_then_used_as_keys(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.providers import ResolvedModel
    from tether.providers.catalog import unknown_model
    from tether.providers.scripted import ScriptedProvider

    def model(request: Any) -> str:
        # the fact writer's answer: the first turn shown gets a fact that names the table's owner
        first = re.search(r"^\[(\d+)\] ", request.messages[-1].text, re.M)
        return f"[{first.group(1)}] The users table belongs to the billing team." if first else ""

    provider = ScriptedProvider(model, name="scripted")
    monkeypatch.setattr(
        "tether.providers.registry.resolve_provider",
        lambda model=None, **_: ResolvedModel(provider=provider, model="test", info=unknown_model("scripted", "test")),
    )
    assert not tether(db, "recall", "billing team", "--all", "--json").exit_code
    assert json.loads(tether(db, "recall", "billing team", "--all", "--json").stdout)["hits"] == []
    built = tether(db, "recall", "--facts", "--all", "--facts-calls", "1")
    assert built.exit_code == 0, built.output
    assert "1 model calls" in built.stdout and "run it again to go on" in built.stdout
    assert "turns read" not in built.stderr  # progress on a terminal only
    rest = tether(db, "recall", "--facts", "--all", "--json")
    assert json.loads(rest.stdout)["calls"] == 1 and not json.loads(rest.stdout)["left"]
    hits = json.loads(tether(db, "recall", "billing team", "--all", "--json").stdout)["hits"]
    assert {(h["directory"], h["seq"]) for h in hits} >= {("/repo/a", 1), ("/repo/b", 1)}
    assert len(provider.requests) == 2  # one call a session, none again for a recall


def test_recall_on_postgresql_in_real_processes(postgres_url: str, tmp_path: Path) -> None:
    """`tether recall` on a PostgreSQL store, as separate processes: the turn keys live in the store's own tables
    (nothing in the tether home), a later append is found by the next recall through the store's change
    cursor, a deleted session is gone from the hits, and `--rebuild` makes the keys again."""
    import os
    import subprocess
    import sys

    from tether.store.postgres import PostgresStore

    url = postgres_url.replace("postgres@", "postgres:s3cr3t@", 1)  # trust: the password is not checked
    home = tmp_path / "home"
    env = {**os.environ, "TETHER_HOME": str(home)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", "--store", url, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    async def seed() -> list[str]:
        async with PostgresStore(url) as store:
            ids = []
            for directory, words in (("/repo/a", "the flaky reconnect test"), ("/repo/b", "deploy notes")):
                info = await store.create_session(directory=directory, title=f"work in {directory}")
                await store.append(info.id, [Message.user(words), Message.assistant("looking at it")])
                ids.append(info.id)
            return ids

    ids = asyncio.run(seed())
    first = run("recall", "flaky reconnect", "--all", "--json")
    assert first.returncode == 0, first.stderr
    hits = json.loads(first.stdout)["hits"]
    assert hits and hits[0]["session_id"] == ids[0] and hits[0]["seq"] == 1
    assert not list(home.glob("**/*.keys"))  # no side file: the keys are the database's
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM recall_turns").fetchone() == (4,)

    async def later() -> None:
        async with PostgresStore(url) as store:
            await store.append(ids[1], [Message.user("the rollback of the canary deploy")])
            await store.delete_session(ids[0])

    asyncio.run(later())
    second = run("recall", "canary rollback flaky", "--all", "--json")
    assert second.returncode == 0, second.stderr
    found = [(h["session_id"], h["seq"]) for h in json.loads(second.stdout)["hits"]]
    assert found[0] == (ids[1], 3) and all(sid != ids[0] for sid, _ in found)
    rebuilt = run("recall", "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    third = run("recall", "canary", "--all", "--json")
    assert [(h["session_id"], h["seq"]) for h in json.loads(third.stdout)["hits"]][:1] == [(ids[1], 3)]
