"""The `Store` conformance suite: every test here takes the `store` fixture, so it runs once per backend
(memory and SQLite today, PostgreSQL when it lands). What one backend does, all must do."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.errors import (
    InvalidId,
    InvalidInput,
    LeaseLost,
    NotFound,
    SeqConflict,
    SessionBusy,
    SessionNotFound,
    StoreClosed,
)
from tether.ids import is_valid_id, new_session_id
from tether.messages import (
    Entry,
    EntryBody,
    Marker,
    Message,
    Revert,
    TextPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from tether.store import UNSET, SessionInfo, Store, active_entries, active_tail
from tether.store.bookkeeping import artifact_id


def priced(text: str, *, tokens_in: int = 0, tokens_out: int = 0, cost: str | None = None) -> Message:
    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out, cost=Decimal(cost) if cost else None)
    return Message(role="assistant", parts=[TextPart(text=text)], usage=usage)


def numbered(n: int, prefix: str = "m") -> list[EntryBody]:
    return [Message.user(f"{prefix}{i}") for i in range(1, n + 1)]


def texts(entries: list[Entry]) -> list[str]:
    return [e.body.text if isinstance(e.body, Message) else f"<{e.kind}>" for e in entries]


async def all_sessions(store: Store, **filters: Any) -> list[SessionInfo]:
    out: list[SessionInfo] = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(limit=50, cursor=cursor, **filters)
        out.extend(page.items)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


# --- sessions: create and get ------------------------------------------------------------------------


async def test_create_with_generated_id(store: Store) -> None:
    info = await store.create_session(directory="/work/a", model="m1", agent="build", system_prompt="be brief")
    assert is_valid_id(info.id) and info.id.startswith("ses_")
    assert (info.directory, info.model, info.agent, info.system_prompt) == ("/work/a", "m1", "build", "be brief")
    assert (info.state, info.entry_count, info.message_count, info.cost, info.metadata) == (
        "active",
        0,
        0,
        Decimal(0),
        {},
    )
    assert info.parent_id is None and info.forked_from is None and info.forked_at is None
    assert await store.get_session(info.id) == info


async def test_create_with_given_id_and_fields(store: Store) -> None:
    sid = new_session_id()
    meta = {"source": "import", "nested": {"list": [1, 2.5, None, "x"]}}
    info = await store.create_session(id=sid, title="Given", state="paused", metadata=meta, created_at=1_000_000.0)
    assert info.id == sid
    assert (info.title, info.state, info.metadata, info.created_at) == ("Given", "paused", meta, 1_000_000.0)
    assert await store.get_session(sid) == info


async def test_create_duplicate_id_is_refused(store: Store) -> None:
    sid = new_session_id()
    await store.create_session(id=sid, title="first")
    with pytest.raises(InvalidInput, match="already exists"):
        await store.create_session(id=sid, title="second")
    assert (await store.get_session(sid)).title == "first"
    assert len(await all_sessions(store)) == 1


async def test_create_with_missing_parent_is_refused(store: Store) -> None:
    missing = new_session_id()
    with pytest.raises(SessionNotFound) as caught:
        await store.create_session(parent_id=missing)
    assert caught.value.session_id == missing
    assert await all_sessions(store) == []


async def test_create_with_bad_state_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match="state"):
        await store.create_session(state="running")  # type: ignore[arg-type]
    assert await all_sessions(store) == []


async def test_get_missing_session(store: Store) -> None:
    missing = new_session_id()
    with pytest.raises(SessionNotFound) as caught:
        await store.get_session(missing)
    assert caught.value.session_id == missing
    assert isinstance(caught.value, NotFound)


async def test_returned_rows_are_copies(store: Store) -> None:
    """Mutating what the store returned must not change what it holds (a disk never aliases)."""
    meta: dict[str, Any] = {"tags": ["a"], "nested": {"k": 1}}
    info = await store.create_session(metadata=meta)
    meta["tags"].append("changed-after-create")
    got = await store.get_session(info.id)
    got.metadata["tags"].append("changed-after-get")
    got.metadata["nested"]["k"] = 2
    listed = (await store.list_sessions()).items[0]
    listed.metadata["new"] = True
    assert (await store.get_session(info.id)).metadata == {"tags": ["a"], "nested": {"k": 1}}


# --- sessions: update ----------------------------------------------------------------------------------


async def test_update_every_field(store: Store) -> None:
    info = await store.create_session(directory="/a")
    new = await store.update_session(
        info.id,
        title="T",
        model="gpt",
        agent="plan",
        state="paused",
        system_prompt="sys",
        directory="/b",
        metadata={"k": ["v", 1]},
    )
    assert (new.title, new.model, new.agent, new.state, new.system_prompt, new.directory, new.metadata) == (
        "T",
        "gpt",
        "plan",
        "paused",
        "sys",
        "/b",
        {"k": ["v", 1]},
    )
    assert new.updated_at >= info.updated_at
    assert await store.get_session(info.id) == new


async def test_update_none_clears_and_unset_keeps(store: Store) -> None:
    info = await store.create_session(title="T", model="m", metadata={"a": 1}, directory="/d")
    new = await store.update_session(info.id, title=None, model=UNSET, metadata=None)
    assert (new.title, new.model, new.metadata, new.directory) == (None, "m", {}, "/d")


@pytest.mark.parametrize(
    "fields",
    [
        {"state": "running"},
        {"state": None},
        {"entry_count": 10},
        {"id": "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"},
        {"cost": Decimal(1)},
        {"title": "ok", "nonsense": 1},
    ],
    ids=["bad-state", "null-state", "counter", "id", "cost", "unknown-field"],
)
async def test_update_bad_field_is_refused(store: Store, fields: dict[str, Any]) -> None:
    info = await store.create_session(title="before")
    with pytest.raises(InvalidInput):
        await store.update_session(info.id, **fields)
    assert await store.get_session(info.id) == info


async def test_update_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.update_session(new_session_id(), title="x")


# --- sessions: delete ---------------------------------------------------------------------------------


async def test_delete_removes_children_recursively_and_keeps_forks(store: Store) -> None:
    root = await store.create_session(title="root")
    await store.append(root.id, numbered(3))
    child = await store.create_session(parent_id=root.id, title="child")
    grandchild = await store.create_session(parent_id=child.id, title="grandchild")
    await store.append(grandchild.id, numbered(2))
    fork = await store.fork(root.id, 2)
    unrelated = await store.create_session(title="unrelated")

    deleted = await store.delete_session(root.id)

    assert sorted(deleted) == sorted([root.id, child.id, grandchild.id])
    for gone in (root.id, child.id, grandchild.id):
        with pytest.raises(SessionNotFound):
            await store.get_session(gone)
        with pytest.raises(SessionNotFound):
            await store.read(gone)
    assert {s.id for s in await all_sessions(store)} == {fork.id, unrelated.id}
    kept = await store.get_session(fork.id)
    assert (kept.forked_from, kept.forked_at, kept.entry_count) == (root.id, 2, 2)
    assert texts(await store.read(fork.id)) == ["m1", "m2"]


async def test_delete_child_leaves_parent(store: Store) -> None:
    root = await store.create_session()
    child = await store.create_session(parent_id=root.id)
    assert await store.delete_session(child.id) == [child.id]
    assert await store.get_session(root.id) == root


async def test_delete_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.delete_session(new_session_id())


async def test_deleted_id_can_be_created_again(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, numbered(2))
    await store.delete_session(info.id)
    again = await store.create_session(id=info.id)
    assert again.entry_count == 0
    assert await store.read(info.id) == []


# --- sessions: list and last ---------------------------------------------------------------------------


async def test_list_most_recent_first_and_append_moves_to_top(store: Store) -> None:
    ids = [(await store.create_session()).id for _ in range(5)]
    assert [s.id for s in (await store.list_sessions()).items] == ids[::-1]
    await store.append(ids[1], [Message.user("hi")])
    assert [s.id for s in (await store.list_sessions()).items] == [ids[1], ids[4], ids[3], ids[2], ids[0]]
    await store.update_session(ids[3], title="renamed")
    assert (await store.list_sessions(limit=1)).items[0].id == ids[3]


async def test_list_paging_returns_each_session_exactly_once(store: Store) -> None:
    ids = [(await store.create_session(directory=f"/d{i % 3}")).id for i in range(120)]
    pages = []
    cursor: str | None = None
    while True:
        page = await store.list_sessions(limit=50, cursor=cursor)
        pages.append(page.items)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert [len(p) for p in pages] == [50, 50, 20]
    seen = [s.id for p in pages for s in p]
    assert seen == ids[::-1]
    stamps = [(s.updated_at, s.id) for p in pages for s in p]
    assert stamps == sorted(stamps, reverse=True)


async def test_list_paging_with_exact_multiple_of_limit(store: Store) -> None:
    for _ in range(4):
        await store.create_session()
    first = await store.list_sessions(limit=2)
    assert len(first.items) == 2 and first.next_cursor is not None
    second = await store.list_sessions(limit=2, cursor=first.next_cursor)
    assert len(second.items) == 2 and second.next_cursor is None
    assert not {s.id for s in first.items} & {s.id for s in second.items}


async def test_list_filters_by_directory_and_parent(store: Store) -> None:
    a1 = await store.create_session(directory="/a")
    b1 = await store.create_session(directory="/b")
    a2 = await store.create_session(directory="/a")
    child = await store.create_session(directory="/a", parent_id=a1.id)
    grandchild = await store.create_session(directory="/b", parent_id=child.id)

    assert [s.id for s in await all_sessions(store, directory="/a")] == [child.id, a2.id, a1.id]
    assert [s.id for s in await all_sessions(store, directory="/a", parent_id=None)] == [a2.id, a1.id]
    assert [s.id for s in await all_sessions(store, parent_id=None)] == [a2.id, b1.id, a1.id]
    assert [s.id for s in await all_sessions(store, parent_id=a1.id)] == [child.id]
    assert [s.id for s in await all_sessions(store, parent_id=child.id)] == [grandchild.id]
    assert [s.id for s in await all_sessions(store, parent_id=child.id, directory="/a")] == []
    assert [s.id for s in await all_sessions(store, parent_id=UNSET)] == [
        grandchild.id,
        child.id,
        a2.id,
        b1.id,
        a1.id,
    ]
    assert await all_sessions(store, directory="/nowhere") == []


@pytest.mark.parametrize("limit", [0, -1, 10_001, 2.5, "10"])
async def test_list_bad_limit(store: Store, limit: Any) -> None:
    with pytest.raises(InvalidInput, match="limit"):
        await store.list_sessions(limit=limit)


@pytest.mark.parametrize("cursor", ["not a cursor!", "", "bm9waXBl"])
async def test_list_bad_cursor(store: Store, cursor: str) -> None:
    await store.create_session()
    with pytest.raises(InvalidInput, match="cursor"):
        await store.list_sessions(cursor=cursor)


async def test_last_session_for_directory(store: Store) -> None:
    assert await store.last_session("/a") is None
    first = await store.create_session(directory="/a")
    second = await store.create_session(directory="/a")
    await store.create_session(directory="/b")
    await store.create_session(directory="/a", parent_id=first.id)  # a child is never "the last session"
    last = await store.last_session("/a")
    assert last is not None and last.id == second.id
    await store.append(first.id, [Message.user("back to the first")])
    last = await store.last_session("/a")
    assert last is not None and last.id == first.id
    assert await store.last_session("/c") is None


# --- counters and titles -------------------------------------------------------------------------------


async def test_counters_follow_appends(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, [Message.user("q")])
    await store.append(
        info.id,
        [
            priced("a", tokens_in=100, tokens_out=20, cost="0.1"),
            Marker(name="approval", data={"ok": True}),
            priced("b", tokens_in=5, tokens_out=7, cost="0.2"),
        ],
    )
    await store.append(info.id, [priced("c", tokens_in=1), Revert(to_seq=1), TitleChange(title="t")])
    got = await store.get_session(info.id)
    assert (got.entry_count, got.last_seq, got.message_count) == (7, 7, 4)
    assert (got.input_tokens, got.output_tokens) == (106, 27)
    assert got.cost == Decimal("0.3") and str(got.cost) == "0.3"  # exact: 0.1 + 0.2 is not 0.30000000000000004


async def test_cost_stays_exact_over_many_appends(store: Store) -> None:
    info = await store.create_session()
    for _ in range(30):
        await store.append(info.id, [priced("x", cost="0.0000001")])  # $0.10 per million tokens, one token
    await store.append(info.id, [priced("y", cost="1234567.1")])
    await store.append(info.id, [priced("z", cost="0.000000000001")])  # one picodollar
    assert (await store.get_session(info.id)).cost == Decimal("1234567.100003000001")


async def test_default_title_is_first_user_message(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, [Message.system("sys"), Message.assistant("hello"), Message.user("   ")])
    assert (await store.get_session(info.id)).title is None  # nothing a user said yet
    await store.append(info.id, [Message.user("  fix   the\nfailing test  ")])
    assert (await store.get_session(info.id)).title == "fix the failing test"
    await store.append(info.id, [Message.user("a later message does not retitle")])
    assert (await store.get_session(info.id)).title == "fix the failing test"


async def test_default_title_is_cut_to_47_characters(store: Store) -> None:
    info = await store.create_session()
    long = "word " * 30
    await store.append(info.id, [Message.user(long)])
    title = (await store.get_session(info.id)).title
    assert title == " ".join(long.split())[:47] + "..."
    assert len(title) == 50
    exact = await store.create_session()
    await store.append(exact.id, [Message.user("x" * 47)])
    assert (await store.get_session(exact.id)).title == "x" * 47


async def test_title_change_overrides_and_given_title_is_kept(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, [Message.user("first words"), TitleChange(title="Chosen")])
    assert (await store.get_session(info.id)).title == "Chosen"
    await store.append(info.id, [TitleChange(title="Chosen again")])
    assert (await store.get_session(info.id)).title == "Chosen again"
    given = await store.create_session(title="Given")
    await store.append(given.id, [Message.user("does not replace a given title")])
    assert (await store.get_session(given.id)).title == "Given"
    cleared = await store.update_session(given.id, title=None)
    assert cleared.title is None
    await store.append(given.id, [Message.user("titles it again")])
    assert (await store.get_session(given.id)).title == "titles it again"


# --- entries: append ------------------------------------------------------------------------------------


async def test_append_one_and_several_with_dense_seqs(store: Store) -> None:
    info = await store.create_session()
    one = await store.append(info.id, [Message.user("one")])
    assert [e.seq for e in one] == [1]
    several = await store.append(info.id, [Message.assistant("two"), Marker(name="m"), Message.user("four")])
    assert [e.seq for e in several] == [2, 3, 4]
    assert len({e.created_at for e in several}) == 1  # one transaction, one commit time
    assert [e.kind for e in several] == ["message", "marker", "message"]
    assert await store.read(info.id) == one + several
    assert (await store.get_session(info.id)).entry_count == 4


async def test_append_keeps_the_created_at_it_is_given(store: Store) -> None:
    """An importer keeps its source's times: each entry gets the time given for it, stored and read back;
    the session's updated_at is still the commit time."""
    info = await store.create_session()
    got = await store.append(info.id, [Message.user("old"), Message.assistant("older")], created_at=[1000.0, 999.5])
    assert [e.created_at for e in got] == [1000.0, 999.5]
    assert [e.created_at for e in await store.read(info.id)] == [1000.0, 999.5]
    assert (await store.get_session(info.id)).updated_at > 1000.0
    with pytest.raises(InvalidInput):
        await store.append(info.id, [Message.user("x")], created_at=[1.0, 2.0])
    with pytest.raises(InvalidInput):
        await store.append(info.id, [Message.user("x")], created_at=[float("nan")])
    assert (await store.get_session(info.id)).entry_count == 2


