"""tether's own session format: the JSON export (streamed entry by entry, so a long session is never held
in memory whole) and its import (validated in full before one all-or-nothing write), which gives back
exactly what was exported. Other agents' formats (Claude Code, Codex, opencode) join it in this package."""

from __future__ import annotations

import codecs
import os
import time
from pathlib import Path
from typing import IO, Any

import msgspec

from ..errors import CorruptEntry, ImportFormatError, InvalidId, InvalidInput, SessionNotFound
from ..ids import check_id, new_session_id
from ..messages import Entry, decode_body, encode_json
from ..store.protocols import Journal
from ..store.records import IMPORTED, SessionInfo
from ..store.validate import validate_bodies

FORMAT = "tether.session"
VERSION = 1

__all__ = [
    "FORMAT",
    "VERSION",
    "SessionExport",
    "export_json",
    "import_file",
    "import_json",
    "parse_export",
    "session_record",
]


class SessionExport(msgspec.Struct, frozen=True):
    """A parsed and fully validated tether export: the session's row and its whole journal."""

    session: SessionInfo
    entries: list[Entry]


# --- export ------------------------------------------------------------------------------------------------


def session_record(info: SessionInfo) -> dict[str, Any]:
    """Every field of a session row, defaults included, as JSON-ready values. Cost is normalized so that
    backends that keep different trailing zeros export the same text."""
    record = {name: getattr(info, name) for name in info.__struct_fields__}
    record["cost"] = str(info.cost.normalize()) if info.cost else "0"
    record["metadata"] = dict(info.metadata)
    return record


async def export_json(store: Journal, session_id: str, out: IO[bytes]) -> SessionInfo:
    """Write the session as a tether JSON document to `out`, one entry per line, reading the journal in
    batches so that a long session is never held in memory whole. Entries appended while this runs are left
    out: the export is the session as it was when it started. Returns that session row."""
    info = await store.get_session(session_id)
    record = session_record(info)
    record["metadata"].pop(IMPORTED, None)  # this store's note of where it got the session, not the session's
    head = {"format": FORMAT, "version": VERSION, "session": record}
    # The document is written by hand around the entry stream: the header object without its closing brace,
    # then the entries array one line at a time. Output stays valid JSON and diffs line by line.
    out.write(encode_json(head)[:-1] + b',\n"entries":[')
    expected = 1
    async for entry in store.iter_entries(session_id):
        if entry.seq > info.entry_count:
            break
        if entry.seq != expected:
            # The store skipped an unreadable entry. An export with a hole could never be imported.
            raise CorruptEntry(session_id, expected, "unreadable, so the export would be incomplete")
        out.write((b"\n" if expected == 1 else b",\n") + encode_json(entry))
        expected += 1
    if expected != info.entry_count + 1:
        raise CorruptEntry(session_id, expected, "unreadable, so the export would be incomplete")
    out.write(b"\n]}\n")
    return info


# --- import ------------------------------------------------------------------------------------------------


class _RawEntry(msgspec.Struct):
    seq: int
    created_at: float
    body: msgspec.Raw


_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_session_decoder = msgspec.json.Decoder(SessionInfo)
_entries_decoder = msgspec.json.Decoder(list[_RawEntry])


def _fail(source: str, problem: str) -> ImportFormatError:
    return ImportFormatError(f"cannot import {source}: {problem}")


def _at(error: Exception, prefix: str) -> str:
    """msgspec says where a value was wrong as `$...`; say it from the top of the document instead."""
    return str(error).replace("`$", f"`{prefix}")


def _decode_document(data: bytes, source: str) -> dict[str, msgspec.Raw]:
    if not data.strip():
        raise _fail(source, "the file is empty")
    if data.startswith(b"\x1f\x8b"):
        raise _fail(source, "the file is gzip-compressed; decompress it first")
    if b"\x00" in data[:65536]:
        raise _fail(source, "the file is binary, not a JSON session export")
    bad = _utf8_error_at(data)
    if bad is not None:
        raise _fail(source, f"the file is binary or not UTF-8 text (byte {bad}), not a JSON session export")
    try:
        return _top_decoder.decode(data)
    except msgspec.ValidationError as e:
        shape = data.lstrip()[:1]
        what = {b"[": "a JSON array", b'"': "a JSON string"}.get(shape, "not a JSON object")
        raise _fail(source, f"the top level is {what}; a tether export is one object ({e})") from None
    except msgspec.DecodeError as e:
        reason = str(e)
        if "truncated" in reason:
            raise _fail(source, "the file is truncated: the JSON ends before the document does") from None
        if "trailing characters" in reason:
            first = data.lstrip().split(b"\n", 1)[0]
            try:
                msgspec.json.decode(first)
            except msgspec.DecodeError:
                pass
            else:
                raise _fail(
                    source,
                    "the file is JSON Lines (one JSON value per line, like a Claude Code or Codex transcript), "
                    "not a tether session export",
                ) from None
        raise _fail(source, f"the file is not valid JSON ({reason})") from None


