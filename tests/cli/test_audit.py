"""`tether audit` on a real SQLite file: the records of what commands did (a session exported, forked,
deleted, shared), filtered by time, session and kind, as lines or JSON; `tether audit verify` names the
position of a record edited or deleted in the database and exits 1; `tether audit prune`; bad input is one
clear line."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tether.cli.audit import parse_since
from tether.cli.main import cli
from tether.errors import InvalidInput  # noqa: F401  (the kinds of error the CLI turns into one line)

from .test_share import make_session


def tether(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args], env={"TETHER_SERVER": ""})


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tether.db"


def test_what_commands_did_is_listed_and_filtered(db: Path, tmp_path: Path) -> None:
    sid = make_session(db)
    ok(tether(db, "sessions", "export", sid, "-o", str(tmp_path / "s.json")))
    fork = json.loads(ok(tether(db, "sessions", "fork", sid, "--json")))["id"]
    ok(tether(db, "share", sid))
    ok(tether(db, "sessions", "rm", fork, "--yes"))
    records = [json.loads(line) for line in ok(tether(db, "audit", "--json")).splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds == ["session.created", "session.exported", "session.forked", "share.created", "session.deleted"]
    assert all(r["actor"].startswith("cli ") and len(r["hash"]) == 64 for r in records)
    assert records[1]["detail"] == {"format": "json", "to": str(tmp_path / "s.json")}
    lines = ok(tether(db, "audit")).splitlines()
    assert len(lines) == 5 and "session.exported" in lines[1] and sid in lines[1]
    assert [json.loads(x)["kind"] for x in ok(tether(db, "audit", "--kind", "share", "--json")).splitlines()] == [
        "share.created"
    ]
    # a deleted session's records stay, found by its id
    deleted = ok(tether(db, "audit", "--session", fork, "--json")).splitlines()
    assert [json.loads(x)["kind"] for x in deleted] == ["session.forked", "session.deleted"]
    assert len(ok(tether(db, "audit", "--since", "1h", "--json")).splitlines()) == 5
    assert ok(tether(db, "audit", "--since", "2999-01-01")) == ""
    assert len(ok(tether(db, "audit", "--limit", "2", "--json")).splitlines()) == 2
    assert "intact: 5 records" in ok(tether(db, "audit", "verify"))


def test_verify_names_an_edited_or_deleted_record_and_fails(db: Path) -> None:
    for _ in range(4):
        make_session(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE audit SET actor = 'someone else' WHERE seq = 2")
    result = tether(db, "audit", "verify")
    assert result.exit_code == 1 and "record 2: changed" in result.output
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM audit WHERE seq IN (2, 3)")
    result = tether(db, "audit", "verify", "--json")
    report = json.loads(result.stdout.splitlines()[0])
    assert result.exit_code == 1 and report["problems"][0]["seq"] == 2 and "missing" in report["problems"][0]["problem"]


def test_prune_removes_old_records_and_the_rest_verifies(db: Path) -> None:
    make_session(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE audit SET at = at - 100 * 86400")  # made long ago (the hash covers it: re-chain)
    assert "record 1: changed" in tether(db, "audit", "verify").output
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM audit")
        conn.execute("DELETE FROM audit_head")
    make_session(db)
    assert "Nothing that old" in ok(tether(db, "audit", "prune", "--older-than", "90d"))
    assert "Removed 1" in ok(tether(db, "audit", "prune", "--older-than", "0.000001s"))
    assert "intact: 1 records" in ok(tether(db, "audit", "verify"))


def test_bad_input_is_one_clear_line(db: Path) -> None:
    result = tether(db, "audit", "--since", "yesterday-ish")
    assert result.exit_code == 2 and "--since takes a duration" in result.output
    result = tether(db, "audit", "--kind", "Bad Kind")
    assert result.exit_code == 1 and "an audit kind is lowercase words" in result.output
    result = tether(db, "audit", "--json", "verify")
    assert result.exit_code == 2 and "go with `tether audit` itself" in result.output
    assert tether(db, "audit").stderr.strip() == "No audit records yet."


def test_since_parses_durations_and_dates() -> None:
    assert parse_since("2026-01-01") == 1767225600.0
    assert parse_since("2026-01-01T01:00:00+01:00") == 1767225600.0