async def test_seqs_are_per_session(store: Store) -> None:
    a = await store.create_session()
    b = await store.create_session()
    await store.append(a.id, numbered(3))
    got = await store.append(b.id, numbered(2))
    assert [e.seq for e in got] == [1, 2]


async def test_append_with_expect_seq(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, numbered(2), expect_seq=1)
    got = await store.append(info.id, [Message.user("m3")], expect_seq=3)
    assert [e.seq for e in got] == [3]


@pytest.mark.parametrize("expect", [1, 3, 5, 100, 0, -1])
async def test_append_with_stale_expect_seq_conflicts_and_writes_nothing(store: Store, expect: int) -> None:
    info = await store.create_session()
    await store.append(info.id, numbered(3))
    before = await store.get_session(info.id)
    with pytest.raises(SeqConflict) as caught:
        await store.append(info.id, [priced("late", tokens_in=9, cost="1"), TitleChange(title="x")], expect_seq=expect)
    assert (caught.value.session_id, caught.value.expected, caught.value.actual) == (info.id, expect, 4)
    assert await store.get_session(info.id) == before
    assert texts(await store.read(info.id)) == ["m1", "m2", "m3"]


async def test_append_nothing_is_refused(store: Store) -> None:
    info = await store.create_session()
    with pytest.raises(InvalidInput):
        await store.append(info.id, [])
    assert await store.get_session(info.id) == info


