"""Sessions moved out of the database into S3-compatible object storage, and back (`tether archive`).

A session is archived with its sub-agent sessions (they belong to it) as one gzip-compressed JSON Lines
object, ``sessions/ID.jsonl.gz`` (a ``session`` line, then its ``entry`` lines, for each session of the tree,
parents first), and a manifest beside it, ``sessions/ID.manifest.json``, with the object's size and SHA-256,
the uncompressed lines' SHA-256, and each session's id and entry count. The steps, each safe to die after:

1. the object and the manifest are written (the store is untouched: a crash leaves the old state, and an
   orphan object that the next archive of the session overwrites);
2. both are read back, checked against their checksums and decoded entry by entry against what was read
   from the store (a mismatch stops here, store untouched);
3. one store transaction swaps the session for its stub (`Journal.replace_session`): the same row (id,
   title, directory, times), no entries, and ``metadata["archived"]`` saying where it is. The old state or
   the new one: never neither.

The session stays listed (as archived); opening it says how to bring it back; `restore` reads the object,
checks it, and swaps the stub for the sessions exactly as they were (ids, times, entries, metadata), again
in one transaction. The session's lease is held throughout, so no run writes to it meanwhile."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import InvalidInput, NotFound
from ..messages import Entry, decode_body, encode_body
from ..store.audit import draft
from ..store.objects import Bucket, BucketConfig
from ..store.protocols import Journal, JournalLeases
from ..store.records import SessionInfo

ARCHIVED = "archived"
"""The metadata key of an archived session's stub: ``{"bucket", "key", "manifest", "endpoint_url", "prefix",
"sha256", "bytes", "sessions", "entries", "at", "counters"}``."""
FORMAT = 1
LEASE_TTL = 600.0
_info_encoder = msgspec.json.Encoder()
Tree = list[tuple[SessionInfo, list[Entry]]]


def archived(info: SessionInfo) -> dict[str, Any] | None:
    marker = info.metadata.get(ARCHIVED)
    return marker if isinstance(marker, dict) else None


def refuse_archived(info: SessionInfo) -> None:
    """Opening an archived session: say where it is and how to bring it back."""
    marker = archived(info)
    if marker is not None:
        where = f"s3://{marker.get('bucket')}/{marker.get('key')}"
        raise InvalidInput(
            f"session {info.id} is archived in {where}: bring it back with `tether archive --restore {info.id}`"
        )


def object_names(session_id: str) -> tuple[str, str]:
    return f"sessions/{session_id}.jsonl.gz", f"sessions/{session_id}.manifest.json"


def encode_tree(tree: Tree) -> bytes:
    lines: list[bytes] = []
    for info, entries in tree:
        lines.append(b'{"session":' + _info_encoder.encode(info) + b"}")
        for e in entries:
            lines.append(
                b'{"entry":{"session_id":'
                + json.dumps(info.id).encode()
                + b',"seq":'
                + str(e.seq).encode()
                + b',"created_at":'
                + _info_encoder.encode(e.created_at)
                + b',"body":'
                + encode_body(e.body)
                + b"}}"
            )
    return b"\n".join(lines) + b"\n"


class _EntryLine(msgspec.Struct):
    session_id: str
    seq: int
    created_at: float
    body: msgspec.Raw


def decode_tree(raw: bytes) -> Tree:
    """The sessions of an archive object, in its order; `InvalidInput` naming the line of anything wrong."""
    tree: Tree = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = msgspec.json.decode(line, type=dict[str, msgspec.Raw])
            if "session" in item:
                tree.append((msgspec.json.decode(item["session"], type=SessionInfo), []))
            elif "entry" in item and tree:
                e = msgspec.json.decode(item["entry"], type=_EntryLine)
                if e.session_id != tree[-1][0].id:
                    raise InvalidInput(f"an entry of {e.session_id} under session {tree[-1][0].id}")
                tree[-1][1].append(Entry(e.seq, e.created_at, decode_body(bytes(e.body))))
            else:
                raise InvalidInput("neither a session nor an entry after one")
        except (msgspec.DecodeError, msgspec.ValidationError, InvalidInput) as exc:
            raise InvalidInput(f"archive line {number}: {exc}") from None
    return tree


@dataclass(frozen=True)
class Archived:
    session_id: str
    where: str
    sessions: int
    entries: int
    bytes: int
    raw_bytes: int


async def _tree(store: Journal, info: SessionInfo) -> Tree:
    tree: Tree = []
    frontier = [info]
    while frontier:
        current = frontier.pop(0)
        tree.append((current, [e async for e in store.iter_entries(current.id, batch=2000)]))
        cursor: str | None = None
        while True:
            page = await store.list_sessions(parent_id=current.id, limit=1000, cursor=cursor)
            frontier += sorted(page.items, key=lambda s: (s.created_at, s.id))
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    return tree


def _stub(info: SessionInfo, marker: dict[str, Any]) -> SessionInfo:
    counters = {
        "entry_count": info.entry_count,
        "message_count": info.message_count,
        "input_tokens": info.input_tokens,
        "output_tokens": info.output_tokens,
        "cost": str(info.cost),
    }
    return msgspec.structs.replace(info, metadata={**info.metadata, ARCHIVED: {**marker, "counters": counters}})


async def archive_session(store: JournalLeases, bucket: Bucket, session_id: str) -> Archived:
    """Move one top-level session (with its sub-agent sessions) to the bucket; see the module docstring."""
    info = await store.get_session(session_id)
    if archived(info) is not None:
        raise InvalidInput(f"session {session_id} is archived already")
    if info.parent_id is not None:
        raise InvalidInput(f"session {session_id} is a sub-agent's: archive its parent {info.parent_id}")
    holder = f"archive:{os.getpid()}:{time.monotonic_ns()}"
    await store.acquire_lease(session_id, holder, ttl=LEASE_TTL, pid=os.getpid())  # SessionBusy: a run holds it
    try:
        tree = await _tree(store, info)
        raw = encode_tree(tree)
        packed = await asyncio.to_thread(gzip.compress, raw, 6, mtime=0)
        key, manifest_key = (bucket.config.key(n) for n in object_names(session_id))
        manifest = {
            "format": FORMAT,
            "session_id": session_id,
            "object": key,
            "bytes": len(packed),
            "sha256": hashlib.sha256(packed).hexdigest(),
            "raw_bytes": len(raw),
            "raw_sha256": hashlib.sha256(raw).hexdigest(),
            "sessions": [{"id": i.id, "entries": len(es)} for i, es in tree],
            "archived_at": time.time(),
        }
        manifest_bytes = json.dumps(manifest, indent=1, sort_keys=True).encode()
        await asyncio.to_thread(bucket.put, key, packed, "application/gzip")
        await asyncio.to_thread(bucket.put, manifest_key, manifest_bytes, "application/json")
        # read back, verified, before anything leaves the store
        back = await asyncio.to_thread(bucket.get, key)
        if hashlib.sha256(back).hexdigest() != manifest["sha256"]:
            raise InvalidInput(f"the archive of {session_id} read back differs from what was written: not archived")
        if await asyncio.to_thread(bucket.get, manifest_key) != manifest_bytes:
            raise InvalidInput(f"the manifest of {session_id} read back differs from what was written: not archived")
        if decode_tree(await asyncio.to_thread(gzip.decompress, back)) != tree:
            raise InvalidInput(f"the archive of {session_id} does not decode to the session: not archived")
        entries = sum(len(es) for _, es in tree)
        marker: dict[str, Any] = {
            "bucket": bucket.config.bucket,
            "prefix": bucket.config.prefix,
            "endpoint_url": bucket.config.endpoint_url,
            "key": key,
            "manifest": manifest_key,
            "sha256": manifest["sha256"],
            "bytes": len(packed),
            "sessions": len(tree),
            "entries": entries,
            "at": manifest["archived_at"],
        }
        record = draft("session.archived", at=time.time(), session_id=session_id, detail=marker)
        current = await store.get_session(session_id)
        if current.entry_count != info.entry_count:
            raise InvalidInput(f"session {session_id} changed while it was being archived: not archived, try again")
        await store.replace_session(session_id, [(_stub(current, marker), [])], record)
    finally:
        try:
            await store.release_lease(session_id, holder)
        except NotFound:
            pass
    return Archived(
        session_id, f"s3://{bucket.config.bucket}/{key}", len(tree), marker["entries"], len(packed), len(raw)
    )


def bucket_of(marker: dict[str, Any], config: BucketConfig | None) -> BucketConfig:
    """The bucket an archived session is in: its stub's, with the endpoint configured now when the stub has none."""
    endpoint = marker.get("endpoint_url") or (config.endpoint_url if config else None)
    region = config.region if config else None
    return BucketConfig(str(marker["bucket"]), str(marker.get("prefix") or ""), endpoint, region)


