"""Copying every session of one store into another (`tether migrate`): SQLite to PostgreSQL and back, or any
two backends, written only against the store's protocols.

What is copied: every artifact (walked in id order on both sides at once, so a rerun copies only what is
missing), then every session, parents before their children: its row as it is (id, times, title, lineage,
fork origin, metadata) and its journal with its seqs and source times, in one `import_session` (all of it or
nothing), then its shares with their token hashes (links keep opening) and the answer a run was streaming
in it. The target indexes the journal for search itself (its backlog is filled before the end); recall's
keys are derived and follow. Not copied: leases (runs belong to the store they run on) and the audit trail,
a hash chain that stays with its store (`tether audit verify` there); the target records each import in
its own.

Resumable: a kill leaves each session whole or absent in the target, since its import is one transaction.
A rerun skips a session whose row in the target equals the source's, copies what is absent, and copies
again a session the source changed since (an append, a new title): the old copy is deleted first, but only
when its journal is a prefix of the source's, since otherwise the target's copy was written to and
`MigrationConflict` stops the run before anything is lost (unless `overwrite`). Verified, at the end, per
session: the rows' counters and a sha256 over the row and every entry (seq, time, body), computed on both
sides from what each store reads back, and the shares."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from ..errors import NotFound, StoreError
from ..messages import Entry, encode_body, encode_json
from .protocols import Artifacts, Journal, Store
from .records import ArtifactInfo, SessionInfo


class MigrationConflict(StoreError):
    """A session in the target differs from the source's in a way a copy cannot explain: it holds entries
    the source does not (it was written to after an earlier migration)."""


class MigrationMismatch(StoreError):
    """The verification found sessions whose copy differs from the source."""


@dataclass
class Progress:
    """Where a migration stands, passed to the `progress` callback after each step."""

    phase: str  # "artifacts", "sessions", "search", "verify", "done"
    sessions_total: int = 0
    sessions_done: int = 0
    copied: int = 0
    skipped: int = 0
    replaced: int = 0
    entries: int = 0
    artifacts: int = 0
    shares: int = 0
    verified: int = 0
    indexed: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


class MigrationReport(msgspec.Struct, kw_only=True):
    """What a migration did: sessions in the source, copied now, skipped (already whole in the target),
    replaced (an outdated copy), entries and artifacts copied, shares restored, sessions verified, and the
    sessions found only in the target (left alone)."""

    sessions: int
    copied: int
    skipped: int
    replaced: int
    entries: int
    artifacts: int
    shares: int
    verified: int
    only_in_target: int
    seconds: float


ProgressFn = Callable[[Progress], None]

_ROW_FIELDS = (
    "id", "created_at", "updated_at", "title", "directory", "parent_id", "forked_from", "forked_at", "agent",
    "model", "state", "system_prompt", "entry_count", "message_count", "input_tokens", "output_tokens",
)  # fmt: skip


def row_digest(info: SessionInfo) -> bytes:
    """The canonical bytes of a session's row: every field a copy must keep, counters and cost included."""
    row = {name: getattr(info, name) for name in _ROW_FIELDS}
    row["cost"] = str(info.cost.normalize()) if info.cost else "0"
    row["metadata"] = info.metadata
    return encode_json(row)


def entry_digest(entry: Entry) -> bytes:
    """The canonical bytes of an entry: its seq, its time (exactly, as `repr` of the float) and its body."""
    return b"%d|%s|" % (entry.seq, repr(entry.created_at).encode()) + encode_body(entry.body)


async def session_checksum(store: Journal, info: SessionInfo, *, upto: int | None = None) -> str:
    """The sha256 of the session's row and its entries 1..`upto` (all when None) as `store` reads them back.
    With `upto` the row is left out: a prefix of the journal only."""
    digest = hashlib.sha256()
    if upto is None:
        digest.update(row_digest(info))
    last = info.entry_count if upto is None else upto
    async for entry in store.iter_entries(info.id, 1):
        if entry.seq > last:
            break
        digest.update(b"\n")
        digest.update(entry_digest(entry))
    return digest.hexdigest()


async def _all_sessions(store: Journal) -> list[SessionInfo]:
    infos: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(limit=1000, cursor=cursor)
        infos.extend(page.items)
        if page.next_cursor is None:
            return infos
        cursor = page.next_cursor


def parents_first(infos: Sequence[SessionInfo]) -> list[SessionInfo]:
    """The sessions ordered so that a session's parent comes before it (oldest first within a depth): the
    order in which the target can take them (`import_session` needs the parent)."""
    by_id = {info.id: info for info in infos}
    depth: dict[str, int] = {}
    for info in infos:
        chain: list[str] = []
        sid: str | None = info.id
        while sid is not None and sid not in depth and sid in by_id and sid not in chain:
            chain.append(sid)
            sid = by_id[sid].parent_id
        below = depth.get(sid, -1) if sid is not None else -1  # a parent outside the listing: a root here
        for n, child in enumerate(reversed(chain), start=1):
            depth[child] = below + n
    return sorted(infos, key=lambda i: (depth[i.id], i.created_at, i.id))


async def _artifact_ids(store: Artifacts) -> AsyncIterator[ArtifactInfo]:
    after: str | None = None
    while True:
        page = await store.list_artifacts(after=after, limit=1000)
        for item in page:
            yield item
        if len(page) < 1000:
            return
        after = page[-1].id


async def copy_artifacts(source: Store, target: Store, on_copy: Callable[[], None] | None = None) -> tuple[int, int]:
    """Every artifact of `source` that `target` lacks, copied (both listings are walked in id order at once).
    Returns (copied, present in both). The id is the payload's sha256: the target's answer checks the copy."""
    theirs = _artifact_ids(target)
    have: str | None = None
    exhausted = False
    copied = present = 0
    async for item in _artifact_ids(source):
        while not exhausted and (have is None or have < item.id):
            nxt = await anext(theirs, None)
            if nxt is None:
                exhausted = True
                have = None
            else:
                have = nxt.id
        if have == item.id:
            present += 1
            continue
        data = await source.get_artifact(item.id)
        made = await target.put_artifact(data, item.media_type)
        if made != item.id:
            raise MigrationMismatch(f"artifact {item.id} was stored as {made}: its bytes changed on the way")
        copied += 1
        if on_copy is not None:
            on_copy()
    return copied, present


async def _entries(store: Journal, info: SessionInfo) -> list[Entry]:
    """Entries 1..entry_count of the session, checked dense (a corrupt row the store skipped stops here)."""
    out: list[Entry] = []
    async for entry in store.iter_entries(info.id, 1):
        if entry.seq > info.entry_count:
            break
        if entry.seq != len(out) + 1:
            raise StoreError(
                f"session {info.id} cannot be copied whole: its entry {len(out) + 1} cannot be read "
                f"(run `tether doctor` on the source store)"
            )
        out.append(entry)
    if len(out) != info.entry_count:
        raise StoreError(f"session {info.id}: {info.entry_count} entries counted, {len(out)} read")
    return out


async def _same_prefix(source: Store, target: Store, src: SessionInfo, dst: SessionInfo) -> bool:
    if dst.entry_count > src.entry_count or dst.created_at != src.created_at or dst.parent_id != src.parent_id:
        return False
    return await session_checksum(source, src, upto=dst.entry_count) == await session_checksum(
        target, dst, upto=dst.entry_count
    )


