"""`tether serve --workers N`: N server processes on one address over one store. Each worker is a whole
server (its own event loop, `SessionManager` and runs) on its own listening socket bound with
`SO_REUSEPORT`, so that the kernel spreads the connections over the workers; a run lives in the worker that
took its prompt, or in one with fewer runs that it placed the prompt with (`runtime/mesh.py`: the kernel
spreads connections, not runs; its lease says which), and the others hear of it through the store's relay: every event of every run reaches every follower, whichever worker it is connected to, and
an answer, a cancel or a pause reaches the run wherever it is.

This process is the supervisor: it forks the workers (before it has an event loop or a thread, so a fork is
a clean copy), starts a new one in the place of one that died (a SIGKILL: its runs are taken over by the
others once their leases are free, `mesh`), and on SIGINT or SIGTERM tells every worker to stop gracefully
(each gives its runs the grace period) and waits for them. Linux (SO_REUSEPORT with balancing, fork)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger("tether.server")

RESTART_PAUSE = 0.5
"""Seconds between a worker's death and its replacement (more when workers keep dying: up to `MAX_PAUSE`)."""
MAX_PAUSE = 30.0


def _die_with(supervisor: int) -> None:
    """A worker ends when its supervisor is gone without stopping it (killed with SIGKILL, or crashed): the
    kernel sends it SIGKILL then, as the supervisor's own death (PR_SET_PDEATHSIG), so that no worker goes on
    serving the port, or running sessions, behind a service its user saw die. A supervisor that stops
    normally stops its workers first, each with its grace period (`run`)."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != supervisor:  # it died between the fork and the prctl
        os._exit(1)


def load_shared() -> None:
    """Load now what runs need and a process finds out only once, which their first prompt paid before: the
    default token counter (a run counts its project text and its context with it; 0.1-0.3 s of CPU and ~65
    MiB) and the sandbox's probe (bubblewrap tried in a child process, ~15 ms of the event loop's time). The
    supervisor of `--workers N` loads them before it forks, so that the workers share one copy of the counter,
    whose pages nobody writes after loading, rather than each load its own; neither leaves a thread behind,
    so the fork stays a clean copy."""
    from ..context.tokens import get_counter
    from ..tools.sandbox import support

    get_counter()
    support()


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def bind(host: str, port: int, *, listen: bool) -> socket.socket:
    """A TCP socket on (host, port) with SO_REUSEPORT: the workers' listening sockets, and the supervisor's
    (not listening: it only holds the port, chosen by the system for port 0).

    Made with its protocol named (IPPROTO_TCP), as asyncio's own listening sockets are: asyncio turns Nagle's
    algorithm off (TCP_NODELAY) only on a connection whose socket says TCP, and a connection takes the
    protocol of the socket it was accepted on. With 0 there, every response written in two sends (uvicorn's
    head, then its body) waited for the client's delayed ACK: ~40 ms on a prompt's 202, and on a status read."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host.strip("[]") or "0.0.0.0", port))
    if listen:
        sock.listen(2048)
        sock.setblocking(False)
    return sock


class Supervisor:
    """Forks `workers` processes, each running `serve_one(sock)` on its own listening socket, keeps that many
    running and stops them all on SIGINT/SIGTERM (see the module docstring). `port` is the bound port."""

    def __init__(self, host: str, port: int, workers: int, serve_one: Callable[[socket.socket], None]) -> None:
        if workers < 1:
            raise ValueError("at least one worker")
        if not hasattr(socket, "SO_REUSEPORT") or not hasattr(os, "fork"):
            raise OSError("--workers above 1 needs Linux (SO_REUSEPORT and fork); use --workers 1 here")
        self.host = host
        self.workers = workers
        self.serve_one = serve_one
        self._holder = bind(host, port, listen=False)
        self.port = int(self._holder.getsockname()[1])
        self.children: dict[int, int] = {}
        """Process id -> worker slot."""
        self._stopping = False
        self._signal: int | None = None
        """The signal that stopped the service: raised again once the workers are gone (as one server does)."""
        self._deaths: list[float] = []

    def _spawn(self, slot: int) -> None:
        supervisor = os.getpid()
        # Listening before the fork: a connection that comes while the worker starts waits in its queue
        # (served once the worker's loop runs), and the service is there once `run` says it is.
        sock = bind(self.host, self.port, listen=True)
        try:
            pid = os.fork()
        except BaseException:
            sock.close()
            raise
        if pid == 0:  # the worker
            code = 0
            try:
                _die_with(supervisor)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                self._holder.close()
                os.environ["TETHER_WORKER"] = str(slot)
                self.serve_one(sock)
            except BaseException:  # nothing of the supervisor's may run in a worker: leave at once
                log.exception("worker %d failed", slot)
                code = 1
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        sock.close()  # (the worker's)
        self.children[pid] = slot

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True
        self._signal = signum
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def run(self, *, grace: float = 5.0, ready: Callable[[], None] | None = None) -> int:
        """Serve until told to stop; returns the exit status (0 when every worker stopped cleanly). `ready`
        is called once every worker's socket listens: a connection that comes after it may wait for its
        worker's loop to start, and is never refused."""
        try:
            load_shared()  # once, here: the workers share it
            # What the workers inherit, out of their collectors' sight: a collection in a worker (its startup
            # makes one) writes to every object it walks and so copies its page, inherited or not. 2 workers
            # after a few runs each: 26 MiB of each worker's own against 34 without this; the server's PSS 131
            # MiB against 147 (and 187 without load_shared).
            gc.collect()
            gc.freeze()
        except BaseException:
            self._holder.close()
            raise
        before = {s: signal.signal(s, self._stop) for s in (signal.SIGINT, signal.SIGTERM)}
        status = 0
        try:
            for slot in range(self.workers):
                self._spawn(slot)
            if ready is not None:
                ready()
            while self.children:
                try:
                    pid, code = os.wait()
                except ChildProcessError:
                    break
                except InterruptedError:
                    continue
                slot_of = self.children.pop(pid, None)
                if slot_of is None:
                    continue
                if self._stopping:
                    status = status or (0 if os.waitstatus_to_exitcode(code) in (0, -signal.SIGTERM) else 1)
                    continue
                self._deaths = [t for t in self._deaths if t > time.monotonic() - 60] + [time.monotonic()]
                pause = min(RESTART_PAUSE * 2 ** (len(self._deaths) - 1), MAX_PAUSE)
                log.warning(
                    "worker %d (pid %d) ended (%s); a new one starts in %.1fs",
                    slot_of, pid, _how(code), pause,
                )  # fmt: skip
                time.sleep(pause)
                if not self._stopping:
                    self._spawn(slot_of)
        finally:
            self._stopping = True
            deadline = time.monotonic() + grace * 2 + 5
            while self.children and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                    if pid:
                        self.children.pop(pid, None)
                        continue
                time.sleep(0.05)
            for pid in self.children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for s, handler in before.items():
                signal.signal(s, handler)
            self._holder.close()
        if self._signal is not None:  # end as a single server does: by the signal, through the handler before
            signal.raise_signal(self._signal)
        return status


def _how(code: int) -> str:
    exit_code = os.waitstatus_to_exitcode(code)
    return f"signal {-exit_code}" if exit_code < 0 else f"exit status {exit_code}"


def serve_workers(
    workers: int,
    host: str,
    port: int,
    serve_one: Callable[[socket.socket], None],
    *,
    grace: float,
    ready: Callable[[], None] | None = None,
    **_: Any,
) -> int:
    """Serve with `workers` processes (see `Supervisor`)."""
    return Supervisor(host, port, workers, serve_one).run(grace=grace, ready=ready)
