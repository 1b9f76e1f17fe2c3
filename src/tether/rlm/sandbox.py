"""The RLM sandbox, parent side: a Python REPL in a separate, confined process (`repl_process.py`, `confine.py`)
that holds an oversized text as `context`, runs the model's code blocks one at a time, and sends its
sub-model calls back here over JSON-line pipes. The provider and its keys stay in this process; the child
gets no network, no environment secrets, and a fresh temporary directory as the only place it may write.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec

from ..errors import SandboxError

LlmHandler = Callable[[list[str]], Awaitable[list[str]]]
"""Answers a batch of sub-model prompts, in order. An exception it raises reaches the model's code as a
RuntimeError with the same message."""

REPL_PROCESS = Path(__file__).with_name("repl_process.py")
_LINE_LIMIT = 32 << 20  # one protocol message; prompts that carry slices of the context can be large
_MAX_BATCH = 256
_START_TIMEOUT = 30.0


class SandboxLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on one REPL process. CPU limits are kernel-enforced (a block over `cpu_seconds_per_block` is
    interrupted and the REPL lives on; past `cpu_seconds_total` the kernel kills it). `block_timeout` is the
    wall time a block may compute without a word to the parent (time spent on its sub-model calls does
    not count). `memory_bytes` bounds the address space; it is raised to fit the context when needed.
    `file_bytes` caps one file the REPL writes; `disk_bytes` all of them, where a private tmpfs can be
    mounted over its directory (see the ``tmpfs`` layer)."""

    cpu_seconds_per_block: int = 20
    cpu_seconds_total: int = 120
    block_timeout: float = 60.0
    memory_bytes: int = 1 << 30
    output_chars: int = 10_000
    file_bytes: int = 64 << 20
    disk_bytes: int = 128 << 20
    open_files: int = 64
    threads: int = 16


class SandboxLayer(msgspec.Struct, frozen=True):
    """One confinement layer and whether this kernel let it hold."""

    name: str
    active: bool
    detail: str


class BlockResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one code block did: its printed output (the first `SandboxLimits.output_chars` characters of
    `output_chars`), the error it ended with, and the answer it gave with FINAL/FINAL_VAR, if any."""

    output: str
    output_chars: int
    error: str | None = None
    final: str | None = None

    @property
    def truncated(self) -> bool:
        return self.output_chars > len(self.output)


class Sandbox:
    """A confined REPL holding `context`. Use it as an async context manager, or `start()` and `close()`.

    >>> async with Sandbox(text, llm=answer_prompts) as repl:
    ...     result = await repl.run("print(len(context))")

    `run` raises `SandboxError` when the process dies, stops answering, or breaks the protocol; the
    sandbox is then closed and a new one must be started (variables are lost).
    """

    def __init__(
        self,
        context: str,
        *,
        llm: LlmHandler,
        limits: SandboxLimits | None = None,
        python: str | None = None,
        audit_hook: bool = True,
    ) -> None:
        self._context = context
        self._llm = llm
        self.limits = limits or SandboxLimits()
        self._python = python or sys.executable
        # Off only in tests that check that the kernel layers hold by themselves.
        self._audit_hook = audit_hook
        self._proc: asyncio.subprocess.Process | None = None
        self._workdir: str | None = None
        self._stderr: collections.deque[bytes] = collections.deque(maxlen=64)
        self._stderr_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self.layers: list[SandboxLayer] = []

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def workdir(self) -> str | None:
        """The child's temporary directory (its cwd and the only place it may write)."""
        return self._workdir

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None and not self._closed

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        if self._proc is not None or self._closed:
            raise SandboxError("a sandbox starts once; make a new one", reason="start")
        self._workdir = tempfile.mkdtemp(prefix="tether-rlm-")
        context_file = Path(self._workdir, "context.txt")
        data = self._context.encode("utf-8", "replace")
        context_file.write_bytes(data)
        # The child holds the bytes, the decoded str and whatever slices the model makes of it.
        memory = max(self.limits.memory_bytes, (256 << 20) + 6 * len(data))
        policy = {
            "workdir": self._workdir,
            "cpu_seconds": self.limits.cpu_seconds_total,
            "memory_bytes": memory,
            "file_bytes": self.limits.file_bytes,
            "disk_bytes": self.limits.disk_bytes,
            "open_files": self.limits.open_files,
            "threads": self.limits.threads,
            "audit_hook": self._audit_hook,
        }
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": self._workdir,
            "TMPDIR": self._workdir,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self._python,
                "-I",  # isolated: no user site, no PYTHON* variables, script dir not on sys.path
                "-S",  # no site: only the standard library is importable
                "-B",  # no .pyc writes
                str(REPL_PROCESS),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self._workdir,
                env=env,
                start_new_session=True,
                limit=_LINE_LIMIT,
            )
        except OSError as exc:
            await self.close()
            raise SandboxError(f"could not start the REPL process: {exc}", reason="start") from exc
        self._stderr_task = asyncio.create_task(self._drain_stderr())
        await self._send(
            {
                "op": "init",
                "policy": policy,
                "context_file": context_file.name,
                "output_chars": self.limits.output_chars,
                "cpu_seconds_per_block": self.limits.cpu_seconds_per_block,
            }
        )
        ready = await self._receive(_START_TIMEOUT)
        if ready.get("op") != "ready" or not isinstance(ready.get("layers"), list):
            await self._fail("protocol", f"expected ready, got {ready.get('op')!r}")
        self.layers = [SandboxLayer(str(n), bool(a), str(d)) for n, a, d in ready["layers"]]

    async def run(self, code: str) -> BlockResult:
        """Run one block in the REPL, answering its sub-model calls as they come."""
        async with self._lock:
            self._check_open()
            try:
                await self._send({"op": "exec", "code": code})
                while True:
                    message = await self._receive(self.limits.block_timeout)
                    op = message.get("op")
                    if op == "llm":
                        await self._answer(message.get("prompts"))
                    elif op == "result":
                        return BlockResult(
                            output=str(message.get("output", "")),
                            output_chars=int(message.get("output_chars", 0)),
                            error=None if message.get("error") is None else str(message["error"]),
                            final=None if message.get("final") is None else str(message["final"]),
                        )
                    else:
                        await self._fail("protocol", f"unexpected message {op!r} during a block")
            except BaseException:
                # Cancelled or failed mid-block: the child may be waiting on us; it cannot be reused.
                await self.close()
                raise

    async def get_var(self, name: str) -> str | None:
        """`str()` of a REPL variable, or None when there is no such variable."""
        async with self._lock:
            self._check_open()
            try:
                await self._send({"op": "get_var", "name": name})
                message = await self._receive(self.limits.block_timeout)
            except BaseException:
                await self.close()
                raise
            if message.get("op") != "var":
                await self._fail("protocol", f"expected var, got {message.get('op')!r}")
            return str(message["value"]) if message.get("found") else None

    async def close(self) -> None:
        """Kill the process (its whole process group) and remove its directory. Idempotent."""
        self._closed = True
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            self._proc = proc  # keep the exit status readable
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stderr_task
            self._stderr_task = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    # --- plumbing -------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self.alive:
            raise SandboxError("the REPL is not running", reason="crashed")

    async def _answer(self, prompts: Any) -> None:
        if (
            not isinstance(prompts, list)
            or not prompts
            or len(prompts) > _MAX_BATCH
            or not all(isinstance(p, str) for p in prompts)
        ):
            await self._send({"op": "llm_result", "ok": False, "error": f"prompts must be 1 to {_MAX_BATCH} strings"})
            return
        try:
            texts = await self._llm(prompts)
        except Exception as exc:
            await self._send({"op": "llm_result", "ok": False, "error": str(exc) or type(exc).__name__})
            return
        await self._send({"op": "llm_result", "ok": True, "texts": [str(t) for t in texts]})

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8", "replace"))
            await self._proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            await self._crashed()

    async def _receive(self, timeout: float) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), timeout)
        except TimeoutError:
            await self._fail("timeout", f"the REPL computed for {timeout:g} s without answering; it was killed")
        except (ValueError, asyncio.LimitOverrunError):
            await self._fail("protocol", f"the REPL sent a message over {_LINE_LIMIT >> 20} MiB")
        if not line:
            await self._crashed()
        try:
            message = json.loads(line)
        except ValueError:
            await self._fail("protocol", "the REPL sent a line that is not JSON")
        if not isinstance(message, dict):
            await self._fail("protocol", "the REPL sent JSON that is not an object")
        return dict(message)

    async def _crashed(self) -> Any:
        proc = self._proc
        code = await proc.wait() if proc is not None else None
        if self._stderr_task is not None:
            # Let the drain catch the last words before we quote them.
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)
        tail = b"".join(self._stderr).decode("utf-8", "replace").strip()[-2000:]
        await self.close()
        raise SandboxError(
            f"the REPL process exited ({_describe_exit(code)})" + (f":\n{tail}" if tail else ""), reason="crashed"
        )

    async def _fail(self, reason: str, message: str) -> Any:
        await self.close()
        raise SandboxError(message, reason=reason)

    async def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(4096):
            self._stderr.append(chunk)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "status unknown"
    if code >= 0:
        return f"status {code}"
    name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
    if -code in (signal.SIGKILL, signal.SIGXCPU):
        return f"killed by {name}: its total CPU time or memory ran out"
    return f"killed by {name}"
