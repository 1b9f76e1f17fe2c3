"""Landlock (Linux 5.13+), through the three system calls, for the sandbox's second mechanism: a ruleset
made in tether's own process (`Ruleset`), applied in the child between fork and exec (`Ruleset.restrict`,
two system calls and nothing that allocates), inherited by everything the command starts.

What it can say: which paths may be read, written, made or removed beneath a directory (allow-lists only:
no part of a writable tree can be made read-only again), whether TCP ports may be bound or connected to
(ABI 4; UDP and other sockets are not covered), and (ABI 6) that signals and abstract UNIX sockets stay
within the sandbox. A sandboxed process cannot ptrace, or read the `/proc/PID/environ` of, a process
outside its domain."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from functools import cache

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPort(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl


@cache
def abi() -> int:
    """The Landlock ABI version the kernel offers; 0 where it has none (or it is turned off)."""
    if os.uname().sysname != "Linux":
        return 0
    version = _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def fs_rights(version: int) -> int:
    """Every filesystem right the ABI `version` handles."""
    rights = (1 << 13) - 1
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    if version >= 5:
        rights |= IOCTL_DEV
    return rights


class Ruleset:
    """A Landlock ruleset under construction: paths with the rights granted beneath them, the TCP ports that
    may be connected to (when the network is handled), and the scopes. `restrict` applies it to the calling
    process; the file descriptor stays open in tether until `close`."""

    def __init__(self, *, network: bool, filesystem: bool = True, scoped: bool = True) -> None:
        self.version = abi()
        if self.version < 1:
            raise OSError("Landlock is not available on this kernel")
        if not filesystem and self.version < 4:
            raise OSError(f"Landlock ABI {self.version} has no network rules (4 is needed)")
        # a ruleset that handles no filesystem right leaves mounts allowed (bubblewrap runs under it)
        self.fs = fs_rights(self.version) if filesystem else 0
        net = NET_BIND_TCP | NET_CONNECT_TCP if network and self.version >= 4 else 0
        scopes = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if scoped and self.version >= 6 else 0
        attr = _RulesetAttr(self.fs, net, scopes)
        size = ctypes.sizeof(_RulesetAttr) if self.version >= 4 else 8  # older kernels know the first field
        fd = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        self.fd = int(fd)
        self.handles_network = bool(net)

    def allow(self, path: str, rights: int) -> None:
        """Grant `rights` (masked to what this ABI handles) beneath `path`; a path that does not exist is
        skipped. Rights a file cannot have (making entries, reading a directory) are left off a file's rule."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                rights &= EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
            attr = _PathBeneath(rights & self.fs, fd)
            if _syscall(_ADD_RULE, self.fd, _RULE_PATH_BENEATH, ctypes.byref(attr), ctypes.c_uint32(0)) < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
        finally:
            os.close(fd)

    def allow_ports(self, ports: Iterable[int]) -> None:
        """Let TCP connections reach `ports` (any host: Landlock does not see addresses)."""
        if not self.handles_network:
            return
        for port in ports:
            attr = _NetPort(NET_CONNECT_TCP, port)
            if _syscall(_ADD_RULE, self.fd, _RULE_NET_PORT, ctypes.byref(attr), ctypes.c_uint32(0)) < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"landlock_add_rule port {port}: {os.strerror(err)}")

    def restrict(self) -> None:
        """Apply the ruleset to this process (and what it starts from now on): for the child, after fork."""
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if _syscall(_RESTRICT_SELF, self.fd, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
