"""The optional fact index: short fact lines that a capable model writes for each stored turn ("Caroline
went to an LGBTQ support group on 7 May 2023", "tests/test_api.py fails on ImportError: numpy"), kept in a
side SQLite file beside the store and searched as extra keys of their turns (key expansion: LongMemEval
found facts added to the key improved recall@k by ~9% on average).

Written by `FactIndex.build` in the background, never on the append path: a bounded number of model calls
per run, each session's progress saved with its facts after every call, so an interrupted build resumes
where it stopped. The model is any `FactWriter` (a prompt in, text out): the CLI gives one that calls the
configured provider; tests give a scripted one."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..store.protocols import Store
from ..store.searchtext import indexed_text, match_expression, query_terms
from ..store.walfile import connect_wal
from .backfill import changes_since, side_path

FactWriter = Callable[[str], Awaitable[str]]
"""Writes fact lines for a prompt (`PROMPT` filled in): one call to a model."""

TURNS_PER_CALL = 12
"""Turns shown to the model in one call: enough for it to see the exchange, few enough to stay short."""
TURN_CHARS = 800
"""Of each turn this much is shown: a long tool output is summarised by its start, not paid for whole."""
MAX_LINES_PER_TURN = 4
MAX_LINE_CHARS = 300

PROMPT = """Below are turns of a conversation (session of {date}). For each turn that states a fact worth
remembering later (what someone did, plans, likes, decided; a file, command, error or setting in work
sessions), write one to three short, self-contained sentences: name the people (never "I" or "you"), and
turn relative times into dates using the session date. Answer only with lines of the form
[number] fact
and nothing for a turn without facts.

{turns}"""

_LINE = re.compile(r"^\s*\[(\d+)\]\s*(.+?)\s*$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (
    id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, seq INTEGER NOT NULL, directory TEXT, line TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS facts_turn ON facts (session_id, seq);
CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5(line, tokenize = 'porter unicode61', content = '');
CREATE TABLE IF NOT EXISTS progress (session_id TEXT PRIMARY KEY, upto INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cursor (id INTEGER PRIMARY KEY CHECK (id = 1), position INTEGER NOT NULL);
"""


def _setup(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)


@dataclass(frozen=True)
class FactProgress:
    """Where a build stands: sessions finished, turns read, model calls made, fact lines written, and
    whether it stopped on its budget with turns left (`left`: run it again to go on)."""

    sessions_done: int
    turns: int
    calls: int
    lines: int
    left: bool = False


def default_fact_path(store: Store) -> str:
    """Where a store's facts live: beside its SQLite file; in memory for other stores
    (`backfill.side_path`; a PostgreSQL store's facts are its tables)."""
    return side_path(store, ".facts")


def parse_facts(text: str, seqs: set[int]) -> dict[int, list[str]]:
    """The fact lines of a model's answer, by the turn they belong to; lines for turns not asked about,
    and lines beyond `MAX_LINES_PER_TURN` a turn, are dropped."""
    out: dict[int, list[str]] = {}
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if m is None or int(m.group(1)) not in seqs:
            continue
        lines = out.setdefault(int(m.group(1)), [])
        if len(lines) < MAX_LINES_PER_TURN:
            lines.append(m.group(2)[:MAX_LINE_CHARS])
    return out


