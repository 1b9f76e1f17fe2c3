"""Every error a server answers, as one JSON shape (`tether.wire.ErrorBody`): ``{"error": {"code", "message",
"details"}}``. A tether exception says all three itself (`TetherError.code`, `http_status`, `details()`), the
one mapping that runs and `tether.client` use too, so that a client raises the same exception again
(`TetherError.from_wire`). Nothing answers with a traceback: an error the server did not expect is
``internal``, its details logged here only."""

from __future__ import annotations

from typing import Any

import msgspec

from .. import errors as E
from ..wire import ErrorBody, ErrorDetail


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    return msgspec.json.encode(ErrorBody(ErrorDetail(code=code, message=message, details=details or {})))


def tether_error_body(exc: E.TetherError) -> tuple[int, bytes]:
    message = " ".join(str(exc).split()) or type(exc).__name__
    return exc.http_status, error_body(exc.code, message, exc.details())