async def _copy_session(source: Store, target: Store, listed: SessionInfo, progress: Progress, overwrite: bool) -> None:
    """One session, its shares and its streamed answer, as the class docstring says."""
    try:
        info = await source.get_session(listed.id)  # as it is now, not as listed a while ago
    except NotFound:
        return  # deleted from the source meanwhile
    try:
        existing: SessionInfo | None = await target.get_session(info.id)
    except NotFound:
        existing = None
    if existing is not None and row_digest(existing) == row_digest(info):
        progress.skipped += 1
    else:
        entries = await _entries(source, info)
        if existing is not None:
            if not overwrite and not await _same_prefix(source, target, info, existing):
                raise MigrationConflict(
                    f"session {info.id} in the target differs from the source's and holds what the source does "
                    f"not ({existing.entry_count} entries against {info.entry_count}, or other entries): it was "
                    "written to after an earlier copy. Rerun with --overwrite to replace it with the source's."
                )
            await target.delete_session(info.id)  # and its sub-agents: they come again after it
            progress.replaced += 1
        await target.import_session(info, entries)
        progress.copied += 1
        progress.entries += len(entries)
    for share, token_hash in await source.share_records(info.id):
        if await target.restore_share(share, token_hash):
            progress.shares += 1
    stream = await source.get_stream(info.id)
    if stream is not None:
        await target.save_stream(info.id, stream.after_seq, stream.message)


async def verify(
    source: Store,
    target: Store,
    infos: Sequence[SessionInfo],
    progress: Progress,
    told: Callable[[], None] = lambda: None,
) -> list[str]:
    """What differs between each session of `infos` in the source and in the target: row and journal
    checksums, counters, shares. Returns one line per difference (empty: all equal). `told` after each
    session (its count in `progress`)."""
    problems: list[str] = []
    for listed in infos:
        try:
            src = await source.get_session(listed.id)
        except NotFound:
            continue
        try:
            dst = await target.get_session(listed.id)
        except NotFound:
            problems.append(f"{listed.id}: missing from the target")
            continue
        if row_digest(src) != row_digest(dst):
            problems.append(f"{src.id}: its row differs ({src.entry_count} entries against {dst.entry_count})")
        elif await session_checksum(source, src) != await session_checksum(target, dst):
            problems.append(f"{src.id}: its entries differ (checksums)")
        theirs = {share.id: (share, h) for share, h in await target.share_records(src.id)}
        for share, token_hash in await source.share_records(src.id):
            if theirs.get(share.id) != (share, token_hash):
                problems.append(f"{src.id}: share {share.id} differs or is missing")
        progress.verified += 1
        told()
    return problems


async def migrate(
    source: Store,
    target: Store,
    *,
    check: bool = True,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
) -> MigrationReport:
    """Copy every session of `source` into `target` (see the module's docstring); with `check`, verify each
    one after. Raises `MigrationConflict` (nothing of that session is changed) and `MigrationMismatch`."""
    state = Progress(phase="artifacts")

    def tell(phase: str | None = None) -> None:
        if phase is not None:
            state.phase = phase
        if progress is not None:
            progress(state)

    def one_artifact() -> None:
        state.artifacts += 1
        if state.artifacts % 100 == 0:
            tell()

    tell()
    await copy_artifacts(source, target, one_artifact)
    infos = parents_first(await _all_sessions(source))
    state.sessions_total = len(infos)
    tell("sessions")
    for info in infos:
        await _copy_session(source, target, info, state, overwrite)
        state.sessions_done += 1
        tell()
    if await target.search_backlog():
        tell("search")
        async for step in target.backfill_search():
            state.indexed = step.entries_indexed
            tell()
    ids = {info.id for info in infos}
    only_there = sum(1 for info in await _all_sessions(target) if info.id not in ids)
    if check:
        tell("verify")
        problems = await verify(source, target, infos, state, tell)
        if problems:
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            raise MigrationMismatch(f"{len(problems)} session(s) differ after the copy: {shown}")
    tell("done")
    return MigrationReport(
        sessions=len(infos),
        copied=state.copied,
        skipped=state.skipped,
        replaced=state.replaced,
        entries=state.entries,
        artifacts=state.artifacts,
        shares=state.shares,
        verified=state.verified,
        only_in_target=only_there,
        seconds=round(state.elapsed, 3),
    )
