"""The agent loop's own cost: framework overhead per step, store calls per step, and whole turns through the
real `openai` client against a loopback OpenAI-compatible server, with opencode beside it when it is here.

Step overhead: a scripted provider answers every step with one call to a no-op tool, so a step is: derive the
context, build the request, stream the answer, journal the assistant message, run the tool, journal its result.
The time spent inside the provider's stream is measured and subtracted. Histories of 10 and 10,000 messages
(realistic ones, from tau-bench when it is there), on the real SQLite store at normal durability. The model's
window is the catalog's guess for an unknown model (32k tokens), so 10,000 messages do not fit: the first step
compacts them once (reported apart, as first_step_ms), and the steady steps that follow are the per-step
figure, as in any long session. Each step adds two entries, so runs are short (10 steps) for the history to
stay near its nominal size; many runs make the median. One more run per size goes through a store wrapper
that counts the calls of each store method: store_calls_per_step is what a steady step costs (from the run's
first model call to its last, divided by the steps between them); what the run costs once (start-up and the
checkpoint at its end) is reported beside it.

SDK turns: one session of 200 turns (the data's user messages as prompts), each `session.stream(prompt,
provider=OpenAIProvider(...))` through the real `openai` client against bench/_openai_stub.py, which streams
a short answer, or on every other turn a call to a no-op tool first. Everything but the model is real.

Durable stream: one answer of 2,000 text deltas (8 characters each, back to back, as a fast local model
sends them), each in a fresh session, with the streamed part saved as it comes (tether's default) and without
(``durable_stream=False``), alternated in the same run; the whole turn is timed (run start to `Done`), and
the ratio of the medians is stream_checkpoint_overhead_ratio.

    python bench/loop.py [--data PATH] [--steps N] [--runs N] [--turns N] [--opencode PATH] [--quick]

Last line: JSON with step_ms_10, step_ms_10000, store_calls_per_step_10, store_calls_per_step_10000,
sdk_turn_ms_10, sdk_turn_ms_200, sdk_turn_growth_ms, stream_turn_ms, stream_turn_ms_undurable,
stream_saves_per_answer, stream_checkpoint_overhead_ratio and, when opencode ran, opencode_turn_ms_10,
opencode_turn_ms_200, opencode_turn_growth_ms. Targets: step_ms_10 <= 1, step_ms_10000 <= 5, store calls per
step <= 2, sdk_turn_growth_ms <= 0.1, stream_checkpoint_overhead_ratio <= 1.2.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import inspect
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BenchError,
    ChatMessage,
    Report,
    Target,
    linear_fit,
    load_chat_data,
    long_conversation,
    median,
    scratch_dir,
    tenths,
    to_message,
)

from tether import Message, Session, ToolCallPart
from tether.config import Config, RuntimeConfig
from tether.events import CompactionStarted, Done, RunStarted
from tether.messages import Usage
from tether.providers.base import ModelRequest, StreamDone, StreamEvent, TextPartDelta
from tether.providers.openai import OpenAIProvider
from tether.providers.scripted import ScriptedProvider
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry, function_tool

STUB = Path(__file__).resolve().parent / "_openai_stub.py"


@function_tool(read_only=True)
async def noop(n: int) -> str:
    """Does nothing."""
    return "ok"


class TimedProvider:
    """Wraps a provider and adds up the time spent waiting on its stream: the model's own time."""

    def __init__(
        self, inner: ScriptedProvider, marks: list[Counter[str]] | None = None, calls: Counter[str] | None = None
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.ns = 0
        self.marks, self.calls = marks, calls

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if self.marks is not None and self.calls is not None:
            self.marks.append(Counter(self.calls))
        t0 = time.perf_counter_ns()
        it = self.inner.stream(request).__aiter__()
        self.ns += time.perf_counter_ns() - t0
        while True:
            t0 = time.perf_counter_ns()
            try:
                event = await it.__anext__()
            except StopAsyncIteration:
                self.ns += time.perf_counter_ns() - t0
                return
            self.ns += time.perf_counter_ns() - t0
            yield event


class CountingStore:
    """Stands in for a store: every public method of the wrapped one is called through, and each call is
    counted by method name in `calls`; everything else is the wrapped store's own. Generic on purpose
    (`__getattr__`, no list of methods), so it keeps counting whatever the store's methods become."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        calls = self.calls
        wrapper: Any
        if inspect.iscoroutinefunction(attr):

            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                return await attr(*args, **kwargs)

        else:
            # Plain methods and async iterators alike: the call is what counts, the result goes back as it is.
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                return attr(*args, **kwargs)

        functools.update_wrapper(wrapper, attr)
        self.__dict__[name] = wrapper  # later lookups skip __getattr__
        return wrapper


def respond(request: ModelRequest) -> Message:
    # A different argument each step, so the loop's repeated-call guard never fires.
    return Message.assistant(
        tool_calls=[ToolCallPart(id=f"c{len(request.messages)}", name="noop", arguments={"n": len(request.messages)})]
    )


async def run_once(
    session: Session, steps: int, marks: list[Counter[str]] | None = None, calls: Counter[str] | None = None
) -> tuple[float, float, float]:
    """(framework ms per step, start-up ms, total ms) of one run of `steps` steps. With `calls` (a counting
    store's tally) and `marks`, a copy of the tally is kept as each model call starts: what the steps between
    them cost the store."""
    provider = TimedProvider(ScriptedProvider(respond), marks=marks, calls=calls)
    t0 = time.perf_counter_ns()
    started = 0
    async for event in session.stream(
        "keep going", provider=provider, model="bench", tools=ToolRegistry([noop]), max_steps=steps
    ):
        if isinstance(event, RunStarted):
            started = time.perf_counter_ns() - t0
        elif isinstance(event, Done):
            assert event.reason == "step_limit" and event.steps == steps, event
    total = time.perf_counter_ns() - t0
    framework = total - started - provider.ns
    return framework / steps / 1e6, started / 1e6, (total - provider.ns) / 1e6


async def new_session(store: Any, history: list[Message], directory: Path) -> Session:
    session = await Session.create(store, directory=directory)
    for i in range(0, len(history), 500):
        await session.append(*history[i : i + 500])
    return session


async def measure(
    store: SqliteStore, history: list[Message], steps: int, directory: Path
) -> tuple[float, float, float]:
    """A session holding `history`, then: one first step (where a history larger than the model's window
    is compacted, once, as any long session has been), then a steady run of `steps` steps.
    Returns (steady framework ms per step, steady start-up ms, first step framework ms)."""
    session = await new_session(store, history, directory)
    _, _, first_ms = await run_once(session, 1)
    per_step, startup, _ = await run_once(session, steps)
    return per_step, startup, first_ms


async def count_store_calls(
    store: SqliteStore, history: list[Message], steps: int, directory: Path
) -> tuple[Counter[str], Counter[str]]:
    """The store calls of a run of `steps` steps after a first one (as in `measure`), by method: those of its
    steady steps (from its first model call to its last, per step), and those of the whole run (start-up: the
    session's row, the tail it resumes from, the prompt; end: the checkpoint at the step limit). A run of its
    own: the timed runs go to the store directly, untouched by the wrapper."""
    counting = CountingStore(store)
    session = await new_session(counting, history, directory)
    await run_once(session, 1)
    counting.calls.clear()
    marks: list[Counter[str]] = []
    await run_once(session, steps, marks, counting.calls)
    steady = marks[-1] - marks[0]
    per_step = Counter({name: n / (len(marks) - 1) for name, n in steady.items()})
    return per_step, Counter(counting.calls)


# --- the durable stream ---------------------------------------------------------------------------------

STREAM_DELTAS = 2000


class DeltaProvider:
    """Streams one answer of `STREAM_DELTAS` text deltas, yielding to the event loop between them (as a
    read from the network does), and nothing else."""

    name = "deltas"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        pieces = [f"w{i:05d} " for i in range(STREAM_DELTAS)]
        for piece in pieces:
            yield TextPartDelta(text=piece)
            await asyncio.sleep(0)
        yield StreamDone(
            message=Message.assistant("".join(pieces)), usage=Usage(output_tokens=4000), finish_reason="stop"
        )


async def stream_turn(store: Any, directory: Path, durable: bool) -> tuple[float, int]:
    """(ms, saves) of one turn that streams the answer, in a new session."""
    session = await Session.create(store, directory=directory)
    saves = 0
    inner_save = store.save_stream

    async def counted(*args: Any, **kwargs: Any) -> None:
        nonlocal saves
        saves += 1
        await inner_save(*args, **kwargs)

    store.save_stream = counted
    try:
        # the answer is longer than an unknown model's default output limit: let it run to its end
        config = Config(runtime=RuntimeConfig(max_answer_tokens=1_000_000))
        done = None
        t0 = time.perf_counter_ns()
        async for event in session.stream(
            "go", provider=DeltaProvider(), model="bench", tools=ToolRegistry(), durable_stream=durable, config=config
        ):
            if isinstance(event, Done):
                done = event
        elapsed = (time.perf_counter_ns() - t0) / 1e6
        assert done is not None and done.reason == "completed", "the answer did not stream to its end"
        return elapsed, saves
    finally:
        del store.save_stream


async def stream_section(report: Report, args: argparse.Namespace, scratch: Path) -> None:
    report.section(f"durable stream: a {STREAM_DELTAS:,}-delta answer, saved as it streams against not (SQLite normal)")
    runs = 5 if args.quick else 30
    store = SqliteStore(scratch / "stream.db")
    try:
        await stream_turn(store, scratch, True)  # warm-up: imports, first statements
        await stream_turn(store, scratch, False)
        durable: list[float] = []
        plain: list[float] = []
        saves: list[int] = []
        for _ in range(runs):
            ms, n = await stream_turn(store, scratch, True)
            durable.append(ms)
            saves.append(n)
            ms, n = await stream_turn(store, scratch, False)
            assert n == 0
            plain.append(ms)
    finally:
        await store.close()
    report.note(f"{runs} turns each way, alternated; median of each")
    report.row("turn with the durable stream", "stream_turn_ms", median(durable), "ms", digits=2)
    report.row("turn without it", "stream_turn_ms_undurable", median(plain), "ms", digits=2)
    report.row("saves per answer", "stream_saves_per_answer", median([float(n) for n in saves]), "", digits=1)
    ratio = median(durable) / median(plain)
    report.row("durable over not", "stream_checkpoint_overhead_ratio", ratio, "x", digits=3)


# --- turns through the real SDK, and opencode's --------------------------------------------------------


def user_prompts(trajectories: Sequence[list[ChatMessage]], n: int) -> list[str]:
    """The first `n` user messages of the data, cycled: what a person types, turn after turn."""
    texts = [str(m["content"]) for t in trajectories for m in t if m.get("role") == "user" and m.get("content")]
    if not texts:
        raise BenchError("the data holds no user messages to use as prompts")
    return [texts[i % len(texts)] for i in range(n)]


@contextmanager
def openai_stub(tools: Mapping[str, str], log: Path) -> Iterator[str]:
    """bench/_openai_stub.py in a process of its own (its work stays off this interpreter's lock), its
    stderr in `log`; yields its base URL."""
    args = [sys.executable, str(STUB), *(f"--tool={name}={spec}" for name, spec in tools.items())]
    with log.open("wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://"):
            raise BenchError(f"the OpenAI stub did not start: {url!r} {log.read_text(errors='replace')[-1000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stub_stats(url: str) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/v1/stats")
        return dict(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


async def tether_turns(url: str, prompts: list[str], scratch: Path) -> tuple[list[float], int]:
    """Milliseconds of each turn of one tether session, and how many compactions ran. One warm-up turn in
    a session of its own comes first: the SDK's import, its client and the loopback connection are a
    process's start-up cost, not a turn's."""
    store = SqliteStore(scratch / "sdk.db")
    provider = OpenAIProvider("bench", base_url=url, api_key="bench")
    tools = ToolRegistry([noop])
    compactions = 0

    async def turn(session: Session, prompt: str) -> float:
        nonlocal compactions
        t0 = time.perf_counter_ns()
        async for event in session.stream(prompt, provider=provider, model="bench", tools=tools, max_steps=4):
            if isinstance(event, CompactionStarted):
                compactions += 1
            elif isinstance(event, Done) and event.reason != "completed":
                raise BenchError(f"a tether turn ended with {event.reason!r}, not 'completed': {event}")
        return (time.perf_counter_ns() - t0) / 1e6

    try:
        await turn(await Session.create(store, directory=scratch), prompts[0])
        session = await Session.create(store, directory=scratch)
        times = [await turn(session, prompt) for prompt in prompts]
    finally:
        await provider.aclose()
        await store.close()
    return times, compactions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OpencodeServer:
    """`opencode serve` on loopback with a config of its own (a custom OpenAI-compatible provider, ``stub``,
    at the stub's URL) and every directory it writes under `root`: nothing of the user's is read or touched,
    and with plugins, model-list fetches, updates and sharing off it needs no network."""

    def __init__(self, binary: str, stub_url: str, root: Path) -> None:
        self.root = root
        self.project = root / "project"
        self.project.mkdir(parents=True, exist_ok=True)
        if shutil.which("git"):
            # A repository of its own: opencode's project root is then this directory, not the checkout
            # that holds the scratch directory (whose files it would otherwise scan, watch and snapshot).
            subprocess.run(["git", "init", "-q", str(self.project)], check=False, capture_output=True)
        self.port = free_port()
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "stub": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Loopback stub",
                    "options": {"baseURL": stub_url, "apiKey": "bench"},
                    "models": {
                        "bench": {"name": "bench", "tool_call": True, "limit": {"context": 128000, "output": 4096}}
                    },
                }
            },
            "model": "stub/bench",
            "small_model": "stub/bench",
            "autoupdate": False,
            "share": "disabled",
        }
        (root / "opencode.json").write_text(json.dumps(config))
        xdg = root / "xdg"
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root / "home"),
            "XDG_CONFIG_HOME": str(xdg / "config"),
            "XDG_DATA_HOME": str(xdg / "data"),
            "XDG_CACHE_HOME": str(xdg / "cache"),
            "XDG_STATE_HOME": str(xdg / "state"),
            "OPENCODE_CONFIG": str(root / "opencode.json"),
            "OPENCODE_PURE": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_SHARE": "1",
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        }
        self.log = root / "opencode.log"
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: http.client.HTTPConnection | None = None

    def start(self, timeout: float = 90.0) -> None:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--hostname", "127.0.0.1", "--port", str(self.port), "--print-logs"],
                cwd=self.project,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so that its children go with it
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"opencode serve exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                # A short timeout: a request that arrives while opencode is still starting can go unanswered.
                self.call("GET", "/session", timeout=5)
                self.conn = None  # the turns get a connection with the long timeout
                return
            except OSError:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
            if time.monotonic() > deadline:
                raise BenchError(f"opencode serve did not answer within {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.2)

    def settle(self, timeout: float = 180.0) -> float:
        """Wait for the install opencode starts in the background at every start (npm, `@opencode-ai/plugin`
        into its config directory) to end, so that it does not share the CPU with the timed turns. Returns
        the seconds waited; gives up quietly after `timeout` (the note says so)."""
        t0 = time.monotonic()
        installed = Path(self.env["XDG_CONFIG_HOME"]) / "opencode" / "node_modules" / "@opencode-ai" / "plugin"
        while time.monotonic() - t0 < timeout:
            if (installed / "package.json").is_file() or "dependency install failed" in self.log_tail(20_000):
                break
            time.sleep(0.25)
        return time.monotonic() - t0

    def log_tail(self, size: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def call(self, method: str, path: str, body: Any = None, timeout: float = 120.0) -> Any:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        payload = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if payload is not None else {}
        self.conn.request(method, path, body=payload, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        if response.status >= 400:
            raise BenchError(f"opencode {method} {path}: HTTP {response.status}: {data[:500]!r}")
        return json.loads(data) if data else None

    def new_session(self) -> str:
        return str(self.call("POST", "/session", {})["id"])

    def turn(self, session_id: str, prompt: str) -> float:
        """One prompt, answered to the end (the call returns when opencode's loop has finished): its ms."""
        body = {"parts": [{"type": "text", "text": prompt}], "model": {"providerID": "stub", "modelID": "bench"}}
        t0 = time.perf_counter_ns()
        reply = self.call("POST", f"/session/{session_id}/message", body)
        elapsed = (time.perf_counter_ns() - t0) / 1e6
        info = (reply or {}).get("info", {})
        if info.get("error") or not any(p.get("type") == "text" for p in (reply or {}).get("parts", [])):
            raise BenchError(f"an opencode turn did not end in a text answer: {json.dumps(reply)[:800]}")
        return elapsed

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.proc is None:
            return
        # The whole process group: opencode starts helpers (git, npm) of its own.
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


def opencode_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as e:
        raise BenchError(f"cannot run {binary}: {e}") from None
    if out.returncode != 0:
        raise BenchError(f"{binary} --version exited with {out.returncode}: {out.stderr.strip()[-500:]}")
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "unknown"


def opencode_turns(server: OpencodeServer, prompts: list[str]) -> list[float]:
    """Milliseconds of each turn of one opencode session, after a warm-up turn in a session of its own."""
    server.turn(server.new_session(), prompts[0])
    session_id = server.new_session()
    return [server.turn(session_id, prompt) for prompt in prompts]


def report_turns(report: Report, who: str, prefix: str, times: list[float]) -> None:
    """`{prefix}_ms_10`: median of the first ten turns; `{prefix}_ms_{n}`: of the last ten; `{prefix}_growth_ms`:
    the least-squares slope of turn time over turn number, all `n` turns, and `{prefix}_growth_ms_se` its
    standard error."""
    n = len(times)
    xs = range(1, n + 1)
    intercept, slope = linear_fit(xs, times)
    # The slope's standard error: how far apart two runs' slopes may fall from noise alone.
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, times, strict=True)) / (n - 2)
    spread = sum((x - (n + 1) / 2) ** 2 for x in xs)
    slope_se = math.sqrt(residual / spread)
    report.row(f"{who}: median turn, turns 1-10", f"{prefix}_ms_10", median(times[:10]), "ms", digits=2)
    report.row(f"{who}: median turn, turns {n - 9}-{n}", f"{prefix}_ms_{n}", median(times[-10:]), "ms", digits=2)
    report.row(f"{who}: median turn, all {n}", f"{prefix}_ms_median", median(times), "ms", digits=2)
    report.row(f"{who}: growth (least-squares slope over {n} turns)", f"{prefix}_growth_ms", slope, "ms/turn", digits=4)
    report.row(f"{who}: growth, its standard error", f"{prefix}_growth_ms_se", slope_se, "ms/turn", digits=4)
    report.note(f"{who}: median of each tenth, ms: " + ", ".join(f"{x:.1f}" for x in tenths(times)))


# --- the run -------------------------------------------------------------------------------------------


async def step_section(report: Report, args: argparse.Namespace, history_data: Any, scratch: Path) -> None:
    report.section("agent loop: framework overhead per step (scripted model, no-op tool, SQLite normal)")
    report.note(f"messages: {history_data.source}; {args.steps} steps a run, {args.runs} runs per history size")
    sizes = [10, 10_000] if not args.quick else [10, 1_000]
    store = SqliteStore(scratch / "loop.db")
    try:
        for size in sizes:
            history = [to_message(m) for m in long_conversation(history_data.trajectories, size)]
            per_step: list[float] = []
            startup: list[float] = []
            first: list[float] = []
            for _ in range(args.runs):
                step_ms, start_ms, first_ms = await measure(store, history, args.steps, scratch)
                per_step.append(step_ms)
                startup.append(start_ms)
                first.append(first_ms)
            report.row(f"per step, history of {size:,} messages", f"step_ms_{size}", median(per_step), "ms", digits=3)
            report.row(f"run start-up (resume), {size:,} messages", f"startup_ms_{size}", median(startup), "ms")
            report.row(
                f"first step on the raw history (compacts if over the window), {size:,}",
                f"first_step_ms_{size}",
                median(first),
                "ms",
            )
            per_step_calls, run_calls = await count_store_calls(store, history, args.steps, scratch)
            per_method = {name: n for name, n in sorted(per_step_calls.items())}
            report.row(
                f"store calls per steady step, {size:,} messages",
                f"store_calls_per_step_{size}",
                sum(per_method.values()),
                "calls",
                digits=2,
            )
            report.note("  by method: " + (", ".join(f"{k} {v:.2f}" for k, v in per_method.items()) or "none"))
            report.note(
                f"  the whole run of {args.steps} steps: "
                + ", ".join(f"{k} {v}" for k, v in sorted(run_calls.items()))
                + " (start-up: the row, the tail, the prompt; end: the checkpoint)"
            )
            report.set(f"store_calls_by_method_{size}", {k: round(v, 3) for k, v in per_method.items()})
            report.set(f"store_calls_per_run_{size}", dict(sorted(run_calls.items())))
    finally:
        await store.close()


async def sdk_section(report: Report, args: argparse.Namespace, prompts: list[str], scratch: Path) -> None:
    import openai

    report.section(f"turns through the real openai client (v{openai.__version__}), loopback OpenAI-compatible stub")
    opencode_root = scratch / "opencode"
    notes = opencode_root / "project" / "notes.txt"
    # The same stub answers both: tether's turns call its no-op tool, opencode's its `read` tool on a small file.
    tools = {"noop": '{"n": %d}', "read": json.dumps({"filePath": str(notes), "limit": 12345}).replace("12345", "%d")}
    with openai_stub(tools, scratch / "stub.log") as url:
        before = stub_stats(url)
        times, compactions = await tether_turns(url, prompts, scratch)
        after = stub_stats(url)
        report.note(
            f"tether: {len(prompts)} turns, {after['requests'] - before['requests']} model requests, "
            f"{after['tool_calls'] - before['tool_calls']} of them answered with a tool call (warm-up turn "
            f"included), {compactions} compactions"
        )
        report_turns(report, "tether", "sdk_turn", times)
        report.set("sdk_turns", len(times))
        report.set("sdk_requests", after["requests"] - before["requests"])
        report.set("sdk_tool_calls", after["tool_calls"] - before["tool_calls"])
        if len(times) != 200:
            report.set("sdk_turn_ms_200", None)

        report.section("opencode, the peer: the same stub, the same prompts, one session over its HTTP API")
        binary = args.opencode or (None if args.quick else shutil.which("opencode"))
        if binary is None:
            why = "--quick" if args.quick else "no opencode on PATH"
            report.note(
                f"skipped ({why}): pass --opencode PATH (npm install opencode-ai in a directory outside the "
                "repository; the binary is node_modules/.bin/opencode)"
            )
            report.set("opencode_skipped", why)
            return
        server = None
        try:
            version = opencode_version(binary)
            notes.parent.mkdir(parents=True, exist_ok=True)
            notes.write_text("".join(f"line {i}\n" for i in range(40)))
            server = OpencodeServer(binary, url, opencode_root)
            server.start()
            settled = server.settle()
            before = stub_stats(url)
            oc_times = opencode_turns(server, prompts)
            after = stub_stats(url)
        except (BenchError, OSError, ValueError) as e:
            report.note(f"skipped: opencode did not run: {e}")
            report.set("opencode_skipped", str(e)[:500])
            return
        finally:
            if server is not None:
                server.stop()
        report.note(
            f"opencode {version}: {len(prompts)} turns, {after['requests'] - before['requests']} model requests, "
            f"{after['tool_calls'] - before['tool_calls']} of them answered with a tool call (warm-up turn and "
            "title requests included); timed from the HTTP client, which waits for opencode's loop to finish; "
            f"after {settled:.0f} s waiting for its start-up dependency install"
        )
        report_turns(report, "opencode", "opencode_turn", oc_times)
        report.set("opencode_version", version)
        report.set("opencode_skipped", None)
        if len(oc_times) != 200:
            report.set("opencode_turn_ms_200", None)
        ratio = median(oc_times) / median(times)
        report.row("opencode's median turn over tether's", "opencode_vs_tether_median", ratio, "x", digits=2)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="tau-bench trajectories JSON (default: ../shared/data/...)")
    parser.add_argument("--steps", type=int, default=10, help="steps per run (each adds two entries)")
    parser.add_argument("--runs", type=int, default=20, help="runs per history size")
    parser.add_argument("--turns", type=int, default=200, help="turns of the SDK session (and opencode's)")
    parser.add_argument("--opencode", help="the opencode binary (default: opencode on PATH; --quick: none)")
    parser.add_argument("--quick", action="store_true", help="a small run, for tests")
    parser.add_argument("--generated", action="store_true", help="generated messages even if the data file exists")
    parser.add_argument("--dir", help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.runs, args.turns = 10, 1, 30
    if args.turns < 10:
        parser.error("--turns must be at least 10")
    report = Report(
        targets=[
            Target("step_ms_10", "<=", 1),
            Target("step_ms_10000", "<=", 5),
            Target("store_calls_per_step_10", "<=", 2),
            Target("store_calls_per_step_10000", "<=", 2),
            Target("sdk_turn_growth_ms", "<=", 0.1),
            Target("stream_checkpoint_overhead_ratio", "<=", 1.2),
        ]
    )
    try:
        data = load_chat_data(args.data, force_generated=args.generated)
        prompts = user_prompts(data.trajectories, args.turns)
    except BenchError as e:
        print(f"bench/loop.py: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    report.set("data_source", data.source)
    report.set("quick", args.quick)
    report.set("cpus", os.cpu_count())
    report.set("loadavg_start", [round(x, 2) for x in os.getloadavg()])
    with scratch_dir(args.dir) as scratch:
        await step_section(report, args, data, scratch)
        await sdk_section(report, args, prompts, scratch)
        await stream_section(report, args, scratch)
    if args.quick:
        # --quick measures 1,000 messages and 30 turns: no figures for those targets.
        report.set("step_ms_10000", None)
        report.set("store_calls_per_step_10000", None)
    report.set("loadavg_end", [round(x, 2) for x in os.getloadavg()])
    report.finish()


if __name__ == "__main__":
    asyncio.run(main())
