"""The REPL process of the RLM sandbox, run as `python -I -S -B repl_process.py` by `tether.rlm.sandbox`. It confines
itself (`confine.py`, loaded by path: tether is not importable here), loads `context` from its work
directory, then runs code blocks sent as JSON lines, asking the parent for sub-model calls over the same pipes.

Protocol, one JSON object a line. Parent to child: ``init`` (first), ``exec``, ``get_var``, ``llm_result``.
Child to parent: ``ready`` (with the layers that hold), ``llm`` (prompts to answer), ``result``, ``var``.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import io
import json
import linecache
import math
import os
import resource
import signal
import sys
import threading
import traceback
from typing import Any


class CpuTimeExceeded(Exception):
    """A block used more CPU time than a block may."""


class _Capture(io.TextIOBase):
    """stdout and stderr of a block: keeps the first `limit` characters and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        s = str(s)
        self.total += len(s)
        room = self.limit - self.kept
        if room > 0:
            piece = s[:room]
            self.parts.append(piece)
            self.kept += len(piece)
        return len(s)

    def getvalue(self) -> str:
        return "".join(self.parts)


class _Channel:
    """JSON lines over the two descriptors the parent gave us, moved away from 0 and 1 so that a block
    writing to fd 1 (os.write, a C extension) cannot corrupt the protocol."""

    def __init__(self) -> None:
        self._in = open(os.dup(0), "rb", buffering=1 << 16)  # noqa: SIM115 - held for the process lifetime
        self._out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        view = memoryview(data)
        while view:
            view = view[os.write(self._out, view) :]

    def receive(self) -> dict[str, Any] | None:
        line = self._in.readline()
        if not line:
            return None
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("protocol: expected a JSON object")
        return message


