from __future__ import annotations

import re

import pytest

from tether.tools.builtin.text import LinePager, LineSearcher

TEXT = "".join(f"line {i}\n" for i in range(1, 1_001)) + "tail without newline"


def blocks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_pager_gives_the_same_page_however_the_text_is_split(size: int) -> None:
    pager = LinePager(998, 5, line_chars=100, max_chars=10_000)
    for block in blocks(TEXT, size):
        pager.feed(block)
    pager.finish()
    assert [(line.number, line.text) for line in pager.lines] == [
        (998, "line 998"),
        (999, "line 999"),
        (1000, "line 1000"),
        (1001, "tail without newline"),
    ]
    assert pager.total_lines == 1_001


@pytest.mark.parametrize("size", [1, 5, 100_000])
def test_pager_cuts_long_lines_and_keeps_their_length(size: int) -> None:
    pager = LinePager(1, 10, line_chars=4, max_chars=10_000)
    for block in blocks("abcdefghij\r\nxy\n", size):
        pager.feed(block)
    pager.finish()
    assert [(line.text, line.length, line.cut) for line in pager.lines] == [("abcd", 10, True), ("xy", 2, False)]


def test_pager_stops_at_its_character_budget() -> None:
    pager = LinePager(1, 1_000, line_chars=100, max_chars=100)
    pager.feed(TEXT)
    assert pager.done and 1 <= len(pager.lines) < 10


@pytest.mark.parametrize("size", [1, 3, 50, 100_000])
def test_searcher_gives_the_same_hits_however_the_text_is_split(size: int) -> None:
    searcher = LineSearcher(re.compile(r"^line 9\d$|without", re.MULTILINE), max_matches=100, line_chars=100)
    for block in blocks(TEXT, size):
        searcher.feed(block)
    searcher.finish()
    assert [m.number for m in searcher.matches] == [*range(90, 100), 1_001]
    assert not searcher.more


def test_searcher_reports_more_and_first_only() -> None:
    rx = re.compile("line", re.MULTILINE)
    capped = LineSearcher(rx, max_matches=3, line_chars=100)
    capped.feed(TEXT)
    assert [m.number for m in capped.matches] == [1, 2, 3] and capped.more and capped.done
    first = LineSearcher(rx, max_matches=1, line_chars=100, first_only=True)
    first.feed(TEXT)
    assert first.done and len(first.matches) == 1 and not first.more
