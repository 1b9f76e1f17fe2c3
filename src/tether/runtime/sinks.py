"""Event sinks: the durable events of every session (`events.durable_events`, as `journal.replay_events`
gives them) delivered to JSON-lines files (rotated), an S3-compatible bucket (batched, gzip objects) or an
HTTP webhook, at least once and in order per session.

A `SinkRunner` follows the journal, never the append path: each round it lists the sessions updated since
its last round (with a margin for the listing's one-second resolution), reads the entries after the
position the sink reached in each (kept in the store, `SinkPositions`), writes them as one batch, and only
then saves the new positions. A crash between the write and the save delivers that batch again on restart
(at least once, never a gap). Each sink has its own task: a slow or failing one retries with backoff and
falls behind (its lag is what `tether doctor` and `/health` report), and nothing else waits for it.

One line per event: ``{"session_id", "seq", "at" (the entry's commit time), "n", "event": {...}}``."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..config import Config, SinkConfig
from ..errors import ConfigError, TetherError
from ..events import durable_events, event_json
from ..store.objects import Bucket, BucketConfig
from ..store.protocols import Journal, JournalSinkPositions

log = logging.getLogger("tether.sinks")

MARGIN = 2.0
"""Seconds a round looks back before its last one (a session's `updated_at` lags by up to one second)."""


@dataclass(frozen=True)
class Line:
    session_id: str
    seq: int
    at: float
    data: bytes


class Sink(Protocol):
    name: str

    def write(self, lines: Sequence[Line]) -> None:
        """Deliver `lines` durably (or raise): they count as delivered once this returns."""
        ...


class FileSink:
    """JSON lines appended to ``PATH/events.jsonl``, fsynced per batch; at `max_bytes` the file is renamed to
    ``events-NANOSECONDS.jsonl`` (the names sort in the order written) and a new one begun."""

    def __init__(self, name: str, path: str | os.PathLike[str], max_bytes: int = 100_000_000) -> None:
        self.name = name
        self.folder = Path(path).expanduser()
        self.max_bytes = max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)

    @property
    def current(self) -> Path:
        return self.folder / "events.jsonl"

    def write(self, lines: Sequence[Line]) -> None:
        data = b"".join(line.data + b"\n" for line in lines)
        with open(self.current, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        if size >= self.max_bytes:
            os.replace(self.current, self.folder / f"events-{time.time_ns():020d}.jsonl")  # names sort by time


class S3Sink:
    """Each batch one gzip object, ``PREFIX/events/TIME-RANDOM.jsonl.gz`` (keys sort by time)."""

    def __init__(self, name: str, bucket: Bucket) -> None:
        self.name = name
        self.bucket = bucket

    def write(self, lines: Sequence[Line]) -> None:
        data = gzip.compress(b"".join(line.data + b"\n" for line in lines), 6, mtime=0)
        key = self.bucket.config.key(f"events/{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.jsonl.gz")
        self.bucket.put(key, data, "application/gzip")


class WebhookSink:
    """Each batch one POST of JSON lines (``application/x-ndjson``); any answer but 2xx is a failure."""

    def __init__(self, name: str, url: str, headers: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        self.name = name
        self.url = url
        self.headers = headers or {}
        self.timeout = timeout

    def write(self, lines: Sequence[Line]) -> None:
        body = b"".join(line.data + b"\n" for line in lines)
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/x-ndjson", **self.headers}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                if not 200 <= answer.status < 300:
                    raise OSError(f"{self.url} answered {answer.status}")
        except urllib.error.HTTPError as exc:
            raise OSError(f"{self.url} answered {exc.code}") from None


def make_sink(config: SinkConfig) -> Sink:
    if config.type == "file":
        if not config.path:
            raise ConfigError(f"[[sinks]] {config.name}: a file sink needs path")
        return FileSink(config.name, config.path, config.max_bytes)
    if config.type == "s3":
        if not config.bucket:
            raise ConfigError(f"[[sinks]] {config.name}: an s3 sink needs bucket")
        return S3Sink(
            config.name, Bucket(BucketConfig(config.bucket, config.prefix, config.endpoint_url, config.region))
        )
    if not config.url:
        raise ConfigError(f"[[sinks]] {config.name}: a webhook sink needs url")
    return WebhookSink(config.name, config.url, dict(config.headers))


def line_of(session_id: str, seq: int, at: float, event_bytes: bytes, n: int) -> bytes:
    return (
        b'{"session_id":'
        + json.dumps(session_id).encode()
        + b',"seq":'
        + str(seq).encode()
        + b',"at":'
        + repr(at).encode()
        + b',"n":'
        + str(n).encode()
        + b',"event":'
        + event_bytes
        + b"}"
    )


@dataclass
class SinkState:
    """What one sink's follower knows: its lag, its last error, and (for the bench) commit-to-delivery times."""

    name: str
    delivered: int = 0
    lag_seconds: float = 0.0
    error: str | None = None
    latencies: list[float] = field(default_factory=list)
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)


class SinkRunner:
    """Follows the store for each sink (one task each); see the module docstring."""

    def __init__(
        self,
        store: JournalSinkPositions,
        sinks: Sequence[Sink],
        *,
        interval: float = 0.2,
        batch: int = 1000,
        keep_latencies: bool = False,
    ) -> None:
        self.store = store
        self.sinks = list(sinks)
        self.interval = interval
        self.batch = batch
        self.keep_latencies = keep_latencies
        self.states = {s.name: SinkState(s.name) for s in self.sinks}
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._follow(s)) for s in self.sinks]

    def health(self) -> dict[str, dict[str, Any]]:
        """Per sink: events delivered, seconds behind (the oldest entry of its last round), its last error."""
        return {
            name: {"delivered": s.delivered, "lag_seconds": round(s.lag_seconds, 3), "error": s.error}
            for name, s in self.states.items()
        }

    def poke(self) -> None:
        """Look now rather than at the next interval."""
        self._wake.set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _follow(self, sink: Sink) -> None:
        state = self.states[sink.name]
        since = 0.0
        delay = self.interval
        while True:
            started = time.time()
            try:
                more = await self.round(sink, since)
                if not more:  # a round cut at its batch size goes on from where it was
                    since = started - MARGIN
                state.error = None
                delay = self.interval
            except asyncio.CancelledError:
                raise
            except (TetherError, OSError) as exc:
                state.error = f"{type(exc).__name__}: {exc}"
                log.warning("event sink %s: %s (retrying in %.1fs)", sink.name, exc, delay)
                more = False
                delay = min(delay * 2, 60.0)
            if more:
                continue
            state.caught_up.set()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    async def round(self, sink: Sink, since: float) -> bool:
        """Deliver one batch of what is new since `since`; True when more is waiting."""
        state = self.states[sink.name]
        positions = await self.store.sink_positions(sink.name)
        pending = await _changed(self.store, since, positions)
        lines: list[Line] = []
        reached: dict[str, int] = {}
        oldest: float | None = None
        more = False
        for sid, last in pending:
            start = positions.get(sid, 0) + 1
            async for entry in self.store.iter_entries(sid, start, batch=min(self.batch, 500)):
                if entry.seq > last:
                    break
                for event in durable_events(entry, sid):
                    data = line_of(sid, entry.seq, entry.created_at, event_json(event), event.n)
                    lines.append(Line(sid, entry.seq, entry.created_at, data))
                reached[sid] = entry.seq
                oldest = entry.created_at if oldest is None else min(oldest, entry.created_at)
                if len(lines) >= self.batch:
                    more = True
                    break
            if more:
                break
        if not reached:
            state.lag_seconds = 0.0
            return False
        state.lag_seconds = time.time() - oldest if oldest is not None else 0.0
        if lines:
            await asyncio.to_thread(sink.write, lines)
        done = time.time()
        await self.store.save_sink_positions(sink.name, reached)
        state.delivered += len(lines)
        if self.keep_latencies:
            state.latencies += [done - line.at for line in lines]
        return more