class Facts:
    """What every home of the fact lines shares: `build`, from the store's change cursor, a bounded number of
    model calls, resumable. A subclass keeps the lines (`FactIndex`: a SQLite file; `pgfacts.PgFactIndex`:
    tables of a PostgreSQL store) through the hooks below, and searches them (`find`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def _position(self) -> int:
        raise NotImplementedError

    async def _save_position(self, after: int) -> None:
        raise NotImplementedError

    async def _progress(self) -> dict[str, int]:
        """How far each session's turns were read: session -> upto."""
        raise NotImplementedError

    async def _save(self, session_id: str, directory: str | None, rows: list[tuple[int, str]], upto: int) -> None:
        """One transaction: these (seq, line) facts of a session, and its progress `upto`."""
        raise NotImplementedError

    async def find(
        self, query: str, *, directory: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[tuple[str, int, float]]:
        """(session, seq, score) of the turns whose facts match the query, best first, as a positive score."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    async def build(
        self,
        write: FactWriter,
        *,
        directory: str | None = None,
        session_id: str | None = None,
        max_calls: int = 200,
        progress: Callable[[FactProgress], None] | None = None,
    ) -> FactProgress:
        """Write facts for every turn not read yet (of one directory or session, or all), at most
        `max_calls` model calls; returns where it stopped. A failing call stops the build with its error,
        keeping what earlier calls wrote."""
        after: int | None = None  # where the store's change cursor stands once this build is whole
        if session_id is not None:
            infos = [await self.store.get_session(session_id)]
        else:
            infos, _, after = await changes_since(self.store, await self._position())
            if directory is not None:
                infos, after = [i for i in infos if i.directory == directory], None
        done_upto = await self._progress()
        sessions = turns = calls = lines = 0
        for info in sorted(infos, key=lambda i: i.created_at):
            upto = done_upto.get(info.id, 0)
            if info.entry_count <= upto:
                sessions += 1
                continue
            date = datetime.fromtimestamp(info.created_at).strftime("%-d %B %Y")
            batch: list[tuple[int, str]] = []
            last = upto
            finished = True
            async for entry in self.store.iter_entries(info.id, upto + 1):
                text = indexed_text(entry.body)
                last = entry.seq
                if text is not None:
                    batch.append((entry.seq, " ".join(text.split())[:TURN_CHARS]))
                if len(batch) >= TURNS_PER_CALL:
                    if calls >= max_calls:
                        finished = False
                        break
                    lines += await self._write_batch(write, info.id, info.directory, date, batch, batch[-1][0])
                    calls += 1
                    turns += len(batch)
                    batch = []
                    if progress is not None:
                        progress(FactProgress(sessions, turns, calls, lines))
            if finished and batch:
                if calls >= max_calls:
                    finished = False
                else:
                    lines += await self._write_batch(write, info.id, info.directory, date, batch, last)
                    calls += 1
                    turns += len(batch)
            if not finished:
                return FactProgress(sessions, turns, calls, lines, left=True)
            await self._save(info.id, info.directory, [], last)  # entries after the last batch with no text too
            sessions += 1
            if progress is not None:
                progress(FactProgress(sessions, turns, calls, lines))
        if after is not None:
            await self._save_position(after)
        return FactProgress(sessions, turns, calls, lines)

    async def _write_batch(
        self,
        write: FactWriter,
        session_id: str,
        directory: str | None,
        date: str,
        batch: list[tuple[int, str]],
        upto: int,
    ) -> int:
        shown = "\n".join(f"[{seq}] {text}" for seq, text in batch)
        answer = await write(PROMPT.format(date=date, turns=shown))
        found = parse_facts(answer, {seq for seq, _ in batch})
        rows = [(seq, line) for seq, fact_lines in sorted(found.items()) for line in fact_lines]
        await self._save(session_id, directory, rows, upto)
        return len(rows)


class FactIndex(Facts):
    """Fact lines of a store's turns in their own SQLite file (`path`, default beside the store), with a
    full-text index over them."""

    def __init__(self, store: Store, *, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(store)
        self.path = str(path) if path is not None else default_fact_path(store)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = connect_wal(self.path, setup=_setup)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM facts").fetchone()[0])

    def facts_of(self, session_id: str, seq: int) -> list[str]:
        with self._lock:
            sql = "SELECT line FROM facts WHERE session_id = ? AND seq = ? ORDER BY id"
            return [line for (line,) in self._conn.execute(sql, (session_id, seq))]

    async def _position(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT position FROM cursor WHERE id = 1").fetchone()
        return int(row[0]) if row else 0

    async def _save_position(self, after: int) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO cursor (id, position) VALUES (1, ?)", (after,))

    async def _progress(self) -> dict[str, int]:
        with self._lock:
            return dict(self._conn.execute("SELECT session_id, upto FROM progress").fetchall())

    async def _save(self, session_id: str, directory: str | None, rows: list[tuple[int, str]], upto: int) -> None:
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                for seq, line in rows:
                    cur = self._conn.execute(
                        "INSERT INTO facts (session_id, seq, directory, line) VALUES (?, ?, ?, ?)",
                        (session_id, seq, directory, line),
                    )
                    self._conn.execute("INSERT INTO facts_fts (rowid, line) VALUES (?, ?)", (cur.lastrowid, line))
                self._conn.execute(
                    "INSERT OR REPLACE INTO progress (session_id, upto) VALUES (?, ?)", (session_id, upto)
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    async def find(
        self, query: str, *, directory: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[tuple[str, int, float]]:
        return self.search(query, directory=directory, session_id=session_id, limit=limit)

    def search(
        self, query: str, *, directory: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[tuple[str, int, float]]:
        """(session, seq, score) of the turns whose facts match the query, best first: BM25 of their best
        fact line, as a positive score."""
        match = match_expression(query_terms(query))
        if match is None:
            return []
        where, params = "", [match]
        if session_id is not None:
            where, params = " WHERE f.session_id = ?", [match, session_id]
        elif directory is not None:
            where, params = " WHERE f.directory = ?", [match, directory]
        # bm25() only in the full-text query itself: its rows are then grouped by turn
        sql = (
            "WITH m AS MATERIALIZED (SELECT rowid AS id, bm25(facts_fts) AS rank FROM facts_fts"
            " WHERE facts_fts MATCH ?)"
            f" SELECT f.session_id, f.seq, MIN(m.rank) AS best FROM m JOIN facts f ON f.id = m.id{where}"
            " GROUP BY f.session_id, f.seq ORDER BY best LIMIT ?"
        )
        with self._lock:
            rows = self._conn.execute(sql, (*params, limit)).fetchall()
        return [(sid, seq, -rank) for sid, seq, rank in rows]
