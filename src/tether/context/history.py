"""Reading what derivation needs from the store, and no more: the active entries from the latest active
compaction's first kept entry to the end. The cost is the tail since that compaction (and the reverted spans
it jumps over), not the history."""

from __future__ import annotations

from ..messages import Compaction, Entry
from ..store.protocols import Journal
from ..store.reverts import DEFAULT_CHUNK, active_until


def _kept_start(entry: Entry) -> int | None:
    body = entry.body
    return min(body.first_kept_seq, entry.seq) if isinstance(body, Compaction) else None


async def load_context_history(
    store: Journal, session_id: str, *, chunk: int = DEFAULT_CHUNK, last_seq: int | None = None
) -> list[Entry]:
    """The active entries that `derive_context` needs, in seq order: from the `first_kept_seq` of the
    latest compaction still in the active history (or from the start when there is none) to the end. A
    compaction that was undone (hidden by a revert) is not met. `last_seq`: the session's entry count,
    when the caller knows it."""
    if last_seq is None:
        last_seq = (await store.get_session(session_id)).entry_count
    return await active_until(store, session_id, last_seq, _kept_start, chunk=chunk)
