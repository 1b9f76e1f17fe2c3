"""Ids: the shape `check_id` accepts (nothing that could walk a path or break a URL), and ids that sort in
the order they were made, even within one millisecond, across threads, or with a clock that steps back."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tether.errors import InvalidId, InvalidInput
from tether.ids import _ALPHABET, _encode, check_id, id_time, is_valid_id, new_id, new_session_id, new_ulid

GOOD = "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"


def test_new_ids_are_well_formed() -> None:
    sid = new_session_id()
    assert sid.startswith("ses_") and len(sid) == 30
    assert is_valid_id(sid) and check_id(sid) == sid
    assert set(sid[4:]) <= set(_ALPHABET)
    assert new_id("art").startswith("art_")


def test_ids_made_in_a_row_strictly_increase() -> None:
    ids = [new_session_id() for _ in range(5000)]  # many share a millisecond
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_ids_increase_when_the_clock_steps_back() -> None:
    before = new_ulid()
    after_step_back = new_ulid(now_ms=0)  # a clock reset to 1970
    assert after_step_back > before
    assert new_ulid() > after_step_back


def test_ids_from_many_threads_are_unique_and_each_thread_sees_them_increase() -> None:
    results: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(new_session_id() for _ in range(2000))

    threads = [threading.Thread(target=make, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in results:
        assert out == sorted(out)
    assert len({i for out in results for i in out}) == 8000


def test_id_time_reads_the_time_back() -> None:
    ms = 1_700_000_000_123
    assert id_time("ses_" + _encode(ms, 10) + "0" * 16) == ms / 1000
    # a fresh id carries the current time (a loose bound: this checks the encoding, not the speed)
    assert abs(id_time(new_session_id()) - time.time()) < 60


def test_encode_is_fixed_width_crockford_base32() -> None:
    assert _encode(0, 10) == "0" * 10
    assert _encode(31, 2) == "0Z"
    assert _encode(32, 2) == "10"
    assert len(_encode(2**48 - 1, 10)) == 10
    assert not {"I", "L", "O", "U"} & set(_ALPHABET)


@pytest.mark.parametrize(
    "bad",
    [
        "ses_01JD8X3Q5T9N2C7KZ6W4M0R1/B",
        "ses_01JD8X3Q5T9N2C7KZ6W4M0R1\\B",
        "ses_01JD8X3Q5T9N2C7KZ6W4M0R1..",
        "../" + GOOD,
        GOOD + "/..",
        "..",
        "",
        "ses_" + "0" * 25,  # short
        "ses_" + "0" * 27,  # long
        "ses_" + "0" * 100_000,
        "ses_01jd8x3q5t9n2c7kz6w4m0r1yb",  # lowercase
        "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YI",  # I is not Crockford
        "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YU",  # nor U
        "SES_01JD8X3Q5T9N2C7KZ6W4M0R1YB",
        "toolongpf_01JD8X3Q5T9N2C7KZ6W4M0R1YB",
        "se1_01JD8X3Q5T9N2C7KZ6W4M0R1YB",
        "_01JD8X3Q5T9N2C7KZ6W4M0R1YB",
        "ses01JD8X3Q5T9N2C7KZ6W4M0R1YB",
        " " + GOOD,
        GOOD + "\n",
        GOOD + "\x00",
        "ses_01JD8X3Q5T9N2C7KZ6W4M0R1Y\u0412",  # a Cyrillic look-alike
    ],
)
def test_check_id_refuses(bad: str) -> None:
    assert not is_valid_id(bad)
    with pytest.raises(InvalidId) as caught:
        check_id(bad, "session id")
    assert isinstance(caught.value, InvalidInput) and isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert "session id" in message and len(message) < 300


@pytest.mark.parametrize("bad", [None, 123, 1.5, b"ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", ["x"], object()])
def test_check_id_refuses_non_strings(bad: Any) -> None:
    assert not is_valid_id(bad)
    with pytest.raises(InvalidId, match="must be a string"):
        check_id(bad)


@pytest.mark.parametrize("good", [GOOD, "a_" + "0" * 26, "abcdefgh_" + "Z" * 26])
def test_check_id_accepts(good: str) -> None:
    assert check_id(good) == good and is_valid_id(good)


def test_id_time_of_a_bad_id() -> None:
    with pytest.raises(InvalidId):
        id_time("../etc/passwd")