async def restore_session(store: Journal, session_id: str, *, config: BucketConfig | None = None) -> list[SessionInfo]:
    """Bring an archived session back exactly as it was (with its sub-agent sessions)."""
    info = await store.get_session(session_id)
    marker = archived(info)
    if marker is None:
        raise InvalidInput(f"session {session_id} is not archived")
    bucket = Bucket(bucket_of(marker, config))
    packed = await asyncio.to_thread(bucket.get, str(marker["key"]))
    if hashlib.sha256(packed).hexdigest() != marker.get("sha256"):
        raise InvalidInput(f"the archive of {session_id} in the bucket is not the one archived (its SHA-256 differs)")
    tree = decode_tree(await asyncio.to_thread(gzip.decompress, packed))
    if not tree or tree[0][0].id != session_id:
        raise InvalidInput(f"the archive object of {session_id} holds another session")
    record = draft("session.restored", at=time.time(), session_id=session_id, detail={"from": marker["key"]})
    return await store.replace_session(session_id, [(i, es) for i, es in tree], record)


async def select(
    store: Journal, *, ids: Sequence[str] = (), older_than: float | None = None, directory: str | None = None
) -> list[SessionInfo]:
    """The top-level sessions to archive: those named, or those not updated for `older_than` seconds and/or
    filed under `directory`; archived ones left out."""
    if ids:
        return [await store.get_session(i) for i in ids]
    cutoff = time.time() - older_than if older_than is not None else None
    found: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(directory=directory, parent_id=None, limit=1000, cursor=cursor)
        for s in page.items:
            if archived(s) is None and (cutoff is None or s.updated_at < cutoff):
                found.append(s)
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor
