"""Confinement that the RLM REPL process applies to itself before it runs any model-written code: resource
limits, private user, network and mount namespaces with a size-capped tmpfs as its work directory, Landlock
(filesystem, TCP, signals), a seccomp filter, and a Python audit hook. Standard library only, because the
REPL runs as `python -I -S` and cannot import tether.

Every layer is tried on its own and reported (`Layer`), so a kernel that refuses one still gets the others.
The kernel layers hold even against code that reaches ctypes or raw syscalls; the audit hook is defence in
depth that gives clear errors, and the only file-write guard where Landlock is missing.
"""

from __future__ import annotations

import errno
import os
import platform
import resource
import struct
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Policy:
    """What the REPL may use. Sizes in bytes, times in CPU seconds; `read_roots` are extra places it may
    read besides its work directory and the Python standard library. `file_bytes` caps one file,
    `disk_bytes` the whole work directory (where a private tmpfs can be mounted)."""

    workdir: str
    cpu_seconds: int = 120
    memory_bytes: int = 1 << 30
    file_bytes: int = 64 << 20
    disk_bytes: int = 128 << 20
    open_files: int = 64
    threads: int = 16
    read_roots: tuple[str, ...] = ()
    audit_hook: bool = True


@dataclass(frozen=True)
class Layer:
    name: str
    active: bool
    detail: str


# Library and data directories the interpreter may need to read after confinement: the shared objects
# behind stdlib extension modules (libffi, libz, libssl...), the loader cache and the zone database.
SYSTEM_READ_ROOTS: tuple[str, ...] = (
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local/lib",
    "/usr/share/zoneinfo",
    "/etc/ld.so.cache",
    "/etc/localtime",
)


def confine(policy: Policy) -> list[Layer]:
    """Apply every layer this kernel allows, in the order that keeps each one possible, and say which hold.

    Namespaces come before Landlock and seccomp (unshare is one of the calls the filter refuses), and
    ctypes is dropped from the module table at the end so model code cannot simply import it again.
    """
    layers = [_rlimits(policy)]
    libc = _libc()
    if libc is None:
        reason = "not Linux" if sys.platform != "linux" else "libc not loadable"
        for name in ("namespaces", "tmpfs", "landlock", "seccomp"):
            layers.append(Layer(name, False, reason))
    else:
        namespaces, user, mount = _namespaces(libc)
        layers.append(namespaces)
        layers.append(_tmpfs(libc, policy) if mount else Layer("tmpfs", False, "no private mount namespace"))
        if user:
            # RLIMIT_NPROC counts the tasks of this user; in a fresh user namespace that is only us, so it
            # caps our own threads without touching the rest of the user's processes.
            resource.setrlimit(resource.RLIMIT_NPROC, (policy.threads, policy.threads))
        no_new_privs = libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
        layers.append(_landlock(libc, policy) if no_new_privs else Layer("landlock", False, "no_new_privs refused"))
        layers.append(_seccomp(libc) if no_new_privs else Layer("seccomp", False, "no_new_privs refused"))
    if policy.audit_hook:
        install_audit_hook(policy.workdir)
        layers.append(
            Layer("audit_hook", True, "no sockets, subprocesses, signals, ctypes, writes outside the work directory")
        )
    else:
        layers.append(Layer("audit_hook", False, "turned off by the caller"))
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith("ctypes.") or m == "_ctypes"]:
        del sys.modules[name]
    return layers


# --- resource limits ------------------------------------------------------------------------------------


def _rlimits(policy: Policy) -> Layer:
    # CPU: the soft limit is moved per block by the REPL (SIGXCPU interrupts the block); the hard limit is
    # the total for the process, past which the kernel kills it.
    limits = {
        resource.RLIMIT_CPU: (policy.cpu_seconds, policy.cpu_seconds + 1),
        resource.RLIMIT_AS: (policy.memory_bytes, policy.memory_bytes),
        resource.RLIMIT_FSIZE: (policy.file_bytes, policy.file_bytes),
        resource.RLIMIT_NOFILE: (policy.open_files, policy.open_files),
        resource.RLIMIT_CORE: (0, 0),
    }
    failed = []
    for which, value in limits.items():
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError) as exc:
            failed.append(f"{which}: {exc}")
    detail = (
        f"cpu {policy.cpu_seconds}s, address space {policy.memory_bytes >> 20} MiB, "
        f"file size {policy.file_bytes >> 20} MiB, {policy.open_files} open files"
    )
    if failed:
        return Layer("rlimits", False, detail + "; refused: " + "; ".join(failed))
    return Layer("rlimits", True, detail)


