"""The recall engine on both backends: turns re-ranked as conversation (the answer after a matching
question, the author a query names, the period it names), neighbours as context, filters that hold for
lifted neighbours too, and bad arguments refused clearly."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from tether.errors import InvalidInput
from tether.messages import Entry, Message, Revert, TextPart
from tether.recall import Tuning, periods, recall
from tether.store import Store
from tether.store.records import SessionInfo


async def chat(store: Store, turns: list[tuple[str, str]], directory: str = "/w", **kw: object) -> str:
    info = await store.create_session(directory=directory, **kw)  # type: ignore[arg-type]
    await store.append(info.id, [Message.user(t) if r == "user" else Message.assistant(t) for r, t in turns])
    return info.id


async def test_the_answer_after_a_matching_question_is_found(store: Store) -> None:
    sid = await chat(
        store,
        [
            ("user", "hello there"),
            ("assistant", "Which database should the service use?"),
            ("user", "Postgres 16, with the pgvector extension."),  # the answer never says "database"
            ("assistant", "noted, thanks"),
        ]
        + [("user", f"unrelated chatter {i}") for i in range(20)],
    )
    # by the store's search the question matches and lifts its answer; by the turn keys (the default) the
    # answer matches itself, its key holding the question's words, and comes first
    lifted = await recall(store, "which database did we pick", limit=3, keys=False)
    assert [h.seq for h in lifted.hits][:2] == [2, 3]
    top = lifted.hits[0]
    assert top.session_id == sid and top.title and top.directory == "/w"
    assert [c.seq for c in top.context] == [1, 3]  # its neighbours, one each side by default
    assert [h.seq for h in (await recall(store, "which database did we pick", limit=3)).hits][:2] == [3, 2]


async def test_context_size_and_zero_context(store: Store) -> None:
    await chat(store, [("user", f"line {i} zeta" if i == 5 else f"line {i}") for i in range(1, 10)])
    (hit, *_) = (await recall(store, "zeta", context=2)).hits
    assert hit.seq == 5 and [c.seq for c in hit.context] == [3, 4, 6, 7]
    (hit, *_) = (await recall(store, "zeta", context=0)).hits
    assert hit.context == []


async def test_an_author_the_query_names_ranks_first(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(
        info.id,
        [
            Message(role="user", parts=[TextPart(text="I adopted a cat")], metadata={"name": "Ana"}),
            Message(role="assistant", parts=[TextPart(text="I adopted a cat too")], metadata={"name": "Ben"}),
        ],
    )
    assert (await recall(store, "what did Ben adopt", tuning=Tuning(before=0, after=0, after_question=0))).hits[
        0
    ].seq == 2
    assert (await recall(store, "what did Ana adopt", tuning=Tuning(before=0, after=0, after_question=0))).hits[
        0
    ].seq == 1


async def test_the_question_s_subject_is_the_author_that_counts(store: Store) -> None:
    info = await store.create_session(directory="/w")
    await store.append(
        info.id,
        [
            Message(role="user", parts=[TextPart(text="the grand opening is tomorrow")], metadata={"name": "Jon"}),
            Message(
                role="assistant", parts=[TextPart(text="good luck with the grand opening")], metadata={"name": "Gina"}
            ),
        ],
    )
    flat = Tuning(before=0, after=0, after_question=0, semantic=0)
    # both names are in the query; the one after the verb is whom the question is about
    hits = (await recall(store, "what does Gina say to Jon about the grand opening", tuning=flat)).hits
    assert [h.seq for h in hits] == [2, 1]
    hits = (await recall(store, "what does Jon say to Gina about the grand opening", tuning=flat)).hits
    assert [h.seq for h in hits] == [1, 2]


async def test_an_author_name_that_is_not_a_string_is_ignored(store: Store) -> None:
    info = await store.create_session(directory="/w")
    odd = [{"first": "Ana"}, ["Ana"], 7, None]
    await store.append(
        info.id, [Message(role="user", parts=[TextPart(text="what did Ana adopt")], metadata={"name": n}) for n in odd]
    )
    hits = (await recall(store, "what did Ana adopt")).hits
    assert sorted(h.seq for h in hits) == [1, 2, 3, 4]


async def test_a_when_question_favours_the_turn_that_says_when(store: Store) -> None:
    await chat(
        store,
        [
            ("user", "should I sign up for a pottery class? a pottery class sounds fun"),
            ("user", "I signed up for a pottery class yesterday"),
            ("user", "sign up for the pottery class! the pottery class is the best class"),
        ],
    )
    flat = Tuning(before=0, after=0, after_question=0, second=0)
    assert (await recall(store, "When did I sign up for the pottery class?", tuning=flat)).hits[0].seq == 2
    # without the cue the turns that say "pottery" most come first
    unaware = Tuning(before=0, after=0, after_question=0, second=0, when=0)
    plain = (await recall(store, "When did I sign up for the pottery class?", tuning=unaware)).hits
    assert plain[0].seq != 2
    # a question that does not ask when is not affected
    assert (await recall(store, "pottery class", tuning=flat)).hits[0].seq != 2


async def test_a_named_date_favours_turns_from_then(store: Store) -> None:
    def day(text: str) -> float:
        return datetime.strptime(text, "%Y-%m-%d %H:%M").timestamp()

    for date in ("2023-05-08 13:56", "2023-10-13 09:00"):
        info = SessionInfo(id=f"ses_01JD8X3Q5T9N2C7KZ6W4M0R{'1YB' if date < '2023-06' else '2YC'}",
                           created_at=day(date), updated_at=day(date), directory="/w")  # fmt: skip
        await store.import_session(info, [Entry(1, day(date), Message.user("I painted a sunset"))])
    hits = (await recall(store, "what did I paint on October 13, 2023")).hits
    assert datetime.fromtimestamp(hits[0].created_at).month == 10
    hits = (await recall(store, "what did I paint in May 2023")).hits
    assert datetime.fromtimestamp(hits[0].created_at).month == 5


def test_periods_named_in_queries() -> None:
    now = datetime(2026, 3, 15, 12, 0).timestamp()
    (p,) = periods("what happened on 13 October, 2023?", now=now)
    assert datetime.fromtimestamp(p.start) == datetime(2023, 10, 13) and p.end - p.start == 86400
    (p,) = periods("in July 2023", now=now)
    assert datetime.fromtimestamp(p.end) == datetime(2023, 8, 1)
    (p,) = periods("during December", now=now)  # the most recent December
    assert datetime.fromtimestamp(p.start) == datetime(2025, 12, 1)
    (p,) = periods("yesterday's error", now=now)
    assert datetime.fromtimestamp(p.start) == datetime(2026, 3, 14)
    assert [x.text for x in periods("2026-02-30 or 2026-02-03", now=now)] == ["2026-02-03"]
    assert periods("may I ask about march madness", now=now) == []


@pytest.mark.parametrize("keys", [False, True], ids=["store-search", "turn-keys"])
async def test_lifted_neighbours_obey_the_filters(store: Store, keys: bool) -> None:
    # by the store's search the answer is only lifted; by the turn keys it matches too (the question's words)
    await chat(store, [("user", "what port does the api use?"), ("assistant", "eight thousand and eighty")])
    assert sorted(h.seq for h in (await recall(store, "api port", keys=keys)).hits) == [1, 2]
    assert [h.role for h in (await recall(store, "api port", role="user", keys=keys)).hits] == ["user"]
    assert [h.role for h in (await recall(store, "api port", role="assistant", keys=keys)).hits] == (
        ["assistant"] if keys else []
    )
    later = time.time() + 3600
    assert (await recall(store, "api port", since=later, keys=keys)).hits == []


@pytest.mark.parametrize("keys", [False, True], ids=["store-search", "turn-keys"])
async def test_lifted_neighbours_that_a_revert_hid_stay_hidden(store: Store, keys: bool) -> None:
    sid = await chat(store, [("user", "what port does the api use?"), ("assistant", "eight thousand and eighty")])
    await store.append(sid, [Revert(to_seq=1)])
    assert [h.seq for h in (await recall(store, "api port", keys=keys)).hits] == [1]
    shown = (await recall(store, "api port", include_reverted=True, keys=keys)).hits
    assert sorted((h.seq, h.reverted) for h in shown) == [(1, False), (2, True)]


async def test_non_message_neighbours_are_skipped(store: Store) -> None:
    sid = await chat(store, [("user", "where is the config file?")])
    await store.append(sid, [Revert(to_seq=1), Message.assistant("in the home folder")])
    seqs = [h.seq for h in (await recall(store, "config file")).hits]
    assert seqs == [1, 3]  # 3 lifted from two away; the revert marker between them is no hit


async def test_scopes(store: Store) -> None:
    a = await chat(store, [("user", "the heron report")], directory="/a")
    b = await chat(store, [("user", "the heron report")], directory="/b")
    assert {h.session_id for h in (await recall(store, "heron")).hits} == {a, b}
    assert {h.session_id for h in (await recall(store, "heron", directory="/b")).hits} == {b}
    assert {h.session_id for h in (await recall(store, "heron", session_id=a)).hits} == {a}


async def test_no_match_empty_and_huge_queries(store: Store) -> None:
    await chat(store, [("user", "the heron report")])
    assert (await recall(store, "flamingo")).hits == []
    assert (await recall(store, "")).hits == []
    assert (await recall(store, '"NEAR(( *')).hits == []
    huge = "heron " + "x" * 20_000
    result = await recall(store, huge)
    assert [h.seq for h in result.hits] == [1] and len(result.query) == 10_000


@pytest.mark.parametrize("kwargs", [{"limit": 0}, {"limit": 5000}, {"context": -1}, {"context": 99}])
async def test_bad_arguments_are_refused(store: Store, kwargs: dict[str, int]) -> None:
    with pytest.raises(InvalidInput):
        await recall(store, "x", **kwargs)  # type: ignore[arg-type]


async def test_results_serialise_for_machines(store: Store) -> None:
    import msgspec

    await chat(store, [("user", "the heron report")])
    data = msgspec.json.decode(msgspec.json.encode(await recall(store, "heron")))
    assert data["hits"][0]["seq"] == 1 and data["backlog"] == 0 and data["semantic"] is False


async def test_a_named_date_does_not_outrank_an_exact_error_from_another_day(store: Store) -> None:
    def day(text: str) -> float:
        return datetime.strptime(text, "%Y-%m-%d %H:%M").timestamp()

    turns = {
        "2024-03-01 10:00": "ran pytest, all green",
        "2024-03-02 10:00": "pytest fails: ImportError in tests/test_api.py",
    }
    for n, (date, text) in enumerate(turns.items()):
        info = SessionInfo(
            id=f"ses_01JD8X3Q5T9N2C7KZ6W4M0R{n}YB", created_at=day(date), updated_at=day(date), directory="/w"
        )
        await store.import_session(info, [Entry(1, day(date), Message.user(text))])
    hits = (await recall(store, "pytest ImportError tests/test_api.py 2024-03-01")).hits
    assert "ImportError" in hits[0].excerpt  # the exact error wins over the day named
    hits = (await recall(store, "what did pytest say on 2024-03-01")).hits
    assert hits[0].excerpt == "ran pytest, all green"  # with nothing else to choose by, the day named decides


class _BusyStore:
    """A store another process appends to while a recall's search runs (after the search's own flush)."""

    def __init__(self, store: Store, other: str) -> None:
        self._store, self._other = store, other

    async def search(self, *args: object, **kw: object) -> object:
        hits = await self._store.search(*args, **kw)  # type: ignore[arg-type]
        await self._store.append(self._other, [Message.user("meanwhile, elsewhere")])
        return hits

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


async def test_appends_while_a_recall_runs_are_not_called_an_older_backlog(store: Store) -> None:
    await chat(store, [("user", "the deploy failed on the staging cluster"), ("assistant", "rolled back")])
    other = await chat(store, [("user", "hello")])
    busy = _BusyStore(store, other)
    result = await recall(busy, "deploy staging", keys=False)  # type: ignore[arg-type]
    assert [h.seq for h in result.hits][:1] == [1]
    assert result.backlog == 0  # the note would tell the user to backfill for entries a moment old
