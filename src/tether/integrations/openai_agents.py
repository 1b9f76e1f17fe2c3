"""The OpenAI Agents SDK's `Session` backed by a tether store: `TetherSession`, and the mapping between the
SDK's items (Responses API input items) and tether's journal entries.

    from agents import Agent, Runner
    from tether.integrations.openai_agents import TetherSession

    session = TetherSession("support-42")          # the default tether store; or store=..., directory=...
    await Runner.run(agent, "hello", session=session)

Each item becomes one journal entry. Items with a tether meaning (messages, function calls and their
outputs, reasoning) become messages, so `tether sessions show`, `recall`, `context`, `compact` and export
read them; any other item is kept as a marker. When tether's form of an item does not give the item back
exactly, the entry also keeps the item's JSON, so `get_items` returns exactly what `add_items` took.
`pop_item` and `clear_session` are reverts: the journal keeps every item.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import gc
import threading
import weakref
from collections.abc import Awaitable, Coroutine, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import msgspec

from .. import markers
from ..errors import InvalidInput, SeqConflict, SessionNotFound
from ..ids import is_valid_id
from ..importers.jsonl import source_session_id
from ..messages import (
    Compaction,
    Entry,
    EntryBody,
    FilePart,
    ImagePart,
    Message,
    Part,
    Revert,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from ..paths import canonical_directory
from ..store import Store, open_store
from ..store.reverts import active_until

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.memory import SessionSettings

Item = dict[str, Any]

META_KEY = "openai_agents"
"""``Message.metadata[META_KEY] = {"item": <the item's JSON>}`` when tether's form does not give it back."""
ITEM_MARKER = markers.OPENAI_AGENTS_MARKER
"""An item with no tether meaning (a web search, a computer call...): `markers.OpenAiAgentsItem`."""
SOURCE = "openai-agents"
"""The tool name a session key is derived under (`source_session_id`), and the session's `agent`."""

_encode = msgspec.json.Encoder().encode
_decode_list = msgspec.json.Decoder(list[Any]).decode


# --- items <-> entries ---------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of a content list (input_text / output_text / refusal parts), joined."""
    if isinstance(content, str):
        return content
    out: list[str] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, Mapping):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                out.append(text)
    return "".join(out)


def _media_of(uri: str, default: str) -> tuple[str, bytes | None, str | None]:
    """(media type, bytes, uri) of an image or file reference: a data URI is decoded, anything else kept."""
    if uri.startswith("data:"):
        head, sep, payload = uri.partition(",")
        if sep and head.endswith(";base64"):
            try:
                return head[5:-7] or default, base64.b64decode(payload, validate=True), None
            except ValueError:
                pass
    return default, None, uri


def _content_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    parts: list[Part] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            parts.append(TextPart(text=part["text"]))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append(TextPart(text=part["refusal"]))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            media, data, uri = _media_of(part["image_url"], "image/*")
            parts.append(ImagePart(media_type=media, data=data, uri=uri))
        elif kind == "input_file":
            ref = part.get("file_data") or part.get("file_url") or part.get("file_id")
            if isinstance(ref, str):
                media, data, uri = _media_of(ref, "application/octet-stream")
                name = part.get("filename")
                parts.append(
                    FilePart(media_type=media, data=data, uri=uri, name=name if isinstance(name, str) else None)
                )
    return parts


def _message_of(item: Mapping[str, Any]) -> Message | None:
    """tether's form of an item that has one, without the item's own JSON."""
    kind = item.get("type")
    if kind in (None, "message"):
        role = item.get("role")
        if role in ("user", "system", "developer", "assistant"):
            return Message(
                role="system" if role == "developer" else role,
                parts=_content_parts(item.get("content")),
            )
        return None
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str):
            return Message(role="assistant", parts=[ToolCallPart.from_raw(call_id, name, arguments)])
        return None
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if isinstance(call_id, str):
            return Message.tool(ToolResultPart(call_id=call_id, content=_text_of(output)))
        return None
    if kind == "reasoning":
        texts = [_text_of([s]) for s in item.get("summary") or ()] or [_text_of(item.get("content"))]
        encrypted = item.get("encrypted_content")
        return Message(
            role="assistant",
            parts=[
                ThinkingPart(
                    text="\n\n".join(t for t in texts if t),
                    redacted=encrypted if isinstance(encrypted, str) else None,
                    provider="openai",
                )
            ],
        )
    return None