# --- namespaces -----------------------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_PR_SET_NO_NEW_PRIVS = 38


def _libc() -> Any:
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return libc
    except OSError:
        return None


def _errno_name() -> str:
    import ctypes

    code = ctypes.get_errno()
    return errno.errorcode.get(code, str(code))


def _namespaces(libc: Any) -> tuple[Layer, bool, bool]:
    """New network and mount namespaces, inside a new user namespace when we are not privileged. The
    network namespace has only a loopback device, and it is down: nothing is reachable, not even the host's
    127.0.0.1. Returns the layer, and whether the user and mount namespaces are ours."""
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET | _CLONE_NEWNS) == 0:
        try:
            # Map our own ids to themselves (all an unprivileged process may map): files we create on the
            # scratch tmpfs need an owner that exists in this namespace.
            _write_proc("setgroups", "deny")
            _write_proc("uid_map", f"{uid} {uid} 1")
            _write_proc("gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            return Layer("namespaces", True, f"user + network + mount (id map refused: {exc.strerror})"), True, False
        return Layer("namespaces", True, "user + network + mount: no network interface is up"), True, True
    first = _errno_name()
    if libc.unshare(_CLONE_NEWNET | _CLONE_NEWNS) == 0:
        return Layer("namespaces", True, f"network + mount (user namespace refused: {first})"), False, True
    if libc.unshare(_CLONE_NEWNET) == 0:
        return Layer("namespaces", True, f"network only (user namespace refused: {first})"), False, False
    return Layer("namespaces", False, f"unshare refused: {first}, then {_errno_name()}"), False, False


def _write_proc(name: str, text: str) -> None:
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)


def _tmpfs(libc: Any, policy: Policy) -> Layer:
    """A private tmpfs of `disk_bytes` over the work directory: the REPL's writes go to memory it cannot
    grow past the cap, vanish with the process, and are invisible to every other process."""
    import ctypes

    # Mounts copied from the parent namespace may be shared; make them private first, or our tmpfs would
    # propagate back to the host.
    if libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
        return Layer("tmpfs", False, f"could not make mounts private: {_errno_name()}")
    options = f"size={policy.disk_bytes},mode=0700".encode()
    flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if libc.mount(b"tmpfs", os.fsencode(policy.workdir), b"tmpfs", flags, options) != 0:
        return Layer("tmpfs", False, f"mount refused: {_errno_name()}")
    os.chdir(policy.workdir)  # the old cwd is the directory underneath the mount
    return Layer("tmpfs", True, f"work directory is a private {policy.disk_bytes >> 20} MiB tmpfs")


# --- Landlock -------------------------------------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET = 444  # same number on every architecture (asm-generic)
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1

# Rights that make sense on a single file (a rule on a file with directory rights is refused).
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV


