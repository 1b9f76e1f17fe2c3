"""`MemoryStore`: the whole store in process memory. The reference semantics of the `Store` protocol, and
a fast store for tests and throwaway sessions; nothing survives the process."""

from __future__ import annotations

import bisect
import copy
import json
import time
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from typing import Any

import msgspec

from ..errors import InvalidInput, NotFound, SeqConflict, SessionNotFound, StoreClosed
from ..ids import check_id, new_id, new_session_id
from ..messages import Entry, EntryBody, Message, Revert, TitleChange, decode_body, encode_body
from . import audit as audit_records
from .audit import GENESIS, AuditDraft, AuditRecord, kind_matches, pruned_draft, seal
from .bookkeeping import artifact_id, decimal_to_pico, message_counters, pico_to_decimal, title_candidate
from .records import (
    UNSET,
    ArtifactInfo,
    BackfillProgress,
    Change,
    ChangedSessions,
    Durability,
    Lease,
    LeaseRequest,
    Page,
    QueuedPrompt,
    RevertSpan,
    SearchHit,
    SessionInfo,
    SessionState,
    Share,
    StreamRecord,
    decode_cursor,
    encode_cursor,
    lease_lost,
)
from .reverts import hidden_spans, is_hidden
from .searchtext import bm25_rank, document, excerpt_of, indexed_text, query_terms, terms
from .validate import (
    check_artifact_id,
    check_artifact_listing,
    check_audit_filters,
    check_change,
    check_changed_sessions,
    check_changes_after,
    check_created_at,
    check_lease,
    check_lease_request,
    check_limit,
    check_new_session,
    check_reservation,
    check_restored_share,
    check_search_filters,
    check_share,
    check_stream,
    check_token_hash,
    check_update,
    validate_bodies,
    validate_import,
)

_message_decoder = msgspec.json.Decoder(Message)


class _Feed:
    """The change numbers of the sessions (`Changes`), as SqliteStore's triggers keep them: the next number
    for each write or deletion, unless the session already holds the latest."""

    def __init__(self) -> None:
        self.stamps: dict[str, int] = {}
        self.top = 0

    def stamp(self, session_id: str) -> None:
        if self.stamps.get(session_id) != self.top:
            self.top += 1
            self.stamps[session_id] = self.top


