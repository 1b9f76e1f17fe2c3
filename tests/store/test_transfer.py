"""Copying a store into another (`tether.store.transfer`): what each backend offers for it (artifacts listed,
shares with their token hashes, restored exactly: run on every backend through the `store` fixture), and the
migration between backends: everything kept entry for entry, reruns that skip, redo and refuse, a copy
stopped midway and finished, and 1,000 sessions there and back."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from tether.errors import InvalidInput, NotFound, SessionNotFound
from tether.ids import new_id
from tether.messages import Entry, Message, Revert, TextPart, TitleChange, ToolCallPart, ToolResultPart, Usage
from tether.store import MemoryStore, SqliteStore, Store
from tether.store.records import SessionInfo, Share
from tether.store.transfer import (
    MigrationConflict,
    migrate,
    parents_first,
    session_checksum,
)

from ..conftest import BACKENDS, make_store


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


# --- what every backend offers a migration --------------------------------------------------------------


async def test_artifacts_are_listed_in_id_order_page_by_page_with_their_media_types(store: Store) -> None:
    ids = {
        await store.put_artifact(f"payload {i}".encode(), "text/plain" if i % 2 else "application/json")
        for i in range(7)
    }
    first = await store.list_artifacts(limit=3)
    rest = await store.list_artifacts(after=first[-1].id, limit=100)
    listed = first + rest
    assert [a.id for a in listed] == sorted(ids)
    for a in listed:
        data = await store.get_artifact(a.id)
        assert a.size == len(data) and a.media_type == (
            "text/plain" if int(data.split()[1]) % 2 else "application/json"
        )
    assert await store.list_artifacts(after=listed[-1].id) == []


@pytest.mark.parametrize("bad", [{"after": "art_nothex"}, {"limit": 0}, {"limit": 10_001}, {"limit": True}])
async def test_a_bad_artifact_listing_is_refused(store: Store, bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        await store.list_artifacts(**bad)


async def test_share_records_carry_token_hashes_and_restore_exactly(store: Store) -> None:
    sid = (await store.create_session()).id
    live = await store.create_share(sid, digest("a"), expires_at=time.time() + 3600)
    gone = await store.create_share(sid, digest("b"))
    gone = await store.revoke_share(gone.id)
    records = await store.share_records(sid)
    assert records == [(live, digest("a")), (gone, digest("b"))]

    other = (await store.create_session()).id
    copied = Share(
        id=new_id("shr"),
        session_id=other,
        created_at=1_700_000_000.5,
        expires_at=1_800_000_000.0,
        revoked_at=1_700_000_100.25,
    )
    assert await store.restore_share(copied, digest("c")) is True
    assert await store.restore_share(copied, digest("c")) is False  # already there: nothing written
    assert await store.share_by_token(digest("c")) == copied
    assert await store.share_records(other) == [(copied, digest("c"))]


async def test_restore_share_refuses_what_it_cannot_keep(store: Store) -> None:
    sid = (await store.create_session()).id
    await store.create_share(sid, digest("taken"))
    share = Share(id=new_id("shr"), session_id=sid, created_at=1_700_000_000.0)
    with pytest.raises(InvalidInput):
        await store.restore_share(share, digest("taken"))  # another share's token
    with pytest.raises(InvalidInput):
        await store.restore_share(share, b"short")
    with pytest.raises(InvalidInput):
        await store.restore_share(Share(id=new_id("shr"), session_id=sid, created_at=-1.0), digest("y"))
    with pytest.raises(SessionNotFound):
        await store.restore_share(Share(id=new_id("shr"), session_id=new_id("ses"), created_at=1.0), digest("z"))
    with pytest.raises(SessionNotFound):
        await store.share_records(new_id("ses"))
    assert len(await store.share_records(sid)) == 1  # nothing written by the refusals


# --- a store with a bit of everything ---------------------------------------------------------------------


def _turns(n: int, tag: str) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        out.append(Message(role="user", parts=[TextPart(text=f"{tag} question {i} about ünïcode and zebras")]))
        if i % 3 == 2:
            call = ToolCallPart(id=f"c{i}", name="bash", arguments={"command": f"echo {i}"})
            out.append(Message(role="assistant", parts=[call], usage=Usage(input_tokens=10 + i, output_tokens=3)))
            out.append(Message(role="tool", parts=[ToolResultPart(call_id=f"c{i}", content=f"{i}\n")]))
        out.append(
            Message(
                role="assistant",
                parts=[TextPart(text=f"{tag} answer {i}")],
                usage=Usage(input_tokens=20, output_tokens=5 + i),
            )
        )
    return out


async def fill(store: Store, sessions: int = 6) -> list[str]:
    """Sessions of every shape: imported with source times, a parent with sub-agents (two levels), a fork, a
    revert and a title change, metadata, shares (one revoked), artifacts and a streamed answer."""
    ids: list[str] = []
    base = 1_600_000_000.123456
    for k in range(sessions):
        bodies = _turns(3 + k, f"s{k}")
        info = SessionInfo(
            id=new_id("ses"), created_at=base + k, updated_at=base + k + 50, title=f"imported {k}",
            directory=f"/work/p{k % 2}", agent="build", model="m-1", metadata={"imported": {"source": "x"}, "k": k},
        )  # fmt: skip
        entries = [Entry(i + 1, base + k + i * 0.001, b) for i, b in enumerate(bodies)]
        ids.append((await store.import_session(info, entries)).id)
    parent = await store.create_session(directory="/work/p0", title="parent", metadata={"n": [1, 2]})
    await store.append(parent.id, _turns(2, "parent"))
    child = await store.create_session(directory="/work/p0", parent_id=parent.id, metadata={"task": {"depth": 1}})
    await store.append(child.id, _turns(1, "child"))
    grandchild = await store.create_session(directory="/work/p0", parent_id=child.id)
    await store.append(grandchild.id, _turns(1, "grandchild"))
    await store.append(parent.id, [Revert(to_seq=2), TitleChange(title="renamed")])
    fork = await store.fork(parent.id, 3, title="forked")
    await store.update_session(fork.id, state="paused", system_prompt="be brief")
    share = await store.create_share(parent.id, digest("p1"), expires_at=2_000_000_000.0)
    await store.create_share(parent.id, digest("p2"))
    await store.revoke_share(share.id)
    await store.put_artifact(b"x" * 5000, "text/plain")
    await store.put_artifact(b'{"chunks": []}', "application/vnd.tether.chunked-artifact+json")
    await store.save_stream(fork.id, 3, Message(role="assistant", parts=[TextPart(text="half an ans")]))
    return [*ids, parent.id, child.id, grandchild.id, fork.id]


async def everything(store: Store) -> dict[str, Any]:
    """All a migration must keep, read back through the protocol: rows, entries, shares, streams, artifacts."""
    out: dict[str, Any] = {"sessions": {}, "artifacts": {}}
    cursor = None
    while True:
        page = await store.list_sessions(limit=200, cursor=cursor)
        for info in page.items:
            entries = [e async for e in store.iter_entries(info.id)]
            stream = await store.get_stream(info.id)
            out["sessions"][info.id] = (
                info,
                entries,
                await store.share_records(info.id),
                (stream.after_seq, stream.message) if stream else None,
            )
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    for a in await store.list_artifacts(limit=10_000):
        out["artifacts"][a.id] = (a, await store.get_artifact(a.id))
    return out


PAIRS = [(a, b) for a in BACKENDS for b in BACKENDS]


def open_kind(kind: str, folder: Path, request: pytest.FixtureRequest) -> Store:
    """A store of `kind` in `folder`; on PostgreSQL the test's database first, then more on the same server
    (dropped after the test), so that a test can hold two PostgreSQL stores."""
    folder.mkdir(exist_ok=True)
    if kind != "postgres":
        return make_store(kind, folder)
    from tether.store.postgres import PostgresStore

    taken = getattr(request.node, "_pg_taken", 0)
    request.node._pg_taken = taken + 1
    if taken == 0:
        return PostgresStore(request.getfixturevalue("postgres_url"))
    import uuid

    import psycopg

    server = request.getfixturevalue("postgres_server")
    name = f"t_more_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    request.addfinalizer(drop)
    return PostgresStore(server.rsplit("/", 1)[0] + "/" + name)


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
async def test_a_migration_keeps_everything_entry_for_entry(
    tmp_path: Path, src_kind: str, dst_kind: str, request: pytest.FixtureRequest
) -> None:
    source, target = open_kind(src_kind, tmp_path / "a", request), open_kind(dst_kind, tmp_path / "b", request)
    try:
        ids = await fill(source)
        seen: list[str] = []
        report = await migrate(source, target, progress=lambda p: seen.append(p.phase))
        assert (report.sessions, report.copied, report.skipped, report.verified) == (len(ids), len(ids), 0, len(ids))
        assert report.artifacts == 2 and report.shares == 2 and report.entries > 50
        assert seen[0] == "artifacts" and "sessions" in seen and seen[-1] == "done"
        assert await everything(target) == await everything(source)
        # the target searches what it was given, and follows lineage as the source does
        hits = await target.search("zebras", directory="/work/p1")
        assert hits and {h.session_id for h in hits} <= set(ids)
        parent = ids[-4]  # fill: ..., parent, child, grandchild, fork
        page = await target.list_sessions(parent_id=parent)
        assert [s.id for s in page.items] == [s.id for s in (await source.list_sessions(parent_id=parent)).items]
        assert await target.reverted_spans(parent) == await source.reverted_spans(parent)
    finally:
        await source.close()
        await target.close()


async def test_a_rerun_skips_what_is_whole_and_copies_again_what_the_source_changed(tmp_path: Path) -> None:
    source, target = SqliteStore(tmp_path / "a.db"), SqliteStore(tmp_path / "b.db")
    try:
        ids = await fill(source)
        await migrate(source, target)
        again = await migrate(source, target)
        assert (again.copied, again.skipped, again.replaced, again.artifacts, again.shares) == (0, len(ids), 0, 0, 0)
        await source.append(ids[0], _turns(1, "later"))
        await source.update_session(ids[1], title="retitled")
        parent = ids[-4]  # fill: ..., parent, child, grandchild, fork
        await source.append(parent, _turns(1, "more"))  # its sub-agents go with it and come back
        third = await migrate(source, target)
        assert (third.replaced, third.copied) == (3, 5)
        assert await everything(target) == await everything(source)
    finally:
        await source.close()
        await target.close()


async def test_a_copy_written_to_in_the_target_is_a_conflict_until_overwrite(tmp_path: Path) -> None:
    source, target = SqliteStore(tmp_path / "a.db"), SqliteStore(tmp_path / "b.db")
    try:
        ids = await fill(source, sessions=2)
        await migrate(source, target)
        await target.append(ids[0], _turns(1, "written in the target"))
        before = [e async for e in target.iter_entries(ids[0])]
        with pytest.raises(MigrationConflict, match=ids[0]):
            await migrate(source, target)
        assert [e async for e in target.iter_entries(ids[0])] == before  # nothing lost
        report = await migrate(source, target, overwrite=True)
        assert report.replaced == 1
        assert await everything(target) == await everything(source)
    finally:
        await source.close()
        await target.close()


class _Failing(MemoryStore):
    """A target that fails on its n-th import: a migration stopped midway."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.imports = 0
        self.fail_at = fail_at

    async def import_session(self, info: SessionInfo, entries: Any) -> SessionInfo:
        self.imports += 1
        if self.imports == self.fail_at:
            raise OSError("connection lost")
        return await super().import_session(info, entries)


