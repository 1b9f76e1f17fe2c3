"""Every error a server answers, as one JSON shape: ``{"error": {"code", "message", "details"}}``, with the
HTTP status that the tether exception's class maps to. The code is the class's name in snake case
(`SessionBusy` is ``session_busy``), so a client turns it back into the same exception. Nothing answers with
a traceback: an error the server did not expect is ``internal``, its details logged here only."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from .. import errors as E

_STATUS: list[tuple[type[BaseException], int]] = [
    # the first class an error is an instance of decides (subclasses before their bases)
    (E.InvalidId, 400),
    (E.InvalidInput, 400),
    (E.NotFound, 404),
    (E.SeqConflict, 409),
    (E.SessionBusy, 409),
    (E.ConfirmationRequired, 409),
    (E.ImportFormatError, 422),
    (E.ConfigError, 422),
    (E.StoreBusy, 503),
    (E.StoreUnavailable, 503),
    (E.ProviderError, 502),
    (E.MissingExtra, 501),
    (E.TetherError, 500),
]


class ErrorDetail(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: str
    """Stable: the tether exception's class in snake case (``session_not_found``, ``session_busy``,
    ``invalid_input``), or one of the server's own (``unauthorized``, ``forbidden_host``,
    ``forbidden_origin``, ``payload_too_large``, ``invalid_request``, ``not_found``, ``method_not_allowed``,
    ``internal``)."""
    message: str
    details: dict[str, Any] = msgspec.field(default_factory=dict)
    """What the error carries: the holder of a busy session (``holder``, ``pid``, ``host``, ``since``,
    ``expires_at``), the fields of a request that failed validation, ..."""


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


def code_of(exc: type[BaseException]) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", exc.__name__).lower()


CODES: dict[str, type[E.TetherError]] = {
    code_of(cls): cls for cls in vars(E).values() if isinstance(cls, type) and issubclass(cls, E.TetherError)
}
"""Every tether error by its code: how a client raises what the server raised."""


def status_of(exc: BaseException) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def details_of(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, E.SessionBusy):
        return {
            "session_id": exc.session_id,
            "holder": exc.holder,
            "pid": exc.pid,
            "host": exc.host,
            "since": exc.since,
            "expires_at": exc.expires_at,
        }
    if isinstance(exc, E.SessionNotFound):
        return {"session_id": exc.session_id}
    if isinstance(exc, E.ConfirmationRequired):
        return {"session_id": exc.session_id, "directory": exc.directory, "system_prompt": exc.system_prompt}
    if isinstance(exc, E.SeqConflict):
        return {"session_id": exc.session_id, "expected": exc.expected, "actual": exc.actual}
    if isinstance(exc, E.ProviderError):
        return {"provider": exc.provider, "status": exc.status, "retryable": exc.retryable}
    if isinstance(exc, E.MissingExtra):
        return {"extra": exc.extra, "module": exc.module}
    return {}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    return msgspec.json.encode(ErrorBody(ErrorDetail(code=code, message=message, details=details or {})))


def tether_error_body(exc: E.TetherError) -> tuple[int, bytes]:
    message = " ".join(str(exc).split()) or type(exc).__name__
    return status_of(exc), error_body(code_of(type(exc)), message, details_of(exc))
