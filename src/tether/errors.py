"""The one exception tree of tether. Every error a user can catch derives from `TetherError`.

TetherError
├── InvalidInput            bad input from a caller: ids, arguments, options
│   ├── InvalidId           an id that is not a tether id (path separators, "..", wrong shape)
│   ├── UnknownName         a name of something there is none of: an agent, a tool, a waiting call, a page
│   ├── NotYet              something the state of things does not allow yet (a session with nothing to title)
│   └── InvalidRequest      a request to a server that does not match its schema (its `problems`)
├── NotFound                a session, entry or artifact that does not exist
│   └── SessionNotFound
├── StoreError              the storage backend failed
│   ├── SeqConflict         an append stated an expected seq and another writer got there first
│   ├── StoreBusy           the store stayed locked by other writers past the busy timeout
│   ├── CorruptEntry        a stored entry could not be decoded (readers skip and report it)
│   ├── StoreClosed         the store was used after it was closed
│   └── StoreUnavailable    the database cannot be opened or used (names the path and what to do)
│       ├── StoreCorrupt    the file is damaged or is not a database (SQLITE_CORRUPT, SQLITE_NOTADB)
│       ├── StorePermission the file or its directory cannot be written (read-only, permissions)
│       ├── StoreFull       no space left: the disk, or the database's page limit (SQLITE_FULL, ENOSPC)
│       └── StoreConnectionLost  the connection to a database server dropped mid-operation (PostgreSQL)
├── ImportFormatError       a file given to import is truncated, foreign or inconsistent
├── SessionBusy             another run holds this session's lease (names the holder)
│   └── LeaseLost           a run's lease expired and another holder took it, or it was released
├── ProviderError           a model provider failed; `retryable` says whether to try again
│   ├── AuthError
│   ├── RateLimited         (carries `retry_after` seconds when the provider said so)
│   ├── ContextOverflow
│   ├── TransientError      timeouts, 5xx, dropped connections
│   └── BadRequest
├── ToolError               a tool failed in a way the model should see as an error result
│   └── OutsideWorkspace
├── SandboxError            the RLM code sandbox could not start, crashed, timed out or broke its protocol
├── ConfigError             configuration is missing or wrong
│   └── UnknownModel        a model no provider or `[models]` table knows
├── MissingExtra            an optional dependency is not installed; names the extra
├── ConfirmationRequired    a run that needs a person's yes first (an imported session); says what to show
└── RemoteError             a tether server answered with an error that has no class here (its code, status)

Every class carries its wire vocabulary, the one mapping that runs (`events.Error.code`), the HTTP server and
`tether.client` all use: `code`, stable, the class's name in snake case (`SessionBusy` is ``session_busy``);
`http_status`, the HTTP status a server answers it with; `details()`, what the instance carries beyond its
message, as JSON-able data; and `from_wire(code, message, details)`, which makes the instance again from
these three (what a client raises).
"""

from __future__ import annotations

import re
from typing import Any


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


ERRORS: dict[str, type[TetherError]] = {}
"""Every tether error class by its `code` (filled as the classes are made)."""