async def test_append_to_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.append(new_session_id(), [Message.user("x")])
    with pytest.raises(SessionNotFound):
        await store.append(new_session_id(), [Message.user("x")], expect_seq=1)


async def test_appended_bodies_round_trip(store: Store) -> None:
    info = await store.create_session()
    call = ToolCallPart(id="call_1", name="bash", arguments={"cmd": "ls", "opts": [1, 2.5, None, True]})
    broken = ToolCallPart.from_raw("call_2", "edit", '{"path": "a.py", "text": ')
    bodies: list[EntryBody] = [
        Message.user("run ls"),
        Message.assistant("sure", tool_calls=[call, broken]),
        Message.tool(ToolResultPart(call_id="call_1", content="a.py\nb.py", metadata={"exit": 0})),
        Message.tool(ToolResultPart(call_id="call_2", content="bad json", is_error=True)),
        priced("done", tokens_in=3, tokens_out=4, cost="0.0001"),
        Marker(name="approval", data={"tool": "bash", "ok": True}),
    ]
    await store.append(info.id, bodies)
    assert [e.body for e in await store.read(info.id)] == bodies
    assert (await store.read(info.id, 2, 2))[0].body.tool_calls[1].raw_arguments == '{"path": "a.py", "text": '  # type: ignore[union-attr]


