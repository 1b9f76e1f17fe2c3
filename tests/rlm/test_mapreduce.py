"""Map-reduce, the RLM fallback: how text is cut, and how notes are read, merged and answered from. The
model here is a plain async function of (system, prompt), which is all `map_reduce` asks of one."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.rlm.mapreduce import ANSWER_SYSTEM, DIRECT_SYSTEM, MAP_SYSTEM, MERGE_SYSTEM, NOTHING, map_reduce, split_text


@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=2_000), st.integers(min_value=1, max_value=300))
def test_split_covers_the_text_in_pieces_no_longer_than_the_limit(text: str, limit: int) -> None:
    pieces = split_text(text, limit)
    assert "".join(pieces) == text
    assert all(len(p) <= limit for p in pieces)
    assert all(pieces) or pieces == [""]


def test_split_prefers_paragraphs_then_lines_then_spaces() -> None:
    text = "a" * 90 + "\n\n" + "b" * 50
    assert split_text(text, 100)[0] == "a" * 90 + "\n\n"
    assert split_text("a" * 85 + "\n" + "b" * 50, 100)[0] == "a" * 85 + "\n"
    assert split_text("a" * 85 + " " + "b" * 50, 100)[0] == "a" * 85 + " "
    assert split_text("a" * 150, 100) == ["a" * 100, "a" * 50]  # no break in reach: cut at the limit


def test_split_rejects_a_useless_limit() -> None:
    with pytest.raises(ValueError):
        split_text("text", 0)


class Model:
    """Finds 'code=NNN' in what it is shown, and records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, system: str, prompt: str) -> str:
        self.calls.append((system, prompt))
        codes = re.findall(r"code=(\d+)", prompt)
        if system == MAP_SYSTEM:
            return " ".join(f"code={c}" for c in codes) if codes else NOTHING
        if system == MERGE_SYSTEM:
            return "merged: " + " ".join(f"code={c}" for c in codes)
        return "codes: " + ",".join(sorted(set(codes)))

    def count(self, system: str) -> int:
        return sum(1 for s, _ in self.calls if s == system)


async def test_a_text_that_fits_is_answered_in_one_call() -> None:
    model = Model()
    assert await map_reduce("x code=1 y", "codes?", model, chunk_chars=1_000, notes_chars=500) == "codes: 1"
    assert [s for s, _ in model.calls] == [DIRECT_SYSTEM]


async def test_each_chunk_is_read_and_only_relevant_notes_reach_the_answer() -> None:
    text = "\n".join(["filler line"] * 200 + ["code=7"] + ["filler line"] * 200 + ["code=9"])
    model = Model()
    progress: list[tuple[str, int, int]] = []
    answer = await map_reduce(
        text, "codes?", model, chunk_chars=500, notes_chars=10_000, progress=lambda *a: progress.append(a)
    )
    assert answer == "codes: 7,9"
    maps = model.count(MAP_SYSTEM)
    assert maps == len(split_text(text, 500)) > 5
    final_prompt = model.calls[-1][1]
    assert model.calls[-1][0] == ANSWER_SYSTEM and final_prompt.count("[part") == 2  # NOTHING notes dropped
    assert [p for p in progress if p[0] == "map"][-1] == ("map", maps, maps)


async def test_notes_too_long_for_one_call_are_merged_in_rounds() -> None:
    text = "\n".join(f"code={n:04d} " + "pad " * 30 for n in range(64))
    model = Model()
    answer = await map_reduce(text, "codes?", model, chunk_chars=150, notes_chars=200, concurrency=3)
    assert model.count(MERGE_SYSTEM) > 0
    assert model.calls[-1][0] == ANSWER_SYSTEM
    assert len(model.calls[-1][1]) < 400  # the answer call was given notes within the bound
    assert answer.startswith("codes: ")


async def test_merging_stops_when_notes_cannot_shrink() -> None:
    async def verbose(system: str, prompt: str) -> str:
        return "a long note " * 100  # every note is longer than a merge may take

    answer = await map_reduce("x " * 2_000, "q?", verbose, chunk_chars=200, notes_chars=300)
    assert answer == "a long note " * 100  # it ended, with the notes cut to fit the answer call


async def test_nothing_relevant_anywhere_is_said_plainly() -> None:
    model = Model()
    answer = await map_reduce("nothing " * 500, "codes?", model, chunk_chars=400, notes_chars=1_000)
    assert answer.startswith("No part of the text")
    assert model.count(ANSWER_SYSTEM) == 0
