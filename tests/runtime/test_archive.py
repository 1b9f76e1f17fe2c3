"""The archive against a real S3 service (Ceph's RADOS Gateway on loopback, the `s3` fixture): a session and
its sub-agent sessions out to the bucket and back, exactly; 1,000 sessions archived and restored, equal entry
for entry; a process SIGKILLed at each step of an archive leaves every session readable (from the store or
from the bucket, never neither); an object that does not check out is refused and changes nothing."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tether.errors import InvalidInput
from tether.messages import Message, Revert, ToolCallPart, ToolResultPart
from tether.runtime.archive import ARCHIVED, archive_session, archived, decode_tree, restore_session, select
from tether.runtime.handle import SessionHandle
from tether.store import SqliteStore, Store
from tether.store.objects import Bucket

pytestmark = pytest.mark.slow


async def make(store: Store, directory: str, n: int = 6, title: str = "t") -> str:
    info = await store.create_session(directory=directory, title=title, metadata={"k": [1, "ü"]})
    bodies: list[Any] = []
    for i in range(n // 2):
        call = ToolCallPart(id=f"c{i}", name="bash", arguments={"command": f"echo {i}"})
        bodies += [
            Message.assistant(f"answer {i}", tool_calls=[call]),
            Message.tool(ToolResultPart(call_id=f"c{i}", content=f"{i}\n")),
        ]
    await store.append(info.id, [Message.user("start"), *bodies])
    return info.id


async def snapshot(store: Store, session_id: str) -> list[Any]:
    """Every session of the tree with every entry, as the store gives them."""
    out: list[Any] = []
    frontier = [session_id]
    while frontier:
        sid = frontier.pop(0)
        out.append((await store.get_session(sid), await store.read(sid)))
        frontier += sorted(s.id for s in (await store.list_sessions(parent_id=sid, limit=1000)).items)
    return out


async def test_a_session_and_its_sub_agents_go_out_and_come_back_exactly(store: Store, s3: Bucket) -> None:
    sid = await make(store, "/w")
    child = await store.create_session(parent_id=sid, directory="/w", metadata={"task": {"depth": 1}})
    await store.append(child.id, [Message.user("sub"), Message.assistant("done")])
    await store.append(sid, [Revert(to_seq=2, reason="again")])
    before = await snapshot(store, sid)

    result = await archive_session(store, s3, sid)
    assert (result.sessions, result.entries) == (2, len(before[0][1]) + 2)
    stub = await store.get_session(sid)
    marker = archived(stub)
    assert marker is not None and stub.entry_count == 0 and await store.read(sid) == []
    assert (stub.title, stub.created_at, stub.updated_at, stub.directory) == (
        before[0][0].title,
        before[0][0].created_at,
        before[0][0].updated_at,
        "/w",
    )
    assert marker["counters"]["entry_count"] == before[0][0].entry_count
    # listed (as archived), and its child is gone with it
    assert [s.id for s in (await store.list_sessions(directory="/w")).items] == [sid]
    assert (await store.list_sessions(parent_id=sid)).items == []
    # the object and its manifest check out
    packed = s3.get(marker["key"])
    manifest = json.loads(s3.get(marker["manifest"]))
    assert manifest["sha256"] == hashlib.sha256(packed).hexdigest() == marker["sha256"]
    raw = gzip.decompress(packed)
    assert manifest["raw_sha256"] == hashlib.sha256(raw).hexdigest()
    assert manifest["sessions"] == [{"id": sid, "entries": len(before[0][1])}, {"id": child.id, "entries": 2}]
    assert decode_tree(raw) == before
    # opening it says how to bring it back
    with pytest.raises(InvalidInput, match=f"tether archive --restore {sid}"):
        await SessionHandle.open(store, sid)
    with pytest.raises(InvalidInput, match="archived already"):
        await archive_session(store, s3, sid)

    await restore_session(store, sid)
    assert await snapshot(store, sid) == before
    kinds = [r.kind for r in await store.list_audit(session_id=sid)]
    assert kinds[-2:] == ["session.archived", "session.restored"]
    with pytest.raises(InvalidInput, match="is not archived"):
        await restore_session(store, sid)


async def test_a_sub_agent_session_is_archived_with_its_parent_only(store: Store, s3: Bucket) -> None:
    sid = await make(store, "/w")
    child = await store.create_session(parent_id=sid)
    with pytest.raises(InvalidInput, match="archive its parent"):
        await archive_session(store, s3, child.id)


async def test_a_damaged_object_is_refused_and_the_stub_stays(store: Store, s3: Bucket) -> None:
    sid = await make(store, "/w")
    await archive_session(store, s3, sid)
    marker = archived(await store.get_session(sid))
    assert marker is not None
    s3.put(marker["key"], gzip.compress(b'{"session": {"id": "x"}}\n'))
    with pytest.raises(InvalidInput, match="SHA-256 differs"):
        await restore_session(store, sid)
    assert archived(await store.get_session(sid)) is not None
    s3.delete(marker["key"])
    with pytest.raises(Exception, match="no object"):
        await restore_session(store, sid)


async def test_a_missing_bucket_is_a_clear_error_and_nothing_changes(store: Store, s3: Bucket) -> None:
    from tether.errors import StoreUnavailable
    from tether.store.objects import BucketConfig

    sid = await make(store, "/w")
    before = await snapshot(store, sid)
    nowhere = Bucket(BucketConfig("no-such-bucket-h28", "tether/", s3.config.endpoint_url))
    with pytest.raises(StoreUnavailable, match="create the bucket"):
        await archive_session(store, nowhere, sid)
    assert await snapshot(store, sid) == before and await store.get_lease(sid) is None


async def test_selection_by_age_and_directory(store: Store, s3: Bucket) -> None:
    old = await make(store, "/a")
    new = await make(store, "/a")
    other = await make(store, "/b")
    assert {s.id for s in await select(store, directory="/a")} == {old, new}
    assert {s.id for s in await select(store, older_than=3600)} == set()
    assert {s.id for s in await select(store, older_than=0)} == {old, new, other}
    await archive_session(store, s3, old)
    assert {s.id for s in await select(store, directory="/a")} == {new}  # archived ones left out


async def test_a_thousand_sessions_archive_and_restore_equal_entry_for_entry(tmp_path: Path, s3: Bucket) -> None:
    import asyncio

    async with SqliteStore(tmp_path / "t.db") as store:
        ids = [await make(store, "/many", n=4 + i % 5, title=f"s{i}") for i in range(1000)]
        before = {sid: await snapshot(store, sid) for sid in ids}
        gate = asyncio.Semaphore(8)

        async def out(sid: str) -> None:
            async with gate:
                await archive_session(store, s3, sid)

        async def back(sid: str) -> None:
            async with gate:
                await restore_session(store, sid)

        await asyncio.gather(*(out(s) for s in ids))
        assert all([archived(await store.get_session(s)) is not None for s in ids])
        assert len(s3.list("tether/sessions/")) == 2000
        await asyncio.gather(*(back(s) for s in ids))
        for sid in ids:
            assert await snapshot(store, sid) == before[sid]
        assert (await store.get_session(ids[0])).cost == Decimal(0) + before[ids[0]][0][0].cost


# --- SIGKILL at each step ----------------------------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from tether.store import SqliteStore
    from tether.store.objects import Bucket, BucketConfig
    from tether.runtime import archive

    db, bucket_name, endpoint, step = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    seen = {"put": 0, "get": 0}

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class Dying(Bucket):
        def put(self, key, data, content_type="application/octet-stream"):
            if step == "mid-object" and seen["put"] == 0:
                super().put(key, data[: len(data) // 2], content_type)  # a torn object, then death
                die()
            super().put(key, data, content_type)
            seen["put"] += 1
            if step == f"after-put-{seen['put']}":
                die()

        def get(self, key):
            data = super().get(key)
            seen["get"] += 1
            if step == f"after-get-{seen['get']}":
                die()
            return data

    async def main():
        async with SqliteStore(db) as store:
            real = store.replace_session
            async def replace(*args, **kwargs):
                if step == "before-swap":
                    die()
                out = await real(*args, **kwargs)
                if step == "after-swap":
                    die()
                return out
            store.replace_session = replace
            bucket = Dying(BucketConfig(bucket_name, "tether/", endpoint))
            ids = [s.id for s in await archive.select(store, directory="/k")]
            for sid in ids:
                await archive.archive_session(store, bucket, sid)

    asyncio.run(main())
    """
)
STEPS = ["mid-object", "after-put-1", "after-put-2", "after-get-1", "after-get-2", "before-swap", "after-swap"]


