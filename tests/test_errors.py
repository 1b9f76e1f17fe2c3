"""Every tether error says its wire vocabulary itself: a stable `code` (the class in snake case), the HTTP
`http_status`, and `details()`, from which `from_wire` makes the same error again (what a client raises)."""

from __future__ import annotations

import pytest

from tether import errors as E


def classes() -> list[type[E.TetherError]]:
    return [c for c in vars(E).values() if isinstance(c, type) and issubclass(c, E.TetherError)]


def test_every_class_has_a_code_and_is_found_by_it() -> None:
    for cls in classes():
        assert E.error_class(cls.code) is cls
        assert cls.code == cls.code.lower() and " " not in cls.code
    assert E.SessionBusy.code == "session_busy" and E.AuthError.code == "auth_error"


@pytest.mark.parametrize(
    "error",
    [
        E.SessionBusy("ses_x", "run_1", pid=12, host="h", since=1.0, expires_at=2.0),
        E.LeaseLost("ses_x", "run_2", pid=None, host=None),
        E.SessionNotFound("ses_y"),
        E.SeqConflict("ses_z", 3, 4),
        E.ConfirmationRequired("needs a yes", session_id="ses_a", directory="/w", system_prompt="be"),
        E.AuthError("bad key", status=401, provider="openai"),
        E.RateLimited("slow down", retry_after=2.5, provider="anthropic"),
        E.MissingExtra("server", "httpx2"),
        E.SandboxError("died", reason="crashed"),
        E.InvalidRequest("no", problems=[{"where": "body.x", "problem": "missing"}]),
        E.UnknownName("unknown agent 'x'"),
        E.UnknownModel("unknown model 'x'"),
        E.InvalidInput("bad"),
        E.StoreBusy("locked"),
    ],
)
def test_an_error_made_again_from_the_wire_is_the_same(error: E.TetherError) -> None:
    again = type(error).from_wire(str(error), error.details())
    assert type(again) is type(error) and str(again) == str(error) and again.details() == error.details()


def test_statuses_follow_the_kind_of_error() -> None:
    assert E.InvalidInput.http_status == 400 and E.InvalidRequest.http_status == 422
    assert E.NotFound.http_status == E.UnknownName.http_status == E.UnknownModel.http_status == 404
    assert E.SessionBusy.http_status == E.SeqConflict.http_status == E.NotYet.http_status == 409
    assert E.ProviderError.http_status == 502 and E.StoreUnavailable.http_status == 503
    assert E.TetherError("x").http_status == 500
    remote = E.RemoteError("odd", status=418, code="teapot", details={"a": 1})
    assert (remote.code, remote.http_status, remote.details()) == ("teapot", 418, {"a": 1})
