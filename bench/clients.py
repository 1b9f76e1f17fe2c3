"""Prompts in a row to an OpenAI-compatible service over TLS, with the runs' SDK clients shared (what a
`SessionManager` does since `providers/clients.py`) against each run making its own (before).

    python bench/clients.py [--prompts 12] [--rounds 4] [--rtt-ms 0,20]

The service is bench/_openai_stub.py behind TLS (a self-signed certificate made with `openssl` for
127.0.0.1, trusted through SSL_CERT_FILE as a user's own CA would be), on loopback. Between the client and
it, a relay that holds every chunk for half of `--rtt-ms` in each direction: a network with that round trip,
which loopback alone does not have (every round trip of a connection's TCP and TLS handshakes pays it, as
on the way to a hosted API; 0 measures the handshakes' own CPU). The relay counts the connections it gets.

Each round is a fresh `SessionManager` on a fresh SQLite store running `--prompts` prompts, one after the
other, in one session (each prompt a run, and each run a provider of its own, as `tether serve` makes
them), in both modes, A B A B; per prompt, the time from `start` to its result. Figures per RTT:
`prompt_ms_p50_{shared,own}_rtt{N}`, `connections_per_prompt_{shared,own}_rtt{N}`, and
`prompt_own_over_shared_rtt{N}` (the ratio of the p50s, pair by pair within each round, then the median).
No targets: the figures say what a connection per prompt cost."""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Report, median

from tether.config import Config, ProviderConfig
from tether.events import Done
from tether.providers.registry import resolve_provider
from tether.runtime.launch import RunRequest
from tether.runtime.manager import SessionManager
from tether.store import SqliteStore


def _stub() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_openai_stub", Path(__file__).resolve().parent / "_openai_stub.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def tls_service(cert: Path, key: Path) -> tuple[int, Callable[[], None]]:
    """The stub behind TLS in a thread: its port, and how to stop it."""
    stub = _stub()
    server = stub.make_server(stub.Answers())
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return int(server.server_address[1]), stop


class Latency:
    """A TCP relay on 127.0.0.1 to `upstream` that holds each chunk `one_way` seconds in each direction, in
    order, in a thread of its own (the network is not the client's event loop); `connections` counts."""

    def __init__(self, upstream: int, one_way: float) -> None:
        self.upstream = upstream
        self.one_way = one_way
        self.connections = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await held.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()
            writer.close()

        delivering = asyncio.ensure_future(deliver())
        try:
            while data := await reader.read(65536):
                held.put_nowait((time.monotonic() + self.one_way, data))
        except ConnectionError:
            pass
        held.put_nowait((time.monotonic() + self.one_way, b""))
        await delivering

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


async def one_round(folder: Path, port: int, prompts: int, shared: bool) -> list[float]:
    """The milliseconds of each prompt of a fresh manager's session."""
    config = Config(providers={"bench": ProviderConfig(kind="openai", base_url=f"https://127.0.0.1:{port}/v1")})
    with tempfile.TemporaryDirectory(dir=folder) as where:
        async with SqliteStore(Path(where) / "t.db") as store:
            resolve = None if shared else resolve_provider  # before: no SharedClients
            defaults = RunRequest(None, directory=where, tools="none", model="bench/bench")
            manager = SessionManager(store, config=config, defaults=defaults, resolve=resolve)
            times: list[float] = []
            session: str | None = None
            try:
                for n in range(prompts):
                    started = time.perf_counter()
                    handle = await manager.start(session, f"prompt {n}")
                    result = await handle.result()
                    times.append((time.perf_counter() - started) * 1000)
                    if not isinstance(result, Done):
                        raise RuntimeError(f"prompt {n} ended with {result!r}")
                    session = handle.session_id
            finally:
                await manager.shutdown()
            return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=12, help="prompts per round (default 12)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each mode, A B A B (default 4)")
    parser.add_argument("--rtt-ms", default="0,20", help="round trips of the emulated network (default 0,20)")
    args = parser.parse_args()
    rtts = [float(x) for x in args.rtt_ms.split(",") if x.strip()]
    report = Report()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        cert, key = certificate(folder)
        os.environ["SSL_CERT_FILE"] = str(cert)
        os.environ["OPENAI_API_KEY"] = "sk-bench"
        service, stop = tls_service(cert, key)
        try:
            report.note(f"{args.prompts} prompts a round, {args.rounds} rounds of each mode; load {os.getloadavg()}")
            for rtt in rtts:
                relay = Latency(service, rtt / 2000)
                tag = f"rtt{rtt:g}"
                report.section(f"round trip {rtt:g} ms (TLS, loopback)")
                samples: dict[bool, list[float]] = {True: [], False: []}
                connections: dict[bool, int] = {True: 0, False: 0}
                ratios: list[float] = []
                for _ in range(args.rounds):
                    p50 = {}
                    for shared in (False, True):
                        before = relay.connections
                        times = asyncio.run(one_round(folder, relay.port, args.prompts, shared))
                        connections[shared] += relay.connections - before
                        samples[shared].extend(times)
                        p50[shared] = statistics.median(times)
                    ratios.append(p50[False] / p50[True])
                total = args.prompts * args.rounds
                for shared, name in ((True, "shared"), (False, "own")):
                    report.row(
                        f"prompt p50, {name} clients", f"prompt_ms_p50_{name}_{tag}", median(samples[shared]), "ms"
                    )
                    report.row(
                        f"connections per prompt, {name} clients",
                        f"connections_per_prompt_{name}_{tag}",
                        connections[shared] / total,
                        "",
                        digits=3,
                    )
                report.row(
                    "own over shared (p50s, per round)", f"prompt_own_over_shared_{tag}", median(ratios), "x", digits=2
                )
                relay.close()
        finally:
            stop()
    report.finish()


if __name__ == "__main__":
    main()