def item_to_entry(item: Mapping[str, Any], tool_names: Mapping[str, str] | None = None) -> EntryBody:
    """The journal entry for one SDK item: a message when the item has a tether meaning (keeping the item's
    JSON in its metadata when `entry_to_items` would not give it back exactly), else a marker holding it.
    `tool_names` (call id -> tool name) names the tool of a function call's output, which the item lacks."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"an Agents SDK item must be a dict, not {type(item).__name__}")
    message = _message_of(item)
    if message is None:
        return markers.to_marker(markers.OpenAiAgentsItem(item=dict(item)))
    if _message_items(message) != [item]:
        message.metadata[META_KEY] = {"item": dict(item)}
    provider_data = item.get("provider_data")
    if isinstance(provider_data, Mapping) and isinstance(provider_data.get("model"), str):
        message.model = provider_data["model"]
    if tool_names and message.role == "tool":
        for result in message.tool_results:
            result.name = tool_names.get(result.call_id)
    return message


def items_to_entries(items: Sequence[Mapping[str, Any]]) -> list[EntryBody]:
    """The journal entries of items written together (a turn): a function call's output is named after the
    call's tool when the call is among them."""
    names = {
        item["call_id"]: item["name"]
        for item in items
        if isinstance(item, Mapping)
        and item.get("type") == "function_call"
        and isinstance(item.get("call_id"), str)
        and isinstance(item.get("name"), str)
    }
    return [item_to_entry(item, names) for item in items]


def _message_items(message: Message) -> list[Item]:
    """The items of a tether message that holds no item JSON (one written by tether itself, or an import)."""
    if message.role in ("system", "user"):
        if len(message.parts) == 1 and isinstance(message.parts[0], TextPart):
            return [{"role": message.role, "content": message.parts[0].text}]
        content: list[Item] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                content.append({"type": "input_text", "text": part.text})
            elif isinstance(part, ImagePart):
                url = part.uri or _data_uri(part.media_type, part.data)
                content.append({"type": "input_image", "image_url": url, "detail": "auto"})
            elif isinstance(part, FilePart):
                file: Item = {"type": "input_file"}
                if part.uri is not None:
                    file["file_url"] = part.uri
                else:
                    file["file_data"] = _data_uri(part.media_type, part.data)
                if part.name is not None:
                    file["filename"] = part.name
                content.append(file)
        return [{"role": message.role, "content": content}] if content else []
    if message.role == "assistant":
        # thinking written by another model (an Anthropic signature, a local model's) means nothing to an
        # OpenAI model; OpenAI reasoning comes back from its own item JSON
        out: list[Item] = []
        text = message.text
        if text:
            out.append({"role": "assistant", "content": text})
        for call in message.tool_calls:
            out.append(
                {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments_json()}
            )
        return out
    return [
        {"type": "function_call_output", "call_id": result.call_id, "output": result.content}
        for result in message.tool_results
    ]


def _data_uri(media_type: str, data: bytes | None) -> str:
    return f"data:{media_type};base64," + base64.b64encode(data or b"").decode()


def entry_to_items(body: EntryBody) -> list[Item]:
    """The SDK items of a journal entry: the item JSON it keeps, else its tether form translated (a message
    with text and tool calls gives several items); none for entries that are not conversation."""
    if isinstance(body, Message):
        kept = body.metadata.get(META_KEY)
        if isinstance(kept, dict) and isinstance(kept.get("item"), dict):
            return [kept["item"]]
        return _message_items(body)
    kept = markers.read(body, markers.OpenAiAgentsItem)
    return [kept.item] if kept is not None else []


def summary_item(compaction: Compaction) -> Item:
    """What a compaction's summary is to the model: a user message, as tether's own context gives it."""
    return {"role": "user", "content": compaction.summary}


# --- the session ---------------------------------------------------------------------------------------