class _Stamped(dict[str, SessionInfo]):
    """The sessions, stamping each write and deletion in `feed` (a copy shares it: a rollback to a copy
    keeps the stamps, which only ever ask a reader to look again)."""

    def __init__(self, feed: _Feed, *args: Any) -> None:
        super().__init__(*args)
        self.feed = feed

    def __setitem__(self, key: str, value: SessionInfo) -> None:
        super().__setitem__(key, value)
        self.feed.stamp(key)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self.feed.stamp(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self.feed.stamp(key)
        return super().pop(key, *default)

    def copy(self) -> _Stamped:
        return _Stamped(self.feed, self)


def _copy(info: SessionInfo) -> SessionInfo:
    """A row the caller may mutate without touching the store, as if read from disk (metadata nests)."""
    return msgspec.structs.replace(info, metadata=copy.deepcopy(info.metadata))


class MemoryStore:
    """In-memory `Store`. Entries are kept encoded, so that what a reader gets is a copy, as from disk."""

    durability: Durability = "normal"

    def __init__(self) -> None:
        self._sessions: dict[str, SessionInfo] = _Stamped(_Feed())
        self._entries: dict[str, list[tuple[float, bytes]]] = {}
        self._artifacts: dict[str, tuple[bytes, str]] = {}  # id -> (payload, media type)
        self._leases: dict[str, Lease] = {}
        self._shares: dict[str, tuple[bytes, Share]] = {}  # share id -> (token hash, share), oldest first
        self._streams: dict[str, tuple[int, float, bytes]] = {}  # session -> (after_seq, updated_at, message)
        self._closed = False
        self._clock = 0.0
        # (session, seq) -> (role, text, stemmed terms) of indexed entries, filled lazily by search
        self._indexed: dict[tuple[str, int], tuple[str, str, list[str]] | None] = {}
        self._audit: list[AuditRecord] = []
        self._audit_head: tuple[int, str] | None = None
        self._sinks: dict[str, dict[str, int]] = {}
        self._numbers: dict[str, int] = {}  # session -> the highest live event number reserved
        self._changes: list[Change] = []
        self._last_change = 0
        self._queue: dict[str, list[QueuedPrompt]] = {}  # session -> its queued prompts, oldest first
        self._last_queued = 0

    def _now(self) -> float:
        # strictly increasing, so that "most recent first" is well defined even within one clock tick
        now = time.time()
        self._clock = now if now > self._clock else self._clock + 1e-6
        return self._clock

    def _check(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    def _get(self, session_id: str) -> SessionInfo:
        self._check()
        check_id(session_id, "session id")
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id) from None

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def create_session(
        self,
        *,
        id: str | None = None,
        directory: str | None = None,
        parent_id: str | None = None,
        title: str | None = None,
        agent: str | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
        state: SessionState = "active",
        metadata: dict[str, Any] | None = None,
        created_at: float | None = None,
        forking: bool = False,
    ) -> SessionInfo:
        self._check()
        fields: dict[str, Any] = {"title": title, "directory": directory, "agent": agent, "model": model}
        fields.update(system_prompt=system_prompt, metadata=metadata)
        sid = check_new_session(id, parent_id, state, fields) or new_session_id()
        if sid in self._sessions:
            raise InvalidInput(f"session {sid} already exists")
        if parent_id is not None:
            self._get(parent_id)
        now = self._now()
        info = SessionInfo(
            id=sid,
            created_at=created_at if created_at is not None else now,
            updated_at=now,
            title=title,
            directory=directory,
            parent_id=parent_id,
            agent=agent,
            model=model,
            state=state,
            system_prompt=system_prompt,
            metadata=copy.deepcopy(metadata or {}),
        )
        self._sessions[sid] = info
        self._entries[sid] = []
        if not forking:
            self._record(audit_records.created(sid, now, directory, parent_id, title, metadata))
        return _copy(info)

    async def get_session(self, session_id: str) -> SessionInfo:
        return _copy(self._get(session_id))

    async def update_session(self, session_id: str, **fields: Any) -> SessionInfo:
        changes = check_update(session_id, fields)
        info = self._get(session_id)
        if "metadata" in changes:
            changes["metadata"] = copy.deepcopy(changes["metadata"] or {})
        info = msgspec.structs.replace(info, updated_at=self._now(), **changes)
        self._sessions[session_id] = info
        return _copy(info)

    async def delete_session(self, session_id: str) -> list[str]:
        self._get(session_id)
        doomed = [session_id]
        i = 0
        while i < len(doomed):
            doomed.extend(s.id for s in self._sessions.values() if s.parent_id == doomed[i])
            i += 1
        for sid in doomed:
            self._sessions.pop(sid, None)
            self._leases.pop(sid, None)
            self._streams.pop(sid, None)
            self._numbers.pop(sid, None)
            self._queue.pop(sid, None)
            for share_id in [k for k, (_, share) in self._shares.items() if share.session_id == sid]:
                del self._shares[share_id]
            rows = self._entries.pop(sid, [])
            for seq in range(1, len(rows) + 1):
                self._indexed.pop((sid, seq), None)
        self._record(audit_records.deleted(session_id, doomed))
        return doomed

    async def list_sessions(
        self,
        *,
        directory: str | None = None,
        parent_id: str | None = UNSET,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[SessionInfo]:
        self._check()
        check_limit(limit)
        if parent_id is not UNSET and parent_id is not None:
            check_id(parent_id, "parent id")
        rows = [
            s
            for s in self._sessions.values()
            if (directory is None or s.directory == directory) and (parent_id is UNSET or s.parent_id == parent_id)
        ]
        rows.sort(key=lambda s: (s.updated_at, s.id), reverse=True)
        if cursor is not None:
            at, sid = decode_cursor(cursor)
            rows = [s for s in rows if (s.updated_at, s.id) < (at, sid)]
        page = rows[:limit]
        nxt = encode_cursor(page[-1].updated_at, page[-1].id) if len(rows) > limit else None
        return Page([_copy(s) for s in page], nxt)

    async def last_session(self, directory: str) -> SessionInfo | None:
        page = await self.list_sessions(directory=directory, parent_id=None, limit=1)
        return page.items[0] if page.items else None

    async def append(
        self,
        session_id: str,
        bodies: Sequence[EntryBody],
        *,
        expect_seq: int | None = None,
        created_at: Sequence[float] | None = None,
        audit: Sequence[AuditDraft] = (),
    ) -> list[Entry]:
        given = list(audit)
        info = self._get(session_id)
        first = info.entry_count + 1
        if expect_seq is not None and expect_seq != first:
            raise SeqConflict(session_id, expect_seq, first)
        validate_bodies(bodies, first)
        times = check_created_at(created_at, len(bodies))
        encoded = [encode_body(b) for b in bodies]  # fails before anything changes
        now = self._now()
        stamps = times if times is not None else [now] * len(encoded)
        rows = self._entries[session_id]
        rows.extend(zip(stamps, encoded, strict=True))
        messages, t_in, t_out, cost = message_counters(bodies)
        title = info.title if info.title is not None else title_candidate(bodies)
        for body in bodies:
            if isinstance(body, TitleChange):
                title = body.title or None
        self._sessions[session_id] = msgspec.structs.replace(
            info,
            updated_at=now,
            title=title,
            entry_count=info.entry_count + len(bodies),
            message_count=info.message_count + messages,
            input_tokens=info.input_tokens + t_in,
            output_tokens=info.output_tokens + t_out,
            cost=pico_to_decimal(decimal_to_pico(info.cost) + decimal_to_pico(cost)),
        )
        for record in [*given, *audit_records.reverted(session_id, bodies, first, now)]:
            self._record(record)
        return [Entry(first + i, stamps[i], decode_body(data)) for i, data in enumerate(encoded)]

    async def read(self, session_id: str, start: int = 1, end: int | None = None) -> list[Entry]:
        self._get(session_id)
        rows = self._entries[session_id]
        start = max(1, start)
        stop = len(rows) if end is None else min(end, len(rows))
        return [Entry(seq, rows[seq - 1][0], decode_body(rows[seq - 1][1])) for seq in range(start, stop + 1)]

    async def tail(self, session_id: str, n: int) -> list[Entry]:
        count = self._get(session_id).entry_count
        return await self.read(session_id, max(1, count - n + 1), count) if n > 0 else []

    async def iter_entries(self, session_id: str, start: int = 1, *, batch: int = 500) -> AsyncIterator[Entry]:
        seq = start
        while True:
            chunk = await self.read(session_id, seq, seq + batch - 1)
            if not chunk:
                return
            for entry in chunk:
                yield entry
            seq = chunk[-1].seq + 1

    async def fork(
        self, session_id: str, at_seq: int | None = None, *, id: str | None = None, title: str | None = None
    ) -> SessionInfo:
        src = self._get(session_id)
        at = src.entry_count if at_seq is None else at_seq
        if not 0 <= at <= src.entry_count:
            raise InvalidInput(f"cannot fork {session_id} at {at}: it has {src.entry_count} entries")
        new = await self.create_session(
            id=id,
            directory=src.directory,
            title=title if title is not None else src.title,
            agent=src.agent,
            model=src.model,
            system_prompt=src.system_prompt,
            metadata=src.metadata,
            forking=True,
        )
        rows = list(self._entries[session_id][:at])
        self._entries[new.id] = rows
        bodies = [decode_body(data) for _, data in rows]
        messages, t_in, t_out, cost = message_counters(bodies)
        info = msgspec.structs.replace(
            self._sessions[new.id],
            forked_from=session_id,
            forked_at=at,
            entry_count=at,
            message_count=messages,
            input_tokens=t_in,
            output_tokens=t_out,
            cost=Decimal(0) + cost,
        )
        self._sessions[new.id] = info
        self._record(audit_records.forked(new.id, session_id, at, info.created_at))
        return _copy(info)

    async def import_session(self, info: SessionInfo, entries: Sequence[Entry]) -> SessionInfo:
        stored = await self._import(info, entries)
        self._record(audit_records.imported(stored, len(entries)))
        return stored

    async def _import(self, info: SessionInfo, entries: Sequence[Entry]) -> SessionInfo:
        self._check()
        sid = validate_import(info, entries)
        if sid in self._sessions:
            raise InvalidInput(f"session {sid} already exists")
        if info.parent_id is not None:
            self._get(info.parent_id)
        rows = [(e.created_at, encode_body(e.body)) for e in entries]
        messages, t_in, t_out, cost = message_counters([e.body for e in entries])
        stored = msgspec.structs.replace(
            info,
            metadata=copy.deepcopy(info.metadata),
            entry_count=len(rows),
            message_count=messages,
            input_tokens=t_in,
            output_tokens=t_out,
            cost=cost,
        )
        self._sessions[sid] = stored
        self._entries[sid] = rows
        return _copy(stored)

    async def replace_session(
        self, session_id: str, sessions: Sequence[tuple[SessionInfo, Sequence[Entry]]], record: AuditDraft
    ) -> list[SessionInfo]:
        self._get(session_id)
        for info, entries in sessions:  # every check before anything changes
            validate_import(info, entries)
            for e in entries:
                encode_body(e.body)
        saved = (self._sessions.copy(), dict(self._entries), dict(self._leases), dict(self._shares), list(self._audit))
        head = self._audit_head
        try:
            doomed = [session_id]
            i = 0
            while i < len(doomed):
                doomed.extend(s.id for s in self._sessions.values() if s.parent_id == doomed[i])
                i += 1
            for sid in doomed:
                self._sessions.pop(sid, None)
                self._leases.pop(sid, None)
                for share_id in [k for k, (_, share) in self._shares.items() if share.session_id == sid]:
                    del self._shares[share_id]
                for seq in range(1, len(self._entries.pop(sid, [])) + 1):
                    self._indexed.pop((sid, seq), None)
            made = [await self._import(info, entries) for info, entries in sessions]
        except BaseException:
            self._sessions, self._entries, self._leases, self._shares, self._audit = saved  # all or nothing
            self._audit_head = head
            raise
        self._record(record)
        return made

    # --- search: a scan with the tokeniser and BM25 of the SQLite index -----------------------------------

    def _doc(self, session_id: str, seq: int, data: bytes) -> tuple[str, str, list[str]] | None:
        key = (session_id, seq)
        if key not in self._indexed:
            body = decode_body(data)
            text = indexed_text(body)
            self._indexed[key] = None if text is None else (body.role, text, terms(document(text)))  # type: ignore[union-attr]
        return self._indexed[key]

    def _reverts(self, session_id: str) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for seq, (_, data) in enumerate(self._entries[session_id], 1):
            if b'"kind":"revert"' in data:
                body = decode_body(data)
                if isinstance(body, Revert):
                    out.append((seq, body.to_seq))
        return out

    async def search(
        self,
        query: str,
        *,
        directory: str | None = None,
        session_id: str | None = None,
        role: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 20,
        include_reverted: bool = False,
    ) -> list[SearchHit]:
        self._check()
        check_search_filters(role, limit, session_id)
        wanted = query_terms(query)
        if not wanted:
            return []
        # Like the FTS index, BM25's statistics cover every indexed entry; the filters only pick among them.
        docs: list[tuple[tuple[str, int], list[str]]] = []
        keep: set[tuple[str, int]] = set()
        for sid, rows in self._entries.items():
            info = self._sessions[sid]
            chosen = (session_id is None or sid == session_id) and (directory is None or info.directory == directory)
            for seq, (created_at, data) in enumerate(rows, 1):
                doc = self._doc(sid, seq, data)
                if doc is None:
                    continue
                docs.append(((sid, seq), doc[2]))
                if (
                    chosen
                    and (role is None or doc[0] == role)
                    and (since is None or created_at >= since)
                    and (until is None or created_at < until)
                ):
                    keep.add((sid, seq))
        spans: dict[str, list[RevertSpan]] = {}
        hits: list[SearchHit] = []
        stems = [t for term in wanted for t in term.tokens]
        for (sid, seq), score in bm25_rank(docs, wanted, keep):
            if sid not in spans:
                spans[sid] = hidden_spans(self._reverts(sid))
            reverted = is_hidden(seq, spans[sid])
            if reverted and not include_reverted:
                continue
            created_at, data = self._entries[sid][seq - 1]
            body = decode_body(data)
            doc = self._indexed[sid, seq]
            assert doc is not None
            info = self._sessions[sid]
            hits.append(
                SearchHit(
                    session_id=sid,
                    seq=seq,
                    role=doc[0],
                    created_at=created_at,
                    score=score,
                    excerpt=excerpt_of(doc[1], stems),
                    title=info.title,
                    directory=info.directory,
                    metadata=copy.deepcopy(getattr(body, "metadata", {})),
                    reverted=reverted,
                )
            )
            if len(hits) >= limit:
                break
        return hits

    async def reverted_spans(self, session_id: str) -> list[RevertSpan]:
        self._get(session_id)
        return hidden_spans(self._reverts(session_id))

    async def search_backlog(self, *, before: float | None = None) -> int:
        self._check()
        return 0  # indexed as it is searched: never behind

    async def backfill_search(self, *, batch: int = 500) -> AsyncIterator[BackfillProgress]:
        self._check()
        check_limit(batch)
        return
        yield  # an async generator that yields nothing

    async def put_artifact(self, data: bytes, media_type: str = "text/plain") -> str:
        self._check()
        aid = artifact_id(data)
        self._artifacts.setdefault(aid, (bytes(data), media_type))
        return aid

    async def get_artifact(self, artifact_id: str) -> bytes:
        self._check()
        check_artifact_id(artifact_id)
        try:
            return self._artifacts[artifact_id][0]
        except KeyError:
            raise NotFound(f"no artifact {artifact_id}") from None

    async def list_artifacts(self, *, after: str | None = None, limit: int = 1000) -> list[ArtifactInfo]:
        self._check()
        check_artifact_listing(after, limit)
        ids = sorted(aid for aid in self._artifacts if aid > (after or ""))[:limit]
        return [
            ArtifactInfo(id=aid, media_type=self._artifacts[aid][1], size=len(self._artifacts[aid][0])) for aid in ids
        ]

    # --- leases ------------------------------------------------------------------------------------------

    def _live_lease(self, session_id: str) -> Lease | None:
        lease = self._leases.get(session_id)
        return lease if lease is not None and lease.expires_at > time.time() else None

    async def acquire_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl: float,
        pid: int | None = None,
        host: str | None = None,
        take_from: str | None = None,
    ) -> Lease:
        check_lease(session_id, holder, ttl)
        self._get(session_id)
        now = time.time()
        current = self._live_lease(session_id)
        if current is not None and current.holder != holder:
            if take_from is None or current.holder != take_from:
                raise current.busy()
            current = None  # its holder is dead: the lease starts anew
        since = current.since if current is not None else now
        request = current.request if current is not None else None  # live and ours (others are refused above)
        lease = Lease(
            session_id=session_id, holder=holder, pid=pid, host=host, since=since, expires_at=now + ttl, request=request
        )
        self._leases[session_id] = lease
        return lease

    async def renew_lease(self, session_id: str, holder: str, *, ttl: float) -> Lease:
        check_lease(session_id, holder, ttl)
        self._get(session_id)
        current = self._live_lease(session_id)
        if current is None or current.holder != holder:
            raise lease_lost(session_id, holder, current)
        lease = msgspec.structs.replace(current, expires_at=time.time() + ttl)
        self._leases[session_id] = lease
        return lease

    async def request_lease(self, session_id: str, request: LeaseRequest) -> Lease | None:
        check_lease_request(session_id, request)
        self._get(session_id)
        current = self._live_lease(session_id)
        if current is None:
            return None
        if current.request != "cancel":
            current = msgspec.structs.replace(current, request=request)
            self._leases[session_id] = current
        return current

    async def release_lease(self, session_id: str, holder: str) -> bool:
        check_lease(session_id, holder)
        self._check()
        current = self._leases.get(session_id)
        if current is None or current.holder != holder:
            return False
        del self._leases[session_id]
        return True

    async def get_lease(self, session_id: str) -> Lease | None:
        self._get(session_id)
        return self._live_lease(session_id)

    # --- streams ---------------------------------------------------------------------------------------------

    async def save_stream(self, session_id: str, after_seq: int, message: Message) -> None:
        data = check_stream(session_id, after_seq, message)
        self._get(session_id)
        self._streams[session_id] = (after_seq, time.time(), data)

    async def get_stream(self, session_id: str) -> StreamRecord | None:
        self._get(session_id)
        kept = self._streams.get(session_id)
        if kept is None:
            return None
        after_seq, updated_at, data = kept
        return StreamRecord(
            session_id=session_id, after_seq=after_seq, updated_at=updated_at, message=_message_decoder.decode(data)
        )

    async def drop_stream(self, session_id: str) -> bool:
        check_id(session_id, "session id")
        self._check()
        return self._streams.pop(session_id, None) is not None

    # --- shares ----------------------------------------------------------------------------------------------

    async def create_share(
        self, session_id: str, token_hash: bytes, *, expires_at: float | None = None, id: str | None = None
    ) -> Share:
        check_share(session_id, token_hash, expires_at, id)
        self._get(session_id)
        share_id = id or new_id("shr")
        if share_id in self._shares or any(h == token_hash for h, _ in self._shares.values()):
            raise InvalidInput("a share with this id or token already exists")
        share = Share(id=share_id, session_id=session_id, created_at=time.time(), expires_at=expires_at)
        self._shares[share_id] = (bytes(token_hash), share)
        self._record(audit_records.share_made(share))
        return share

    async def share_by_token(self, token_hash: bytes) -> Share | None:
        self._check()
        check_token_hash(token_hash)
        return next((share for h, share in self._shares.values() if h == token_hash), None)

    async def list_shares(self, session_id: str | None = None) -> list[Share]:
        self._check()
        if session_id is not None:
            self._get(session_id)
        return [share for _, share in self._shares.values() if session_id is None or share.session_id == session_id]

    async def share_records(self, session_id: str) -> list[tuple[Share, bytes]]:
        self._check()
        self._get(session_id)
        return [(share, h) for h, share in self._shares.values() if share.session_id == session_id]

    async def restore_share(self, share: Share, token_hash: bytes) -> bool:
        self._check()
        check_restored_share(share, token_hash)
        self._get(share.session_id)
        if share.id in self._shares:
            return False
        if any(h == token_hash for h, _ in self._shares.values()):
            raise InvalidInput("another share has this token")
        self._shares[share.id] = (bytes(token_hash), share)
        return True

    async def revoke_share(self, share_id: str) -> Share:
        self._check()
        check_id(share_id, "share id")
        if share_id not in self._shares:
            raise NotFound(f"no share {share_id}")
        token_hash, share = self._shares[share_id]
        if share.revoked_at is None:
            share = msgspec.structs.replace(share, revoked_at=time.time())
            self._shares[share_id] = (token_hash, share)
            self._record(audit_records.share_revoked(share))
        return share

    # --- the audit trail --------------------------------------------------------------------------------------

    def _record(self, draft: AuditDraft) -> AuditRecord:
        seq, prev = (self._audit_head[0] + 1, self._audit_head[1]) if self._audit_head else (1, GENESIS)
        record = seal(seq, prev, draft)
        self._audit.append(record)
        self._audit_head = (seq, record.hash)
        return record

    async def append_audit(self, draft: AuditDraft) -> AuditRecord:
        self._check()
        return self._record(draft)

    async def list_audit(
        self,
        *,
        after: int = 0,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        kind: str | None = None,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        self._check()
        check_audit_filters(after, session_id, kind, limit)
        out: list[AuditRecord] = []
        for record in self._audit:
            if record.seq <= after or (since is not None and record.at < since):
                continue
            if until is not None and record.at >= until:
                continue
            if session_id is not None and record.session_id != session_id:
                continue
            if kind is not None and not kind_matches(record.kind, kind):
                continue
            out.append(record)
            if len(out) >= limit:
                break
        return out

    async def audit_head(self) -> tuple[int, str] | None:
        self._check()
        return self._audit_head

    async def sink_positions(self, sink: str) -> dict[str, int]:
        self._check()
        return dict(self._sinks.get(sink, {}))

    async def save_sink_positions(self, sink: str, positions: dict[str, int]) -> None:
        self._check()
        kept = self._sinks.setdefault(sink, {})
        for sid, seq in positions.items():
            kept[sid] = max(kept.get(sid, 0), seq)

    async def reserve_numbers(self, session_id: str, floor: int, count: int) -> int:
        self._check()
        check_reservation(session_id, floor, count)
        first = max(floor, self._numbers.get(session_id, 0)) + 1
        self._numbers[session_id] = first + count - 1
        return first

    async def append_change(
        self, kind: str, *, session_id: str | None = None, data: dict[str, Any] | None = None
    ) -> Change:
        self._check()
        body = check_change(kind, session_id, {} if data is None else data)
        self._last_change += 1
        change = Change(id=self._last_change, at=time.time(), kind=kind, session_id=session_id, data=json.loads(body))
        self._changes.append(change)
        return msgspec.structs.replace(change, data=json.loads(body))

    async def changes_after(self, after: int, limit: int = 500) -> list[Change]:
        self._check()
        check_changes_after(after, limit)
        start = bisect.bisect_right([c.id for c in self._changes], after)
        return [msgspec.structs.replace(c, data=copy.deepcopy(c.data)) for c in self._changes[start : start + limit]]

    async def last_change_id(self) -> int:
        self._check()
        return self._last_change

    async def prune_audit(self, before: float) -> int:
        self._check()
        old = [r for r in self._audit if r.at < before]
        if not old:
            return 0
        through = max(r.seq for r in old)
        last = next(r for r in self._audit if r.seq == through)
        count = sum(1 for r in self._audit if r.seq <= through)
        self._audit = [r for r in self._audit if r.seq > through]
        self._record(pruned_draft(through, last.hash, count, before, time.time()))
        return count

    async def changed_sessions(self, after: int = 0, *, limit: int = 1000) -> ChangedSessions:
        self._check()
        check_changed_sessions(after, limit)
        feed: _Feed = self._sessions.feed  # type: ignore[attr-defined]
        if after > feed.top:
            after = 0
        stamps = sorted((n, sid) for sid, n in feed.stamps.items() if n >= after)[: limit + 1]
        return ChangedSessions(
            sessions=[self._sessions[sid] for _, sid in stamps if sid in self._sessions],
            deleted=[sid for _, sid in stamps if sid not in self._sessions],
            position=stamps[-1][0] if stamps else after,
            more=len(stamps) > limit,
        )

    async def close(self) -> None:
        self._closed = True

    # --- the prompt queue --------------------------------------------------------------------------

    async def enqueue_prompt(self, session_id: str, body: bytes) -> QueuedPrompt:
        info = self._get(session_id)
        self._last_queued += 1
        item = QueuedPrompt(
            id=self._last_queued,
            session_id=session_id,
            after_seq=info.last_seq,
            body=bytes(body),
            queued_at=time.time(),
        )
        self._queue.setdefault(session_id, []).append(item)
        return item

    async def queued_prompts(self, session_id: str) -> list[QueuedPrompt]:
        self._check()
        return list(self._queue.get(session_id, ()))

    async def queued_sessions(self) -> list[str]:
        self._check()
        return [sid for sid, items in self._queue.items() if items]

    async def drop_prompt(self, session_id: str, prompt_id: int) -> bool:
        self._check()
        items = self._queue.get(session_id, [])
        kept = [q for q in items if q.id != prompt_id]
        if len(kept) == len(items):
            return False
        if kept:
            self._queue[session_id] = kept
        else:
            self._queue.pop(session_id, None)
        return True
