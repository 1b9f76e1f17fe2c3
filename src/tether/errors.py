"""The one exception tree of tether. Every error a user can catch derives from `TetherError`.

TetherError
├── InvalidInput            bad input from a caller: ids, arguments, options
│   └── InvalidId           an id that is not a tether id (path separators, "..", wrong shape)
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
├── MissingExtra            an optional dependency is not installed; names the extra
├── ConfirmationRequired    a run that needs a person's yes first (an imported session); says what to show
└── RemoteError             a tether server answered with an error that has no class here (its code, status)
"""

from __future__ import annotations


class TetherError(Exception):
    """Base class of every tether error."""


class InvalidInput(TetherError, ValueError):
    """A caller passed something tether cannot accept."""


class InvalidId(InvalidInput):
    """An id that is not a well-formed tether id."""


class NotFound(TetherError, LookupError):
    """Something that was asked for does not exist."""


class SessionNotFound(NotFound):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r}")
        self.session_id = session_id


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


class StoreBusy(StoreError):
    """The database stayed locked by other writers for longer than the busy timeout."""


class CorruptEntry(StoreError):
    """A stored entry could not be decoded."""

    def __init__(self, session_id: str, seq: int, reason: str) -> None:
        super().__init__(f"session {session_id}: entry {seq} is corrupt: {reason}")
        self.session_id = session_id
        self.seq = seq
        self.reason = reason


class StoreClosed(StoreError):
    """The store was used after it was closed."""


class StoreUnavailable(StoreError):
    """The database cannot be opened or used: its home is not a directory, an I/O error, a schema this
    version does not know. The message is one line: `problem` (which names `path` and what is wrong), then
    `advice` (what to do)."""

    def __init__(self, problem: str, advice: str | None = None, *, path: str | None = None) -> None:
        super().__init__(f"{problem}: {advice}" if advice else problem)
        self.problem = problem
        self.advice = advice
        self.path = path


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


class LeaseLost(SessionBusy):
    """A run's lease is no longer its own: it expired and another holder took it, or it was released."""


class ProviderError(TetherError):
    """A model provider failed."""

    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None, provider: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.provider = provider


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


class ConfigError(TetherError):
    """Configuration is missing or wrong."""


class MissingExtra(TetherError, ImportError):
    """An optional dependency is not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"this needs the optional dependency {module!r}: install it with `pip install 'tether[{extra}]'`"
        )
        self.extra = extra
        self.module = module


class ConfirmationRequired(TetherError):
    """A run that needs a person's yes before it starts: an imported session would run its own system
    prompt in its own directory. Carries what to show them."""

    def __init__(self, message: str, *, session_id: str, directory: str | None, system_prompt: str | None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.directory = directory
        self.system_prompt = system_prompt


class RemoteError(TetherError):
    """A tether server answered with an error that no class here stands for (`tether.client` raises the
    others as themselves): its HTTP `status`, its stable `code` and its `details`."""

    def __init__(self, message: str, *, status: int, code: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details = details or {}
