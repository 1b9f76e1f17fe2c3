"""The audit trail in the store, on every backend (the `store` fixture): appended in one chain, listed by
filters, kept when its session is deleted, the store's own records for what it does to sessions and shares,
pruning that keeps the rest verifiable; and on SQLite, what `verify` finds in a file edited behind its back
(a changed record, a removed one, the last one removed) and two processes appending at once."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.errors import InvalidInput
from tether.messages import Message, Revert
from tether.store import SqliteStore, Store
from tether.store.audit import ACTOR, GENESIS, PRUNED, AuditRecord, draft, verify


async def walk(store: Store) -> AsyncIterator[AuditRecord]:
    after = 0
    while True:
        page = await store.list_audit(after=after, limit=100)
        if not page:
            return
        for record in page:
            yield record
        after = page[-1].seq


async def check(store: Store) -> list[tuple[int, str]]:
    report = await verify(walk(store), await store.audit_head())
    return [(p.seq, p.problem) for p in report.problems]


async def test_records_chain_in_order_and_verify(store: Store) -> None:
    assert await store.audit_head() is None
    assert (await verify(walk(store), None)).ok
    first = await store.append_audit(draft("tool.call", at=1.0, session_id=None, actor="rule allow", detail={"a": 1}))
    second = await store.append_audit(draft("server.refused", at=2.0, outcome="401", detail={"path": "/x"}))
    assert (first.seq, first.prev) == (1, GENESIS)
    assert (second.seq, second.prev) == (2, first.hash)
    assert await store.audit_head() == (2, second.hash)
    assert [r.seq for r in await store.list_audit()] == [1, 2]
    assert await check(store) == []


async def test_listing_filters_by_time_session_kind_and_position(store: Store) -> None:
    sid = (await store.create_session(title="audited")).id
    await store.append_audit(draft("tool.call", at=100.0, session_id=sid, detail={}))
    await store.append_audit(draft("tool.call", at=200.0, detail={}))
    await store.append_audit(draft("approval.requested", at=300.0, session_id=sid, detail={}))
    kinds = [r.kind for r in await store.list_audit(session_id=sid)]
    assert kinds == ["session.created", "tool.call", "approval.requested"]
    assert [r.at for r in await store.list_audit(kind="tool")] == [100.0, 200.0]
    assert [r.kind for r in await store.list_audit(kind="tool.call", since=150.0)] == ["tool.call"]
    assert [r.kind for r in await store.list_audit(since=100.0, until=300.0)] == ["tool.call", "tool.call"]
    assert [r.kind for r in await store.list_audit(kind="approval")] == ["approval.requested"]
    assert await store.list_audit(kind="tool.cal") == []  # a family is whole words
    page = await store.list_audit(limit=2)
    rest = await store.list_audit(after=page[-1].seq)
    assert [r.seq for r in page + rest] == [1, 2, 3, 4]


async def test_the_store_records_what_it_does_to_sessions_and_shares(store: Store) -> None:
    token = ACTOR.set("token 127.0.0.1")
    try:
        sid = (await store.create_session(title="t", directory="/w")).id
        await store.append(sid, [Message.user("hi"), Message.assistant("hello")])
        await store.append(sid, [Revert(to_seq=1, reason="undo")])
        fork = await store.fork(sid, 1)
        share = await store.create_share(sid, hashlib.sha256(b"x").digest())
        await store.revoke_share(share.id)
        await store.revoke_share(share.id)  # changes nothing: no second record
        await store.delete_session(sid)
    finally:
        ACTOR.reset(token)
    records = await store.list_audit()
    assert [(r.kind, r.session_id) for r in records] == [
        ("session.created", sid),
        ("session.reverted", sid),
        ("session.forked", fork.id),
        ("share.created", sid),
        ("share.revoked", sid),
        ("session.deleted", sid),
    ]
    assert {r.actor for r in records} == {"token 127.0.0.1"}
    assert records[0].detail == {"directory": "/w", "title": "t"}
    assert records[1].detail == {"seq": 3, "to": 1, "reason": "undo"}
    assert records[2].detail == {"from": sid, "at": 1}
    assert records[3].detail["share"] == share.id
    # deleting the session kept its records (and the chain)
    assert [r.kind for r in await store.list_audit(session_id=sid)][-1] == "session.deleted"
    assert await check(store) == []


async def test_an_import_is_recorded(store: Store) -> None:
    source = await store.create_session(title="orig")
    await store.append(source.id, [Message.user("a")])
    info = await store.get_session(source.id)
    entries = await store.read(source.id)
    await store.delete_session(source.id)
    await store.import_session(info, entries)
    (record,) = await store.list_audit(kind="session.imported")
    assert record.session_id == source.id and record.detail["entries"] == 1


async def test_records_hold_no_secret_and_refuse_bad_kinds(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.redaction import Redactor

    secret = "sk-test-abcdefghijklmnopqrstuvwxyz0123"
    record = await store.append_audit(
        draft(
            "tool.call",
            at=time.time(),
            actor=f"token {secret}",
            outcome=f"failed: {secret}",
            detail={"arguments": {"command": f"curl -H 'Authorization: {secret}'"}, secret: 1},
            redactor=Redactor({"OPENAI_API_KEY": secret}),
        )
    )
    assert secret not in json.dumps([record.actor, record.outcome, record.detail])
    assert "[redacted:OPENAI_API_KEY]" in record.detail["arguments"]["command"]
    for bad in ("Tool.Call", "", "tool..call", "a" * 3 + "/x"):
        with pytest.raises(InvalidInput):
            draft(bad, at=1.0)
    with pytest.raises(InvalidInput):
        await store.list_audit(limit=0)


async def test_a_huge_detail_is_cut_to_its_bound(store: Store) -> None:
    record = await store.append_audit(draft("tool.call", at=1.0, detail={"output": "x" * 100_000}))
    assert len(json.dumps(record.detail)) < 20_000
    assert "more characters" in record.detail["output"]
    assert await check(store) == []


async def test_pruning_keeps_the_rest_verifiable(store: Store) -> None:
    for at in (10.0, 20.0, 30.0, 40.0):
        await store.append_audit(draft("tool.call", at=at, detail={"at": at}))
    assert await store.prune_audit(25.0) == 2
    records = await store.list_audit()
    assert [r.seq for r in records] == [3, 4, 5] and records[-1].kind == PRUNED
    assert records[-1].detail["through"] == 2 and records[-1].detail["count"] == 2
    assert await check(store) == []
    assert await store.prune_audit(25.0) == 0  # nothing older: nothing written
    await store.append_audit(draft("tool.call", at=50.0, detail={}))
    assert await check(store) == []


# --- what verify finds in a SQLite file edited behind the store's back ------------------------------------------


async def _filled(path: Path, n: int = 6) -> None:
    async with SqliteStore(path) as store:
        for i in range(n):
            await store.append_audit(draft("tool.call", at=float(i), detail={"i": i}))


async def _problems(path: Path) -> list[tuple[int, str]]:
    async with SqliteStore(path) as store:
        return await check(store)


async def test_verify_reports_an_edited_record_with_its_position(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    await _filled(db)
    with sqlite3.connect(db) as conn:
        conn.execute("""UPDATE audit SET detail = '{"i":99}' WHERE seq = 3""")
    problems = await _problems(db)
    assert problems and problems[0][0] == 3 and "changed" in problems[0][1]


async def test_verify_reports_an_edit_whose_hash_was_recomputed(tmp_path: Path) -> None:
    from tether.store.audit import recomputed

    db = tmp_path / "t.db"
    await _filled(db)
    async with SqliteStore(db) as store:
        (rec,) = [r for r in await store.list_audit() if r.seq == 4]
    forged = AuditRecord(**{**{f: getattr(rec, f) for f in rec.__struct_fields__}, "outcome": "nothing happened"})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE audit SET outcome = ?, hash = ? WHERE seq = 4", (forged.outcome, recomputed(forged)))
    assert await _problems(db) == [(4, "changed: the record after it does not continue from it")]


@pytest.mark.parametrize(("seq", "where"), [(1, 1), (3, 3), (6, 6)])
async def test_verify_reports_a_deleted_record_with_its_position(tmp_path: Path, seq: int, where: int) -> None:
    db = tmp_path / "t.db"
    await _filled(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM audit WHERE seq = ?", (seq,))
    problems = await _problems(db)
    assert [p[0] for p in problems] == [where] and "missing" in problems[0][1], problems


async def test_verify_reports_a_trail_emptied(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    await _filled(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM audit")
    assert [p[0] for p in await _problems(db)] == [1]


async def test_a_schema_6_file_gains_the_trail(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    async with SqliteStore(db) as store:
        sid = (await store.create_session()).id
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE audit")
        conn.execute("DROP TABLE audit_head")
        conn.execute("PRAGMA user_version = 6")
    async with SqliteStore(db) as store:
        await store.delete_session(sid)
        assert [r.kind for r in await store.list_audit()] == ["session.deleted"]


WRITER = """
import asyncio, sys
from tether.store import SqliteStore
from tether.store.audit import draft

async def main(path, name, n):
    async with SqliteStore(path) as store:
        for i in range(n):
            await store.append_audit(draft("tool.call", at=float(i), actor=name, detail={"i": i}))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_two_processes_appending_at_once_keep_one_chain(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    async with SqliteStore(db):
        pass
    n = 300
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(db), name, str(n)], stderr=subprocess.PIPE)
        for name in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    async with SqliteStore(db) as store:
        records = [r async for r in walk(store)]
        assert [r.seq for r in records] == list(range(1, 2 * n + 1))
        for actor in ("a", "b"):  # each writer's records in its own order
            assert [r.detail["i"] for r in records if r.actor == actor] == list(range(n))
        assert await check(store) == []
