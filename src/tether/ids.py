"""Time-ordered ids: a short kind prefix and a 26-character ULID (48-bit milliseconds + 80 random bits,
Crockford base32), monotonic within one process so that ids made in the same millisecond still sort."""

from __future__ import annotations

import os
import re
import threading
import time

from .errors import InvalidId

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ID_RE = re.compile(r"^[a-z]{1,8}_[0-9A-HJKMNP-TV-Z]{26}\Z")  # \Z, not $: $ lets a trailing "\n" through
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_ulid(now_ms: int | None = None) -> str:
    """A 26-character ULID; strictly increasing across calls in this process."""
    global _last_ms, _last_rand
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    with _lock:
        if ms <= _last_ms:
            ms = _last_ms
            rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last_ms, _last_rand = ms, rand
    return _encode(ms, 10) + _encode(rand, 16)


def new_id(prefix: str) -> str:
    """A new id such as ``ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB``."""
    return f"{prefix}_{new_ulid()}"


def new_session_id() -> str:
    return new_id("ses")


def is_valid_id(value: object) -> bool:
    return isinstance(value, str) and _ID_RE.match(value) is not None


def check_id(value: object, what: str = "id") -> str:
    """Return `value` if it is a well-formed tether id, else raise `InvalidId`.

    Ids end up in file names and URLs, so anything with path separators, dots or odd characters is refused
    here, once, rather than escaped everywhere it is used."""
    if not isinstance(value, str):
        raise InvalidId(f"{what} must be a string, not {type(value).__name__}")
    if not _ID_RE.match(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InvalidId(
            f"invalid {what} {shown!r}: expected a prefix and 26 base32 characters, like 'ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB'"
        )
    return value


def id_time(value: str) -> float:
    """The creation time (unix seconds) encoded in an id."""
    ulid = check_id(value).split("_", 1)[1]
    ms = 0
    for ch in ulid[:10]:
        ms = ms * 32 + _ALPHABET.index(ch)
    return ms / 1000.0
