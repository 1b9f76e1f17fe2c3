"""How a failure of SQLite or of the file system under a store becomes one of tether's errors: `store_fault`
reads SQLite's error code (corrupt, not a database, read-only, cannot open, full, busy, I/O) or the OS
errno, looks at the path when the code alone does not say what is wrong, and returns the `StoreError`
subtype whose one-line message names the path, what is wrong and what to do."""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from ..errors import StoreBusy, StoreCorrupt, StoreError, StoreFull, StorePermission, StoreUnavailable

CORRUPT_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
ACCESS_CODES = frozenset({sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH})
BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
ACCESS_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
NEARLY_FULL = 1 << 20
"""Free bytes under which an I/O error is taken for a full disk: SQLite reports ENOSPC as SQLITE_FULL when
it writes a page, but as SQLITE_IOERR_SHMSIZE and the like when it grows its shared-memory file."""

RESTORE = "restore it from a backup (`tether backup` makes them); `tether doctor` says more"
ELSEWHERE = "or keep the store elsewhere (TETHER_HOME, TETHER_STORE or --store)"


def primary_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code of `error` (the extended code's low byte), when it carries one."""
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_corrupt(error: sqlite3.Error) -> bool:
    return primary_code(error) in CORRUPT_CODES


def is_busy(error: sqlite3.Error) -> bool:
    code = primary_code(error)
    if code is not None:
        return code in BUSY_CODES
    return "locked" in str(error) or "busy" in str(error)


def store_fault(error: BaseException, path: str, doing: str) -> StoreError:
    """The `StoreError` for `error`, met while `doing` ("open", "read", "write to"...) the database at
    `path`. A `StoreError` is returned as it is."""
    if isinstance(error, StoreError):
        return error
    reason = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, sqlite3.Error):
        code = primary_code(error)
        name = getattr(error, "sqlite_errorname", None)
        if code in CORRUPT_CODES:
            what = "is not a database or is damaged" if code == sqlite3.SQLITE_NOTADB else "is damaged"
            return StoreCorrupt(f"the database {path} {what} ({reason})", RESTORE, path=path)
        if code in BUSY_CODES:
            return busy(path, reason)
        if code == sqlite3.SQLITE_FULL or (code == sqlite3.SQLITE_IOERR and 0 <= free_bytes(path) < NEARLY_FULL):
            return full(path, reason)
        if code in ACCESS_CODES:
            return access(path, reason, doing)
        if code == sqlite3.SQLITE_IOERR:
            return StoreUnavailable(
                f"cannot {doing} the database {path}: I/O error ({reason}, {name})",
                "check the disk it is on; `tether doctor` says more",
                path=path,
            )
        return StoreUnavailable(
            f"cannot {doing} the database {path}: {reason}" + (f" ({name})" if name else ""),
            "`tether doctor` says more",
            path=path,
        )
    if isinstance(error, OSError):
        if error.errno in FULL_ERRNOS:
            return full(path, reason)
        if isinstance(error, (FileExistsError, NotADirectoryError)) or error.errno in ACCESS_ERRNOS:
            return access(path, reason, doing)
        return StoreUnavailable(f"cannot {doing} the database {path}: {reason}", "`tether doctor` says more", path=path)
    return StoreUnavailable(f"cannot {doing} the database {path}: {reason}", path=path)


def busy(path: str, reason: str) -> StoreBusy:
    return StoreBusy(f"the database {path} is locked by another process ({reason}): try again when it is done")


def full(path: str, reason: str) -> StoreFull:
    where = existing_ancestor(Path(path).parent)
    return StoreFull(
        f"no space left for the database {path} ({reason}; {human_bytes(free_bytes(path))} free in {where})",
        "free disk space there and try again",
        path=path,
    )


def access(path: str, reason: str, doing: str) -> StoreUnavailable:
    try:
        return _diagnose(path, reason, doing)
    except OSError:  # a parent that cannot even be looked into
        return StorePermission(f"cannot {doing} the database {path} ({reason})", "check its permissions", path=path)


def _diagnose(path: str, reason: str, doing: str) -> StoreUnavailable:
    """What keeps `path` from being opened or written, found by looking at the path itself: a file where a
    directory should be, a directory where the database should be, a directory or file that cannot be
    written. Root ignores permission bits, so writability is tried, not read from the mode."""
    target = Path(path)
    for ancestor in (target.parent, *target.parent.parents):
        if ancestor.exists() or ancestor.is_symlink():
            if not ancestor.is_dir():
                return StoreUnavailable(
                    f"cannot {doing} the database {path}: {ancestor} is a file, not a directory",
                    f"move it away, {ELSEWHERE}",
                    path=path,
                )
            break
    if target.is_dir():
        return StoreUnavailable(
            f"cannot {doing} the database {path}: it is a directory, not a database file",
            f"move it away, {ELSEWHERE}",
            path=path,
        )
    directory = existing_ancestor(target.parent)
    problem = unwritable(directory)
    if problem is not None:
        return StorePermission(
            f"cannot {doing} the database {path}: {directory} cannot be written ({problem})",
            f"check the permissions of {directory}, {ELSEWHERE}",
            path=path,
        )
    if target.exists():
        try:
            with open(target, "r+b"):
                pass
        except OSError as e:
            return StorePermission(
                f"cannot write the database {path} ({e.strerror or e})", f"check the permissions of {path}", path=path
            )
    return StorePermission(
        f"cannot {doing} the database {path} ({reason})",
        f"check the permissions of {directory} and {path}",
        path=path,
    )


def unwritable(directory: Path) -> str | None:
    """Why no file can be created in `directory` (the OS's words), or None when one can: tried by creating and
    removing an empty file, since permission bits say nothing for root, an immutable directory or a
    read-only mount."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".tether-probe-")
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def existing_ancestor(path: Path) -> Path:
    """`path` or the nearest of its parents that exists."""
    for candidate in (path, *path.parents):
        try:
            if candidate.exists():
                return candidate
        except OSError:  # a parent that cannot be looked into: what is above it is where to look
            continue
    return path


def free_bytes(path: str) -> int:
    """Free bytes on the file system that holds `path` (or its nearest existing parent); -1 if unknown."""
    try:
        return shutil.disk_usage(existing_ancestor(Path(path).parent)).free
    except OSError:
        return -1


def human_bytes(n: int) -> str:
    """1234567 -> '1.2 MB'; a negative count (unknown) -> 'unknown'."""
    if n < 0:
        return "unknown"
    if n < 1000:
        return f"{n} bytes"
    value = n / 1000
    for unit in ("kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"
