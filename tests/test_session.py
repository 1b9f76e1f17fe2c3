"""`Session`, the handle on one stored session, on every backend: it files sessions under a canonical
directory, keeps its `info` in step with what it writes, and reads the active history through reverts."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from tether import Session
from tether.errors import InvalidId, InvalidInput, SeqConflict, SessionNotFound
from tether.ids import new_session_id
from tether.messages import Marker, Message, Revert, TitleChange, Usage
from tether.store import Store


async def test_create_files_the_session_under_the_canonical_directory(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "link").symlink_to(tmp_path)
    s = await Session.create(store, directory=tmp_path / "link", model="m", agent="build", system_prompt="sys")
    assert s.info.directory == str(tmp_path.resolve())
    assert (s.info.model, s.info.agent, s.info.system_prompt, s.info.state) == ("m", "build", "sys", "active")
    monkeypatch.chdir(tmp_path)
    here = await Session.create(store, title="here", metadata={"k": 1})
    assert here.info.directory == str(tmp_path.resolve())
    assert (here.title, here.info.metadata) == ("here", {"k": 1})
    assert repr(here) == f"<Session {here.id} 'here' entries=0>"


async def test_open_and_last(store: Store, tmp_path: Path) -> None:
    first = await Session.create(store, directory=tmp_path)
    second = await Session.create(store, directory=tmp_path)
    await Session.create(store, directory=tmp_path, parent_id=first.id)  # children are never "last"
    opened = await Session.open(store, first.id)
    assert opened.info == first.info
    last = await Session.last(store, tmp_path)
    assert last is not None and last.id == second.id
    await first.append(Message.user("resume me"))
    last = await Session.last(store, str(tmp_path / "sub" / ".."))
    assert last is not None and last.id == first.id
    assert await Session.last(store, tmp_path / "elsewhere") is None


async def test_open_missing_or_bad(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await Session.open(store, new_session_id())
    with pytest.raises(InvalidId):
        await Session.open(store, "../../etc/passwd")


async def test_append_keeps_info_in_step(store: Store, tmp_path: Path) -> None:
    s = await Session.create(store, directory=tmp_path)
    entries = await s.append(Message.user("fix the test"), Message.assistant("on it"))
    assert [e.seq for e in entries] == [1, 2]
    assert (s.info.entry_count, s.info.message_count, s.title) == (2, 2, "fix the test")
    more = await s.append_many([Marker(name="m"), Message.user("and then?")], expect_seq=3)
    assert [e.seq for e in more] == [3, 4]
    row = await store.get_session(s.id)
    # the counters, the title and the cost are the row's, kept without reading it back; updated_at is the
    # time of the handle's last write, which a store may leave unbumped within a second (SqliteStore does)
    assert msgspec.structs.replace(s.info, updated_at=row.updated_at) == row
    assert abs(s.info.updated_at - row.updated_at) < 1.0


async def test_the_handle_counts_tokens_cost_and_titles_as_the_store_does(store: Store, tmp_path: Path) -> None:
    s = await Session.create(store, directory=tmp_path)
    usage = Usage(input_tokens=120, output_tokens=30, cost=Decimal("0.000123456789012"))
    answer = msgspec.structs.replace(Message.assistant("one"), usage=usage)
    await s.append(Message.user("  a first\nprompt  "), answer)
    await s.append(answer, TitleChange(title="Named"))
    await s.append(Message.user("a later prompt does not retitle"))
    row = await store.get_session(s.id)
    assert (s.info.input_tokens, s.info.output_tokens, s.info.cost) == (row.input_tokens, row.output_tokens, row.cost)
    assert s.info.cost == Decimal("0.000246913578") and s.title == row.title == "Named"  # picodollars
    await s.append(TitleChange(title=""))
    assert s.title is None and (await store.get_session(s.id)).title is None


async def test_append_conflict_leaves_info_alone(store: Store, tmp_path: Path) -> None:
    s = await Session.create(store, directory=tmp_path)
    other = await Session.open(store, s.id)
    await other.append(Message.user("the other handle was first"), expect_seq=1)
    with pytest.raises(SeqConflict):
        await s.append(Message.user("stale"), expect_seq=1)
    assert s.info.entry_count == 0  # not refreshed by the failed append
    await s.refresh()
    assert s.info.entry_count == 1
    assert [e.seq for e in await s.append(Message.user("retried"), expect_seq=2)] == [2]


async def test_revert_and_the_active_history(store: Store, tmp_path: Path) -> None:
    s = await Session.create(store, directory=tmp_path)
    await s.append(Message.user("q1"), Message.assistant("a1"), Message.user("q2"), Message.assistant("a2"))
    entry = await s.revert(2, reason="wrong turn")
    assert entry.seq == 5 and entry.body == Revert(to_seq=2, reason="wrong turn")
    await s.append(Message.user("q2 again"))
    assert [m.text for m in await s.messages()] == ["q1", "a1", "q2 again"]
    assert [e.seq for e in await s.entries()] == [1, 2, 6]
    assert [e.seq for e in await s.tail(2)] == [2, 6]
    assert [e.seq for e in await s.tail(2, active=False)] == [5, 6]
    assert [e.seq for e in await s.read(2, 3)] == [2, 3]
    assert [e.seq async for e in s.history()] == [1, 2, 3, 4, 5, 6]  # the history stays
    assert [e.seq async for e in s.history(5)] == [5, 6]
    with pytest.raises(InvalidInput):
        await s.revert(7)  # a revert must point before itself
    assert s.info.entry_count == 6


async def test_set_title(store: Store, tmp_path: Path) -> None:
    s = await Session.create(store, directory=tmp_path)
    await s.append(Message.user("the first words"))
    entry = await s.set_title("Chosen")
    assert entry.body == TitleChange(title="Chosen")
    assert s.title == "Chosen" == (await store.get_session(s.id)).title


async def test_fork(store: Store, tmp_path: Path) -> None:
    s = await Session.create(store, directory=tmp_path, title="source")
    await s.append(Message.user("q1"), Message.assistant("a1"), Message.user("q2"))
    fork = await s.fork(2, title="branch")
    assert fork.id != s.id and fork.store is store
    assert (fork.title, fork.info.forked_from, fork.info.forked_at) == ("branch", s.id, 2)
    assert [m.text for m in await fork.messages()] == ["q1", "a1"]
    await fork.append(Message.user("q2 differently"))
    assert [m.text for m in await s.messages()] == ["q1", "a1", "q2"]
    whole = await s.fork()
    assert whole.info.entry_count == 3 and whole.title == "source"


async def test_update_and_delete(store: Store, tmp_path: Path) -> None:
    s = await Session.create(store, directory=tmp_path)
    child = await Session.create(store, directory=tmp_path, parent_id=s.id)
    info = await s.update(state="paused", title="renamed")
    assert s.info == info and (info.state, info.title) == ("paused", "renamed")
    with pytest.raises(InvalidInput):
        await s.update(state="gone")
    assert sorted(await s.delete()) == sorted([s.id, child.id])
    with pytest.raises(SessionNotFound):
        await s.refresh()
    with pytest.raises(SessionNotFound):
        await child.append(Message.user("orphan"))


async def test_a_handle_that_was_overtaken_reads_its_row_again(store: Store, tmp_path: Path) -> None:
    a = await Session.create(store, directory=tmp_path)
    b = await Session.open(store, a.id)
    await b.append(Message.user("one"), Message.assistant("two"))
    await a.set_title("mine")  # lands after b's entries: a's own counting would miss them
    assert a.info.entry_count == 3 and a.info.message_count == 2 and a.title == "mine"
    assert a.info == await store.get_session(a.id)
