"""What a recall query says besides its words: whether it asks when, which texts say when, and whom a
question is about."""

from __future__ import annotations

import pytest

from tether.recall.query import asks_when, places_in_time, subject_of


@pytest.mark.parametrize(
    "query",
    [
        "When did Melanie paint a sunrise?",
        "  when is the release?",
        "What year did we move the CI to GitHub?",
        "In which month was the outage?",
        "How long ago was the migration?",
    ],
)
def test_questions_that_ask_when(query: str) -> None:
    assert asks_when(query)


@pytest.mark.parametrize(
    "query",
    ["What did Melanie paint?", "Where is the config?", "since when", "Who said when to deploy?", ""],
)
def test_questions_that_do_not(query: str) -> None:
    assert not asks_when(query)


@pytest.mark.parametrize(
    "text",
    [
        "I went to a fair yesterday to show off my studio",
        "that roadtrip this past weekend was insane",
        "we went camping two weekends ago",
        "We had a blast last year at the Pride fest",
        "the deploy is on Friday",
        "Painting since 2016 has kept me sane",
        "back in March we rewrote it",
        "the meeting moved to 5/23",
        "the release in May",
        "released May 23",
    ],
)
def test_texts_that_place_something_in_time(text: str) -> None:
    assert places_in_time(text)


@pytest.mark.parametrize("text", ["I love painting landscapes", "May I ask what you think?", ""])
def test_texts_that_do_not(text: str) -> None:
    assert not places_in_time(text)  # "May" the verb is not the month


def test_a_number_that_could_be_a_year_reads_as_one() -> None:
    # a known limit: the cue is a boost among turns that already match, so a false one costs little
    assert places_in_time("the error is on line 2016 of app.py")


def test_the_subject_of_a_question() -> None:
    names = {"jon", "gina"}
    assert subject_of("What did Jon say about Gina's progress with her store?", names) == "jon"
    assert subject_of("What does Gina say to Jon about the grand opening?", names) == "gina"
    assert subject_of("How do Jon and Gina both like to destress?", names) is None  # both alike
    assert subject_of("What did Jon and his dad build?", names) == "jon"
    assert subject_of("Why did the studio close?", names) is None  # no name after the verb
    assert subject_of("Gina's store: what happened?", names) is None
    assert subject_of("What did Jon say?", set()) is None