class _KeptItems:
    """The items a session has read, as their JSON in one buffer (``item,item,...,``) with each one's start
    and the seq of its entry: appending and dropping the newest are cheap, and the history is one JSON array
    to decode, not a list of pieces to join on every read."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.starts: list[int] = []
        self.seqs: list[int] = []  # non-decreasing: items come in journal order

    def __len__(self) -> int:
        return len(self.seqs)

    def append(self, seq: int, blob: bytes) -> None:
        self.starts.append(len(self.buf))
        self.seqs.append(seq)
        self.buf += blob
        self.buf += b","

    def blob(self, i: int) -> bytes:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.buf)
        return bytes(self.buf[self.starts[i] : end - 1])

    def keep_first(self, n: int) -> None:
        if n < len(self.seqs):
            del self.buf[self.starts[n] :]
            del self.starts[n:], self.seqs[n:]

    def keep_up_to(self, seq: int) -> None:
        """Drop the items of entries after `seq`."""
        self.keep_first(bisect.bisect_right(self.seqs, seq))

    def keep_from(self, seq: int) -> None:
        """Drop the items of entries before `seq`."""
        n = bisect.bisect_left(self.seqs, seq)
        if n:
            cut = self.starts[n] if n < len(self.starts) else len(self.buf)
            del self.buf[:cut]
            self.starts = [start - cut for start in self.starts[n:]]
            del self.seqs[:n]

    def array(self, first: int, head: bytes | None) -> bytes:
        """A JSON array of `head` (when given) and the items from index `first` on."""
        items = self.buf[self.starts[first] : -1] if first < len(self.starts) else b""
        if head is not None:
            return b"[" + head + (b"," + items if items else b"") + b"]"
        return b"[" + items + b"]"


class _SessionLock:
    """One writer at a time on a session that callers share across threads, each with its own event loop
    (the SDK's sessions allow it). An `asyncio.Lock` cannot be shared so (a waiter on another loop is never
    woken), and a thread lock held across an ``await`` would block its own loop for a second coroutine of
    it: so the coroutines of one loop queue on that loop's `asyncio.Lock`, and the one at the head takes the
    thread lock, waiting for it (when another loop holds it) in a worker thread, its loop running on."""

    def __init__(self) -> None:
        self._thread_lock = threading.Lock()
        self._guard = threading.Lock()
        self._loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def _loop_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._guard:
            lock = self._loop_locks.get(loop)
            if lock is None:
                lock = self._loop_locks[loop] = asyncio.Lock()
            return lock

    async def __aenter__(self) -> None:
        loop_lock = self._loop_lock()
        await loop_lock.acquire()
        try:
            if not self._thread_lock.acquire(blocking=False):
                taking = asyncio.get_running_loop().run_in_executor(None, self._thread_lock.acquire)
                try:
                    await asyncio.shield(taking)
                except BaseException:
                    # cancelled while waiting: the worker still takes the lock; give it back when it does
                    taking.add_done_callback(lambda f: self._thread_lock.release() if not f.cancelled() else None)
                    raise
        except BaseException:
            loop_lock.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._thread_lock.release()
        self._loop_lock().release()


class _Done:
    """The awaitable `TetherSession.close` returns: the work is already done."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that returns at once