async def test_a_migration_stopped_midway_is_finished_by_the_next(tmp_path: Path) -> None:
    source = SqliteStore(tmp_path / "a.db")
    target = _Failing(fail_at=5)
    try:
        ids = await fill(source)
        with pytest.raises(OSError):
            await migrate(source, target)
        assert 0 < len((await target.list_sessions(limit=100)).items) < len(ids)
        report = await migrate(source, target)
        assert report.skipped == 4 and report.copied == len(ids) - 4 and report.verified == len(ids)
        assert await everything(target) == await everything(source)
    finally:
        await source.close()


async def test_the_verification_finds_a_copy_that_differs(tmp_path: Path) -> None:
    source, target = SqliteStore(tmp_path / "a.db"), SqliteStore(tmp_path / "b.db")
    try:
        ids = await fill(source, sessions=2)
        await migrate(source, target)
        info = await source.get_session(ids[0])
        assert await session_checksum(source, info) == await session_checksum(target, await target.get_session(ids[0]))
        with target._reading() as conn:  # damage the copy under the store's feet, as a disk or a person could
            conn.execute(
                "UPDATE entries SET payload = replace(payload, 'zebras', 'horses') WHERE session_id = ?", (ids[0],)
            )
        assert await session_checksum(source, info) != await session_checksum(target, await target.get_session(ids[0]))
    finally:
        await source.close()
        await target.close()