def _landlock(libc: Any, policy: Policy) -> Layer:
    """Everything Landlock can restrict is restricted, then granted back only where needed: read beneath
    the standard library and system library directories, read and write beneath the work directory, and
    execute nowhere. With ABI 4 TCP bind/connect are refused; with ABI 6 abstract unix sockets and signals
    to processes outside the sandbox are too."""
    import ctypes

    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 0:
        return Layer("landlock", False, f"not available: {_errno_name()}")

    handled_fs = (1 << 13) - 1
    if abi >= 2:
        handled_fs |= _FS_REFER
    if abi >= 3:
        handled_fs |= _FS_TRUNCATE
    if abi >= 5:
        handled_fs |= _FS_IOCTL_DEV
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0
    # struct landlock_ruleset_attr grew a u64 field at ABI 4 and at ABI 6; pass the size this kernel knows.
    attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return Layer("landlock", False, f"create_ruleset refused: {_errno_name()}")

    read = _FS_READ_FILE | _FS_READ_DIR
    write = (
        _FS_WRITE_FILE
        | _FS_REMOVE_DIR
        | _FS_REMOVE_FILE
        | _FS_MAKE_DIR
        | _FS_MAKE_REG
        | _FS_MAKE_SYM
        | _FS_MAKE_FIFO
        | _FS_MAKE_SOCK
        | _FS_REFER
        | _FS_TRUNCATE
    )
    grants: list[tuple[str, int]] = [(policy.workdir, read | write), ("/dev/null", _FS_READ_FILE | _FS_WRITE_FILE)]
    grants += [(root, read) for root in _stdlib_roots()]
    grants += [(root, read) for root in (*SYSTEM_READ_ROOTS, *policy.read_roots)]
    try:
        for path, rights in grants:
            _add_path_rule(libc, ruleset, path, rights & handled_fs)
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return Layer("landlock", False, f"restrict_self refused: {_errno_name()}")
    except OSError as exc:
        return Layer("landlock", False, f"rule refused: {exc}")
    finally:
        os.close(ruleset)
    detail = f"ABI {abi}: writes only in the work directory, reads only of the stdlib and system libraries, no exec"
    if handled_net:
        detail += ", no TCP bind/connect"
    if scoped:
        detail += ", no signals or abstract sockets outside"
    return Layer("landlock", True, detail)


def _stdlib_roots() -> list[str]:
    # Under -I -S, sys.path is exactly where imports come from: the stdlib zip, the stdlib, lib-dynload.
    return [p for p in sys.path if p and os.path.exists(p)]


def _add_path_rule(libc: Any, ruleset: int, path: str, rights: int) -> None:
    import ctypes

    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a root that does not exist here needs no rule
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        # struct landlock_path_beneath_attr is packed: u64 allowed_access, s32 parent_fd.
        attr = struct.pack("=Qi", rights, fd)
        if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), attr, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path!r}) failed")
    finally:
        os.close(fd)


# --- seccomp --------------------------------------------------------------------------------------------

_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_CLONE_THREAD = 0x00010000

# The syscalls the filter handles, by architecture. clone and clone3 are special-cased (below); every other
# one is refused with EPERM: sockets of every family (including unix sockets on the host's filesystem, which
# no namespace hides), exec and fork, new namespaces and mounts, tracing and reading other processes'
# memory or descriptors, kernel keyrings, bpf, and io_uring (its operations would not pass this filter).
_X86_64 = """
    socket=41 connect=42 accept=43 bind=49 listen=50 socketpair=53 clone=56 fork=57 vfork=58 execve=59
    ptrace=101 pivot_root=155 chroot=161 mount=165 umount2=166 add_key=248 request_key=249 keyctl=250
    unshare=272 accept4=288 perf_event_open=298 setns=308 process_vm_readv=310 process_vm_writev=311 bpf=321
    execveat=322 userfaultfd=323 io_uring_setup=425 io_uring_enter=426 io_uring_register=427 clone3=435
    pidfd_getfd=438
"""
_AARCH64 = """
    umount2=39 mount=40 pivot_root=41 chroot=51 unshare=97 ptrace=117 socket=198 socketpair=199 bind=200
    listen=201 accept=202 connect=203 add_key=217 request_key=218 keyctl=219 clone=220 execve=221
    perf_event_open=241 accept4=242 setns=268 process_vm_readv=270 process_vm_writev=271 bpf=280
    execveat=281 userfaultfd=282 io_uring_setup=425 io_uring_enter=426 io_uring_register=427 clone3=435
    pidfd_getfd=438
"""


def _table(spec: str) -> dict[str, int]:
    return {name: int(number) for name, _, number in (item.partition("=") for item in spec.split())}


_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, _table(_X86_64)),  # AUDIT_ARCH_X86_64
    "aarch64": (0xC00000B7, _table(_AARCH64)),  # AUDIT_ARCH_AARCH64
}


