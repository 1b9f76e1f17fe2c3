"""The turn keys on coding-session text: an answer found by its question's words, an exact identifier in
its own turn still first, reverted turns never a neighbour's key; kept up to date incrementally, rebuilt
when stale or missing, and recall falling back to the store's search when they cannot be kept."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from tether.ids import new_session_id
from tether.messages import Entry, Message, Revert, ToolResultPart
from tether.recall import Tuning, recall
from tether.recall.keys import KEY_VERSION, KeyIndex, default_key_path
from tether.store import SqliteStore, Store
from tether.store.records import SessionInfo

FLAT = Tuning(after_question=0, after=0, before=0, second=0, author=0, when=0, period=0)
"""No score passed to neighbours: a turn comes back only if its own key matches."""

TRACEBACK = """Traceback (most recent call last):
  File "src/app/parse.py", line 42, in parse_header
    name, value = line.split(":", 1)
ValueError: not enough values to unpack (expected 2, got 1)"""


async def chat(store: Store, messages: list[Message], directory: str = "/repo") -> str:
    info = await store.create_session(directory=directory)
    await store.append(info.id, messages)
    return info.id


async def seqs(store: Store, query: str, **kw: object) -> list[int]:
    return [h.seq for h in (await recall(store, query, tuning=FLAT, **kw)).hits]  # type: ignore[arg-type]


async def test_an_answer_is_found_by_its_questions_words(store: Store) -> None:
    await chat(
        store,
        [
            Message.user("why does test_loader crash on empty input?"),
            Message.tool(ToolResultPart(call_id="c1", content=TRACEBACK, name="bash")),
            Message.assistant("Fixed: skip lines without a colon."),
        ]
        + [Message.user(f"unrelated step {i}") for i in range(10)],
    )
    assert 2 in await seqs(store, "why does test_loader crash")  # the traceback shares none of these words
    assert 2 not in await seqs(store, "why does test_loader crash", keys=False)  # the store only lifts it


async def test_an_exact_identifier_in_its_own_turn_ranks_first(store: Store) -> None:
    await chat(
        store,
        [
            Message.user("what does parse_header_v2 return?"),
            Message.assistant("A dict of the header's fields, keys lower-cased."),
            Message.user("and where is parse_header_v2 defined?"),
            Message.assistant("In src/app/headers.py, next to the tokenizer."),
        ],
    )
    hits = await seqs(store, "parse_header_v2")
    assert set(hits[:2]) == {1, 3}  # the turns that say it
    assert set(hits[2:]) == {2, 4}  # below them, the replies whose previous turn says it


async def test_reverted_turns_are_no_neighbours_key(store: Store) -> None:
    sid = await chat(
        store,
        [
            Message.user("deploy the service"),
            Message.assistant("running kubectl apply with the zorbulon manifest"),
        ],
    )
    await store.append(sid, [Revert(to_seq=1), Message.assistant("Deployed with docker compose.")])
    assert await seqs(store, "zorbulon") == []  # turn 2 is hidden, and turn 4's key does not hold it
    assert await seqs(store, "zorbulon", include_reverted=True) == [2]
    assert 4 in await seqs(store, "deploy service")  # its previous turn is the request it answers


async def test_a_revert_that_a_later_revert_hid_gives_back_the_previous_turn(store: Store) -> None:
    sid = await chat(store, [Message.user("alpha question"), Message.assistant("beta reply")])
    await recall(store, "beta")  # the keys read this far now; the rest comes incrementally
    await store.append(sid, [Revert(to_seq=1), Message.assistant("gamma reply")])
    await store.append(sid, [Revert(to_seq=2), Message.user("delta follow-up")])  # hides 3..5: back to 1, 2
    assert await seqs(store, "beta") == [2, 6]  # turn 6 follows "beta reply" again
    assert await seqs(store, "gamma") == []


async def test_keys_grow_incrementally(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    keys = KeyIndex(default_key_path(store))
    assert keys.path == str(tmp_path / "t.db.keys")
    sid = await chat(store, [Message.user(f"step {i} of the migration") for i in range(5)])
    await chat(store, [Message.user("elsewhere")], directory="/other")
    # the keys are one index of every session, brought up to date whole whatever the recall's scope
    assert await keys.sync(store, directory="/repo") and keys.count() == 6
    assert await keys.sync(store) and keys.count() == 6
    await store.append(sid, [Message.user("the migration is done"), Message.assistant("ok")])
    assert not await keys.sync(store, limit=1)  # a bounded sync says what it left
    assert await keys.sync(store) and keys.count() == 8
    hits = await recall(store, "migration done", keys=keys)
    assert hits.hits[0].seq == 6 and hits.backlog == 0
    keys.close()
    await store.close()


async def test_a_bounded_sync_counts_every_batch_it_read(tmp_path: Path) -> None:
    """The limit bounds the entries read, batches of one session included: 3 sessions of 30 turns, read 8 at
    a time, with a limit of 40, stop after the second session (the progress counts what was read)."""
    store = SqliteStore(tmp_path / "t.db")
    keys = KeyIndex(default_key_path(store))
    for n in range(3):
        await chat(store, [Message.user(f"turn {i} of session {n}") for i in range(30)])
    told: list[int] = []
    assert not await keys.sync(store, limit=40, batch=8, progress=told.append)
    assert keys.count() == 40 and told == [30, 40]
    assert await keys.sync(store, batch=8) and keys.count() == 90
    keys.close()
    await store.close()


async def test_deleted_and_replaced_sessions_leave_the_keys(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    keys = KeyIndex(tmp_path / "k.keys")
    gone = await chat(store, [Message.user("the flaky websocket test")])
    kept = await chat(store, [Message.user("the websocket reconnect logic")])
    await keys.sync(store)
    await store.delete_session(gone)
    assert [h.session_id for h in (await recall(store, "websocket", keys=keys)).hits] == [kept]
    # the same id again, holding something else: its old keys are not searched
    await store.delete_session(kept)
    info = SessionInfo(id=kept, created_at=1.0, updated_at=2.0, directory="/repo")
    await store.import_session(info, [Entry(1, 1.5, Message.user("a new session about caching"))])
    assert (await recall(store, "websocket", keys=keys)).hits == []
    assert [h.seq for h in (await recall(store, "caching", keys=keys)).hits] == [1]
    keys.close()
    await store.close()


async def test_missing_or_outdated_keys_are_built_again(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    await chat(store, [Message.user("set RUST_LOG=debug before cargo test")])
    path = tmp_path / "t.db.keys"
    keys = KeyIndex(path)
    await keys.sync(store)
    keys.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'version'", (KEY_VERSION - 1,))
    keys = KeyIndex(path)
    assert keys.count() == 0  # an older format is dropped...
    assert [h.seq for h in (await recall(store, "RUST_LOG", keys=keys)).hits] == [1]  # ...and built again
    keys.close()
    for leftover in tmp_path.glob("t.db.keys*"):
        leftover.unlink()
    assert [h.seq for h in (await recall(store, "RUST_LOG")).hits] == [1]  # the default keys, made anew
    assert path.exists()
    await store.close()


async def test_recall_falls_back_to_the_store_search_without_keys(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    (tmp_path / "t.db.keys").mkdir()  # cannot be opened as a database
    await chat(store, [Message.user("the cache key includes the git sha")])
    result = await recall(store, "cache key")
    assert [h.seq for h in result.hits] == [1]
    await store.close()


class CountingStore:
    """The store with the rows its change cursor returned counted, and its listings refused: a sync must never
    list every session."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.changed = 0

    async def list_sessions(self, **kw: Any) -> Any:
        raise AssertionError("a sync listed the sessions")

    async def changed_sessions(self, after: int = 0, **kw: Any) -> Any:
        page = await self.store.changed_sessions(after, **kw)
        self.changed += len(page.sessions) + len(page.deleted)
        return page

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def test_a_sync_reads_what_changed_not_every_session(tmp_path: Path) -> None:
    """The first sync reads every session from the store's change cursor; after it, a sync reads the sessions
    written since (and the last one it saw): an append to an old session is keyed at once, 300 untouched
    sessions are not read again, a session imported with old timestamps is found at once, a deleted one is
    dropped, and the position survives the keys being closed and opened again."""
    store = SqliteStore(tmp_path / "t.db")
    counting = CountingStore(store)
    keys = KeyIndex(default_key_path(store))
    ids = [await chat(store, [Message.user(f"notes {i}")], directory=f"/repo{i % 3}") for i in range(300)]
    assert await keys.sync(counting) and keys.count() == 300 and counting.changed == 300  # the first: all
    counting.changed = 0
    await store.append(ids[5], [Message.assistant("the flaky test is tests/test_io.py::test_reconnect")])
    assert await keys.sync(counting) and keys.count() == 301
    assert counting.changed <= 2  # the changed session (and the one the last sync ended at)
    counting.changed = 0
    assert await keys.sync(counting, directory="/repo2") and counting.changed <= 1
    hits = await recall(counting, "test_reconnect flaky", keys=keys)  # type: ignore[arg-type]
    assert [(h.session_id, h.seq) for h in hits.hits][:1] == [(ids[5], 2)]
    old = time.time() - 86400 * 30
    info = SessionInfo(id=new_session_id(), created_at=old, updated_at=old + 2, directory="/repo0")
    await store.import_session(info, [Entry(1, old + 1, Message.user("imported: the cache_ttl setting"))])
    assert await keys.sync(counting) and keys.count() == 302
    await store.delete_session(ids[7])
    assert await keys.sync(counting) and keys.count() == 301
    keys.close()
    counting.changed = 0
    again = KeyIndex(default_key_path(store))
    await store.append(ids[9], [Message.user("one more")])
    assert await again.sync(counting) and again.count() == 302 and counting.changed <= 3
    again.close()
    await store.close()