def _utf8_error_at(data: bytes, chunk: int = 1 << 20) -> int | None:
    """The offset of the first byte that is not valid UTF-8, or None. msgspec leaves the text inside
    deferred (`Raw`) values unchecked, so it is checked here once, a chunk at a time, without a copy."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for start in range(0, len(data), chunk):
        try:
            decoder.decode(view[start : start + chunk], final=start + chunk >= len(data))
        except UnicodeDecodeError as e:
            return start + e.start
    return None


def parse_export(data: bytes | str, *, source: str = "input") -> SessionExport:
    """Read and check a whole tether export before anything is written: the format marker and version, the
    session row and its ids, dense seqs 1..n, every entry body, and reverts that point back. Raises
    `ImportFormatError` saying what is wrong; `source` names the file in that message."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # a byte-order mark some editors add
    doc = _decode_document(raw, source)

    marker = msgspec.json.decode(doc["format"]) if "format" in doc else None
    if marker != FORMAT:
        if marker is None:
            keys = ", ".join(sorted(doc)[:8]) or "none"
            found = f"no 'format' field (top-level keys: {keys})"
        else:
            found = f"its format is {str(marker)[:60]!r}"
        raise _fail(source, f"not a tether session export: {found}; expected 'format': {FORMAT!r}")
    version = msgspec.json.decode(doc["version"]) if "version" in doc else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _fail(source, f"'version' must be a positive integer, not {version!r}")
    if version > VERSION:
        raise _fail(source, f"it was written by a newer tether (format version {version}; this one reads {VERSION})")
    for key in ("session", "entries"):
        if key not in doc:
            raise _fail(source, f"the {key!r} field is missing")

    try:
        info = _session_decoder.decode(doc["session"])
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise _fail(source, f"bad session record: {_at(e, '$.session')}") from None
    try:
        check_id(info.id, "session id")
        for name, value in (("parent_id", info.parent_id), ("forked_from", info.forked_from)):
            if value is not None:
                check_id(value, name)
    except InvalidId as e:
        raise _fail(source, str(e)) from None

    try:
        raw_entries = _entries_decoder.decode(doc["entries"])
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise _fail(source, f"bad entry list: {_at(e, '$.entries')}") from None
    entries: list[Entry] = []
    for i, item in enumerate(raw_entries, 1):
        if item.seq != i:
            raise _fail(source, f"entry {i} has seq {item.seq}: seqs must run 1, 2, 3, ... with no gaps or repeats")
        try:
            body = decode_body(item.body)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise _fail(source, f"entry {i}: the body does not decode: {_at(e, f'$.entries[{i - 1}].body')}") from None
        entries.append(Entry(item.seq, item.created_at, body))
    if info.entry_count != len(entries):
        raise _fail(
            source,
            f"the session record says {info.entry_count} entries but the file holds {len(entries)} "
            "(cut short or edited?)",
        )
    if entries:
        try:
            validate_bodies([e.body for e in entries], 1)
        except InvalidInput as e:
            raise _fail(source, str(e)) from None
    return SessionExport(info, entries)


async def import_json(
    store: Journal, data: bytes | str | SessionExport, *, new_id: bool = False, source: str = "input"
) -> SessionInfo:
    """Import a tether export, keeping its id, timestamps and entries exactly, so that exporting it again
    gives the same document. With `new_id` the session gets a fresh id and `metadata["imported_from"]` names
    the original. A parent session that is not in this store is dropped (kept as `imported_parent_id`).
    The session is marked as imported (`metadata["imported"]`: from where, when), so that running it asks
    first (`tether.runtime.launch`); an export leaves the mark out. The file is validated in full first and
    written in one transaction: a bad file writes nothing."""
    export = data if isinstance(data, SessionExport) else parse_export(data, source=source)
    info = export.session
    mark = {"source": source, "format": FORMAT, "at": time.time()}
    info = msgspec.structs.replace(info, metadata={**info.metadata, IMPORTED: mark})
    if new_id:
        info = msgspec.structs.replace(info, id=new_session_id(), metadata={**info.metadata, "imported_from": info.id})
    elif await _exists(store, info.id):
        raise InvalidInput(
            f"session {info.id} already exists in this store; import it under a new id (`--new-id`) "
            "or delete the existing one first"
        )
    if info.parent_id is not None and not await _exists(store, info.parent_id):
        info = msgspec.structs.replace(
            info, parent_id=None, metadata={**info.metadata, "imported_parent_id": info.parent_id}
        )
    return await store.import_session(info, export.entries)


async def import_file(store: Journal, path: str | os.PathLike[str], *, new_id: bool = False) -> SessionInfo:
    """`import_json` on a file's contents; an unreadable file is an `ImportFormatError` too."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ImportFormatError(f"cannot import {os.fspath(path)}: {e.strerror or e}") from None
    return await import_json(store, data, new_id=new_id, source=os.fspath(path))


async def _exists(store: Journal, session_id: str) -> bool:
    try:
        await store.get_session(session_id)
    except SessionNotFound:
        return False
    return True