class TetherError(Exception):
    """Base class of every tether error."""

    code: str = "tether_error"
    """Stable: the class's name in snake case (set for each subclass)."""
    http_status: int = 500
    """The HTTP status a server answers this error with (inherited unless a class sets its own)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.code = _snake(cls.__name__)
        ERRORS[cls.code] = cls

    def details(self) -> dict[str, Any]:
        """What this error carries beyond its message (the holder of a busy session, ...), as JSON-able data:
        the `details` of an HTTP error body, and what `from_wire` takes back."""
        return {}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        """The error again from its message and `details()` (what a client raises for a server's answer)."""
        return cls(message)


def error_class(code: str) -> type[TetherError] | None:
    """The class whose `code` this is (None: no class here has it)."""
    return ERRORS.get(code)


ERRORS[TetherError.code] = TetherError


class InvalidInput(TetherError, ValueError):
    """A caller passed something tether cannot accept."""

    http_status = 400


class InvalidId(InvalidInput):
    """An id that is not a well-formed tether id."""


class UnknownName(InvalidInput):
    """A request names something there is none of: an agent profile, a tool, a call that waits for an
    answer, a share, a page of a listing (a cursor this store never gave). HTTP 404: the name is well-formed,
    the thing is not there."""

    http_status = 404


class NotYet(InvalidInput):
    """What was asked cannot be done in the state things are in now (a session with no exchange to title
    yet). HTTP 409."""

    http_status = 409


class InvalidRequest(InvalidInput):
    """A request that does not match the server's schema (a field missing, of the wrong type, out of range):
    `problems` says where and what, one ``{"where", "problem"}`` each."""

    http_status = 422

    def __init__(self, message: str, *, problems: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []

    def details(self) -> dict[str, Any]:
        return {"problems": self.problems}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(message, problems=list(details.get("problems") or []))


class NotFound(TetherError, LookupError):
    """Something that was asked for does not exist."""

    http_status = 404


class SessionNotFound(NotFound):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}")
        self.session_id = session_id

    def details(self) -> dict[str, Any]:
        return {"session_id": self.session_id}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(str(details.get("session_id", message)))


class StoreError(TetherError):
    """The storage backend failed."""


class SeqConflict(StoreError):
    """An append stated the seq it expected, and the session had moved on."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {session_id}: expected next seq {expected}, but it is {actual} "
            "(another writer appended first; re-read the tail and retry)"
        )
        self.session_id = session_id
        self.expected = expected
        self.actual = actual

    http_status = 409

    def details(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "expected": self.expected, "actual": self.actual}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(str(details.get("session_id", "")), int(details.get("expected", 0)), int(details.get("actual", 0)))


class StoreBusy(StoreError):
    """The database stayed locked by other writers for longer than the busy timeout."""

    http_status = 503


class CorruptEntry(StoreError):
    """A stored entry could not be decoded."""

    def __init__(self, session_id: str, seq: int, reason: str) -> None:
        super().__init__(f"session {session_id}: entry {seq} is corrupt: {reason}")
        self.session_id = session_id
        self.seq = seq
        self.reason = reason

    def details(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "seq": self.seq}


class StoreClosed(StoreError):
    """The store was used after it was closed."""


class StoreUnavailable(StoreError):
    """The database cannot be opened or used: its home is not a directory, an I/O error, a schema this
    version does not know. The message is one line: `problem` (which names `path` and what is wrong), then
    `advice` (what to do)."""

    http_status = 503

    def __init__(self, problem: str, advice: str | None = None, *, path: str | None = None) -> None:
        super().__init__(f"{problem}: {advice}" if advice else problem)
        self.problem = problem
        self.advice = advice
        self.path = path

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(message)


class StoreCorrupt(StoreUnavailable):
    """The database file is damaged or is not a database. Nothing is repaired in place: restore a backup."""


class StorePermission(StoreUnavailable):
    """The database or its directory cannot be read or written: permissions, a read-only file system."""


class StoreFull(StoreUnavailable):
    """A write found no space left: the disk holding the database is full, or the database reached its page
    limit. Nothing of that write was kept."""


class StoreConnectionLost(StoreUnavailable):
    """The connection to the database server was lost, or none could be made, while an operation ran (the
    server restarted, a network cut, an administrator ended the backend). A write is one transaction: it was
    either committed whole or not at all, and which is unknown when the loss came while it committed (read the
    session again to see). The store's next operation gets a new connection."""


class ImportFormatError(TetherError):
    """A file given to import cannot be read as a session."""

    http_status = 422


class SessionBusy(TetherError):
    """Another run holds the session's lease: who (`holder`, `pid`, `host`), since when and until when
    (seconds since the epoch, by the store's clock)."""

    def __init__(
        self,
        session_id: str,
        holder: str,
        *,
        pid: int | None = None,
        host: str | None = None,
        since: float | None = None,
        expires_at: float | None = None,
        message: str | None = None,
    ) -> None:
        where = ", ".join(x for x in (f"pid {pid}" if pid is not None else "", host or "") if x)
        super().__init__(
            message or f"session {session_id} is busy: run {holder}" + (f" ({where})" if where else "") + " holds it"
        )
        self.session_id = session_id
        self.holder = holder
        self.pid = pid
        self.host = host
        self.since = since
        self.expires_at = expires_at

    http_status = 409

    def details(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "holder": self.holder,
            "pid": self.pid,
            "host": self.host,
            "since": self.since,
            "expires_at": self.expires_at,
        }

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(
            str(details.get("session_id", "")),
            str(details.get("holder", "")),
            pid=details.get("pid"),
            host=details.get("host"),
            since=details.get("since"),
            expires_at=details.get("expires_at"),
            message=message,
        )


class LeaseLost(SessionBusy):
    """A run's lease is no longer its own: it expired and another holder took it, or it was released."""


class ProviderError(TetherError):
    """A model provider failed."""

    retryable: bool = False
    http_status = 502

    def __init__(self, message: str, *, status: int | None = None, provider: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.provider = provider

    def details(self) -> dict[str, Any]:
        return {"provider": self.provider, "status": self.status, "retryable": self.retryable}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(message, status=details.get("status"), provider=details.get("provider"))


class AuthError(ProviderError):
    """The provider rejected the credentials."""


class RateLimited(ProviderError):
    """The provider asked us to slow down."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        status: int | None = 429,
        provider: str | None = None,
    ) -> None:
        super().__init__(message, status=status, provider=provider)
        self.retry_after = retry_after

    def details(self) -> dict[str, Any]:
        return {**super().details(), "retry_after": self.retry_after}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(
            message,
            retry_after=details.get("retry_after"),
            status=details.get("status"),
            provider=details.get("provider"),
        )


class ContextOverflow(ProviderError):
    """The request did not fit the model's context window."""


class TransientError(ProviderError):
    """A failure that may pass: timeout, 5xx, dropped connection. `retry_after`: what an overloaded server
    (503, 529) asked for, in seconds, when it said."""

    retryable = True
    retry_after: float | None = None


class BadRequest(ProviderError):
    """The provider refused the request as malformed."""


class ToolError(TetherError):
    """A tool failed; the model sees the message as an error result."""


class OutsideWorkspace(ToolError):
    """A tool was asked to touch a path outside the session's workspace."""


class SandboxError(TetherError):
    """The RLM code sandbox failed. `reason` is ``"start"``, ``"crashed"``, ``"timeout"`` or ``"protocol"``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason

    def details(self) -> dict[str, Any]:
        return {"reason": self.reason}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(message, reason=str(details.get("reason", "")))


class ConfigError(TetherError):
    """Configuration is missing or wrong."""

    http_status = 422


class UnknownModel(ConfigError):
    """A model that no provider, catalog entry or ``[models]`` table knows. HTTP 404, as any name of
    something there is none of."""

    http_status = 404


class MissingExtra(TetherError, ImportError):
    """An optional dependency is not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"this needs the optional dependency {module!r}: install it with `pip install 'tether[{extra}]'`"
        )
        self.extra = extra
        self.module = module

    http_status = 501

    def details(self) -> dict[str, Any]:
        return {"extra": self.extra, "module": self.module}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(str(details.get("extra", "")), str(details.get("module", "")))


class ConfirmationRequired(TetherError):
    """A run that needs a person's yes before it starts: an imported session would run its own system
    prompt in its own directory. Carries what to show them."""

    def __init__(self, message: str, *, session_id: str, directory: str | None, system_prompt: str | None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.directory = directory
        self.system_prompt = system_prompt

    http_status = 409

    def details(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "directory": self.directory, "system_prompt": self.system_prompt}

    @classmethod
    def from_wire(cls, message: str, details: dict[str, Any]) -> TetherError:
        return cls(
            message,
            session_id=str(details.get("session_id", "")),
            directory=details.get("directory"),
            system_prompt=details.get("system_prompt"),
        )


class RemoteError(TetherError):
    """A tether server answered with an error that no class here stands for (`tether.client` raises the
    others as themselves): its HTTP `status`, its stable `code` and its `details`."""

    def __init__(self, message: str, *, status: int, code: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.http_status = status
        self.code = code
        self.carried = details or {}

    def details(self) -> dict[str, Any]:
        return dict(self.carried)
