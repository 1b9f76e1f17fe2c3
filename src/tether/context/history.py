"""Reading what derivation needs from the store, and no more: the active entries from the latest active
compaction's first kept entry to the end. The cost is the tail since that compaction (and the reverted spans
it jumps over), not the history."""

from __future__ import annotations

from ..messages import Compaction, Entry, Revert
from ..store.base import Store

DEFAULT_CHUNK = 256


async def load_context_history(store: Store, session_id: str, *, chunk: int = DEFAULT_CHUNK) -> list[Entry]:
    """The active entries that `derive_context` needs, in seq order: from the `first_kept_seq` of the
    latest compaction still in the active history (or from the start when there is none) to the end.

    Walks the journal backwards `chunk` entries at a time with the same rules as `active_tail` (entries
    hidden by a later revert are skipped, revert markers left out), stopping once it has passed the kept
    start of the first compaction it meets. A compaction that was undone (hidden by a revert) is not met."""
    info = await store.get_session(session_id)
    hi = info.entry_count  # the highest seq that may still be visible
    stop = 1  # the lowest seq needed; raised when a compaction is met
    out: list[Entry] = []
    found = False
    while hi >= stop:
        lo = max(stop, hi - chunk + 1)
        for entry in reversed(await store.read(session_id, lo, hi)):
            if entry.seq > hi:
                continue  # inside a span that a later revert hid
            if entry.seq < stop:
                break
            body = entry.body
            if isinstance(body, Revert):
                hi = body.to_seq
                continue
            out.append(entry)
            hi = entry.seq - 1
            if isinstance(body, Compaction) and not found:
                found = True
                stop = max(1, min(body.first_kept_seq, entry.seq))
        else:
            hi = min(hi, lo - 1)
            continue
        break
    out.reverse()
    return out
