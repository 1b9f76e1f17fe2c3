"""The fact lines of a PostgreSQL store in its own tables (`recall/pgfacts.py`): written per turn by a model (the
scripted provider plays it), found by recall as extra keys of their turns, kept to the directory searched,
resumable at a budget, shared by two nodes (a build on one serves the other, two at once save each line
once), and safe with any query text. Real PostgreSQL."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from typing import Any

import psycopg

from tether.messages import Message
from tether.providers import ScriptedProvider
from tether.recall import Tuning, recall
from tether.recall.facts import FactProgress
from tether.recall.pgfacts import PgFactIndex
from tether.store.postgres import PostgresStore

_spec = importlib.util.spec_from_file_location("facts_helpers", Path(__file__).with_name("test_facts.py"))
assert _spec is not None and _spec.loader is not None
_helpers = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("facts_helpers", _helpers)
_spec.loader.exec_module(_helpers)
FACTS, model, seed, writer = _helpers.FACTS, _helpers.model, _helpers.seed, _helpers.writer


async def _lines(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT count(*) FROM recall_facts")
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def test_facts_are_kept_in_the_stores_tables_and_found_by_recall(postgres_store_url: str) -> None:
    async with PostgresStore(postgres_store_url) as store:
        sid = await seed(store)
        provider = ScriptedProvider(model)
        facts = PgFactIndex(store)
        done = await facts.build(writer(provider))
        assert done == FactProgress(sessions_done=1, turns=5, calls=1, lines=4)
        assert await facts.facts_of(sid, 3) == [FACTS["ok do it"]]
        assert (await facts.build(writer(provider))).calls == 0 and len(provider.requests) == 1
        assert await _lines(postgres_store_url) == 4 == await facts.total()
        assert not (await recall(store, "what did the user approve", limit=3)).hits  # no turn says "approve"
        found = await recall(store, "what did the user approve", facts=facts, limit=3)
        assert [(h.session_id, h.seq) for h in found.hits] == [(sid, 3)]
        renamed = await recall(store, "load_settings src/app/config.py", facts=facts, limit=3)
        assert (sid, 5) in [(h.session_id, h.seq) for h in renamed.hits]
        assert not (await recall(store, "what did the user approve", facts=facts, tuning=Tuning(facts=0))).hits
        for query in ("", '"', "'; DROP TABLE recall_facts; --", "a:* | !b & (c", "numpy*", "🤖", "x" * 500):
            assert isinstance(await facts.find(query), list)
        assert await facts.total() == 4


async def test_facts_keep_to_the_directory_and_resume_at_a_budget(postgres_store_url: str) -> None:
    async with PostgresStore(postgres_store_url) as store:
        await seed(store, "/repo")
        other = await seed(store, "/elsewhere")
        facts = PgFactIndex(store)
        await facts.build(writer(ScriptedProvider(model)))
        assert {sid for sid, _, _ in await facts.find("approved numpy", directory="/elsewhere")} == {other}
        info = await store.create_session(directory="/repo")
        await store.append(info.id, [Message.user(f"step {i}: ok do it") for i in range(30)])  # 3 calls of 12
        provider = ScriptedProvider(model)
        first = await facts.build(writer(provider), max_calls=2)
        assert first.left and first.calls == 2 and first.turns == 24
        second = await facts.build(writer(provider), max_calls=5)
        assert not second.left and second.calls == 1 and second.turns == 6
        assert len(provider.requests) == 3 and await facts.total() == 8 + 30


async def test_one_nodes_build_serves_another_and_two_at_once_save_each_line_once(postgres_store_url: str) -> None:
    a, b = PostgresStore(postgres_store_url), PostgresStore(postgres_store_url)
    try:
        for i in range(4):
            await seed(a, f"/repo/{i}")
        providers = [ScriptedProvider(model) for _ in range(2)]
        built: list[Any] = await asyncio.gather(
            PgFactIndex(a).build(writer(providers[0])), PgFactIndex(b).build(writer(providers[1]))
        )
        assert all(not step.left for step in built)
        assert await _lines(postgres_store_url) == 16  # 4 lines a session, each saved once
        later = ScriptedProvider(model)
        assert (await PgFactIndex(b).build(writer(later))).calls == 0 and not later.requests
    finally:
        await a.close()
        await b.close()
