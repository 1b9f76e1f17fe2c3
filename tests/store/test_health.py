"""The store's own check (`check_file`, `SqliteStore.check`) on real files: a sound database is all ok; each
fault fails the check that finds it with what to do; the search index is compared with the journal; and
checking never writes, creates or migrates anything."""

from __future__ import annotations

import asyncio
import importlib.util
import sqlite3
from pathlib import Path
from types import ModuleType

import pytest

from tether.messages import Message
from tether.store import SqliteStore
from tether.store.health import Finding, failed
from tether.store.sqlite import SCHEMA_VERSION, check_file


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"tether_store_test_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _load("faults")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "tether.db"
    faults.build_database(path)
    return path


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


@pytest.mark.parametrize("full", [True, False], ids=["full", "quick"])
def test_a_sound_database_is_all_ok(db: Path, full: bool) -> None:
    before = faults.fingerprint(db)
    findings = check_file(db, full=full)
    assert [f.status for f in findings] == ["ok"] * len(findings), findings
    checks = by_check(findings)
    assert set(checks) == {"database", "integrity", "schema", "entries", "search index"}
    assert checks["entries"].detail.startswith("12 session(s), 480 entries")
    assert ("integrity_check" if full else "quick_check") in checks["integrity"].detail
    assert faults.fingerprint(db) == before


def test_a_missing_database_is_reported_not_made(tmp_path: Path) -> None:
    (finding,) = check_file(tmp_path / "tether.db")
    assert finding.status == "ok" and "does not exist yet" in finding.detail
    assert not (tmp_path / "tether.db").exists()


@pytest.mark.parametrize("fault", ["truncate", "garbage"])
def test_a_file_that_does_not_open_fails_the_database_check(db: Path, fault: str) -> None:
    getattr(faults, fault)(db)
    before = faults.fingerprint(db)
    (finding,) = check_file(db)
    assert finding.check == "database" and finding.status == "fail"
    assert str(db) in finding.detail and finding.fix is not None
    assert "restore it from a backup" in finding.fix and ".recover" in finding.fix
    assert faults.fingerprint(db) == before


@pytest.mark.parametrize("full", [True, False], ids=["full", "quick"])
def test_damaged_pages_fail_the_integrity_check(db: Path, full: bool) -> None:
    faults.damage_pages(db)
    before = faults.fingerprint(db)
    findings = check_file(db, full=full)
    assert failed(findings)
    integrity = by_check(findings)["integrity"]
    assert integrity.status == "fail" and integrity.fix is not None and ".recover" in integrity.fix
    assert "entries" not in by_check(findings)  # reading on says again what the check said
    assert faults.fingerprint(db) == before


def test_a_newer_schema_fails_and_an_older_one_warns_without_being_migrated(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    schema = by_check(check_file(db))["schema"]
    assert schema.status == "fail" and "newer tether" in schema.detail and schema.fix == "upgrade tether"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    schema = by_check(check_file(db))["schema"]
    assert schema.status == "warn" and "migrates it" in schema.detail and "tether backup" in (schema.fix or "")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
    conn.close()


def damage_index(db: Path, sql: str) -> Finding:
    conn = sqlite3.connect(db)
    conn.execute(sql)
    conn.commit()
    conn.close()
    return by_check(check_file(db, full=True))["search index"]


def test_an_index_row_missing_is_found(db: Path) -> None:
    conn = sqlite3.connect(db)
    (num,) = conn.execute("SELECT num FROM search_sessions LIMIT 1").fetchone()
    conn.close()
    # a contentless table forgets a row only when told its text: tell it some other text, the row goes
    finding = damage_index(
        db, f"INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', {(num << 34) | (1 << 2) | 1}, 'x')"
    )
    assert finding.status == "fail" and "missing from the index" in finding.detail, finding
    assert "the journal is intact" in (finding.fix or "")


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("UPDATE search_sessions SET indexed = indexed + 5", "indexed past their last entry"),
        ("INSERT INTO search_sessions (session_id, indexed) VALUES ('ses_gone', 0)", "deleted session(s)"),
        ("DELETE FROM search_reverts", "revert(s) differ"),
        ("INSERT INTO search_fts (rowid, body) VALUES (999 << 34 | 4 | 1, 'stray')", "belong to no session"),
        (
            "UPDATE sessions SET entry_count = entry_count + 1, updated_at = 0 WHERE rowid = 1",
            "no flush will index",
        ),
    ],
    ids=["ahead", "orphan", "reverts", "stray", "stranded"],
)
def test_index_inconsistencies_are_found(db: Path, sql: str, words: str) -> None:
    finding = damage_index(db, sql)
    assert finding.status == "fail" and words in finding.detail, finding


def test_the_quick_check_reads_the_index_bookkeeping_only(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM search_reverts")  # only a row by row comparison sees this
    conn.execute("UPDATE search_sessions SET indexed = indexed + 5 WHERE num = 1")
    conn.commit()
    conn.close()
    finding = by_check(check_file(db, full=False))["search index"]
    assert finding.status == "fail" and "indexed past" in finding.detail and "revert" not in finding.detail


def test_entries_that_are_not_json_are_a_warning(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("UPDATE entries SET payload = '{not json' WHERE seq = 3")
    conn.commit()
    conn.close()
    entries = by_check(check_file(db))["entries"]
    assert entries.status == "warn" and "12 entries are not valid JSON" in entries.detail


def test_a_backlog_is_ok_and_counted(tmp_path: Path) -> None:
    async def fill() -> None:
        async with SqliteStore(tmp_path / "tether.db") as store:
            info = await store.create_session(directory=str(tmp_path))
            await store.append(info.id, [Message.user(f"m{i}") for i in range(7)])

    asyncio.run(fill())
    index = by_check(check_file(tmp_path / "tether.db"))["search index"]
    assert index.status == "ok" and "7 entries of 1 session(s) wait to be indexed" in index.detail


async def test_the_live_store_checks_itself_while_it_is_used(db: Path) -> None:
    async with SqliteStore(db) as store:
        sid = (await store.list_sessions()).items[0].id
        checking = asyncio.create_task(store.check())
        await store.append(sid, [Message.user("during the check")])
        findings = await checking
        assert not failed(findings) and by_check(findings)["integrity"].status == "ok"
    memory = SqliteStore(":memory:")
    assert [f.status for f in await memory.check()] == ["ok"]
    await memory.close()


def test_the_consistency_check_agrees_after_the_random_operations(tmp_path: Path) -> None:
    """The check and the test suite's own comparison (tests/store/test_searchindex.py) agree on files that
    the store wrote: forks, deletes, reverts and imports leave nothing for it to report."""
    ids = faults.build_database(tmp_path / "t.db", sessions=4, messages=10)

    async def churn() -> None:
        async with SqliteStore(tmp_path / "t.db") as store:
            await store.fork(ids[0], 5)
            await store.delete_session(ids[1])
            await store.append(ids[2], [Message.user("after"), Message.assistant("more")])
            await store.search("after")

    asyncio.run(churn())
    assert not failed(check_file(tmp_path / "t.db")), check_file(tmp_path / "t.db")