def seccomp_program(machine: str) -> bytes | None:
    """The BPF filter for `machine` (``platform.machine()``), or None where we know no syscall table.

    clone is allowed only with CLONE_THREAD (threads yes, processes no); clone3 answers ENOSYS because its
    flags sit behind a pointer a filter cannot read, and libc then falls back to clone.
    """
    if machine not in _ARCHES:
        return None
    arch, numbers = _ARCHES[machine]
    ins: list[tuple[int, int, int, int]] = []

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> None:
        ins.append((code, jt, jf, k))

    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    op(ld, 4)  # seccomp_data.arch
    op(jeq, arch, jt=1)
    op(ret, _RET_KILL_PROCESS)  # a syscall of another ABI (int 0x80, x32) is an escape attempt
    op(ld, 0)  # seccomp_data.nr
    if machine == "x86_64":
        op(jge, 0x40000000, jf=1)  # x32 syscall numbers
        op(ret, _RET_ERRNO | errno.EPERM)
    for name, number in numbers.items():
        if name not in ("clone", "clone3"):
            op(jeq, number, jf=1)
            op(ret, _RET_ERRNO | errno.EPERM)
    op(jeq, numbers["clone3"], jf=1)
    op(ret, _RET_ERRNO | errno.ENOSYS)
    op(jeq, numbers["clone"], jf=3)
    op(ld, 16)  # low half of args[0]: the clone flags (little-endian)
    op(jset, _CLONE_THREAD, jt=1)
    op(ret, _RET_ERRNO | errno.EPERM)
    op(ret, _RET_ALLOW)
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in ins)


def _seccomp(libc: Any) -> Layer:
    import ctypes

    program = seccomp_program(platform.machine())
    if program is None:
        return Layer("seccomp", False, f"no syscall table for {platform.machine()}")
    buffer = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return Layer("seccomp", False, f"filter refused: {_errno_name()}")
    return Layer("seccomp", True, "no sockets, exec, fork, namespaces, ptrace or io_uring")


# --- audit hook -----------------------------------------------------------------------------------------

_REFUSED_EVENTS = frozenset(
    {
        "socket.__new__",
        "socket.bind",
        "socket.connect",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.dlsym/handle",
        "ctypes.call_function",
        "ctypes.cdata",
    }
)
_REFUSED_IMPORTS = frozenset({"ctypes", "_ctypes"})
# Events whose listed arguments are paths the call creates, changes or removes.
_PATH_EVENTS: dict[str, tuple[int, ...]] = {
    "os.mkdir": (0,),
    "os.rmdir": (0,),
    "os.remove": (0,),
    "os.rename": (0, 1),
    "os.symlink": (1,),
    "os.link": (1,),
    "os.truncate": (0,),
    "os.utime": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.chflags": (0,),
    "os.setxattr": (0,),
    "os.removexattr": (0,),
    "shutil.rmtree": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def install_audit_hook(workdir: str) -> None:
    """Refuse, at the Python level, what the sandbox must not do. Audit hooks cannot be removed, but code
    that reaches raw syscalls can go around them: that is what the kernel layers are for."""
    root = os.path.realpath(workdir)

    def inside(path: Any) -> bool:
        if isinstance(path, int):
            return True  # an already-open descriptor: the kernel checked it when it was opened
        try:
            resolved = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return resolved == root or resolved.startswith(root + os.sep)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes and not inside(path):
                raise PermissionError(errno.EACCES, f"sandbox: no writes outside the work directory: {path!r}")
        elif event in _PATH_EVENTS:
            for index in _PATH_EVENTS[event]:
                if index < len(args) and not inside(args[index]):
                    raise PermissionError(errno.EACCES, f"sandbox: {event} outside the work directory: {args[index]!r}")
        elif event == "import":
            if args[0].partition(".")[0] in _REFUSED_IMPORTS:
                raise ImportError(f"sandbox: module {args[0]!r} is not available here")
        elif event in _REFUSED_EVENTS:
            raise PermissionError(errno.EPERM, f"sandbox: {event} is not allowed")

    sys.addaudithook(hook)
