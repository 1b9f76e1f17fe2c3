"""The turn keys in a PostgreSQL store's tables (`recall/pgkeys.py`): their terms are FTS5's ``porter
unicode61`` terms, they rank a fixed corpus exactly as the SQLite keys do (the same BM25 in SQL), they sync
from the change cursor (a later append found, a deleted session gone, a revert hidden), two nodes syncing at
once neither corrupt nor double-count them, and no query text breaks them. Real PostgreSQL throughout."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tether.ids import new_session_id
from tether.messages import Message, Revert, ToolResultPart
from tether.recall import keys as sqlite_keys
from tether.recall import pgkeys, recall
from tether.recall.engine import default_keys
from tether.recall.keys import KeyIndex, TurnKeys
from tether.recall.pgkeys import PgKeyIndex, postings
from tether.recall.rebuild import rebuild_keys
from tether.store import SqliteStore, Store
from tether.store.postgres import PostgresStore
from tether.store.records import SearchHit
from tether.store.searchtext import document

PREVIOUS = 0.2

CORPUS: list[tuple[str, list[Message]]] = [
    (
        "/repo/a",
        [
            Message.user("why does test_loader crash on empty input in src/app/parse.py?"),
            Message.tool(
                ToolResultPart(
                    call_id="c1",
                    content='Traceback: File "src/app/parse.py", line 42, in parse_header\nValueError: not enough values',
                    name="bash",
                )
            ),
            Message.assistant("Fixed: parse_header skips lines without a colon. The migration is next."),
            Message.user("run the database migration on staging, then the e-mail migrations"),
            Message.assistant("Migrating… the migrations ran; staging is healthy. Café déjà vu naïve résumé."),
        ],
    ),
    (
        "/repo/b",
        [
            Message.user("the flaky reconnect test fails again on CI"),
            Message.assistant("I reran pytest -k reconnect three times: it passed, then failed once."),
            Message.user("is the reconnect backoff too short? it's 50ms"),
            Message.assistant("Yes: the backoff of 50ms loses to the server's 200ms restart. Raised to 500ms."),
            Message.user("great, and the migration of the users table?"),
            Message.assistant("Done in migration 0042_users; running, runner and runs all stem alike."),
        ],
    ),
    (
        "/repo/a",
        [
            Message.user("deploy the canary to eu-west-1 and watch the error rate"),
            Message.assistant("Canary deployed to eu-west-1. Error rate 0.2%, under the 1% budget."),
            Message.user("roll back if the p99 latency passes 300ms"),
            Message.assistant("p99 is 180ms: no rollback. 日本語のテキスト and ünïcödé words stay searchable."),
        ],
    ),
]

QUERIES = [
    "migration",
    "reconnect backoff",
    "test_loader crash",
    "src/app/parse.py",
    "parse_header",
    "migr*",
    "run",
    "canary eu-west-1",
    "rollback latency p99",
    "cafe deja vu",
    "e-mail migrations",
    "日本語のテキスト",
    "what is the error rate of the canary?",
    "the",
    "staging healthy database",
]


async def _fill(store: Store) -> dict[str, int]:
    """The corpus in `store`; returns each session's id by its number in the corpus."""
    out = {}
    for i, (directory, messages) in enumerate(CORPUS):
        info = await store.create_session(directory=directory, title=f"s{i}")
        await store.append(info.id, messages)
        out[info.id] = i
    return out


def _ranked(hits: list[SearchHit], names: dict[str, int]) -> list[tuple[int, int, float]]:
    return [(names[h.session_id], h.seq, h.score) for h in hits]


def _same_ranking(a: list[tuple[int, int, float]], b: list[tuple[int, int, float]]) -> None:
    """The same turns with the same scores (to 1e-9), in the same order but for turns whose scores tie."""
    assert len(a) == len(b)
    for (_, _, sa), (_, _, sb) in zip(a, b, strict=True):
        assert math.isclose(sa, sb, rel_tol=1e-9, abs_tol=1e-12), (a, b)

    def canon(xs: list[tuple[int, int, float]]) -> list[tuple[float, int, int]]:
        return sorted((-round(s, 9), n, seq) for n, seq, s in xs)

    assert canon(a) == canon(b)
    assert [round(s, 9) for _, _, s in a] == sorted((round(s, 9) for _, _, s in a), reverse=True)


@pytest.fixture
async def pg(postgres_store_url: str) -> Any:
    store = PostgresStore(postgres_store_url)
    try:
        yield store
    finally:
        await store.close()