def test_parents_come_before_their_children_whatever_the_listing_order() -> None:
    def row(sid: str, parent: str | None, at: float) -> SessionInfo:
        return SessionInfo(id=sid, created_at=at, updated_at=at, parent_id=parent)

    rows = [
        row("c", "b", 1),
        row("b", "a", 2),
        row("a", None, 3),
        row("x", "gone", 0),
        row("loop1", "loop2", 4),
        row("loop2", "loop1", 5),
    ]
    order = [r.id for r in parents_first(rows)]
    assert order.index("a") < order.index("b") < order.index("c")
    assert sorted(order) == sorted(r.id for r in rows)


async def test_a_session_with_an_unreadable_entry_stops_the_copy_with_its_name(tmp_path: Path) -> None:
    source, target = SqliteStore(tmp_path / "a.db"), MemoryStore()
    try:
        ids = await fill(source, sessions=1)
        with source._reading() as conn:
            conn.execute("UPDATE entries SET payload = '{not json' WHERE session_id = ? AND seq = 2", (ids[0],))
        source.on_corrupt = lambda e: None
        with pytest.raises(Exception, match=f"{ids[0]}.*cannot be read"):
            await migrate(source, target)
        with pytest.raises(NotFound):
            await target.get_session(ids[0])  # nothing half-copied
    finally:
        await source.close()


async def test_there_and_back_compares_equal_on_1000_sessions(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """SQLite -> (every other backend) -> SQLite: what comes back equals what went, entry for entry."""
    first = SqliteStore(tmp_path / "first.db")
    try:
        base = 1_650_000_000.0
        for k in range(1000):
            info = SessionInfo(
                id=new_id("ses"), created_at=base + k, updated_at=base + k + 1, title=f"t{k}", directory=f"/d/{k % 7}"
            )
            bodies = _turns(1 + k % 4, f"n{k}")
            await first.import_session(info, [Entry(i + 1, base + k + i / 1000, b) for i, b in enumerate(bodies)])
        expected = await everything(first)
        for middle_kind in BACKENDS:
            middle = open_kind(middle_kind, tmp_path / middle_kind, request)
            back = SqliteStore(tmp_path / middle_kind / "back.db")
            try:
                assert (await migrate(first, middle)).copied == 1000
                assert (await migrate(middle, back)).verified == 1000
                assert await everything(back) == expected
            finally:
                await middle.close()
                await back.close()
    finally:
        await first.close()