class Repl:
    def __init__(self, channel: _Channel, context: str, *, output_chars: int, cpu_seconds_per_block: int) -> None:
        self.channel = channel
        self.output_chars = output_chars
        self.cpu_seconds_per_block = cpu_seconds_per_block
        self.blocks = 0
        self.running = False
        self.final: str | None = None
        self.namespace: dict[str, Any] = {
            "__name__": "__repl__",
            "__builtins__": builtins,
            "context": context,
            "llm_query": self.llm_query,
            "llm_query_batched": self.llm_query_batched,
            "FINAL": self.final_answer,
            "FINAL_VAR": self.final_var,
            "SHOW_VARS": self.show_vars,
        }
        self._reserved = set(self.namespace)
        # One request on the pipe at a time, or threads in the model's code would take each other's answers.
        self._asking = threading.Lock()
        signal.signal(signal.SIGXCPU, self._on_cpu_limit)

    # --- functions the model's code calls ---

    def llm_query(self, prompt: str) -> str:
        """Ask a sub-model one prompt; returns its answer as text."""
        return self._ask([str(prompt)])[0]

    def llm_query_batched(self, prompts: list[str]) -> list[str]:
        """Ask a sub-model several independent prompts at once; answers come back in the same order."""
        if isinstance(prompts, str):
            raise TypeError("llm_query_batched takes a list of prompts; use llm_query for one")
        return self._ask([str(p) for p in prompts])

    def final_answer(self, answer: Any) -> None:
        self.final = str(answer)

    def final_var(self, name: Any) -> None:
        # FINAL_VAR("x") names a variable; models also write FINAL_VAR(x) in code, passing the value itself.
        if isinstance(name, str) and name.strip().strip("'\"") in self.namespace:
            self.final = str(self.namespace[name.strip().strip("'\"")])
        else:
            self.final = str(name)

    def show_vars(self) -> dict[str, str]:
        return {
            k: type(v).__name__ for k, v in self.namespace.items() if k not in self._reserved and not k.startswith("_")
        }

    def _ask(self, prompts: list[str]) -> list[str]:
        if not prompts:
            return []
        with self._asking:
            self.channel.send({"op": "llm", "prompts": prompts})
            reply = self.channel.receive()
        if reply is None:
            raise SystemExit(0)
        if not reply.get("ok"):
            raise RuntimeError(str(reply.get("error", "sub-model call failed")))
        texts = reply.get("texts")
        if not isinstance(texts, list) or len(texts) != len(prompts):
            raise RuntimeError("sub-model call returned a malformed answer")
        return [str(t) for t in texts]

    # --- running blocks ---

    def _on_cpu_limit(self, signum: int, frame: Any) -> None:
        if self.running:
            raise CpuTimeExceeded(
                f"the block used more than {self.cpu_seconds_per_block} s of CPU time and was stopped"
            )

    def _arm_cpu_limit(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        # Rounded up: rounding the time used so far down could leave a block a sliver of its budget (1.98 s
        # used, a 1 s budget, a soft limit of 2 s: the next block was stopped at once).
        soft = math.ceil(usage.ru_utime + usage.ru_stime + self.cpu_seconds_per_block)
        if hard != resource.RLIM_INFINITY:
            # a second below the hard limit, where the kernel kills without a word: the last block of the
            # process's total is interrupted like any other (and killed only if it will not stop)
            soft = min(soft, max(hard - 1, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    def run(self, code: str) -> dict[str, Any]:
        self.blocks += 1
        filename = f"<block {self.blocks}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        capture = _Capture(self.output_chars)
        self.final = None
        error: str | None = None
        saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = capture
        try:
            self._arm_cpu_limit()
            self.running = True
            tree = ast.parse(code, filename, "exec")
            # Like an interactive prompt, show the value of a trailing expression.
            last = tree.body[-1] if tree.body else None
            if isinstance(last, ast.Expr):
                tree.body.pop()
            exec(compile(tree, filename, "exec"), self.namespace)
            if isinstance(last, ast.Expr):
                value = eval(compile(ast.Expression(last.value), filename, "eval"), self.namespace)
                if value is not None:
                    print(repr(value))
        except BaseException as exc:
            self.running = False
            error = _format_error(exc, filename)
        finally:
            self.running = False
            sys.stdout, sys.stderr = saved
        return {
            "op": "result",
            "output": capture.getvalue(),
            "output_chars": capture.total,
            "error": error,
            "final": self.final,
        }

    def get_var(self, name: str) -> dict[str, Any]:
        name = name.strip().strip("'\"")
        if name in self._reserved or name not in self.namespace:
            return {"op": "var", "found": False, "value": None}
        return {"op": "var", "found": True, "value": str(self.namespace[name])}


def _format_error(exc: BaseException, filename: str, limit: int = 4000) -> str:
    if isinstance(exc, SyntaxError):
        text = "".join(traceback.format_exception_only(type(exc), exc))
    else:
        # Show only the frames of the model's own code, not this file's machinery.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != filename:
            tb = tb.tb_next
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    return text if len(text) <= limit else text[: limit // 2] + "\n[...]\n" + text[-limit // 2 :]


def _load_confine() -> Any:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "confine.py")
    spec = importlib.util.spec_from_file_location("_tether_confine", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks the module up while building the classes
    spec.loader.exec_module(module)
    return module


def main() -> None:
    channel = _Channel()
    init = channel.receive()
    if init is None or init.get("op") != "init":
        raise SystemExit("protocol: the first message must be init")
    confine = _load_confine()
    policy = confine.Policy(**{**init["policy"], "read_roots": tuple(init["policy"].get("read_roots", ()))})
    os.chdir(policy.workdir)
    # Read before confining: a scratch tmpfs mounted over the work directory hides the file.
    with open(init["context_file"], encoding="utf-8", errors="replace") as f:
        context = f.read()
    layers = confine.confine(policy)
    repl = Repl(
        channel,
        context,
        output_chars=int(init["output_chars"]),
        cpu_seconds_per_block=int(init["cpu_seconds_per_block"]),
    )
    channel.send(
        {
            "op": "ready",
            "layers": [[layer.name, layer.active, layer.detail] for layer in layers],
            "context_chars": len(context),
        }
    )
    while (message := channel.receive()) is not None:
        op = message.get("op")
        if op == "exec":
            channel.send(repl.run(str(message.get("code", ""))))
        elif op == "get_var":
            channel.send(repl.get_var(str(message.get("name", ""))))
        else:
            raise SystemExit(f"protocol: unexpected {op!r}")


if __name__ == "__main__":
    main()