def test_terms_are_fts5s_porter_unicode61_terms() -> None:
    """Every term and position `postings` makes is the one SQLite FTS5's ``porter unicode61`` makes, read
    back from the index itself (fts5vocab), on text with stems, hyphens, digits, accents and other scripts."""
    text = (
        "Running runners ran; the relational generalizations were hopefully conditional. Café déjà-vu NAÏVE "
        "résumé e-mail 0042_users src/app/parse.py x86_64 Straße İstanbul 日本語のテキスト ünïcödé 3.14159 "
        "sensational agreed feed plastered motoring happiness sky skies dying lying ties "
        "hyper-extended ÆØÅ œuvre ﬁne ½ ① ²"
    )
    doc = document(text)
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE f USING fts5(own, tokenize = 'porter unicode61', detail = full)")
    conn.execute("INSERT INTO f (rowid, own) VALUES (1, ?)", (doc,))
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    want: dict[str, list[int]] = {}
    for term, offset in conn.execute("SELECT term, offset FROM v ORDER BY offset"):
        want.setdefault(term, []).append(offset)
    count, got = postings(doc)
    assert got == want
    assert count == sum(len(v) for v in want.values())


async def test_the_pg_keys_rank_a_corpus_as_the_sqlite_keys_do(
    pg: PostgresStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lite = SqliteStore(tmp_path / "t.db")
    try:
        lite_names, pg_names = await _fill(lite), await _fill(pg)
        lite_keys, pg_keys = KeyIndex(tmp_path / "t.keys"), PgKeyIndex(pg)
        assert await lite_keys.sync(lite) and await pg_keys.sync(pg)
        assert await pg_keys.count() == lite_keys.count() == 15
        lite_by, pg_by = ({n: sid for sid, n in names.items()} for names in (lite_names, pg_names))
        # each store's own times (the corpus was appended to each at its own moment): session 1's append
        middle = {
            name: (await store.read(by[1]))[0].created_at
            for name, store, by in (("lite", lite, lite_by), ("pg", pg, pg_by))
        }
        filters: list[dict[str, Any]] = [
            {},
            {"directory": "/repo/a"},
            {"role": "assistant"},
            {"limit": 3},
            {"since": "middle"},
            {"until": "middle"},
            {"session": 1},
        ]
        compared = 0
        for query in QUERIES:
            for kw in filters:
                kw_lite, kw_pg = dict(kw), dict(kw)
                if "session" in kw:
                    kw_lite = {"session_id": lite_by[kw["session"]]}
                    kw_pg = {"session_id": pg_by[kw["session"]]}
                for key in ("since", "until"):
                    if key in kw:
                        kw_lite, kw_pg = {key: middle["lite"]}, {key: middle["pg"]}
                a = await lite_keys.search(lite, query, previous=PREVIOUS, **kw_lite)
                b = await pg_keys.search(pg, query, previous=PREVIOUS, **kw_pg)
                _same_ranking(_ranked(a, lite_names), _ranked(b, pg_names))
                assert [h.excerpt for h in a] == [h.excerpt for h in b]
                compared += bool(a)
        assert compared >= 60  # most of them find something: the comparison is not of empty lists
        # the COMMON rule, with a small threshold: a word in many turns' own words is dropped beside rarer ones
        monkeypatch.setattr(sqlite_keys, "COMMON", 2)
        monkeypatch.setattr(pgkeys, "COMMON", 2)
        for query in ("migration reconnect", "the canary", "run migration staging"):
            a = await lite_keys.search(lite, query, previous=PREVIOUS)
            b = await pg_keys.search(pg, query, previous=PREVIOUS)
            _same_ranking(_ranked(a, lite_names), _ranked(b, pg_names))
        lite_keys.close()
    finally:
        await lite.close()


async def test_the_default_keys_of_a_pg_store_are_its_tables(pg: PostgresStore) -> None:
    keys = default_keys(pg)
    assert isinstance(keys, PgKeyIndex) and isinstance(keys, TurnKeys)
    names = await _fill(pg)
    hits = (await recall(pg, "reconnect backoff", limit=3)).hits
    assert hits and names[hits[0].session_id] == 1
    async with await psycopg.AsyncConnection.connect(pg.url) as conn:
        cur = await conn.execute("SELECT count(*) FROM recall_turns")
        assert (await cur.fetchone())[0] == 15


async def test_a_later_append_a_deletion_and_a_revert_reach_the_pg_keys(pg: PostgresStore) -> None:
    keys = PgKeyIndex(pg)
    names = await _fill(pg)
    by_number = {n: sid for sid, n in names.items()}
    assert await keys.sync(pg)
    assert not await keys.search(pg, "kubernetes", previous=PREVIOUS)
    await pg.append(by_number[1], [Message.user("move the reconnect test to kubernetes")])
    assert await keys.sync(pg)
    assert [(h.session_id, h.seq) for h in await keys.search(pg, "kubernetes", previous=PREVIOUS)] == [
        (by_number[1], 7)
    ]
    # a revert back to seq 6 hides 7: gone unless asked for, and then marked
    await pg.append(by_number[1], [Revert(to_seq=6)])
    assert await keys.sync(pg)
    assert not await keys.search(pg, "kubernetes", previous=PREVIOUS)
    shown = await keys.search(pg, "kubernetes", previous=PREVIOUS, include_reverted=True)
    assert [(h.seq, h.reverted) for h in shown] == [(7, True)]
    # a deleted session is gone, and the totals BM25 uses lose its turns
    before = await keys.count()
    await pg.delete_session(by_number[0])
    assert await keys.sync(pg)
    assert await keys.count() == before - 5
    assert all(h.session_id != by_number[0] for h in await keys.search(pg, "migration parse_header", previous=0.2))
    async with await psycopg.AsyncConnection.connect(pg.url) as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM recall_postings p LEFT JOIN recall_turns t USING (num, seq)"
            " WHERE t.num IS NULL), (SELECT value FROM recall_meta WHERE key = 'tokens'),"
            " (SELECT sum(own_len + previous_len) FROM recall_turns)"
        )
        orphans, tokens, summed = await cur.fetchone()
    assert orphans == 0 and tokens == summed