# --- entries: read, tail, iterate -----------------------------------------------------------------------


async def test_read_ranges(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, numbered(10))
    assert texts(await store.read(info.id)) == [f"m{i}" for i in range(1, 11)]
    assert [e.seq for e in await store.read(info.id, 3, 5)] == [3, 4, 5]
    assert [e.seq for e in await store.read(info.id, 8)] == [8, 9, 10]
    assert [e.seq for e in await store.read(info.id, 0, 2)] == [1, 2]
    assert [e.seq for e in await store.read(info.id, -5, 1)] == [1]
    assert [e.seq for e in await store.read(info.id, 9, 100)] == [9, 10]
    assert [e.seq for e in await store.read(info.id, 4, 4)] == [4]
    assert await store.read(info.id, 5, 3) == []
    assert await store.read(info.id, 11) == []
    empty = await store.create_session()
    assert await store.read(empty.id) == []
    with pytest.raises(SessionNotFound):
        await store.read(new_session_id())


async def test_tail(store: Store) -> None:
    info = await store.create_session()
    assert await store.tail(info.id, 5) == []
    await store.append(info.id, numbered(10))
    assert [e.seq for e in await store.tail(info.id, 3)] == [8, 9, 10]
    assert [e.seq for e in await store.tail(info.id, 1)] == [10]
    assert [e.seq for e in await store.tail(info.id, 50)] == list(range(1, 11))
    assert await store.tail(info.id, 0) == []
    assert await store.tail(info.id, -3) == []
    assert await store.tail(info.id, 4) == await store.read(info.id, 7)
    with pytest.raises(SessionNotFound):
        await store.tail(new_session_id(), 3)
    with pytest.raises(SessionNotFound):
        await store.tail(new_session_id(), 0)


async def test_iter_entries_over_a_history_larger_than_the_batch(store: Store) -> None:
    info = await store.create_session()
    for start in range(0, 1210, 110):
        await store.append(info.id, [Message.user(f"m{i}") for i in range(start + 1, start + 111)])
    seqs = [e.seq async for e in store.iter_entries(info.id)]
    assert seqs == list(range(1, 1211))
    small = [e async for e in store.iter_entries(info.id, 1195, batch=7)]
    assert [e.seq for e in small] == list(range(1195, 1211))
    assert texts(small) == [f"m{i}" for i in range(1195, 1211)]
    assert [e async for e in store.iter_entries(info.id, 5000)] == []


async def test_iter_entries_reads_lazily_in_batches(store: Store) -> None:
    """Entries appended while a reader is part-way through still show up: the iterator does not take a
    snapshot of the whole history up front."""
    info = await store.create_session()
    await store.append(info.id, numbered(25))
    seen = []
    async for entry in store.iter_entries(info.id, batch=10):
        seen.append(entry.seq)
        if entry.seq == 1:
            await store.append(info.id, numbered(5, prefix="late"))
    assert seen == list(range(1, 31))


async def test_iter_entries_of_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        async for _ in store.iter_entries(new_session_id()):
            pass


# --- reverts and the active history ---------------------------------------------------------------------


async def test_active_tail_skips_reverted_span(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, numbered(5))  # seqs 1..5
    await store.append(info.id, [Revert(to_seq=2, reason="undo")])  # seq 6 hides 3..5
    await store.append(info.id, [Message.user("after")])  # seq 7
    assert texts(await active_tail(store, info.id, 10)) == ["m1", "m2", "after"]
    assert texts(await active_tail(store, info.id, 2)) == ["m2", "after"]
    assert [e.seq for e in await active_entries(store, info.id)] == [1, 2, 7]
    # the history stays: the raw journal still has everything, the revert included
    assert [e.kind for e in await store.read(info.id)] == ["message"] * 5 + ["revert", "message"]


