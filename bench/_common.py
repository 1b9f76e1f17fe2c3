"""What every benchmark in bench/ shares: where the input data and the scratch directory are, realistic chat
messages (tau-bench trajectories, or generated ones of the same shape), timing and medians, peak RSS of a fresh
subprocess, and the report: readable rows with PASS/FAIL against targets, then one JSON object as the last line."""

from __future__ import annotations

import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tether.messages import Message, Part, TextPart, ToolCallPart, ToolResultPart

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_ENV = "TETHER_BENCH_DATA"
TAU_FILE = "tau-airline-trajectories.json"
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / TAU_FILE

ChatMessage = dict[str, Any]
"""One message in OpenAI chat format: system, user, assistant (maybe with `tool_calls`) or tool."""


class BenchError(Exception):
    """A benchmark cannot run as asked (missing or unreadable input, bad option); the message says why."""


# --- input data ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatData:
    trajectories: list[list[ChatMessage]]
    source: str
    """``tau:<path>`` or ``generated``: printed and put in the JSON, since the figures depend on it."""


def load_chat_data(cli_path: str | None, *, force_generated: bool = False) -> ChatData:
    """Trajectories from `--data PATH`, else `$TETHER_BENCH_DATA`, else ../shared/data next to the repo.

    A path the user named that is missing is an error (a silent fallback would change the figures); when
    the default file is absent, generated messages of the same shape stand in and the source says so."""
    if force_generated:
        return ChatData(generate_trajectories(), "generated")
    named = cli_path or os.environ.get(DATA_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            how = "--data" if cli_path else f"${DATA_ENV}"
            raise BenchError(
                f"{how} names {path}, which is not a file. It should be tau-bench's "
                f"historical_trajectories/gpt-4o-airline.json (github.com/sierra-research/tau-bench)."
            )
        return ChatData(load_tau(path), f"tau:{path}")
    if DEFAULT_DATA.is_file():
        return ChatData(load_tau(DEFAULT_DATA), f"tau:{DEFAULT_DATA}")
    return ChatData(generate_trajectories(), "generated")


def load_tau(path: Path) -> list[list[ChatMessage]]:
    """The `traj` lists of a tau-bench trajectory file, checked enough to fail clearly on a wrong file."""
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise BenchError(f"cannot read {path} as JSON: {e}") from None
    if not isinstance(raw, list) or not raw:
        raise BenchError(f"{path} is not a tau-bench trajectory file (expected a non-empty JSON list)")
    out: list[list[ChatMessage]] = []
    for i, item in enumerate(raw):
        traj = item.get("traj") if isinstance(item, dict) else None
        if not isinstance(traj, list) or not all(isinstance(m, dict) and m.get("role") for m in traj):
            raise BenchError(f"{path}: item {i} has no `traj` list of chat messages")
        out.append(traj)
    return out


_WORDS = [
    "flight",
    "reservation",
    "booking",
    "passenger",
    "baggage",
    "cabin",
    "economy",
    "business",
    "refund",
    "cancel",
    "change",
    "date",
    "certificate",
    "payment",
    "card",
    "insurance",
    "origin",
    "destination",
    "airport",
    "delay",
    "seat",
    "upgrade",
    "policy",
    "confirm",
    "please",
    "thank",
    "you",
    "could",
    "would",
    "the",
    "a",
    "of",
    "to",
    "and",
    "for",
    "with",
    "your",
    "my",
    "is",
    "are",
    "this",
    "that",
    "on",
    "in",
    "at",
]


def generate_trajectories(count: int = 200, seed: int = 7) -> list[list[ChatMessage]]:
    """Airline-support conversations shaped and sized like tau-bench's (a ~6 kB system prompt, user turns of
    ~130 bytes, assistant turns of ~330, tool results of ~850), for when the real file is not there."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "."

    system = "# Airline Agent Policy\n\n" + "\n\n".join(words(40) for _ in range(24))
    trajectories: list[list[ChatMessage]] = []
    for t in range(count):
        traj: list[ChatMessage] = [{"role": "system", "content": system}]
        for turn in range(rng.randint(8, 16)):
            traj.append({"role": "user", "content": words(rng.randint(8, 40))})
            if rng.random() < 0.45:
                call_id = f"call_{t:04d}_{turn:02d}"
                name = rng.choice(("get_user_details", "get_reservation_details", "search_direct_flight"))
                args = json.dumps({"user_id": f"user_{rng.randint(1000, 9999)}", "date": "2024-05-20"})
                traj.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
                        ],
                    }
                )
                result = [
                    {"flight_number": f"HAT{rng.randint(1, 300):03d}", "status": "available", "note": words(12)}
                    for _ in range(rng.randint(1, 6))
                ]
                traj.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": json.dumps(result)})
            traj.append({"role": "assistant", "content": words(rng.randint(20, 90))})
        trajectories.append(traj)
    return trajectories


def long_conversation(trajectories: Sequence[list[ChatMessage]], n: int) -> list[ChatMessage]:
    """`n` messages of one long session: the first system prompt once, then every trajectory's other
    messages in order, cycled (whole trajectories, so tool calls stay next to their results)."""
    if n < 1:
        return []
    first_system = next((m for t in trajectories for m in t if m.get("role") == "system"), None)
    body = [m for t in trajectories for m in t if m.get("role") != "system"]
    if not body:
        raise BenchError("the trajectories hold no user, assistant or tool messages")
    out: list[ChatMessage] = [first_system] if first_system is not None else []
    while len(out) < n:
        out.extend(body[: n - len(out)])
    return out


def to_message(chat: ChatMessage) -> Message:
    """A tether `Message` from an OpenAI chat-format message."""
    role = chat.get("role")
    content = chat.get("content") or ""
    if role in ("system", "user"):
        return Message(role=role, parts=[TextPart(text=content)] if content else [])
    if role == "assistant":
        parts: list[Part] = [TextPart(text=content)] if content else []
        for call in chat.get("tool_calls") or []:
            fn = call.get("function") or {}
            parts.append(ToolCallPart.from_raw(call.get("id", ""), fn.get("name", ""), fn.get("arguments") or ""))
        return Message(role="assistant", parts=parts)
    if role == "tool":
        return Message.tool(
            ToolResultPart(call_id=chat.get("tool_call_id", ""), content=content, name=chat.get("name"))
        )
    raise BenchError(f"unknown chat role {role!r}")


# --- scratch space ------------------------------------------------------------------------------------


@contextmanager
def scratch_dir(base: str | None, *, keep: bool = False) -> Iterator[Path]:
    """A fresh directory for a run's files, under `base` (default: the repo's .bench-out/, which sits on
    the disk users keep their data on; /tmp is often tmpfs, where fsync costs nothing). Removed afterwards
    unless `keep`."""
    root = Path(base).expanduser() if base else REPO_ROOT / ".bench-out"
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def filesystem_of(path: Path) -> str:
    """The mount point and type holding `path` (Linux /proc/mounts), e.g. ``/ (ext4)``; ``unknown`` elsewhere."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "unknown"
    real = str(path.resolve())
    best = ("", "unknown")
    for parts in mounts:
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[0]):
            best = (mount, parts[2])
    return f"{best[0] or '?'} ({best[1]})"