async def test_one_sync_serves_another_node_and_reads_only_what_changed(postgres_store_url: str) -> None:
    """Node A syncs; node B's keys (another store object, another pool) find A's work and read nothing again."""
    a, b = PostgresStore(postgres_store_url), PostgresStore(postgres_store_url)
    try:
        await _fill(a)
        assert await PgKeyIndex(a).sync(a)
        read: list[int] = []
        assert await PgKeyIndex(b).sync(b, progress=read.append)
        assert read == []  # everything was keyed by node A
        assert await PgKeyIndex(b).count() == 15
    finally:
        await a.close()
        await b.close()


async def test_two_nodes_syncing_at_once_neither_corrupt_nor_double_count(
    postgres_store_url: str, tmp_path: Path
) -> None:
    writer = PostgresStore(postgres_store_url)
    nodes = [PostgresStore(postgres_store_url) for _ in range(2)]
    lite = SqliteStore(tmp_path / "t.db")
    try:
        names: dict[str, int] = {}
        lite_names: dict[str, int] = {}
        for round_ in range(8):  # many sessions of several batches each, so that the syncs overlap
            for store, into in ((writer, names), (lite, lite_names)):
                info = await store.create_session(directory="/repo", title=f"r{round_}")
                await store.append(
                    info.id,
                    [
                        Message.user(f"round {round_} question {i} about reconnect {'backoff ' * (i % 3)}")
                        for i in range(40)
                    ],
                )
                into[info.id] = round_
        keys = [PgKeyIndex(node) for node in nodes]
        done = await asyncio.gather(*(k.sync(node, batch=7) for k, node in zip(keys, nodes, strict=True)))
        assert done == [True, True]
        assert await keys[0].count() == 320
        async with await psycopg.AsyncConnection.connect(postgres_store_url) as conn:
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM recall_turns),"
                " (SELECT count(*) FROM (SELECT DISTINCT num, seq FROM recall_postings) p),"
                " (SELECT value FROM recall_meta WHERE key = 'tokens'),"
                " (SELECT sum(own_len + previous_len) FROM recall_turns),"
                " (SELECT count(*) FROM recall_sessions)"
            )
            assert tuple(await cur.fetchone()) == (320, 320, await _tokens(conn), await _tokens(conn), 8)
        lite_keys = KeyIndex(tmp_path / "t.keys")
        assert await lite_keys.sync(lite)
        for query in ("reconnect backoff", "question 7", "round 3"):
            a = await lite_keys.search(lite, query, previous=PREVIOUS, limit=30)
            b = await keys[1].search(writer, query, previous=PREVIOUS, limit=30)
            _same_ranking(_ranked(a, lite_names), _ranked(b, names))
        lite_keys.close()
    finally:
        await lite.close()
        for store in (writer, *nodes):
            await store.close()


