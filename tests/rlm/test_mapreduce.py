"""Map-reduce, the RLM fallback: how text is cut (in characters, and in a model's own tokens), and how notes
are read, merged and answered from, every call within the window. The model here is a plain async function
of (system, prompt), which is all `map_reduce` asks of one."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.rlm.mapreduce import (
    ANSWER_SYSTEM,
    DIRECT_SYSTEM,
    MAP_SYSTEM,
    MERGE_SYSTEM,
    NOTHING,
    call_budgets,
    map_reduce,
    split_text,
    split_tokens,
)
from tether.rlm.sizing import TEMPLATE_TOKENS


class Chars:
    """A counter of one token a character: bounds in tokens read as bounds in characters."""

    source = "chars"

    def count(self, text: str) -> int:
        return len(text)


CHARS = Chars()


class Digits:
    """A tokenizer that spends a token on every digit and one on every four other characters: a text that
    changes density along the way, as logs and tables do under a small model's vocabulary."""

    source = "digits"

    def count(self, text: str) -> int:
        digits = sum(c.isdigit() for c in text)
        return digits + -(-(len(text) - digits) // 4)


DIGITS = Digits()


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
    with pytest.raises(ValueError):
        split_tokens("text", 0, DIGITS)


@given(st.text(alphabet=st.sampled_from("ab7 \n"), max_size=3_000), st.integers(min_value=1, max_value=400))
def test_split_by_tokens_covers_the_text_in_pieces_within_the_limit(text: str, limit: int) -> None:
    pieces = split_tokens(text, limit, DIGITS)
    assert "".join(pieces) == text
    assert all(DIGITS.count(p) <= limit for p in pieces)
    assert all(pieces) or pieces == [""]


def test_split_by_tokens_follows_the_density_as_it_changes() -> None:
    text = "word " * 2_000 + "\n".join(f"{n:08d}" for n in range(1_000)) + " word" * 2_000
    pieces = split_tokens(text, 500, DIGITS)
    assert "".join(pieces) == text
    counts = [DIGITS.count(p) for p in pieces]
    assert max(counts) <= 500
    assert sum(counts[:-1]) / len(counts[:-1]) > 400  # the pieces are nearly full, prose and digits alike
    assert any(len(p) > 1_500 for p in pieces) and any(len(p) < 600 for p in pieces)


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
    assert (
        await map_reduce("x code=1 y", "codes?", model, chunk_tokens=1_000, notes_tokens=500, counter=CHARS)
        == "codes: 1"
    )
    assert [s for s, _ in model.calls] == [DIRECT_SYSTEM]


async def test_each_chunk_is_read_and_only_relevant_notes_reach_the_answer() -> None:
    text = "\n".join(["filler line"] * 200 + ["code=7"] + ["filler line"] * 200 + ["code=9"])
    model = Model()
    progress: list[tuple[str, int, int]] = []
    answer = await map_reduce(
        text,
        "codes?",
        model,
        chunk_tokens=500,
        notes_tokens=10_000,
        counter=CHARS,
        progress=lambda *a: progress.append(a),
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
    answer = await map_reduce(text, "codes?", model, chunk_tokens=150, notes_tokens=200, counter=CHARS, concurrency=3)
    assert model.count(MERGE_SYSTEM) > 0
    assert model.calls[-1][0] == ANSWER_SYSTEM
    assert len(model.calls[-1][1]) < 400  # the answer call was given notes within the bound
    assert answer.startswith("codes: ")


async def test_merging_stops_when_notes_cannot_shrink() -> None:
    async def verbose(system: str, prompt: str) -> str:
        return "a long note " * 100  # every note is longer than a merge may take

    answer = await map_reduce("x " * 2_000, "q?", verbose, chunk_tokens=200, notes_tokens=300, counter=CHARS)
    assert answer == "a long note " * 100  # it ended, with the notes cut to fit the answer call


async def test_nothing_relevant_anywhere_is_said_plainly() -> None:
    model = Model()
    answer = await map_reduce("nothing " * 500, "codes?", model, chunk_tokens=400, notes_tokens=1_000, counter=CHARS)
    assert answer.startswith("No part of the text")
    assert model.count(ANSWER_SYSTEM) == 0


async def test_every_call_fits_the_window_by_the_models_own_count() -> None:
    window, reply = 2_000, 200
    question = "Which readings are 0042?"
    text = "\n".join(f"probe {n:06d} reads {n * 7919 % 10_000:04d}" for n in range(3_000))
    sizes: list[int] = []
    systems: list[str] = []

    async def model(system: str, prompt: str) -> str:
        sizes.append(DIGITS.count(system) + DIGITS.count(prompt) + TEMPLATE_TOKENS)
        systems.append(system)
        return "probe 000006 reads 0042, " * 20 if system == MAP_SYSTEM else "0042"

    chunk_tokens, notes_tokens = call_budgets(question, DIGITS, window=window, reply_tokens=reply)
    await map_reduce(
        text, question, model, chunk_tokens=chunk_tokens, notes_tokens=notes_tokens, counter=DIGITS, concurrency=8
    )
    assert DIGITS.count(text) > 20 * window
    assert len(sizes) > 20 and max(sizes) + reply <= window
    assert MERGE_SYSTEM in systems and systems[-1] == ANSWER_SYSTEM  # merges and the answer fit too
