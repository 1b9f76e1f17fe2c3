"""Finding a session from what a person types: a full id, or a unique prefix or suffix of one (such as the
last six characters that `tether sessions` shows). The CLI and the server name sessions the same way, and
every face reads a session it found here with the answer a killed run was streaming already journaled
(`streaming.settle_stream`)."""

from __future__ import annotations

import re

from ..errors import InvalidId, InvalidInput, SessionNotFound
from ..ids import is_valid_id
from ..store.protocols import Store
from ..store.records import SessionInfo
from .streaming import settle_stream

MIN_REF = 6
"""The fewest characters of an id that `find_session` accepts as a prefix or suffix."""

MAX_REF = 35
"""The longest id there is: an 8-letter kind, "_" and 26 characters."""

_REF_RE = re.compile(r"^[A-Za-z0-9_]+\Z")


async def find_session(store: Store, ref: str, *, settle: bool = True) -> SessionInfo:
    """The session that `ref` names: a full id, or a unique prefix or suffix of one (at least `MIN_REF`
    characters, any case). A full id is one lookup; a piece of one scans the session rows (not their
    entries) once. A streamed answer that a killed run left is journaled first (`settle_stream`), unless
    `settle` is False (for a run about to start there: its own start journals it, under its lease)."""
    found = await _find(store, ref)
    return await settle_stream(store, found) if settle else found


async def _find(store: Store, ref: str) -> SessionInfo:
    ref = ref.strip()
    if is_valid_id(ref):
        return await store.get_session(ref)
    if not _REF_RE.match(ref) or not MIN_REF <= len(ref) <= MAX_REF:
        raise InvalidId(
            f"invalid session id {ref[:80]!r}: give a full id like 'ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB' "
            f"or at least its last {MIN_REF} characters"
        )
    needle = ref.lower()
    matches: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(limit=1000, cursor=cursor)
        matches += [s for s in page.items if s.id.lower().startswith(needle) or s.id.lower().endswith(needle)]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    if not matches:
        raise SessionNotFound(ref)
    if len(matches) > 1:
        shown = ", ".join(s.id for s in matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise InvalidInput(f"{ref!r} matches {len(matches)} sessions ({shown}); give more characters")
    return matches[0]
