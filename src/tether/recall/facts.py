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
    """Where a store's facts live: beside its SQLite file; for a store on a server, in the tether home
    (`backfill.side_path`); in memory for other stores."""
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


class FactIndex:
    """Fact lines of a store's turns in their own SQLite file (`path`, default beside the store), with a
    full-text index over them."""

    def __init__(self, store: Store, *, path: str | os.PathLike[str] | None = None) -> None:
        self.store = store
        self.path = str(path) if path is not None else default_fact_path(store)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.executescript(_SCHEMA)
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
            with self._lock:
                row = self._conn.execute("SELECT position FROM cursor WHERE id = 1").fetchone()
            infos, _, after = await changes_since(self.store, int(row[0]) if row else 0)
            if directory is not None:
                infos, after = [i for i in infos if i.directory == directory], None
        with self._lock:
            done_upto = dict(self._conn.execute("SELECT session_id, upto FROM progress").fetchall())
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
            self._mark(info.id, last)  # entries after the last batch that hold no text are read too
            sessions += 1
            if progress is not None:
                progress(FactProgress(sessions, turns, calls, lines))
        if after is not None:
            with self._lock:
                self._conn.execute("INSERT OR REPLACE INTO cursor (id, position) VALUES (1, ?)", (after,))
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
        rows = [(session_id, seq, directory, line) for seq, fact_lines in sorted(found.items()) for line in fact_lines]
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                for row in rows:
                    cur = self._conn.execute(
                        "INSERT INTO facts (session_id, seq, directory, line) VALUES (?, ?, ?, ?)", row
                    )
                    self._conn.execute("INSERT INTO facts_fts (rowid, line) VALUES (?, ?)", (cur.lastrowid, row[3]))
                self._conn.execute(
                    "INSERT OR REPLACE INTO progress (session_id, upto) VALUES (?, ?)", (session_id, upto)
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return len(rows)

    def _mark(self, session_id: str, upto: int) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO progress (session_id, upto) VALUES (?, ?)", (session_id, upto))

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