async def _changed(store: Journal, since: float, positions: dict[str, int]) -> list[tuple[str, int]]:
    """Sessions updated since `since` whose last seq is past the sink's position, oldest update first."""
    out: list[tuple[str, int]] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(limit=500, cursor=cursor)
        for info in page.items:
            if info.updated_at < since:
                return out[::-1]
            if info.entry_count > positions.get(info.id, 0):
                out.append((info.id, info.entry_count))
        if page.next_cursor is None:
            return out[::-1]
        cursor = page.next_cursor


async def lag(store: JournalSinkPositions, config: Config) -> dict[str, dict[str, Any]]:
    """Per configured sink: entries not delivered yet, sessions behind, and the age of the oldest such
    entry (what `tether doctor` and `/health` report)."""
    report: dict[str, dict[str, Any]] = {}
    for sink in config.sinks:
        positions = await store.sink_positions(sink.name)
        behind = await _changed(store, 0.0, positions)
        entries = sum(last - positions.get(sid, 0) for sid, last in behind)
        oldest: float | None = None
        for sid, _ in behind[:50]:
            first = await store.read(sid, positions.get(sid, 0) + 1, positions.get(sid, 0) + 1)
            if first:
                oldest = first[0].created_at if oldest is None else min(oldest, first[0].created_at)
        report[sink.name] = {
            "type": sink.type,
            "entries_behind": entries,
            "sessions_behind": len(behind),
            "lag_seconds": round(time.time() - oldest, 3) if oldest is not None else 0.0,
        }
    return report


def runner_for(store: JournalSinkPositions, config: Config) -> SinkRunner | None:
    """A runner for the configured sinks (None when there are none)."""
    if not config.sinks:
        return None
    return SinkRunner(store, [make_sink(s) for s in config.sinks])
