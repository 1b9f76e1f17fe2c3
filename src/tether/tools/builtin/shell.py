"""The `bash` tool: one command in a fresh shell in the workspace, in the run's OS sandbox (`sandbox`), with
an allow-listed environment (`SecretPolicy.child_environment`), stdin closed, stdout and stderr merged and
streamed into a bounded spool, killed with its whole process group on timeout, abort or cancel, and by
`GroupWatcher` when tether itself dies.

What a command may write and reach is the sandbox's to say (the workspace, a private /tmp, no network, by
default); with the sandbox off (``--sandbox off``, or a program's own `ToolContext` without one) it runs with
every permission of the user running tether."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from typing import Any, ClassVar

from ...errors import ToolError
from ..base import ToolContext, ToolOutput
from ..netproxy import ensure_proxy
from ..output import MIN_LIMIT, OutputSpool
from ..sandbox import Prepared, explain, refusals

READ_BYTES = 64 * 1024
TERM_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL, for commands that clean up when asked."""
DRAIN_GRACE = 2.0
"""Seconds to keep reading after the shell exits, while background jobs still hold its output open."""
FOOTER_RESERVE = 300
"""Characters kept free for the status line, so the runner never has to cut a command's result again."""

# Pagers would wait for a terminal that is not there; git would ask for credentials on one.
_ENV_OVERRIDES = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}

log = logging.getLogger("tether.tools")


class BashTool:
    name = "bash"
    description = (
        "Run a shell command with bash in the workspace directory and return its output (stdout and stderr "
        "together) and exit code. stdin is closed, so interactive programs get end-of-file. timeout is in "
        "seconds (default 120, at most 600); on timeout the command and every process it started are killed. "
        "Long output is cut to its head and tail, and the whole of it (its start, if huge) saved for read. "
        "Background jobs (`cmd &`) keep running after the call, until tether exits: redirect their output "
        "(`cmd > log 2>&1 &`) or the call waits a moment for it. Environment variables that hold secrets (API "
        "keys, tokens, passwords) are not passed to the command; only ordinary variables (PATH, HOME, LANG, ...) "
        "are. Commands run in a sandbox unless the user turned it off: the result says what it allows."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line, run with bash -c"},
            "timeout": {"type": "number", "description": "Seconds before the command is killed (default 120)"},
            "description": {"type": "string", "description": "What the command does, in a few words (for people)"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    read_only = False
    bulk = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        command: str = args["command"]
        if not command.strip():
            raise ToolError("command is empty")
        given = args.get("timeout")
        timeout = float(given if given is not None else ctx.limits.bash_timeout)
        if not 0 < timeout <= ctx.limits.bash_max_timeout:
            raise ToolError(f"timeout must be more than 0 and at most {ctx.limits.bash_max_timeout:g} seconds")
        shell = shutil.which("bash") or "/bin/sh"
        env = {**ctx.secrets.child_environment(os.environ), **_ENV_OVERRIDES}
        sandbox = ctx.sandbox
        if sandbox is not None and sandbox.policy.network not in ("off", "on"):
            await ensure_proxy(sandbox)
        prepared = (
            sandbox.prepare([shell, "-c", command], workspace=ctx.workspace, env=env)
            if sandbox is not None
            else Prepared([shell, "-c", command], env)
        )
        spool = OutputSpool(
            limit=max(ctx.limits.output_chars - FOOTER_RESERVE, MIN_LIMIT),
            max_lines=max(ctx.limits.output_lines - 5, 10),
            max_bytes=ctx.limits.bash_output_bytes,
            redactor=ctx.redactor,
        )
        # Our own pipe rather than asyncio's: closing our end when we stop reading is then ours to do, so a
        # background job that still writes gets EPIPE instead of filling a pipe nobody reads.
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *prepared.argv,
                cwd=ctx.workspace,
                env=prepared.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                start_new_session=True,  # its own process group, so a kill reaches every child
                preexec_fn=prepared.preexec,
            )
        except (OSError, subprocess.SubprocessError) as e:
            os.close(read_fd)
            spool.close()
            raise ToolError(f"could not start {prepared.argv[0]}: {e}") from None
        finally:
            os.close(write_fd)
            prepared.close()
        WATCHER.add(proc.pid)
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport: asyncio.BaseTransport | None = None
        try:
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe
            )
            outcome = await _supervise(proc, reader, spool, timeout, ctx.abort)
        except BaseException:
            # cancelled (or a bug here), at any point after the start: leave no process behind
            _kill_group(proc, signal.SIGKILL)
            spool.close()
            raise
        finally:
            if transport is not None:
                transport.close()
            else:
                pipe.close()
            WATCHER.discard_if_empty(proc.pid)
        fitted = await spool.finish(ctx.store, ctx.session_id)
        body = fitted.content if fitted.content else "(no output)"
        footer, is_error = _footer(outcome, proc.returncode, timeout)
        metadata: dict[str, Any] = {
            "exit_code": proc.returncode if outcome in ("exited", "detached") else None,
            **fitted.metadata,
        }
        if sandbox is not None:
            metadata["sandbox"] = dict(prepared.note)
            offline = sandbox.policy.network != "on"
            refused = refusals(fitted.content, offline=offline) if sandbox.mechanism is not None else []
            if refused:
                metadata["sandbox"]["refused"] = refused
                footer += "\n" + explain(sandbox, ctx.workspace)
                is_error = is_error or proc.returncode != 0
        if outcome == "timeout":
            metadata["timed_out"] = True
        elif outcome == "aborted":
            metadata["aborted"] = True
        elif outcome == "detached":
            metadata["detached_output"] = True
        sep = "" if body.endswith("\n") else "\n"
        return ToolOutput(f"{body}{sep}{footer}", is_error=is_error, metadata=metadata)