async def test_nested_reverts(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, numbered(4))  # 1..4
    await store.append(info.id, [Revert(to_seq=3)])  # 5: hides 4
    await store.append(info.id, [Message.user("x6"), Message.user("x7")])  # 6, 7
    await store.append(info.id, [Revert(to_seq=6)])  # 8: hides 7
    assert [e.seq for e in await active_entries(store, info.id)] == [1, 2, 3, 6]
    await store.append(info.id, [Revert(to_seq=1)])  # 9: back to just after 1
    assert [e.seq for e in await active_entries(store, info.id)] == [1]
    # a revert to just before an earlier revert brings that revert's span back
    await store.append(info.id, [Revert(to_seq=4)])  # 10: the history as it was after seq 4
    assert [e.seq for e in await active_entries(store, info.id)] == [1, 2, 3, 4]
    await store.append(info.id, [Revert(to_seq=0)])  # 11: hides everything
    assert await active_entries(store, info.id) == []
    assert await active_tail(store, info.id, 5) == []


async def test_active_tail_of_empty_and_unreverted_sessions(store: Store) -> None:
    info = await store.create_session()
    assert await active_tail(store, info.id, 5) == []
    await store.append(info.id, numbered(3))
    assert await active_tail(store, info.id, 3) == await store.read(info.id)
    with pytest.raises(SessionNotFound):
        await active_tail(store, new_session_id(), 3)


@pytest.mark.parametrize("to_seq", [3, 4, 100, -1])
async def test_revert_must_point_before_itself(store: Store, to_seq: int) -> None:
    info = await store.create_session()
    await store.append(info.id, numbered(2))
    before = await store.get_session(info.id)
    with pytest.raises(InvalidInput, match="revert"):
        await store.append(info.id, [Revert(to_seq=to_seq)])  # would be seq 3
    assert await store.get_session(info.id) == before


async def test_revert_is_validated_at_its_position_in_a_batch(store: Store) -> None:
    info = await store.create_session()
    ok = await store.append(info.id, [Message.user("a"), Message.user("b"), Revert(to_seq=2)])
    assert [e.seq for e in ok] == [1, 2, 3]
    with pytest.raises(InvalidInput):
        await store.append(info.id, [Message.user("c"), Revert(to_seq=5)])  # the revert would be seq 5
    assert (await store.get_session(info.id)).entry_count == 3


def _reference_active(bodies: list[EntryBody]) -> list[int]:
    """The active history by definition: a revert to `t` makes it what it was right after seq `t`."""
    states: list[list[int]] = [[]]
    for seq, body in enumerate(bodies, start=1):
        states.append(list(states[body.to_seq]) if isinstance(body, Revert) else [*states[seq - 1], seq])
    return states[-1]


