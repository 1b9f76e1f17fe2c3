"""Opening a file tool's path so that nothing can redirect it between the check and the open.

`ToolContext.resolve` decides on a path with its symlinks resolved; a directory swapped for a symlink right
after (``renameat2(RENAME_EXCHANGE)``, in a loop) would otherwise move the open that follows to wherever the
link points. Here every component is resolved by the kernel in the same system call that opens the file:
``openat2`` from the workspace's directory with ``RESOLVE_BENEATH`` (nothing may lead above it) and
``RESOLVE_NO_SYMLINKS`` (the path was checked symlink-free; a link that appears since is a swap), or, on a
kernel without ``openat2`` (before 5.6), a walk one component at a time with ``O_NOFOLLOW``. A path outside
the workspace (confinement off) is opened from ``/`` the same way."""

from __future__ import annotations

import ctypes
import errno
import os
from functools import cache
from pathlib import Path

from ..errors import ToolError

_OPENAT2 = 437  # the same number on every architecture
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


@cache
def has_openat2() -> bool:
    if os.uname().sysname != "Linux":
        return False
    how = _OpenHow(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, RESOLVE_BENEATH)
    fd = _syscall(_OPENAT2, -100, b"/", ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        os.close(fd)
        return True
    return ctypes.get_errno() != errno.ENOSYS


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)
    while True:
        fd = _syscall(_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err == errno.EAGAIN or err == errno.EINTR:  # a rename elsewhere raced the lookup: try again
            continue
        raise OSError(err, os.strerror(err), path)


def _walk(dir_fd: int, parts: tuple[str, ...], flags: int, mode: int) -> int:
    """The fallback: each directory opened without following a link, then the file itself."""
    fd = os.dup(dir_fd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
    finally:
        os.close(fd)


def open_beneath(root: Path, path: Path, flags: int, mode: int = 0o666) -> int:
    """A file descriptor for `path` (absolute and resolved), opened from `root` (the workspace; ``/`` for a
    path outside it) in one step that no symlink on the way can redirect. `OSError` as `open` raises it;
    `ELOOP`/`EXDEV` when a link appeared on the path since it was checked."""
    if "\0" in str(path):  # C would read the name only up to it: another file than the one asked for
        raise ValueError("embedded null byte")
    if not path.is_relative_to(root):
        root = Path("/")
    parts = path.relative_to(root).parts or (".",)
    if ".." in parts:
        raise OSError(errno.EXDEV, "a path that leads out of its directory", str(path))
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if has_openat2():
            return _openat2(root_fd, os.path.join(*parts), flags, mode)
        return _walk(root_fd, parts, flags, mode)
    finally:
        os.close(root_fd)


def moved(exc: OSError, shown: str) -> ToolError | None:
    """The tool error for an open refused because the path changed under it, or None for other errors."""
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        return ToolError(
            f"{shown}: the path changed while it was being opened (a symlink appeared on it); nothing was "
            "read or written"
        )
    return None
