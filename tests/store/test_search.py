"""`Store.search` on every backend (the `store` fixture runs each test on memory and SQLite): matching by
stem, identifiers, paths and unicode; the filters; ranking; and an index that stays consistent through
fork, revert and delete. Hostile queries give results or nothing, never an exception."""

from __future__ import annotations

import time

import pytest

from tether.errors import InvalidId, InvalidInput, SessionNotFound
from tether.messages import Message, Revert, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from tether.store import Store


async def seed(store: Store, directory: str = "/work/app") -> str:
    info = await store.create_session(directory=directory, title="store work")
    await store.append(
        info.id,
        [
            Message.user("The integration tests fail with a database lock error"),
            Message.assistant(
                "Let me look at the store.",
                tool_calls=[ToolCallPart(id="c1", name="read", arguments={"path": "src/tether/store/sqlite.py"})],
            ),
            Message.tool(ToolResultPart(call_id="c1", content="def open_store_connection(path): ...", name="read")),
            Message.assistant("Running the suite with busy_timeout raised fixed it."),
            Message(role="assistant", parts=[ThinkingPart(text="zebracorn"), TextPart(text="Done.")]),
        ],
    )
    return info.id


def keys(hits: list) -> list[tuple[str, int]]:  # type: ignore[type-arg]
    return [(h.session_id, h.seq) for h in hits]


async def test_stems_match_and_hits_say_where_they_come_from(store: Store) -> None:
    sid = await seed(store)
    hits = await store.search("failing tests")
    assert hits and hits[0].seq == 1
    hit = hits[0]
    assert (hit.session_id, hit.role, hit.title, hit.directory) == (sid, "user", "store work", "/work/app")
    assert hit.created_at > 0 and hit.score > 0 and "tests fail" in hit.excerpt
    assert [h.seq for h in await store.search("run")] == [4]  # "Running"


async def test_identifiers_and_paths_are_found(store: Store) -> None:
    await seed(store)
    assert [h.seq for h in await store.search("busy_timeout")] == [4]
    assert next(h.seq for h in await store.search("open_store_connection")) == 3
    assert next(h.seq for h in await store.search("src/tether/store/sqlite.py")) == 2
    assert 2 in [h.seq for h in await store.search("sqlite.py")]
    assert next(h.seq for h in await store.search("read")) in (2, 3)  # the tool's name is indexed


