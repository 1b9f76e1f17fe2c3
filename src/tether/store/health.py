"""What a check of a store finds: `Finding` (what was looked at, ok/warn/fail, what was found, what to do),
shared by the store's own check and `tether doctor`, and `check_database`, the checks of one SQLite
database over a connection that only reads (integrity, schema version, entries, search index), and
`check_file`, which opens a file for them without writing to it."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Literal

import msgspec

from ..errors import StoreCorrupt, StoreUnavailable
from . import searchindex
from .faults import ELSEWHERE, RESTORE, human_bytes, is_corrupt, primary_code, store_fault

Status = Literal["ok", "warn", "fail"]

FULL_CHECK_BELOW = 256 << 20
"""Databases smaller than this get the full check by default (`integrity_check`, the search index row by
row and read whole: seconds); larger ones the quick one unless asked (`quick_check`, the index's
bookkeeping). `tether doctor` and `tether backup` both go by it."""

REBUILD = "the journal is intact: `tether doctor --repair` rebuilds the search index from it"
"""The fix of a damaged search index over a sound journal (`SqliteStore.reset_search`)."""

RECOVER = (
    "restore it from a backup (`tether backup` makes them); as a last resort, with no tether running, "
    '`sqlite3 {path} ".recover" | sqlite3 recovered.db` saves what can be read, then use recovered.db'
)


class Finding(msgspec.Struct, frozen=True):
    """One thing a check looked at (`check`), how it stands, what was found (`detail`, one line) and, when it
    is not ok, what to do about it (`fix`)."""

    check: str
    status: Status
    detail: str
    fix: str | None = None


def _fault(check: str, error: BaseException, path: str, doing: str) -> Finding:
    fault = store_fault(error, path, doing)
    if isinstance(fault, StoreCorrupt):
        return Finding(check, "fail", fault.problem, RECOVER.format(path=path))
    if isinstance(fault, StoreUnavailable):
        return Finding(check, "fail", fault.problem, fault.advice)
    return Finding(check, "fail", str(fault))


def failed(findings: list[Finding]) -> bool:
    return any(f.status == "fail" for f in findings)


def check_database(conn: sqlite3.Connection, path: str, *, full: bool, known_version: int) -> list[Finding]:
    """The checks of the tether database that `conn` reads (`path` names it in what is said). `full`: an
    `integrity_check` of every page and index, and the search index compared row by row with the journal;
    otherwise a `quick_check` and the index's bookkeeping. Nothing here writes; no check stops the others
    unless the file cannot be read at all."""
    findings: list[Finding] = []
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as e:
        return [_fault("database", e, path, "read")]
    integrity = _integrity(conn, path, full)
    if integrity.status == "fail" and _journal_sound(conn):
        integrity = Finding(
            "integrity", "fail", f"{integrity.detail}: in the search index only, the journal's tables pass", REBUILD
        )
        findings.append(integrity)
        return findings  # the index is read no further: what it holds is rebuilt
    findings.append(integrity)
    if version > known_version:
        findings.append(
            Finding(
                "schema",
                "fail",
                f"schema {version}: written by a newer tether (this one knows {known_version})",
                "upgrade tether",
            )
        )
        return findings
    if version < known_version:
        status: Status = "warn" if tables else "ok"
        detail = f"schema {version}: the next tether command migrates it to {known_version}"
        if not tables:
            detail = "empty: tether creates its tables on first use"
        fix = "make a backup first (`tether backup PATH`)" if tables else None
        findings.append(Finding("schema", status, detail, fix))
        return findings  # the index of an older schema has another shape: nothing more to compare
    findings.append(Finding("schema", "ok", f"schema {version}"))
    if integrity.status == "ok":  # reading a damaged file further says again what its check said
        findings.extend(_contents(conn, path, full))
    return findings


def _integrity(conn: sqlite3.Connection, path: str, full: bool) -> Finding:
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = [" ".join(str(r[0]).split()) for r in conn.execute(f"PRAGMA {pragma}(20)")]
    except sqlite3.Error as e:
        return _fault("integrity", e, path, "check")
    if rows == ["ok"]:
        return Finding("integrity", "ok", f"{pragma}: ok")
    first = rows[0] if rows else "no answer"
    more = f" (and {len(rows) - 1} more problem(s))" if len(rows) > 1 else ""
    return Finding("integrity", "fail", f"{pragma}: {first}{more}", RECOVER.format(path=path))


def _contents(conn: sqlite3.Connection, path: str, full: bool) -> list[Finding]:
    findings: list[Finding] = []
    try:
        (sessions,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
        (entries,) = conn.execute("SELECT coalesce(sum(entry_count), 0) FROM sessions").fetchone()
        detail = f"{sessions} session(s), {entries} entries"
        if full:
            (undecodable,) = conn.execute("SELECT count(*) FROM entries WHERE NOT json_valid(payload)").fetchone()
            if undecodable:
                findings.append(
                    Finding(
                        "entries",
                        "warn",
                        f"{detail}; {undecodable} entries are not valid JSON: readers skip and report them",
                        f"the rest is readable; {RESTORE}",
                    )
                )
                detail = ""
        if detail:
            findings.append(Finding("entries", "ok", detail))
    except sqlite3.Error as e:
        findings.append(_fault("entries", e, path, "read"))
        return findings
    try:
        problems = searchindex.check(conn, rows=full)
        backlog, waiting = searchindex.backlog(conn)
    except sqlite3.Error as e:
        if not is_corrupt(e):
            findings.append(_fault("search index", e, path, "read"))
            return findings
        # the file passed its check, so this is the index's own content, which FTS5 calls damaged
        problems, backlog, waiting = [f"it cannot be read ({' '.join(str(e).split())})"], 0, 0
    if problems:
        findings.append(
            Finding(
                "search index",
                "fail",
                "; ".join(problems) + ": searches may fail, or miss or misplace messages",
                REBUILD,
            )
        )
    else:
        what = "consistent with the journal" if full else "bookkeeping consistent (--full compares every row)"
        if backlog:
            what += f"; {backlog} entries of {waiting} session(s) wait to be indexed (the next search does it)"
        findings.append(Finding("search index", "ok", what))
    return findings


def _journal_sound(conn: sqlite3.Connection) -> bool:
    try:
        return not journal_problems(conn)
    except sqlite3.Error:
        return False


def journal_problems(conn: sqlite3.Connection) -> list[str]:
    """What `integrity_check` finds in the tables that are not derived (the journal: sessions, entries,
    artifacts, leases, shares) and their indexes, one table at a time; nothing when they are sound. A file
    that fails its whole check while these pass is damaged in its search index alone, which is rebuilt from
    them (`SqliteStore.reset_search`)."""
    derived = {*searchindex.TABLES, *searchindex.SHADOW_TABLES}
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0 AND name NOT LIKE 'sqlite%'"
        )
        if name not in derived
    ]
    problems: list[str] = []
    for table in tables:
        rows = [" ".join(str(r[0]).split()) for r in conn.execute(f'PRAGMA integrity_check("{table}")')]
        problems += [f"{table}: {row}" for row in rows if row != "ok"]
    return problems


def open_read_only(path: str) -> sqlite3.Connection:
    """A connection to the database at `path` that cannot write to it: no migration, no checkpoint, no
    recovery written back. In a directory where SQLite cannot make the shared-memory file that reading a
    WAL database needs, the file is read as immutable (what the WAL holds is then not seen)."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.OperationalError as e:
        conn.close()
        if primary_code(e) != sqlite3.SQLITE_CANTOPEN:
            raise
        conn = sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None, check_same_thread=False)
    return conn


def check_file(path: str, *, full: bool, known_version: int) -> list[Finding]:
    """Check the database file at `path` without writing to it (`open_read_only`): that it is there, opens,
    and passes `check_database`."""
    target = Path(path)
    try:
        if not target.exists():
            return [Finding("database", "ok", f"{path} does not exist yet: tether creates it on first use")]
        if target.is_dir():
            return [
                Finding("database", "fail", f"{path} is a directory, not a database file", f"move it away, {ELSEWHERE}")
            ]
        size = target.stat().st_size
        conn = open_read_only(path)
    except (sqlite3.Error, OSError) as e:
        return [_fault("database", e, path, "open")]
    try:
        findings = [Finding("database", "ok", f"{path} ({human_bytes(size)})")]
        findings.extend(check_database(conn, path, full=full, known_version=known_version))
        return findings
    finally:
        conn.close()