async def _tokens(conn: Any) -> int:
    cur = await conn.execute("SELECT sum(own_len + previous_len) FROM recall_turns")
    return int((await cur.fetchone())[0])


BAD_QUERIES = [
    "",
    "   ",
    '"',
    '"unterminated',
    "'; DROP TABLE recall_postings; --",
    "migration AND OR NOT NEAR(a b)",
    "col:migration own:canary",
    "*",
    "**",
    "mi*gr*",
    "%_\\",
    "migr%",
    "(((",
    "^canary",
    "NULL \x00 nul",
    "🤖🔥 emoji only",
    "ünïcödé",
    "x" * 600,
    " ".join(f"w{i}" for i in range(200)),
]


async def test_no_query_text_breaks_the_pg_keys(pg: PostgresStore, tmp_path: Path) -> None:
    lite = SqliteStore(tmp_path / "t.db")
    try:
        lite_names, pg_names = await _fill(lite), await _fill(pg)
        lite_keys, pg_keys = KeyIndex(tmp_path / "t.keys"), PgKeyIndex(pg)
        assert await lite_keys.sync(lite) and await pg_keys.sync(pg)
        for query in BAD_QUERIES:
            a = await lite_keys.search(lite, query, previous=PREVIOUS)
            b = await pg_keys.search(pg, query, previous=PREVIOUS)
            assert all(isinstance(h, SearchHit) for h in b)
            _same_ranking(_ranked(a, lite_names), _ranked(b, pg_names))
        assert await pg_keys.count() == 15  # nothing dropped
        lite_keys.close()
    finally:
        await lite.close()


async def test_a_rebuild_empties_the_tables_and_reads_the_journal_again(pg: PostgresStore) -> None:
    names = await _fill(pg)
    keys = PgKeyIndex(pg)
    assert await keys.sync(pg)
    before = [(h.session_id, h.seq, h.score) for h in await keys.search(pg, "migration", previous=PREVIOUS)]
    read, remade = await rebuild_keys(pg)
    assert (read, remade) == (15, False)
    after = [(h.session_id, h.seq, h.score) for h in await keys.search(pg, "migration", previous=PREVIOUS)]
    assert after == before and len(names) == 3


async def test_a_store_of_an_older_schema_is_migrated_and_its_sessions_keyed(postgres_url: str) -> None:
    """A database at migration 3 (before the keys' tables) with sessions in it: opening it applies the keys'
    migration, and the first sync finds the sessions written before it through the change cursor."""
    from tether.store import pgschema

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert pgschema.migrate(conn, known=3) == (0, 3)
    sid = new_session_id()
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # a session written by that tether
        conn.execute("INSERT INTO sessions (id, directory, created_at, updated_at) VALUES (%s, '/repo', 1, 1)", (sid,))
    store = PostgresStore(postgres_url)
    try:
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT version FROM tether_schema").fetchone() == (pgschema.SCHEMA_VERSION,)
        await store.append(sid, [Message.user("the legacy billing export")])
        keys = PgKeyIndex(store)
        assert await keys.sync(store)
        assert [(h.session_id, h.seq) for h in await keys.search(store, "billing", previous=PREVIOUS)] == [(sid, 1)]
    finally:
        await store.close()


async def test_a_session_deleted_while_the_sync_reads_it_is_dropped_not_an_error(pg: PostgresStore) -> None:
    names = await _fill(pg)
    by_number = {n: sid for sid, n in names.items()}
    keys = PgKeyIndex(pg)
    read_entries = pg.iter_entries

    def deleting(session_id: str, start: int = 1, *, batch: int = 500) -> Any:
        async def go() -> Any:
            if session_id == by_number[1]:
                await pg.delete_session(session_id)  # another node deletes it between the cursor and the read
            async for entry in read_entries(session_id, start, batch=batch):
                yield entry

        return go()

    pg.iter_entries = deleting  # type: ignore[method-assign]
    assert await keys.sync(pg)
    pg.iter_entries = read_entries  # type: ignore[method-assign]
    assert await keys.count() == 15 - 6
    assert all(h.session_id != by_number[1] for h in await keys.search(pg, "reconnect", previous=PREVIOUS))
    assert await keys.sync(pg)  # the deletion, seen by the cursor now, changes nothing more
    assert await keys.count() == 15 - 6