async def test_a_hyphenated_word_is_found_written_either_way(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(info.id, [Message.user("running helps me de-stress"), Message.user("run the pre-commit hooks")])
    assert [h.seq for h in await store.search("destress")] == [1]
    assert [h.seq for h in await store.search("de-stress")] == [1]
    assert [h.seq for h in await store.search("precommit")] == [2]
    (hit,) = await store.search("precommit")
    assert hit.excerpt == "run the pre-commit hooks"  # the joined form is for matching, never shown
    await store.delete_session(info.id)  # a contentless index forgets exactly what it was given
    assert await store.search("destress") == []


async def test_thinking_is_not_searchable(store: Store) -> None:
    await seed(store)
    assert await store.search("zebracorn") == []


async def test_unicode_text(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(
        info.id,
        [Message.user("Le café est fermé à Zürich"), Message.user("東京 の 設定"), Message.user("emoji 🚀 launch")],
    )
    assert [h.seq for h in await store.search("cafe zurich")] == [1]
    assert [h.seq for h in await store.search("ZÜRICH")] == [1]
    assert [h.seq for h in await store.search("東京")] == [2]
    assert [h.seq for h in await store.search("🚀 launch")] == [3]


@pytest.mark.parametrize(
    "query",
    ["", "   ", '"', "NEAR(", "AND", "*", "col:x", "'); DROP TABLE entries; --", "\x00", "((( ]]] ^^^",
     "the of and", "a" * 10_000, " ".join(["lock"] * 2000)],
)  # fmt: skip
async def test_absurd_queries_give_results_or_nothing(store: Store, query: str) -> None:
    await seed(store)
    hits = await store.search(query)
    assert isinstance(hits, list)
    if "lock" in query:
        assert [h.seq for h in hits] == [1]


async def test_a_ten_kilobyte_query_of_real_words_still_finds_the_match(store: Store) -> None:
    await seed(store)
    query = ("database lock error " + "unrelated words here " * 600)[:10_000]
    assert (await store.search(query))[0].seq == 1


async def test_filters(store: Store) -> None:
    a = await seed(store, "/work/app")
    b = await seed(store, "/work/other")
    assert {h.session_id for h in await store.search("lock")} == {a, b}
    assert {h.session_id for h in await store.search("lock", directory="/work/other")} == {b}
    assert await store.search("lock", directory="/nowhere") == []
    assert keys(await store.search("lock", session_id=a)) == [(a, 1)]
    assert {h.role for h in await store.search("store", role="tool")} == {"tool"}
    assert await store.search("lock", role="assistant") == []
    later = time.time() + 3600
    assert await store.search("lock", since=later) == []
    assert len(await store.search("lock", until=later)) == 2
    assert len(await store.search("lock", since=0, until=later, limit=1)) == 1


async def test_bad_filters_are_refused(store: Store) -> None:
    await seed(store)
    with pytest.raises(InvalidInput):
        await store.search("lock", role="system")
    with pytest.raises(InvalidInput):
        await store.search("lock", limit=0)
    with pytest.raises(InvalidId):
        await store.search("lock", session_id="../etc")


async def test_unknown_session_filter_finds_nothing(store: Store) -> None:
    await seed(store)
    assert await store.search("lock", session_id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB") == []


async def test_rarer_and_more_matching_terms_rank_first(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(
        info.id,
        [Message.user("deploy the service"), Message.user("deploy with kubernetes helm charts"), Message.user("x")],
    )
    assert [h.seq for h in await store.search("kubernetes deploy")] == [2, 1]


async def test_reverted_entries_are_hidden_unless_asked_for(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(info.id, [Message.user("keep the alpha plan"), Message.user("try the beta plan")])
    await store.append(info.id, [Message.user("gamma plan after beta")])
    await store.append(info.id, [Revert(to_seq=1)])  # hides 2 and 3
    assert [h.seq for h in await store.search("plan")] == [1]
    shown = {h.seq: h.reverted for h in await store.search("plan", include_reverted=True)}
    assert shown == {1: False, 2: True, 3: True}
    assert await store.reverted_spans(info.id) == [(1, 4)]
    # a revert of the revert's position (to 4) hides nothing before it: undo by appending again
    await store.append(info.id, [Message.user("delta plan")])
    assert sorted(h.seq for h in await store.search("plan")) == [1, 5]


async def test_a_revert_that_a_later_revert_hid_has_no_effect(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(info.id, [Message.user(f"note {i} kiwi") for i in range(1, 4)])  # 1..3
    await store.append(info.id, [Revert(to_seq=2)])  # 4 hides 3
    await store.append(info.id, [Revert(to_seq=1)])  # 5 hides 2..4, including the revert at 4
    assert [h.seq for h in await store.search("kiwi")] == [1]
    assert await store.reverted_spans(info.id) == [(1, 5)]


async def test_fork_indexes_the_copied_entries_only(store: Store) -> None:
    sid = await seed(store)
    fork = await store.fork(sid, 2)
    hits = await store.search("lock", session_id=fork.id)
    assert keys(hits) == [(fork.id, 1)]
    assert await store.search("busy_timeout", session_id=fork.id) == []  # entry 4 was not copied
    await store.append(fork.id, [Message.user("fork only: pelican")])
    assert keys(await store.search("pelican")) == [(fork.id, 3)]
    assert {h.session_id for h in await store.search("lock")} == {sid, fork.id}


async def test_delete_removes_a_session_and_its_children_from_the_index(store: Store) -> None:
    sid = await seed(store)
    child = await store.create_session(parent_id=sid, directory="/work/app")
    await store.append(child.id, [Message.user("child says lock too")])
    fork = await store.fork(sid)
    await store.delete_session(sid)
    assert {h.session_id for h in await store.search("lock")} == {fork.id}
    await store.delete_session(fork.id)
    assert await store.search("lock") == []
    with pytest.raises(SessionNotFound):
        await store.reverted_spans(sid)


async def test_imported_sessions_are_searchable_with_their_times(store: Store) -> None:
    sid = await seed(store)
    info = await store.get_session(sid)
    entries = await store.read(sid)
    await store.delete_session(sid)
    await store.import_session(info, entries)
    hits = await store.search("lock")
    assert keys(hits) == [(sid, 1)] and hits[0].created_at == entries[0].created_at


async def test_many_appends_stay_searchable(store: Store) -> None:
    # more appends than the SQLite store indexes between flushes, in several sessions
    sessions = [(await store.create_session(directory=f"/d{i % 3}")).id for i in range(4)]
    for n in range(300):
        await store.append(sessions[n % 4], [Message.user(f"message {n} token{n}")])
    for n in (0, 127, 128, 299):
        hits = await store.search(f"token{n}")
        assert keys(hits) == [(sessions[n % 4], n // 4 + 1)]
    assert await store.search_backlog() == 0


async def test_message_metadata_comes_back_with_hits(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(info.id, [Message(role="user", parts=[TextPart(text="hello ocelot")], metadata={"k": [1]})])
    (hit,) = await store.search("ocelot")
    assert hit.metadata == {"k": [1]}


async def test_backfill_indexes_what_waits_and_then_has_nothing_to_do(store: Store) -> None:
    await seed(store)
    steps = [p async for p in store.backfill_search()]
    assert sum(p.entries_indexed for p in steps[-1:]) == (5 if steps else 0)  # SQLite indexes in batches
    assert await store.search_backlog() == 0
    assert [p async for p in store.backfill_search()] == []


async def test_a_backlog_before_a_time_leaves_out_what_was_appended_after_it(store: Store) -> None:
    # what a search that began at `cut` could not find, not the appends that came while it ran
    info = await store.create_session(directory="/w")
    await store.append(info.id, [Message.user("first words"), Message.assistant("an answer")])
    waiting = await store.search_backlog()  # the memory store indexes as it searches: never behind
    cut = time.time()
    time.sleep(0.002)
    await store.append(info.id, [Message.user("later words")])
    assert await store.search_backlog(before=cut) == waiting
    assert await store.search_backlog() == (waiting + 1 if waiting else 0)
    await store.search("words")  # a search indexes what waited
    assert await store.search_backlog(before=time.time()) == 0
