"""The OS sandbox every command tether runs goes through: a boundary drawn by the kernel, which no command
line, however it is written, can talk its way past.

Modes: ``workspace-write`` (the default): the workspace and a private temporary directory are writable, with
tether's own files in it read-only (`PROTECTED`: ``.git``, ``.tether``, ``.mcp.json``, skills folders,
instruction files) and nothing else; ``read-only``: only the private temporary directory is; ``off``: the
command runs with the user's full reach. The network is off inside unless the policy says ``on`` or names
the hosts a command may reach (through a proxy tether runs, `netproxy`). The command never sees tether's own
process: not its environment, not its memory, not its signals.

Two mechanisms, chosen in this order by ``auto``:

- **bubblewrap** (``bwrap``): a mount namespace (``/`` read-only, the workspace bound writable, the protected
  paths bound read-only over it, a private ``/tmp``), a PID namespace (tether's processes are not in the
  command's ``/proc``), a network namespace when the network is off, ``--die-with-parent``. It can say
  everything above. Background jobs end with the command (its PID namespace ends with it).
- **Landlock**: the kernel's own allow-lists, applied between fork and exec (`landlock`). Writes are
  confined to the workspace and the private temporary directory, TCP is refused, signals cannot leave the
  sandbox, and ``/proc`` cannot be read at all (Landlock would not keep tether's own environment there from
  the command: tools that need ``/proc``, such as ``ps``, fail). It cannot make part of a writable tree
  read-only (the protected paths inside the workspace stay writable; the project configuration's
  confirmation is then what stands) and it does not see UDP. Background jobs outlive the command as without
  a sandbox.

Where neither can be had, `Sandbox.unavailable` says why: the runtime then asks a person before every
command instead of running it unconfined (`Rules`' ``unconfined``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from ..errors import InvalidInput
from ..paths import config_path, tether_home
from . import landlock, seccomp

SandboxMode = Literal["read-only", "workspace-write", "off"]
SANDBOX_MODES: tuple[str, ...] = get_args(SandboxMode)
MechanismChoice = Literal["auto", "bwrap", "landlock"]
MECHANISMS: tuple[str, ...] = get_args(MechanismChoice)

PROTECTED: tuple[str, ...] = (
    ".git",
    ".tether",
    ".mcp.json",
    ".agents",
    ".claude",
    ".codex",
    ".opencode",
    "AGENTS.md",
    "CLAUDE.md",
)
"""Paths of a workspace a sandboxed command may read but not write: the repository's own data (hooks and
config run code at the next `git` call), tether's and the other agents' configuration, MCP servers, skills
and instructions. Writing them is the user's, or a tool call a person approved."""

_REFUSALS = re.compile(
    r"Read-only file system|Permission denied|Operation not permitted|Network is unreachable|"
    r"Temporary failure in name resolution|Could not resolve host|Name or service not known|"
    r"No address associated with hostname|403 Forbidden \(tether sandbox\)|tether sandbox:",
    re.IGNORECASE,
)
_OFFLINE = re.compile(r"Connection refused|Failed to connect|Couldn't connect|Errno 111", re.IGNORECASE)
"""With the network off (or only through the proxy), a refused connection is the sandbox's doing too: inside,
nothing listens."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What the sandbox allows: the mode, the network (``"off"``, ``"on"``, or the hosts a command may
    reach, ``host`` or ``host:port``, ``*.example.com``), more writable paths, and the mechanism."""

    mode: SandboxMode = "workspace-write"
    network: str | tuple[str, ...] = "off"
    writable: tuple[str, ...] = ()
    mechanism: MechanismChoice = "auto"

    def __post_init__(self) -> None:
        if self.mode not in SANDBOX_MODES:
            raise InvalidInput(f"unknown sandbox mode {self.mode!r}; the modes are: {', '.join(SANDBOX_MODES)}")
        if self.mechanism not in MECHANISMS:
            raise InvalidInput(f"unknown sandbox mechanism {self.mechanism!r}; choose {', '.join(MECHANISMS)}")
        if isinstance(self.network, str) and self.network not in ("off", "on"):
            raise InvalidInput(f'sandbox network must be "off", "on" or a list of hosts, not {self.network!r}')

    @property
    def network_label(self) -> str:
        return self.network if isinstance(self.network, str) else "only " + ", ".join(self.network)


