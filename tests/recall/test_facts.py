"""The fact index: lines a model writes for each turn (the scripted provider plays the model), kept beside
the store, built in bounded and resumable steps, and searched as extra keys of their turns, on the text of
coding sessions (paths, identifiers, error messages)."""

from __future__ import annotations

import re
from pathlib import Path

from tether.messages import Message
from tether.providers import ModelRequest, ScriptedProvider, complete
from tether.recall import Tuning, recall
from tether.recall.facts import FactIndex, FactProgress, default_fact_path, parse_facts
from tether.store import SqliteStore, Store

# what a model would write for each turn, found by the words of the turn shown to it
FACTS = {
    "ok do it": "The user approved pinning numpy below 2 in requirements.txt.",
    "ImportError": "tests/test_api.py failed with ImportError: cannot import name 'float_' from numpy.",
    "rename": "The function load_cfg in src/app/config.py was renamed to load_settings.",
}


def model(request: ModelRequest) -> str:
    """Answers like a fact writer: one line per shown turn that it has a fact for."""
    prompt = request.messages[-1].text
    lines = []
    for seq, turn in re.findall(r"^\[(\d+)\] (.*)$", prompt, re.M):
        for cue, fact in FACTS.items():
            if cue in turn:
                lines.append(f"[{seq}] {fact}")
    return "\n".join(lines) or "nothing to note"


def writer(provider: ScriptedProvider) -> object:
    async def write(prompt: str) -> str:
        response = await complete(provider, ModelRequest(model="scripted", messages=[Message.user(prompt)]))
        return response.message.text

    return write


async def seed(store: Store, directory: str = "/repo") -> str:
    info = await store.create_session(directory=directory)
    await store.append(
        info.id,
        [
            Message.user("pytest fails: ImportError in tests/test_api.py"),
            Message.assistant("numpy 2 removed float_. Shall I pin numpy<2 in requirements.txt?"),
            Message.user("ok do it"),  # the decision: not one word of what it decided
            Message.assistant("Done. Also, shall I rename load_cfg?"),
            Message.user("yes, rename it to load_settings"),
        ],
    )
    return info.id


async def test_facts_are_written_per_turn_and_kept_beside_the_store(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "t.db") as store:
        sid = await seed(store)
        provider = ScriptedProvider(model)
        facts = FactIndex(store)
        assert facts.path == default_fact_path(store) == str(tmp_path / "t.db") + ".facts"
        seen: list[FactProgress] = []
        done = await facts.build(writer(provider), progress=seen.append)  # type: ignore[arg-type]
        assert done == FactProgress(sessions_done=1, turns=5, calls=1, lines=4) and seen
        assert facts.facts_of(sid, 3) == [FACTS["ok do it"]]
        assert "session of" in provider.requests[0].messages[-1].text  # the session's date is given
        again = await facts.build(writer(provider))  # type: ignore[arg-type]
        assert again.calls == 0 and len(provider.requests) == 1  # nothing new: no model call
        facts.close()
        reopened = FactIndex(store)
        assert reopened.count() == 4
        reopened.close()


async def test_a_turn_is_found_by_its_facts_when_its_words_say_nothing(store: Store) -> None:
    sid = await seed(store)
    facts = FactIndex(store, path=":memory:")
    await facts.build(writer(ScriptedProvider(model)))  # type: ignore[arg-type]
    assert not (await recall(store, "what did the user approve", limit=3)).hits  # no turn says "approve"
    found = await recall(store, "what did the user approve", facts=facts, limit=3)
    assert [(h.session_id, h.seq) for h in found.hits] == [(sid, 3)]
    # an identifier only the facts spell out in full finds the turn that renamed it
    renamed = await recall(store, "load_settings src/app/config.py", facts=facts, limit=3)
    assert (sid, 5) in [(h.session_id, h.seq) for h in renamed.hits]
    assert not (await recall(store, "what did the user approve", facts=facts, tuning=Tuning(facts=0))).hits


async def test_facts_keep_to_the_directory_searched(store: Store) -> None:
    await seed(store, "/repo")
    other = await seed(store, "/elsewhere")
    facts = FactIndex(store, path=":memory:")
    await facts.build(writer(ScriptedProvider(model)))  # type: ignore[arg-type]
    assert {sid for sid, _, _ in facts.search("approved numpy", directory="/elsewhere")} == {other}
    result = await recall(store, "approved", directory="/repo", facts=facts)
    assert result.hits and all(h.directory == "/repo" for h in result.hits)


async def test_a_build_stops_at_its_budget_and_resumes_where_it_stopped(store: Store) -> None:
    info = await store.create_session(directory="/repo")
    await store.append(info.id, [Message.user(f"step {i}: ok do it") for i in range(30)])  # 3 calls of 12
    provider = ScriptedProvider(model)
    facts = FactIndex(store, path=":memory:")
    first = await facts.build(writer(provider), max_calls=2)  # type: ignore[arg-type]
    assert first.left and first.calls == 2 and first.turns == 24
    second = await facts.build(writer(provider), max_calls=5)  # type: ignore[arg-type]
    assert not second.left and second.calls == 1 and second.turns == 6
    assert len(provider.requests) == 3 and facts.count() == 30  # every turn read once


async def test_a_failing_model_keeps_what_was_written() -> None:
    from tether.store import MemoryStore

    store = MemoryStore()
    info = await store.create_session(directory="/repo")
    await store.append(info.id, [Message.user(f"ok do it {i}") for i in range(20)])
    provider = ScriptedProvider(["[1] The user said ok.", RuntimeError("the model went away")])
    facts = FactIndex(store, path=":memory:")
    try:
        await facts.build(writer(provider))  # type: ignore[arg-type]
    except RuntimeError:
        pass
    else:
        raise AssertionError("the model's failure should reach the caller")
    assert facts.count() == 1
    resumed = await facts.build(writer(ScriptedProvider(model)))  # type: ignore[arg-type]
    assert resumed.turns == 8  # only the turns after the first call's


def test_only_lines_for_the_turns_asked_about_are_kept() -> None:
    text = "[3] Ann adopted Rex.\nnoise\n[9] not asked\n[3] Rex is a beagle.\n  [4]  Bo plays violin.  "
    assert parse_facts(text, {3, 4}) == {3: ["Ann adopted Rex.", "Rex is a beagle."], 4: ["Bo plays violin."]}