# --- timing -------------------------------------------------------------------------------------------


def time_sync(fn: Callable[[], object], repeat: int, *, warmup: int = 1) -> list[int]:
    """Nanoseconds of each of `repeat` calls of `fn`, after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    out: list[int] = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


async def time_async(fn: Callable[[], Awaitable[object]], repeat: int, *, warmup: int = 1) -> list[int]:
    """Nanoseconds of each of `repeat` awaits of `fn()`, the way a caller awaits it, after `warmup` untimed."""
    for _ in range(warmup):
        await fn()
    out: list[int] = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        await fn()
        out.append(time.perf_counter_ns() - t0)
    return out


def us(ns: float) -> float:
    return ns / 1_000


def ms(ns: float) -> float:
    return ns / 1_000_000


def median(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("no samples")
    return float(statistics.median(samples))


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) by nearest rank."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def tenths(samples: Sequence[float]) -> list[float]:
    """The median of each tenth of a run, in order: how the cost grows as the run goes on."""
    n = len(samples)
    if n < 10:
        return [median(samples)] if samples else []
    return [median(samples[i * n // 10 : (i + 1) * n // 10]) for i in range(10)]


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys over xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return my - slope * mx, slope


# --- memory -------------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak resident set so far, in MB.

    On Linux this is VmHWM, which starts afresh at exec; ru_maxrss does not (a child spawned by a big
    parent reports the parent's peak), so it is only the fallback elsewhere (KiB on Linux, bytes on macOS)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / 1024 if sys.platform == "darwin" else peak / 1024


def run_json_child(args: Sequence[str], *, timeout: float = 300.0) -> dict[str, Any]:
    """Run ``python <args>`` in a fresh interpreter and return the JSON object on its last stdout line.
    Fresh, because peak RSS and cold-start timings mean nothing in a process that already did other work."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise BenchError(f"child {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    result = json.loads(lines[-1])
    if not isinstance(result, dict):
        raise BenchError(f"child {' '.join(args)} printed {lines[-1]!r}, not a JSON object")
    return result


# --- the report ---------------------------------------------------------------------------------------

Op = Literal["<=", ">="]


@dataclass(frozen=True)
class Target:
    key: str
    op: Op
    bound: float

    def passes(self, value: float) -> bool:
        return value <= self.bound if self.op == "<=" else value >= self.bound

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"


@dataclass
class Report:
    """Collects figures under their JSON keys while printing one readable row per figure, with PASS/FAIL
    where a target applies; `finish` prints the target summary and, last, the JSON line."""

    targets: Sequence[Target] = ()
    figures: dict[str, Any] = field(default_factory=dict)

    def section(self, title: str) -> None:
        print(f"\n== {title}", flush=True)

    def note(self, text: str) -> None:
        print(f"   {text}", flush=True)

    def set(self, key: str, value: Any) -> None:
        """Record a figure for the JSON without printing a row."""
        self.figures[key] = value

    def row(self, label: str, key: str, value: float | None, unit: str, *, digits: int = 1) -> None:
        self.figures[key] = None if value is None else round(value, 4)
        shown = "n/a" if value is None else f"{value:,.{digits}f} {unit}"
        verdict = ""
        target = self._target(key)
        if target is not None:
            verdict = f"target {target}: " + ("n/a" if value is None else ("PASS" if target.passes(value) else "FAIL"))
        print(f"   {label:<54} {shown:>14}   {verdict}".rstrip(), flush=True)

    def _target(self, key: str) -> Target | None:
        return next((t for t in self.targets if t.key == key), None)

    def finish(self) -> dict[str, Any]:
        results: dict[str, Any] = {}
        failed: list[str] = []
        for t in self.targets:
            value = self.figures.get(t.key)
            ok = None if value is None else t.passes(value)
            results[t.key] = {"target": str(t), "value": value, "pass": ok}
            if ok is False:
                failed.append(t.key)
        self.figures["targets"] = results
        self.figures["failed_targets"] = failed
        measured = sum(1 for r in results.values() if r["pass"] is not None)
        print(
            f"\n== targets: {measured - len(failed)}/{measured} pass"
            + (f"; FAIL: {', '.join(failed)}" if failed else "")
        )
        print(json.dumps(self.figures, separators=(",", ":")), flush=True)
        return self.figures