_journal_ops = st.lists(st.one_of(st.just(-1), st.integers(0, 40)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_journal_ops, n=st.integers(1, 45), chunk=st.sampled_from([None, 1, 2, 3, 7]))
async def test_active_tail_matches_reference_model(store: Store, ops: list[int], n: int, chunk: int | None) -> None:
    info = await store.create_session()  # a fresh session per example; the store is shared
    bodies: list[EntryBody] = []
    for op in ops:
        seq = len(bodies) + 1
        bodies.append(Message.user(f"m{seq}") if op < 0 else Revert(to_seq=op % seq))
    await store.append(info.id, bodies)
    expected = _reference_active(bodies)
    assert [e.seq for e in await active_tail(store, info.id, n, chunk=chunk)] == expected[-n:]
    assert [e.seq for e in await active_entries(store, info.id)] == expected


# --- fork ------------------------------------------------------------------------------------------------


async def _forkable(store: Store) -> SessionInfo:
    info = await store.create_session(
        directory="/w", agent="build", model="m", system_prompt="sys", metadata={"k": "v"}, title="Source"
    )
    await store.append(info.id, [Message.user("q1"), priced("a1", tokens_in=10, tokens_out=1, cost="0.1")])
    await store.append(info.id, [Message.user("q2"), priced("a2", tokens_in=20, tokens_out=2, cost="0.25")])
    await store.append(info.id, [Marker(name="end")])
    return await store.get_session(info.id)


async def test_fork_at_a_position(store: Store) -> None:
    src = await _forkable(store)
    fork = await store.fork(src.id, 3)
    assert fork.id != src.id and fork.forked_from == src.id and fork.forked_at == 3
    assert (fork.entry_count, fork.message_count, fork.input_tokens, fork.output_tokens, fork.cost) == (
        3,
        3,
        10,
        1,
        Decimal("0.1"),
    )
    assert (fork.directory, fork.agent, fork.model, fork.system_prompt, fork.metadata, fork.title) == (
        "/w",
        "build",
        "m",
        "sys",
        {"k": "v"},
        "Source",
    )
    assert fork.parent_id is None
    assert await store.read(fork.id) == await store.read(src.id, 1, 3)
    assert await store.get_session(fork.id) == fork
    # the fork goes its own way; the source is untouched
    more = await store.append(fork.id, [Message.user("diverge")])
    assert more[0].seq == 4
    assert await store.get_session(src.id) == src


async def test_fork_defaults_to_everything(store: Store) -> None:
    src = await _forkable(store)
    fork = await store.fork(src.id, title="Copy")
    assert (fork.forked_at, fork.entry_count, fork.message_count, fork.cost, fork.title) == (
        5,
        5,
        4,
        Decimal("0.35"),
        "Copy",
    )
    assert await store.read(fork.id) == await store.read(src.id)


async def test_fork_at_zero_is_empty(store: Store) -> None:
    src = await _forkable(store)
    fork = await store.fork(src.id, 0)
    assert (fork.forked_at, fork.entry_count, fork.message_count, fork.input_tokens, fork.cost) == (
        0,
        0,
        0,
        0,
        Decimal(0),
    )
    assert await store.read(fork.id) == []
    assert [e.seq for e in await store.append(fork.id, [Message.user("fresh")])] == [1]


async def test_fork_with_given_id(store: Store) -> None:
    src = await _forkable(store)
    sid = new_session_id()
    fork = await store.fork(src.id, 1, id=sid)
    assert fork.id == sid
    with pytest.raises(InvalidInput, match="already exists"):
        await store.fork(src.id, 1, id=sid)
    with pytest.raises(InvalidInput, match="already exists"):
        await store.fork(src.id, 1, id=src.id)


@pytest.mark.parametrize("at", [6, 100, -1])
async def test_fork_out_of_range_is_refused(store: Store, at: int) -> None:
    src = await _forkable(store)
    with pytest.raises(InvalidInput):
        await store.fork(src.id, at)
    assert [s.id for s in await all_sessions(store)] == [src.id]


async def test_fork_of_missing_session(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.fork(new_session_id())


async def test_fork_keeps_reverts_and_active_history(store: Store) -> None:
    src = await store.create_session()
    await store.append(src.id, [*numbered(3), Revert(to_seq=1), Message.user("m5")])
    fork = await store.fork(src.id)
    assert [e.seq for e in await active_entries(store, fork.id)] == [1, 5]


# --- artifacts -------------------------------------------------------------------------------------------


async def test_artifacts_are_content_addressed(store: Store) -> None:
    data = b"full tool output\x00\xff" * 1000
    aid = await store.put_artifact(data, "application/octet-stream")
    assert aid == artifact_id(data) and aid.startswith("art_") and len(aid) == 68
    assert await store.put_artifact(data) == aid  # the same bytes, the same artifact
    assert await store.get_artifact(aid) == data
    empty = await store.put_artifact(b"")
    assert await store.get_artifact(empty) == b""


async def test_missing_artifact(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.get_artifact(artifact_id(b"never stored"))


@pytest.mark.parametrize(
    "bad",
    [
        "art_" + "g" * 64,
        "art_" + "0" * 63,
        "art_../../etc/passwd",
        "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB",
        "art_" + " " + "0" * 62 + " ",
        "art_" + "0" * 31 + "_" + "0" * 32,
        "art_0x" + "0" * 62,
        "",
        123,
        None,
    ],
    ids=["not-hex", "short", "path", "session-id", "spaces", "underscore", "0x-prefix", "empty", "int", "none"],
)
async def test_bad_artifact_id(store: Store, bad: Any) -> None:
    with pytest.raises(InvalidInput):
        await store.get_artifact(bad)


# --- bad input ------------------------------------------------------------------------------------------

BAD_IDS: list[Any] = [
    "ses_01JD8X3Q5T9N2C7KZ6W4M0R1/B",
    "ses_01JD8X3Q5T9N2C7KZ6W4M0R1\\B",
    "ses_01JD8X3Q5T9N2C7KZ6W4M0R..",
    "../ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB",
    "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB/../../etc",
    "..",
    "/",
    "\\",
    "",
    "ses_" + "0" * 100_000,
    "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB\x00",
    "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB\n",
    "ses_01jd8x3q5t9n2c7kz6w4m0r1yb",
    123,
    None,
    b"ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB",
]
BAD_ID_NAMES = [
    "slash",
    "backslash",
    "dots",
    "dots-prefix",
    "traversal",
    "dotdot",
    "root",
    "lone-backslash",
    "empty",
    "very-long",
    "nul",
    "newline",
    "lowercase",
    "int",
    "none",
    "bytes",
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=BAD_ID_NAMES)
async def test_bad_session_ids_are_refused_everywhere(store: Store, bad: Any) -> None:
    real = await store.create_session()
    await store.append(real.id, numbered(2))
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "get": lambda: store.get_session(bad),
        "update": lambda: store.update_session(bad, title="x"),
        "delete": lambda: store.delete_session(bad),
        "append": lambda: store.append(bad, [Message.user("x")]),
        "append-expect": lambda: store.append(bad, [Message.user("x")], expect_seq=1),
        "read": lambda: store.read(bad),
        "tail": lambda: store.tail(bad, 3),
        "fork": lambda: store.fork(bad),
    }
    if bad is not None:  # where None means "make one up" or "top level"
        calls["fork-to"] = lambda: store.fork(real.id, id=bad)
        calls["create"] = lambda: store.create_session(id=bad)
        calls["create-child"] = lambda: store.create_session(parent_id=bad)
        calls["list-children"] = lambda: store.list_sessions(parent_id=bad)
    for name, call in calls.items():
        with pytest.raises(InvalidId) as caught:
            await call()
        assert len(str(caught.value)) < 300, name  # the message stays readable even for a huge id
    with pytest.raises(InvalidId):
        async for _ in store.iter_entries(bad):
            pass
    assert [s.id for s in await all_sessions(store)] == [real.id]
    assert (await store.get_session(real.id)).entry_count == 2


async def test_nul_and_astral_text_round_trips_exactly(store: Store) -> None:
    odd = "nul:\x00 astral:😀𝄞\U0010fffd bom:\ufeff ls:\u2028 cr:\r\n tab:\t esc:\x1b quote:\"' back:\\ end\x00"
    info = await store.create_session(
        title=odd, directory=f"/tmp/{odd}", system_prompt=odd, agent=odd, model=odd, metadata={odd: [odd]}
    )
    body = Message(
        role="assistant",
        parts=[
            TextPart(text=odd),
            ToolCallPart(id=odd, name="bash", arguments={odd: odd}),
            ToolResultPart(call_id=odd, content=odd, metadata={"k": odd}),
        ],
        metadata={odd: odd},
    )
    await store.append(info.id, [body, Marker(name=odd, data={odd: odd}), TitleChange(title=odd)])
    got = await store.get_session(info.id)
    assert (got.title, got.directory, got.system_prompt, got.agent, got.model) == (odd, f"/tmp/{odd}", odd, odd, odd)
    assert got.metadata == {odd: [odd]}
    entries = await store.read(info.id)
    assert entries[0].body == body and body.text == odd
    assert entries[1].body == Marker(name=odd, data={odd: odd})
    assert (await store.last_session(f"/tmp/{odd}")) == got
    assert [s.id for s in await all_sessions(store, directory=f"/tmp/{odd}")] == [info.id]


_text = st.text()  # every code point but lone surrogates
_json = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text
_stored_bodies = st.one_of(
    st.builds(Message.user, _text),
    st.builds(
        lambda content, key: Message(
            role="tool", parts=[ToolResultPart(call_id="c", content=content)], metadata={key: content}
        ),
        _text,
        _text,
    ),
    st.builds(lambda name, data: Marker(name=name, data=data), _text, st.dictionaries(_text, _json, max_size=3)),
    st.builds(TitleChange, title=_text),
    st.builds(lambda cost: priced("p", tokens_in=1, cost=str(cost)), st.decimals(0, 10**6, places=12)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(_stored_bodies, min_size=1, max_size=6))
async def test_any_text_round_trips_through_the_store(store: Store, bodies: list[EntryBody]) -> None:
    info = await store.create_session()
    written = await store.append(info.id, bodies)
    assert [e.body for e in await store.read(info.id)] == bodies
    assert await store.read(info.id) == written


async def test_a_50_mb_message_round_trips(store: Store) -> None:
    # latin-1 only, so that the str stays one byte per character: 50 MB, not 200
    unit = 'line of tool output é \x00 {"json": [1, 2]} \\ \n'
    big = (unit * (50_000_000 // len(unit) + 1))[:50_000_000]
    info = await store.create_session()
    await store.append(info.id, [Message.user("cat big.log")])
    await store.append(info.id, [Message.tool(ToolResultPart(call_id="c1", content=big))])
    await store.append(info.id, [Message.assistant("that was long")])
    (entry,) = await store.read(info.id, 2, 2)
    assert entry.body.tool_results[0].content == big  # type: ignore[union-attr]
    (tail,) = await store.tail(info.id, 1)
    assert tail.body == Message.assistant("that was long")
    assert (await store.get_session(info.id)).entry_count == 3


async def test_lone_surrogate_is_a_clear_error_and_writes_nothing(store: Store) -> None:
    info = await store.create_session()
    await store.append(info.id, [Message.user("fine")])
    before = await store.get_session(info.id)
    for bad in (
        [Message.user("broken \ud800 text")],
        [Message.user("ok"), Message.assistant("tail \udfff")],
        [Marker(name="m", data={"k": "\ud83d"})],
        [TitleChange(title="\udc80")],
    ):
        with pytest.raises(InvalidInput, match="not valid Unicode"):
            await store.append(info.id, bad)
    assert await store.get_session(info.id) == before
    assert texts(await store.read(info.id)) == ["fine"]


# --- lifecycle -------------------------------------------------------------------------------------------


async def test_closed_store_refuses_work(store: Store) -> None:
    info = await store.create_session()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.get_session(info.id)
    with pytest.raises(StoreClosed):
        await store.append(info.id, [Message.user("x")])
    with pytest.raises(StoreClosed):
        await store.list_sessions()
    await store.close()  # closing twice is harmless


# --- leases ----------------------------------------------------------------------------------------------


async def test_a_lease_is_held_by_one_holder_until_released(store: Store) -> None:
    sid = (await store.create_session()).id
    assert await store.get_lease(sid) is None
    lease = await store.acquire_lease(sid, "run_a", ttl=30, pid=123, host="box")
    assert (lease.session_id, lease.holder, lease.pid, lease.host) == (sid, "run_a", 123, "box")
    assert lease.expires_at - lease.since == pytest.approx(30, abs=1)
    assert await store.get_lease(sid) == lease
    with pytest.raises(SessionBusy) as busy:
        await store.acquire_lease(sid, "run_b", ttl=30)
    assert (busy.value.holder, busy.value.pid, busy.value.host) == ("run_a", 123, "box")
    assert "run_a" in str(busy.value) and "pid 123" in str(busy.value)
    assert not isinstance(busy.value, LeaseLost)
    assert await store.release_lease(sid, "run_b") is False  # not its lease: nothing changes
    assert (await store.get_lease(sid)) == lease
    assert await store.release_lease(sid, "run_a") is True
    assert await store.get_lease(sid) is None
    assert (await store.acquire_lease(sid, "run_b", ttl=30)).holder == "run_b"


async def test_acquiring_again_renews_and_keeps_since(store: Store) -> None:
    sid = (await store.create_session()).id
    first = await store.acquire_lease(sid, "run_a", ttl=5)
    again = await store.acquire_lease(sid, "run_a", ttl=60)
    assert again.since == first.since and again.expires_at > first.expires_at
    renewed = await store.renew_lease(sid, "run_a", ttl=120)
    assert renewed.since == first.since and renewed.expires_at > again.expires_at
    assert await store.get_lease(sid) == renewed


async def test_an_expired_lease_is_free_and_can_be_taken_over(store: Store) -> None:
    import asyncio

    sid = (await store.create_session()).id
    await store.acquire_lease(sid, "dead_run", ttl=0.05, pid=1)
    await asyncio.sleep(0.1)
    assert await store.get_lease(sid) is None  # expired: free
    taken = await store.acquire_lease(sid, "run_b", ttl=30)
    assert taken.holder == "run_b"
    with pytest.raises(LeaseLost, match=r"lost .* to run run_b") as lost:
        await store.renew_lease(sid, "dead_run", ttl=30)  # the old holder finds out when it renews
    assert lost.value.holder == "run_b"
    await store.release_lease(sid, "run_b")
    with pytest.raises(LeaseLost, match="no longer holds"):
        await store.renew_lease(sid, "run_b", ttl=30)


async def test_leases_check_their_input(store: Store) -> None:
    sid = (await store.create_session()).id
    for ttl in (0, -1, 10**9, float("nan")):
        with pytest.raises(InvalidInput, match="lease lasts"):
            await store.acquire_lease(sid, "run_a", ttl=ttl)
    for holder in ("", "   ", "x" * 201, "bad \ud800"):
        with pytest.raises(InvalidInput):
            await store.acquire_lease(sid, holder, ttl=5)
    with pytest.raises(SessionNotFound):
        await store.acquire_lease(new_session_id(), "run_a", ttl=5)
    with pytest.raises(InvalidId):
        await store.get_lease("../x")
    assert await store.get_lease(sid) is None  # nothing was taken by the refused calls


async def test_deleting_a_session_frees_its_lease(store: Store) -> None:
    info = await store.create_session()
    await store.acquire_lease(info.id, "run_a", ttl=30)
    await store.delete_session(info.id)
    again = await store.create_session(id=info.id)
    assert await store.get_lease(again.id) is None
    assert (await store.acquire_lease(again.id, "run_b", ttl=30)).holder == "run_b"


async def test_an_expired_lease_taken_again_by_its_holder_starts_anew(store: Store) -> None:
    import asyncio

    sid = (await store.create_session()).id
    first = await store.acquire_lease(sid, "run_a", ttl=0.05)
    await asyncio.sleep(0.1)
    with pytest.raises(LeaseLost, match="no longer holds"):
        await store.renew_lease(sid, "run_a", ttl=30)  # expired, though nobody took it
    again = await store.acquire_lease(sid, "run_a", ttl=30)
    assert again.since > first.since  # the same on every backend


async def test_a_released_lease_is_free_and_released_once(store: Store) -> None:
    sid = (await store.create_session()).id
    first = await store.acquire_lease(sid, "run_a", ttl=30)
    await store.request_lease(sid, "cancel")
    assert await store.release_lease(sid, "run_a") is True
    assert await store.release_lease(sid, "run_a") is False  # already given back
    assert await store.get_lease(sid) is None
    assert await store.request_lease(sid, "pause") is None  # nobody to ask
    with pytest.raises(LeaseLost, match="no longer holds"):
        await store.renew_lease(sid, "run_a", ttl=30)
    again = await store.acquire_lease(sid, "run_a", ttl=30)  # its holder again: a new lease, no request
    assert again.since >= first.since and again.request is None
    for holder in ("run_b", "run_c", "run_d"):  # taken and given back, over and over
        await store.release_lease(sid, (await store.get_lease(sid)).holder)  # type: ignore[union-attr]
        assert (await store.acquire_lease(sid, holder, ttl=30, pid=7, host="h")).holder == holder
    assert (await store.get_lease(sid)).holder == "run_d"  # type: ignore[union-attr]


async def test_a_live_lease_is_taken_only_from_the_dead_holder_named(store: Store) -> None:
    sid = (await store.create_session()).id
    await store.acquire_lease(sid, "run_a", ttl=30, pid=1, host="h")
    await store.request_lease(sid, "pause")
    with pytest.raises(SessionBusy):
        await store.acquire_lease(sid, "run_b", ttl=30, take_from="run_x")  # not the holder
    taken = await store.acquire_lease(sid, "run_b", ttl=30, pid=2, host="h", take_from="run_a")
    assert (taken.holder, taken.pid, taken.request) == ("run_b", 2, None)  # a new holder starts clean
    assert await store.get_lease(sid) == taken
    with pytest.raises(LeaseLost, match="to run run_b"):
        await store.renew_lease(sid, "run_a", ttl=30)
    assert await store.release_lease(sid, "run_a") is False
    await store.request_lease(sid, "cancel")
    same = await store.acquire_lease(sid, "run_b", ttl=30, pid=2, host="h", take_from="run_b")  # itself: renewed
    assert (same.since, same.request) == (taken.since, "cancel")


async def test_a_request_waits_in_the_lease_for_its_holder(store: Store) -> None:
    sid = (await store.create_session()).id
    assert await store.request_lease(sid, "cancel") is None  # nobody holds it: nothing to ask
    await store.acquire_lease(sid, "run_a", ttl=30)
    asked = await store.request_lease(sid, "pause")
    assert asked is not None and asked.request == "pause" and asked.holder == "run_a"
    assert (await store.renew_lease(sid, "run_a", ttl=30)).request == "pause"  # the holder reads it as it renews
    assert (await store.request_lease(sid, "cancel")).request == "cancel"  # type: ignore[union-attr]
    assert (await store.request_lease(sid, "pause")).request == "cancel"  # type: ignore[union-attr]  # stands
    assert (await store.acquire_lease(sid, "run_a", ttl=30)).request == "cancel"  # renewing keeps it
    await store.release_lease(sid, "run_a")
    assert (await store.acquire_lease(sid, "run_b", ttl=30)).request is None  # a new holder starts clean
    with pytest.raises(InvalidInput, match="lease request"):
        await store.request_lease(sid, "explode")  # type: ignore[arg-type]