async def _supervise(
    proc: asyncio.subprocess.Process,
    output: asyncio.StreamReader,
    spool: OutputSpool,
    timeout: float,
    abort: asyncio.Event,
) -> str:
    """Run the command to its end; returns how it ended: exited, detached, timeout or aborted."""

    async def pump() -> None:
        while chunk := await output.read(READ_BYTES):
            spool.write(chunk)

    pumping = asyncio.create_task(pump())
    waiting = asyncio.create_task(proc.wait())
    aborting = asyncio.create_task(abort.wait())
    try:
        done, _ = await asyncio.wait({waiting, aborting}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiting in done:
            outcome = "exited"
            # the shell is gone; its output ends when the last process holding the pipe closes it
            drained, _ = await asyncio.wait({pumping}, timeout=DRAIN_GRACE)
            if not drained:
                outcome = "detached"
        else:
            outcome = "aborted" if aborting in done else "timeout"
            _kill_group(proc, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiting), TERM_GRACE)
            _kill_group(proc, signal.SIGKILL)  # children that ignored SIGTERM, or outlived the shell
            await waiting
            await asyncio.wait({pumping}, timeout=DRAIN_GRACE)
        return outcome
    finally:
        for task in (pumping, aborting, waiting):
            if not task.done():
                task.cancel()
        await asyncio.gather(pumping, aborting, waiting, return_exceptions=True)


_WATCHER_CODE = r"""
import os, select, signal
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGTSTP):
    signal.signal(s, signal.SIG_IGN)
groups, pending = set(), b""
while True:
    if select.select([0], [], [], 1.0)[0]:
        data = os.read(0, 65536)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            if line[:1] == b"+":
                groups.add(int(line[1:]))
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))
    for group in list(groups):
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            groups.discard(group)
        except OSError:
            pass
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class GroupWatcher:
    """Kills the process groups of this process's commands when this process dies, however it dies.

    A small process of its own (one per tether process, started with the first command, in its own session
    so that a Ctrl-C meant for tether does not reach it) reads the groups to watch from a pipe whose only
    writer is tether. When tether ends, even by SIGKILL, the kernel closes that pipe; the watcher reads
    end-of-file and SIGKILLs every group still alive: the shell, what it runs, and background jobs and their
    children (`PR_SET_PDEATHSIG` would reach the shell only, not its children). A group stays watched while
    any process is in it (background jobs die with tether too); the watcher forgets empty groups every
    second, so a group id that the system gives out again is not killed by mistake, barring that second.

    Not covered: a process that leaves its group (`setsid`, daemons), and a command that tether dies in the
    instant between starting it and `add`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._fd: int | None = None
        self._groups: set[int] = set()
        os.register_at_fork(after_in_child=self._forget)

    @property
    def pid(self) -> int | None:
        """The watcher process's pid, once started."""
        return self._pid

    def add(self, group: int) -> None:
        with self._lock:
            self._groups = {g for g in self._groups if _alive(g)}
            self._groups.add(group)
            self._send(f"+{group}\n")

    def discard_if_empty(self, group: int) -> None:
        """Stop watching `group` once no process is left in it (else the watcher drops it when it empties)."""
        if _alive(group):
            return
        with self._lock:
            if group in self._groups:
                self._groups.discard(group)
                self._send(f"-{group}\n")

    def _send(self, line: str) -> None:
        for _ in range(2):
            if self._fd is None or not self._running():
                self._start()
            if self._fd is None:
                return
            try:
                os.write(self._fd, line.encode())
                return
            except OSError:  # it died since: the next one is told every group
                self._stop()

    def _running(self) -> bool:
        if self._pid is None:
            return False
        try:
            done, _ = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0

    def _start(self) -> None:
        self._stop()
        read_fd, write_fd = os.pipe()  # both close on exec: no command inherits the writer
        try:
            self._pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", "-c", _WATCHER_CODE],
                {},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_fd, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,
            )
        except OSError as e:
            os.close(write_fd)
            log.warning("cannot start the process watcher (%s): commands may outlive tether", e)
            return
        finally:
            os.close(read_fd)
        self._fd = write_fd
        if self._groups:
            os.write(write_fd, "".join(f"+{g}\n" for g in self._groups).encode())

    def _stop(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # end-of-file: a live watcher kills what it watches and exits
            self._fd = None
        if self._pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, os.WNOHANG)
            self._pid = None

    def _forget(self) -> None:
        # a forked child must not keep the watcher alive after tether dies, nor talk to it
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._lock = threading.Lock()
        self._fd = self._pid = None
        self._groups = set()


WATCHER = GroupWatcher()
"""This process's watcher (see `GroupWatcher`)."""


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, but not ours to signal
    return True


def _kill_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    # start_new_session made the shell's pid its group id; the group outlives the shell
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _footer(outcome: str, code: int | None, timeout: float) -> tuple[str, bool]:
    if outcome == "timeout":
        return f"[timed out after {timeout:g} s; the command and its child processes were killed]", True
    if outcome == "aborted":
        return "[aborted; the command and its child processes were killed]", True
    assert code is not None
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        status = f"[killed by signal {name}]"
    else:
        status = f"[exit code {code}]"
    if outcome == "detached":
        status += " [background processes still hold the output open; what they print later is not shown]"
    return status, False
