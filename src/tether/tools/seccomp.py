"""The sandbox's socket filter: a seccomp program (classic BPF, built here byte by byte) that refuses to
make the sockets neither bubblewrap's namespaces nor Landlock can confine:

- UNIX sockets (``socket(AF_UNIX, ...)``): a path-named one is reached by name, and a read-only filesystem
  does not stop a ``connect`` to the user's tmux server, D-Bus, ``docker.sock`` or an ssh agent, each of
  which runs what it is told outside the sandbox. (``socketpair``, which links two ends of the same
  process tree, stays allowed: asyncio and many runtimes need it.)
- with the network confined (off, or only through the proxy): every IPv4/IPv6 socket but TCP (so no UDP,
  which Landlock does not see, and no raw sockets), and packet sockets;
- ``io_uring_setup``, whose ring can make sockets without the ``socket`` call.

A refused call fails with ``EACCES``. x86-64 and arm64 only; elsewhere `program` is None and the sandbox runs
without it. The same program serves bubblewrap (``--seccomp FD``) and Landlock (installed between fork and
exec, `install`)."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from functools import cache

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_AND_K = 0x54
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_AF_UNIX, _AF_INET, _AF_INET6, _AF_PACKET = 1, 2, 10, 17
_SOCK_STREAM, _SOCK_TYPE_MASK = 1, 0xF

# (audit arch, socket, io_uring_setup, whether numbers at or above 0x40000000 are another ABI (x32))
_ARCHES = {
    "x86_64": (0xC000003E, 41, 425, True),
    "aarch64": (0xC00000B7, 198, 425, False),
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


@cache
def program(network_confined: bool) -> bytes | None:
    """The filter for this machine's architecture, or None where it has none."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit, socket_nr, uring_nr, x32 = arch
    # instructions (code, k, jump-if-true label, jump-if-false label) and, between them, labels
    code: list[tuple[int, int, str | None, str | None] | str] = [
        (_LD_W_ABS, 4, None, None),  # arch
        (_JEQ_K, audit, None, "other_abi"),
        (_LD_W_ABS, 0, None, None),  # syscall number
    ]
    if x32:
        code.append((_JGE_K, 0x40000000, "other_abi", None))
    code += [
        (_JEQ_K, uring_nr, "refuse", None),
        (_JEQ_K, socket_nr, None, "allow"),
        (_LD_W_ABS, 16, None, None),  # args[0], its low half: the family
        (_JEQ_K, _AF_UNIX, "refuse", None),
    ]
    if network_confined:
        code += [
            (_JEQ_K, _AF_PACKET, "refuse", None),
            (_JEQ_K, _AF_INET, "check_type", None),
            (_JEQ_K, _AF_INET6, "check_type", "allow"),
            "check_type",
            (_LD_W_ABS, 24, None, None),  # args[1]: the type, with SOCK_NONBLOCK / SOCK_CLOEXEC
            (_AND_K, _SOCK_TYPE_MASK, None, None),
            (_JEQ_K, _SOCK_STREAM, "allow", "refuse"),
        ]
    code += [
        "allow",
        (_RET_K, _RET_ALLOW, None, None),
        "refuse",
        (_RET_K, _RET_ERRNO | errno.EACCES, None, None),
        "other_abi",
        (_RET_K, _RET_ERRNO | errno.ENOSYS, None, None),
    ]
    labels: dict[str, int] = {}
    insns: list[tuple[int, int, str | None, str | None]] = []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)
    out = b""
    for i, (op, k, jt, jf) in enumerate(insns):
        out += _insn(op, k, labels[jt] - i - 1 if jt else 0, labels[jf] - i - 1 if jf else 0)
    return out


class _Filter(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


class Installer:
    """Installs one program in the calling process (for the child, between fork and exec): everything it
    needs is made here, in tether, so that the child only makes two system calls."""

    def __init__(self, code: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(code, len(code))
        self._prog = _Filter(len(code) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))

    def install(self) -> None:
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(self._prog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def memfd(code: bytes) -> int:
    """A file descriptor holding `code`, read from its start, for bubblewrap's ``--seccomp FD``."""
    fd = os.memfd_create("tether-seccomp", 0)  # inheritable is set by the caller's pass_fds
    os.write(fd, code)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