def _run_now(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end before returning: on a loop of its own, in this thread when it has none
    running, else in a helper thread (a running loop cannot run another to completion)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(work)
        return
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(work)
        except BaseException as e:
            failure.append(e)

    helper = threading.Thread(target=run, name="tether-session-close")
    helper.start()
    helper.join()
    if failure:
        raise failure[0]


def _settings(value: Any) -> SessionSettings:
    """The SDK's `SessionSettings` from what a caller passed: settings, a dict of their fields (an unknown
    field is a `TypeError`, as the SDK says it), or None (the defaults), as the SDK's own sessions take them."""
    from agents.memory import SessionSettings

    if value is None:
        return SessionSettings()
    try:  # the SDK's own normalization, where its version has one
        from agents.memory.session_settings import coerce_session_settings
    except ImportError:
        pass
    else:
        return coerce_session_settings(value)
    if isinstance(value, SessionSettings):
        return value
    if isinstance(value, Mapping):
        return SessionSettings(**value)
    raise TypeError(f"session_settings must be a SessionSettings or a dict, not {type(value).__name__}")


class TetherSession:
    """The Agents SDK's `Session` protocol on a tether store: pass it as ``Runner.run(..., session=...)``.

    `session_id` is either a tether session id (``ses_...``: continue that session, whoever wrote it) or
    any other key (``"user-42"``): the tether session is then the one derived from the key, the same every
    time, created on the first `add_items`. `store` is an open tether store (default: ``open_store()``,
    the user's, closed by `close`); `directory` is where the session is filed (default: the current one).

    Reads are incremental: the session keeps the items it has read and the last seq it saw, and each
    `get_items` asks the store only for the entries after it, so another process appending to the same
    session is seen, and a turn does not re-read the history. Reverts and compactions that arrive are
    applied; one that reaches back past what the session has applied makes it read the active history
    again (from the latest compaction on). What `get_items` returns is decoded afresh on every call:
    callers may change it.

    A tether compaction of the session (``tether compact ID``) shows here as its summary, a user message,
    followed by the items it kept. `pop_item` and `clear_session` append reverts; nothing is deleted.
    """

    session_settings: SessionSettings | None = None
    """The SDK's settings (its `limit` is `get_items`' default); ``SessionSettings()`` unless given."""

    def __init__(
        self,
        session_id: str,
        *,
        store: Store | None = None,
        directory: str | None = None,
        title: str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput("session_id must be a non-empty string")
        self.session_id = session_id
        self.tether_id = session_id if is_valid_id(session_id) else source_session_id(SOURCE, session_id)
        self.session_settings = _settings(session_settings)
        self._owns_store = store is None
        self._store: Store = store if store is not None else open_store()
        self._directory = directory
        self._title = title
        self._lock = _SessionLock()
        self._closed = False
        self._loaded = False
        self._exists = False
        self._items = _KeptItems()
        self._summary: bytes | None = None  # the latest compaction's summary item
        self._compaction: Entry | None = None
        self._last_seq = 0  # the highest seq read
        self._floor = 0  # the highest seq of a revert or compaction applied: a revert to before it reloads

    @property
    def store(self) -> Store:
        return self._store

    # --- the protocol ----------------------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in order, the latest `limit` of them when given (default: the
        `session_settings` limit, else all; 0 gives none, a negative limit all)."""
        if limit is None and self.session_settings is not None:
            settings = self.session_settings
            if isinstance(settings, Mapping):  # set after construction, as the SDK allows: normalize it
                settings = self.session_settings = _settings(settings)
            limit = settings.limit
        self._check_open()
        async with self._lock:
            await self._refresh()
            return cast("list[TResponseInputItem]", self._decode(limit))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, all in one transaction."""
        self._check_open()
        bodies = items_to_entries(cast("list[Mapping[str, Any]]", items))
        if not bodies:
            return
        async with self._lock:
            await self._ensure_session()
            entries = await self._store.append(self.tether_id, bodies)
            # keep them when they follow what is kept; when another writer came between, the next read
            # takes its entries and these together
            if self._loaded and entries[0].seq == self._last_seq + 1:
                self._apply(entries)  # items only: nothing here reaches back

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the latest item off the history and return it: a revert to just before its entry (entries
        the revert hides that are not that item, such as the other items of a tether message or a
        compaction after it, are appended again behind it). None when the history is empty."""
        self._check_open()
        async with self._lock:
            while True:
                await self._refresh()
                if not self._items and self._summary is None:
                    return None
                if self._items:
                    last = len(self._items) - 1
                    seq, blob = self._items.seqs[last], self._items.blob(last)
                    to_seq = seq - 1
                    again = [self._items.blob(i) for i in range(last) if self._items.seqs[i] == seq]
                else:
                    blob, to_seq, again = self._summary or b"", 0, []  # only the summary is left
                bodies: list[EntryBody] = [Revert(to_seq=to_seq, reason="openai-agents pop_item")]
                bodies += [item_to_entry(msgspec.json.decode(b)) for b in again]
                if self._compaction is not None and self._compaction.seq > to_seq and to_seq > 0:
                    bodies.append(self._compaction.body)
                try:
                    entries = await self._store.append(self.tether_id, bodies, expect_seq=self._last_seq + 1)
                except SeqConflict:
                    continue  # someone appended since the refresh: pop what is the latest now
                if not self._apply(entries):
                    await self._reload()
                return cast("TResponseInputItem", msgspec.json.decode(blob))

    async def clear_session(self) -> None:
        """Empty the history: a revert to before the first entry (the journal keeps it all)."""
        self._check_open()
        async with self._lock:
            await self._refresh()
            if not self._items and self._summary is None:
                return  # already empty: nothing to revert
            entries = await self._store.append(self.tether_id, [Revert(to_seq=0, reason="openai-agents clear_session")])
            if entries[0].seq == self._last_seq + 1 and not self._apply(entries):
                self._loaded = False

    # --- lifetime --------------------------------------------------------------------------------------

    def close(self) -> Awaitable[None]:
        """Close the session: later calls raise `RuntimeError`, and the store is closed if this session
        opened it. Done when it returns, as the SDK's own sessions' `close` is and as its callers use it
        (``session.close()``, not awaited); what it returns may still be awaited (``await
        session.close()``). Closing again does nothing."""
        if not self._closed:
            self._closed = True
            if self._owns_store:
                _run_now(self._store.close())
        return _Done()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def __aenter__(self) -> TetherSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the items it keeps ----------------------------------------------------------------------------

    def _decode(self, limit: int | None) -> list[Any]:
        n = len(self._items) + (self._summary is not None)
        skip = max(0, n - limit) if limit is not None and limit >= 0 else 0  # negative: no limit, as SQLiteSession
        if skip == n:
            return []
        if self._summary is not None and skip == 0:
            array = self._items.array(0, self._summary)
        else:
            array = self._items.array(skip - (self._summary is not None), None)
        # A long history decodes into tens of thousands of fresh objects: the collector, run again and again
        # as they are made, would walk the process's whole heap each time for nothing (they are all alive).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return _decode_list(array)
        finally:
            if enabled:
                gc.enable()

    async def _ensure_session(self) -> None:
        if self._exists:
            return
        try:
            await self._store.get_session(self.tether_id)
        except SessionNotFound:
            metadata = {} if self.tether_id == self.session_id else {META_KEY: {"session_key": self.session_id}}
            try:
                await self._store.create_session(
                    id=self.tether_id,
                    directory=canonical_directory(self._directory),
                    title=self._title,
                    agent=SOURCE,
                    metadata=metadata,
                )
            except InvalidInput:
                await self._store.get_session(self.tether_id)  # another writer created it first; else raise
        self._exists = True

    async def _refresh(self) -> None:
        """Bring the kept items up to date with the journal."""
        if not self._loaded:
            await self._reload()
            return
        try:
            entries = await self._store.read(self.tether_id, self._last_seq + 1)
        except SessionNotFound:  # deleted meanwhile (`tether sessions rm`): it is empty now
            await self._reload()
            return
        if entries and not self._apply(entries):
            await self._reload()

    async def _reload(self) -> None:
        """Read the active history from the latest compaction on, and keep it."""
        self._items, self._summary, self._compaction = _KeptItems(), None, None
        self._floor = self._last_seq = 0
        try:
            info = await self._store.get_session(self.tether_id)
        except SessionNotFound:
            self._loaded = True
            self._exists = False
            return
        self._exists = True

        def until(entry: Entry) -> int | None:
            return entry.body.first_kept_seq if isinstance(entry.body, Compaction) else None

        history = await active_until(self._store, self.tether_id, info.entry_count, until)
        self._apply(history)  # the active history holds no revert: nothing reaches back
        self._last_seq = max(self._last_seq, info.entry_count)
        # a revert arriving later that points before the latest revert in the journal may show again what
        # that one hid, which is not kept: it must reload
        spans = await self._store.reverted_spans(self.tether_id)
        self._floor = max([self._floor, *(span.revert for span in spans)])
        self._loaded = True

    def _apply(self, entries: Sequence[Entry]) -> bool:
        """Apply entries that follow what is kept, in order. False when one is a revert that reaches back
        past a revert or compaction already applied: what it makes visible again is not kept, so the
        caller reloads."""
        for entry in entries:
            body = entry.body
            self._last_seq = max(self._last_seq, entry.seq)
            if isinstance(body, Revert):
                if body.to_seq == 0:  # nothing before it: the history is empty, whatever came before
                    self._items, self._summary, self._compaction = _KeptItems(), None, None
                elif body.to_seq < self._floor:
                    return False
                self._items.keep_up_to(body.to_seq)
                self._floor = entry.seq
            elif isinstance(body, Compaction):
                self._compaction = entry
                self._summary = _encode(summary_item(body))
                self._items.keep_from(body.first_kept_seq)
                self._floor = entry.seq
            else:
                for item in entry_to_items(body):
                    self._items.append(entry.seq, _encode(item))
        return True