@dataclass(frozen=True)
class Support:
    """Whether a mechanism works here: its name and a line about it, or None and why not."""

    mechanism: Literal["bwrap", "landlock"] | None
    detail: str


@cache
def bwrap_support() -> Support:
    """bubblewrap, found on PATH and tried once (a kernel without user namespaces, or a container that
    forbids mounts, makes it fail: then it is not used)."""
    path = shutil.which("bwrap")
    if path is None:
        return Support(None, "bubblewrap (bwrap) is not installed")
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net"]
    try:
        done = subprocess.run([*probe, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return Support(None, f"bubblewrap does not start here: {exc}")
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        return Support(None, f"bubblewrap does not work here: {why[-1] if why else done.returncode}")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        version = b""  # it ran the probe: only the line about it is lost
    return Support("bwrap", version.decode(errors="replace").strip() or "bubblewrap")


@cache
def landlock_support() -> Support:
    version = landlock.abi()
    if version < 1:
        return Support(None, "Landlock is not offered by this kernel (Linux 5.13+ with landlock in the LSM list)")
    return Support("landlock", f"Landlock ABI {version}")


def landlock_gap(version: int, *, network_confined: bool) -> str | None:
    """What a Landlock of ABI `version` cannot hold of a sandbox, or None: truncating files outside the
    workspace needs ABI 3 (Linux 6.2), refusing TCP needs ABI 4 (Linux 6.7)."""
    if version < 3:
        return f"(ABI {version}) cannot keep files outside the workspace from being truncated: ABI 3 is needed"
    if network_confined and version < 4:
        return f"(ABI {version}) cannot turn the network off: ABI 4 (Linux 6.7) is needed"
    return None


def support(choice: MechanismChoice = "auto") -> Support:
    """The mechanism `choice` gets here: ``auto`` takes bubblewrap, else Landlock."""
    if choice == "bwrap":
        return bwrap_support()
    if choice == "landlock":
        return landlock_support()
    found = bwrap_support()
    if found.mechanism is not None:
        return found
    fallback = landlock_support()
    if fallback.mechanism is not None:
        return fallback
    return Support(None, f"{found.detail}, and {fallback.detail[0].lower()}{fallback.detail[1:]}")


@dataclass
class Prepared:
    """A command as the sandbox runs it: the program and arguments, what runs in the child before exec
    (Landlock), the environment, and what to journal about it."""

    argv: list[str]
    env: dict[str, str]
    preexec: Callable[[], None] | None = None
    close: Callable[[], None] = lambda: None
    note: dict[str, Any] = field(default_factory=dict)
    pass_fds: tuple[int, ...] = ()
    """Descriptors the child keeps (bubblewrap's seccomp program)."""


@dataclass
class Sandbox:
    """A run's sandbox: the policy and the mechanism it got here. One per run; its private temporary
    directory lives as long as it (removed when it is collected, or at exit)."""

    policy: SandboxPolicy = field(default_factory=SandboxPolicy)
    found: Support | None = None
    proxy_port: int | None = None
    """The loopback port of the allow-list proxy (`netproxy`) while one runs for this sandbox."""
    _tmp: str | None = field(default=None, init=False, repr=False)
    _rulesets: dict[tuple[str, int | None], landlock.Ruleset] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.found is None:
            self.found = (
                Support(None, "the sandbox is off") if self.policy.mode == "off" else support(self.policy.mechanism)
            )
        if self.found.mechanism == "landlock":
            gap = landlock_gap(landlock.abi(), network_confined=self.policy.network != "on")
            if gap is not None:  # a Landlock too old to hold what the policy says is no sandbox for it
                self.found = Support(None, f"{self.found.detail} {gap}")

    @property
    def mechanism(self) -> str | None:
        return None if self.policy.mode == "off" or self.found is None else self.found.mechanism

    @property
    def unavailable(self) -> str | None:
        """Why commands cannot be confined though the policy asks for it; None when they can (or it is off)."""
        if self.policy.mode == "off" or self.mechanism is not None:
            return None
        assert self.found is not None
        return self.found.detail

    def describe(self) -> dict[str, Any]:
        """What a call's result records about the sandbox it ran in."""
        out: dict[str, Any] = {"mode": self.policy.mode}
        if self.policy.mode != "off":
            out["mechanism"] = self.mechanism or "none"
            out["network"] = self.policy.network_label
        return out

    def summary(self) -> str:
        """One line: the mode, the mechanism and the network, for `tether doctor` and the tool description."""
        if self.policy.mode == "off":
            return "off: commands run with your full permissions"
        if self.mechanism is None:
            return f"{self.policy.mode} wanted, but no sandbox here ({self.unavailable}): every command asks"
        assert self.found is not None
        line = f"{self.policy.mode} with {self.found.detail}, network {self.policy.network_label}"
        if self.mechanism == "landlock" and landlock.abi() < 6:
            line += " (signals to tether are not refused: Landlock ABI 6 is needed)"
        return line

    def private_tmp(self) -> str:
        if self._tmp is None or not os.path.isdir(self._tmp):
            self._tmp = tempfile.mkdtemp(prefix="tether-sandbox-")
            weakref.finalize(self, shutil.rmtree, self._tmp, True)
        return self._tmp

    def prepare(self, argv: Sequence[str], *, workspace: Path, env: dict[str, str]) -> Prepared:
        """`argv` wrapped for the sandbox, run in `workspace` with `env`. Without a mechanism (off, or none
        here: the caller has asked a person) it runs as it is."""
        mechanism = self.mechanism
        if mechanism is None:
            return Prepared(list(argv), env, note=self.describe())
        env = {**env, "TMPDIR": "/tmp" if mechanism == "bwrap" else self.private_tmp()}
        if self.proxy_port is not None:
            proxy = f"http://127.0.0.1:{self.proxy_port}"
            env.update({k: proxy for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")})
            env.update({"ALL_PROXY": proxy, "NO_PROXY": "", "no_proxy": ""})
        confined = self.policy.network != "on"
        code = seccomp.program(confined)
        if mechanism == "bwrap":
            fds: tuple[int, ...] = (seccomp.memfd(code),) if code is not None else ()
            argv = self._bwrap(argv, workspace, seccomp_fd=fds[0] if fds else None)

            def close() -> None:
                for fd in fds:
                    os.close(fd)

            if self.proxy_port is None:
                return Prepared(argv, env, close=close, note=self.describe(), pass_fds=fds)
            # hosts by name: bubblewrap keeps the host's network, Landlock (network rules only, which leave
            # bubblewrap free to mount) lets TCP reach nothing but the proxy, and the filter refuses the rest
            net = landlock.Ruleset(network=True, filesystem=False)
            net.allow_ports([self.proxy_port])

            def close_all() -> None:
                close()
                net.close()

            return Prepared(argv, env, net.restrict, close_all, self.describe(), fds)
        key = (str(workspace), self.proxy_port)
        ruleset = self._rulesets.get(key)
        if ruleset is None:  # one per workspace, kept: the same rules for every command there
            ruleset = self._rulesets[key] = self._landlock(workspace)
            weakref.finalize(self, ruleset.close)
        filter_ = seccomp.Installer(code) if code is not None else None

        def confine() -> None:
            ruleset.restrict()
            if filter_ is not None:
                filter_.install()

        return Prepared(list(argv), env, preexec=confine, note=self.describe())

    def writable_paths(self, workspace: Path) -> list[Path]:
        """The trees a command may write (besides its private temporary directory)."""
        out = [workspace] if self.policy.mode == "workspace-write" else []
        for given in self.policy.writable:
            path = Path(os.path.expanduser(given))
            out.append(path if path.is_absolute() else workspace / path)
        return [p for p in out if p.exists()]

    def protected_paths(self, workspace: Path) -> list[Path]:
        """Existing paths inside a writable tree that stay read-only: `PROTECTED` in the workspace, and
        tether's own home and configuration wherever a writable tree holds them."""
        writable = self.writable_paths(workspace)
        found = [workspace / name for name in PROTECTED]
        found += [tether_home(), config_path().parent]
        # a protected name that is a link (AGENTS.md -> docs/guide.md, .git -> elsewhere): what it leads to
        found += [path.resolve() for path in found if path.is_symlink()]
        out: list[Path] = []
        for path in found:
            inside = any(path.is_relative_to(w) for w in writable)
            if inside and (path.exists() or path.is_symlink()) and path not in out:
                out.append(path)
        return out

    def _bwrap(self, argv: Sequence[str], workspace: Path, *, seccomp_fd: int | None = None) -> list[str]:
        assert self.found is not None
        args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if self.policy.network != "on" and self.proxy_port is None:
            args.append("--unshare-net")
        args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm"]
        args += ["--bind", self.private_tmp(), "/tmp"]
        for path in _programs_under_tmp(argv):  # seen again, read-only: a virtualenv or a checkout in /tmp
            args += ["--ro-bind", path, path]
        if self.policy.mode == "read-only":  # seen again, should the private /tmp have covered it
            args += ["--ro-bind", str(workspace), str(workspace)]
        for writable in self.writable_paths(workspace):
            args += ["--bind", str(writable), str(writable)]
        for protected in self.protected_paths(workspace):
            # a symlink is bound as what it points to: bind the link's own place read-only only when it is
            # a real file or directory (a link inside the workspace leads to a read-only place or another
            # protected one)
            if not protected.is_symlink():
                args += ["--ro-bind", str(protected), str(protected)]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        args += ["--chdir", str(workspace), "--", *argv]
        return args

    def _landlock(self, workspace: Path) -> landlock.Ruleset:
        network = self.policy.network != "on"
        ruleset = landlock.Ruleset(network=network)
        try:
            # everything may be read but /proc: Landlock does not keep a command from reading the
            # environment of tether's own process there (its provider key), so it gets no /proc at all
            for name in os.listdir("/"):
                if name != "proc":
                    ruleset.allow(os.path.join("/", name), landlock.READ)
            device = landlock.READ_FILE | landlock.WRITE_FILE | landlock.IOCTL_DEV
            for dev in ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts"):
                ruleset.allow(dev, device | landlock.READ_DIR)
            everything = landlock.fs_rights(ruleset.version)
            ruleset.allow(self.private_tmp(), everything)
            for path in self.writable_paths(workspace):
                ruleset.allow(str(path), everything)
            if self.proxy_port is not None:
                ruleset.allow_ports([self.proxy_port])
        except BaseException:
            ruleset.close()
            raise
        return ruleset


def _programs_under_tmp(argv: Sequence[str]) -> list[str]:
    """The places programs come from that the private /tmp would hide: this Python's prefixes, the
    directories on PATH, and those of the program and of the files its arguments name (an MCP server's
    script), when they are in the real /tmp."""
    found: list[str] = []
    candidates = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    candidates += os.environ.get("PATH", "").split(os.pathsep)
    for arg in argv:
        if os.path.isabs(arg) and os.path.exists(arg):
            real = os.path.realpath(arg)
            candidates.append(real if os.path.isdir(real) else os.path.dirname(real))
    for path in candidates:
        real = os.path.realpath(path) if path else ""
        if real.startswith("/tmp/") and os.path.isdir(real) and not any(real.startswith(f + "/") for f in found):
            found = [f for f in found if not f.startswith(real + "/")] + [real]
    return found


def present(workspace: Path) -> frozenset[str]:
    """The `PROTECTED` names at the top of `workspace` now (to tell which ones a command made)."""
    return frozenset(name for name in PROTECTED if os.path.lexists(workspace / name))


def refusals(output: str, limit: int = 5, *, offline: bool = False) -> list[str]:
    """Lines of a command's output that look like the sandbox refusing something (a write to a read-only
    place, a network call; with `offline`, any refused connection), at most `limit`, each cut to 200
    characters."""
    out: list[str] = []
    for line in output.splitlines():
        if _REFUSALS.search(line) or (offline and _OFFLINE.search(line)):
            out.append(line.strip()[:200])
            if len(out) >= limit:
                break
    return out


def explain(sandbox: Sandbox, workspace: Path) -> str:
    """What the sandbox refuses, for the model, once a command met it."""
    policy = sandbox.policy
    if policy.mode == "read-only":
        where = "nothing outside its private /tmp may be written"
    else:
        where = f"only {workspace} and a private /tmp may be written (not {', '.join(PROTECTED[:3])} and the like)"
    net = {"off": "the network is off", "on": "the network is on"}.get(
        policy.network if isinstance(policy.network, str) else "", f"the network reaches {policy.network_label}"
    )
    return (
        f"[sandbox {policy.mode} ({sandbox.mechanism}): {where}; {net}. The failures above are the sandbox's "
        "refusals, not a fault to retry; ask the user if the work needs more]"
    )
