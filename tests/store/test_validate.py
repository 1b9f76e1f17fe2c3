"""The checks every backend shares (`tether.store.validate`): one module, so all backends refuse the same
input with the same error."""

from __future__ import annotations

import pytest

from tether.errors import InvalidId, InvalidInput
from tether.messages import Entry, Message, Revert
from tether.store.records import UNSET, SessionInfo
from tether.store.validate import (
    check_artifact_id,
    check_lease,
    check_new_session,
    check_update,
    validate_bodies,
    validate_import,
)


def test_a_new_session_checks_ids_state_and_fields() -> None:
    assert check_new_session(None, None, "active", {"title": "t", "metadata": {"k": 1}}) is None
    sid = "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"
    assert check_new_session(sid, sid, "paused", {}) == sid
    with pytest.raises(InvalidId):
        check_new_session("../x", None, "active", {})
    with pytest.raises(InvalidId):
        check_new_session(None, "nope", "active", {})
    with pytest.raises(InvalidInput, match="state must be"):
        check_new_session(None, None, "running", {})
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        check_new_session(None, None, "active", {"title": "\ud800"})
    with pytest.raises(InvalidInput, match="JSON"):
        check_new_session(None, None, "active", {"metadata": {"k": object()}})


def test_an_update_keeps_what_was_given_and_refuses_the_rest() -> None:
    sid = "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"
    assert check_update(sid, {"title": "x", "model": UNSET, "agent": None}) == {"title": "x", "agent": None}
    with pytest.raises(InvalidInput, match="cannot update entry_count"):
        check_update(sid, {"entry_count": 3})
    with pytest.raises(InvalidInput, match="state must be"):
        check_update(sid, {"state": "gone"})


def test_bodies_and_imports() -> None:
    with pytest.raises(InvalidInput, match="at least one"):
        validate_bodies([], 1)
    validate_bodies([Message.user("a"), Revert(to_seq=0)], 1)
    with pytest.raises(InvalidInput, match="must point before itself"):
        validate_bodies([Revert(to_seq=5)], 5)
    info = SessionInfo(id="ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", created_at=1.0, updated_at=1.0)
    assert validate_import(info, [Entry(1, 1.0, Message.user("a"))]) == info.id
    with pytest.raises(InvalidInput, match=r"seqs 1\.\.n"):
        validate_import(info, [Entry(2, 1.0, Message.user("a"))])


def test_artifact_ids_and_leases() -> None:
    good = "art_" + "0" * 64
    assert check_artifact_id(good) == good
    for bad in ("art_" + "0" * 63 + "g", "art_ " + "0" * 63, "x" * 68):
        with pytest.raises(InvalidInput):
            check_artifact_id(bad)
    check_lease("ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "run_a", 30)
    with pytest.raises(InvalidInput, match="lease lasts"):
        check_lease("ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "run_a", 0)