@pytest.mark.parametrize("step", [*STEPS, "none"])
async def test_a_sigkill_at_each_step_leaves_every_session_readable(tmp_path: Path, s3: Bucket, step: str) -> None:
    db = tmp_path / "t.db"
    async with SqliteStore(db) as store:
        ids = [await make(store, "/k", n=8) for _ in range(3)]
        before = {sid: await snapshot(store, sid) for sid in ids}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), s3.config.bucket, str(s3.config.endpoint_url), step],
        env=env,
        capture_output=True,
        timeout=300,
    )
    if step == "none":
        assert done.returncode == 0, done.stderr.decode()
    else:
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    async with SqliteStore(db) as store:
        states = []
        for sid in ids:
            info = await store.get_session(sid)  # always listed: the old state or the new one
            marker = archived(info)
            if marker is None:
                assert await snapshot(store, sid) == before[sid]  # the old state, whole
                states.append("store")
            else:
                packed = s3.get(marker["key"])  # the new state: the bucket has it, whole
                assert hashlib.sha256(packed).hexdigest() == marker["sha256"]
                assert decode_tree(gzip.decompress(packed)) == before[sid]
                states.append("bucket")
                await restore_session(store, sid)
                assert await snapshot(store, sid) == before[sid]
            assert await store.get_lease(sid) is None or step != "none"
        expected = {"none": ["bucket"] * 3, "after-swap": ["bucket", "store", "store"]}.get(step, ["store"] * 3)
        assert sorted(states) == sorted(expected)  # (archived most recently updated first)
        # whatever was left, the next archive goes through (a dead run's lease is taken over on this host)
        if step not in ("none",):
            for sid in ids:
                lease = await store.get_lease(sid)
                if lease is not None:
                    await store.release_lease(sid, lease.holder)
            for sid in ids:
                await archive_session(store, s3, sid)
                await restore_session(store, sid)
                assert await snapshot(store, sid) == before[sid]


def test_the_manifest_is_json_with_checksums(tmp_path: Path, s3: Bucket) -> None:
    import asyncio

    async def main() -> dict[str, Any]:
        async with SqliteStore(tmp_path / "t.db") as store:
            sid = await make(store, "/m")
            await archive_session(store, s3, sid)
            marker = archived(await store.get_session(sid))
            assert marker is not None and ARCHIVED in (await store.get_session(sid)).metadata
            return dict(json.loads(s3.get(marker["manifest"])))

    manifest = asyncio.run(main())
    assert set(manifest) == {
        "format",
        "session_id",
        "object",
        "bytes",
        "sha256",
        "raw_bytes",
        "raw_sha256",
        "sessions",
        "archived_at",
    }
