"""The RLM driver (Recursive Language Models; Zhang, Kraska and Khattab, 2025). The root model never sees
the oversized text: it sees a REPL that holds it as `context`, writes code to slice, search and count it,
sends pieces to sub-models with `llm_query`, and ends with FINAL(answer) or FINAL_VAR(name). When that
fails (limits hit, the REPL keeps dying, the model writes no code), a chunked map-reduce answers instead.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable

import msgspec

from ..context.tokens import MAX_CHARS_PER_TOKEN, TokenCounter, count_message, tokens_over
from ..errors import AuthError, ContextOverflow, ProviderError, SandboxError
from ..events import RlmEvent, RlmFinished, RlmProgress, RlmStage
from ..messages import Message, Usage
from ..providers.base import ModelRequest, ModelResponse, Provider, complete
from .mapreduce import call_budgets, map_reduce
from .sandbox import BlockResult, Sandbox, SandboxLayer, SandboxLimits
from .sizing import loaded_counter, text_budget


class RlmLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on one RLM run. `max_tokens` and `wall_seconds` bound the recursive loop (root and sub-model
    calls); the map-reduce fallback, when needed, runs after it and costs about one pass over the text.
    `context_window` and `max_output_tokens` describe the models (root and sub-models alike): every call
    keeps `max_output_tokens` free for its reply, and the text a sub-call carries is cut to the margin of
    `sizing.TEXT_SHARE`, counted by the model's own tokenizer where its provider offers one."""

    max_iterations: int = 15
    max_sub_calls: int = 50
    max_tokens: int = 1_000_000
    wall_seconds: float = 600.0
    context_window: int = 128_000
    max_output_tokens: int = 4_096
    sub_call_concurrency: int = 4
    max_repl_restarts: int = 2
    max_replies_without_code: int = 3
    sandbox: SandboxLimits = msgspec.field(default_factory=SandboxLimits)


class RlmResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer and what it cost. `fallback` says the answer came from map-reduce; `fallback_reason`
    why RLM gave up. `layers` are the sandbox layers that held (empty when no REPL ran)."""

    answer: str
    iterations: int
    sub_calls: int
    usage: Usage
    duration_s: float
    fallback: bool = False
    fallback_reason: str | None = None
    layers: list[SandboxLayer] = msgspec.field(default_factory=list)

    @property
    def input_tokens(self) -> int:
        return self.usage.input_tokens

    @property
    def output_tokens(self) -> int:
        return self.usage.output_tokens


EventSink = Callable[[RlmEvent], None]

SYSTEM_PROMPT = """\
You answer a question about a text that is too large to read at once. The text is loaded in a Python REPL \
as the string variable `context`. You cannot see it except through code you run.

Write Python in fenced blocks that start with ```repl and end with ```. Blocks run in the same REPL, so \
variables persist between them, and you see what each block prints (only the first {output_chars} \
characters). Only the standard library is available: no network, no files outside the working directory.

The REPL gives you:
- `context`: the text, a str.
- `llm_query(prompt)`: asks a sub-model and returns its answer as a str. The sub-model sees only the \
prompt you pass, which may hold up to about {sub_chars} characters: put the piece of `context` it must \
read into the prompt, with the question.
- `llm_query_batched(prompts)`: several independent prompts at once; a list of answers, in order. Faster.
- `SHOW_VARS()`: the variables you have made.

Work like this: look at the size and shape of `context` (its length, its first lines, a few slices); \
narrow it down with code (str.find, re, split, counting); send the pieces that must be read to sub-models; \
combine their answers in code. Print only what you need to see.

You have at most {max_iterations} replies and {max_sub_calls} sub-model calls in all.

When you know the answer, write FINAL(your answer) on a line of its own, outside any code block, or \
FINAL_VAR(name) to answer with the value of a variable you made in the REPL. Inside a block you can call \
FINAL(value) or FINAL_VAR("name") too. The person who asked cannot see the REPL: the answer must be \
complete by itself."""

SUB_SYSTEM = "Answer from the text you are given, precisely and completely. Say so when it does not hold the answer."

_NO_CODE = (
    "Your reply had no ```repl block and no FINAL(...). Write code in a ```repl block to examine `context`, "
    "or give your answer with FINAL(...)."
)
_CODE_BLOCK = re.compile(r"```(?:repl|python|py)[ \t]*\r?\n(.*?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_FINAL_VAR = re.compile(r"^[ \t]*FINAL_VAR\(\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?\s*\)", re.MULTILINE)
_FINAL = re.compile(r"^[ \t]*FINAL\(", re.MULTILINE)


def find_code_blocks(reply: str) -> list[str]:
    """The ```repl (or ```python) blocks of a reply, in order."""
    return [m.group(1).strip("\n") for m in _CODE_BLOCK.finditer(reply) if m.group(1).strip()]


def find_final(reply: str) -> tuple[str, str] | None:
    """``("var", name)`` for FINAL_VAR(name), ``("answer", text)`` for FINAL(text), or None. Only lines
    outside code fences count, and FINAL's parentheses are balanced (the answer may contain some)."""
    prose = _ANY_FENCE.sub("", reply)
    if match := _FINAL_VAR.search(prose):
        return "var", match.group(1)
    if match := _FINAL.search(prose):
        depth, start = 1, match.end()
        for i in range(start, len(prose)):
            if prose[i] == "(":
                depth += 1
            elif prose[i] == ")":
                depth -= 1
                if depth == 0:
                    return "answer", prose[start:i].strip()
        return "answer", prose[start:].strip()  # unclosed: the model ran out of tokens mid-answer
    return None


class _GiveUp(Exception):
    """The recursive loop cannot finish; the message says why, and map-reduce takes over."""


class _Run:
    """One run's state: the counters, the usage so far, the clock, and the calls that move them."""

    def __init__(
        self,
        provider: Provider,
        *,
        model: str,
        sub_model: str,
        limits: RlmLimits,
        on_event: EventSink | None,
        counter: TokenCounter,
        sub_counter: TokenCounter,
    ) -> None:
        self.provider = provider
        self.model = model
        self.sub_model = sub_model
        self.limits = limits
        self.on_event = on_event
        self.counter = counter
        self.sub_counter = sub_counter
        self.usage = Usage()
        self.iterations = 0
        self.sub_calls = 0
        self.started = time.monotonic()
        self.fatal: ProviderError | None = None
        self.layers: list[SandboxLayer] = []
        self._gate = asyncio.Semaphore(max(1, limits.sub_call_concurrency))

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def prompt_tokens(self) -> int:
        """Input tokens one root call may hold: the window less the reply and a margin for the estimate."""
        window = self.limits.context_window
        return max(256, window - self.limits.max_output_tokens - max(256, window // 50))

    @property
    def sub_prompt_tokens(self) -> int:
        """Tokens of prompt one `llm_query` may send, by the sub-model's counter (see `sizing.text_budget`)."""
        limits = self.limits
        return text_budget(limits.context_window, limits.max_output_tokens, self.sub_counter.count(SUB_SYSTEM))

    def emit(self, stage: RlmStage, detail: str = "", *, done: int | None = None, total: int | None = None) -> None:
        if self.on_event is not None:
            self.on_event(
                RlmProgress(
                    stage=stage,
                    detail=detail,
                    iteration=self.iterations,
                    sub_calls=self.sub_calls,
                    input_tokens=self.usage.input_tokens,
                    output_tokens=self.usage.output_tokens,
                    elapsed_s=round(self.elapsed, 3),
                    done=done,
                    total=total,
                )
            )

    async def call(self, request: ModelRequest) -> ModelResponse:
        response = await complete(self.provider, request)
        self.usage = self.usage + response.usage
        return response

    async def ask(self, system: str, prompt: str) -> str:
        """One plain call to the sub-model (map-reduce uses it too)."""
        request = ModelRequest(
            model=self.sub_model,
            system=system,
            messages=[Message.user(prompt)],
            max_output_tokens=self.limits.max_output_tokens,
        )
        return (await self.call(request)).message.text

    async def answer_prompts(self, prompts: list[str]) -> list[str]:
        """The REPL's llm_query/llm_query_batched. Refusals reach the model's code as RuntimeError."""
        limit = self.limits.max_sub_calls
        if self.sub_calls + len(prompts) > limit:
            raise RuntimeError(
                f"sub-model call limit: {self.sub_calls} of {limit} calls used, {len(prompts)} more asked; "
                "finish with what you have"
            )
        if self.usage.total_tokens >= self.limits.max_tokens:
            raise RuntimeError("token budget spent; finish with what you have")
        allowed = self.sub_prompt_tokens
        for n, prompt in enumerate(prompts):
            # Counted only where its size leaves it open: the whole of a 100 MB context would take a while.
            if tokens_over(prompt, allowed, self.sub_counter):
                size = self.sub_counter.count(prompt) if len(prompt) <= MAX_CHARS_PER_TOKEN * allowed else None
                measure = f"about {size:,} tokens" if size is not None else f"{len(prompt):,} characters"
                raise RuntimeError(
                    f"prompt {n} is {measure}; a sub-model takes at most about {allowed:,} tokens. "
                    "Send a smaller piece of the context."
                )
        self.sub_calls += len(prompts)

        async def one(prompt: str) -> str:
            async with self._gate:
                try:
                    return await self.ask(SUB_SYSTEM, prompt)
                except AuthError as exc:
                    self.fatal = exc
                    raise
                except ContextOverflow as exc:
                    raise RuntimeError(f"the sub-model refused the prompt as too long: {exc}") from exc

        # Every call runs to its end (no orphan keeps spending after a sibling failed); the first failure
        # is what the model's code sees.
        answers = await asyncio.gather(*(one(p) for p in prompts), return_exceptions=True)
        self.emit("sub_calls", f"{len(prompts)} answered")
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return [a for a in answers if isinstance(a, str)]

    def result(self, answer: str, *, fallback_reason: str | None = None) -> RlmResult:
        result = RlmResult(
            answer=answer,
            iterations=self.iterations,
            sub_calls=self.sub_calls,
            usage=self.usage,
            duration_s=round(self.elapsed, 3),
            fallback=fallback_reason is not None,
            fallback_reason=fallback_reason,
            layers=self.layers,
        )
        if self.on_event is not None:
            self.on_event(
                RlmFinished(
                    iterations=result.iterations,
                    sub_calls=result.sub_calls,
                    input_tokens=result.input_tokens,
                    output_tokens=result.output_tokens,
                    duration_s=result.duration_s,
                    answer_chars=len(answer),
                    fallback=result.fallback,
                    fallback_reason=fallback_reason,
                )
            )
        return result


async def rlm_answer(
    text: str,
    question: str,
    provider: Provider,
    *,
    model: str,
    sub_model: str | None = None,
    limits: RlmLimits | None = None,
    on_event: EventSink | None = None,
    use_repl: bool = True,
    counter: TokenCounter | None = None,
) -> RlmResult:
    """Answer `question` about `text`, which may be far larger than the model's window.

    `model` writes the REPL code; `sub_model` (default: the same) answers `llm_query`. With
    ``use_repl=False`` (a model that cannot write code) the map-reduce runs directly. Calls are sized by
    `counter` (default: each model's own, `sizing.model_counter`). Provider errors that no retry fixes
    (authentication, a malformed request) propagate; everything else ends in an answer.
    """
    limits = limits or RlmLimits()
    sub_model = sub_model or model
    root_counter = counter or await loaded_counter(provider, model)
    sub_counter = counter or (root_counter if sub_model == model else await loaded_counter(provider, sub_model))
    run = _Run(
        provider,
        model=model,
        sub_model=sub_model,
        limits=limits,
        on_event=on_event,
        counter=root_counter,
        sub_counter=sub_counter,
    )
    if not use_repl:
        reason = "REPL not used: the model cannot write code"
    else:
        try:
            async with asyncio.timeout(limits.wall_seconds):
                answer = await _recursive(run, text, question)
            return run.result(answer)
        except TimeoutError:
            reason = f"wall-clock limit of {limits.wall_seconds:g} s reached without FINAL"
        except _GiveUp as exc:
            reason = str(exc)
        if run.fatal is not None:
            raise run.fatal
    run.emit("fallback", reason)
    answer = await _map_reduce(run, text, question)
    return run.result(answer, fallback_reason=reason)


async def _recursive(run: _Run, text: str, question: str) -> str:
    """The loop: ask the root model, run its blocks, look for its answer, tell it what happened."""
    limits = run.limits
    # At about four characters a token, one block's output then takes at most a quarter of the window.
    output_chars = min(limits.sandbox.output_chars, max(1_000, run.prompt_tokens))
    repl = _Repl(run, text, msgspec.structs.replace(limits.sandbox, output_chars=output_chars))
    system = SYSTEM_PROMPT.format(
        output_chars=output_chars,
        sub_chars=_chars_for(text, run.sub_prompt_tokens, run.sub_counter),
        max_iterations=limits.max_iterations,
        max_sub_calls=limits.max_sub_calls,
    )
    messages = [Message.user(_opening(run, text, question))]
    replies_without_code = 0
    await repl.start()
    try:
        for iteration in range(1, limits.max_iterations + 1):
            run.iterations = iteration
            if run.usage.total_tokens >= limits.max_tokens:
                raise _GiveUp(f"token budget of {limits.max_tokens} spent without FINAL")
            run.emit("iteration")
            request = ModelRequest(
                model=run.model,
                system=system,
                messages=_fit(run, system, messages),
                max_output_tokens=limits.max_output_tokens,
            )
            try:
                reply = (await run.call(request)).message.text
            except ContextOverflow as exc:
                raise _GiveUp(f"the root conversation outgrew the window: {exc}") from exc
            messages.append(Message.assistant(reply or "(empty reply)"))

            blocks = find_code_blocks(reply)
            feedback, answer = await repl.run_blocks(blocks)
            if answer is None and (final := find_final(reply)) is not None:
                answer = await repl.final_answer(final, feedback)
            if answer is not None:
                return answer

            replies_without_code = 0 if blocks else replies_without_code + 1
            if replies_without_code >= limits.max_replies_without_code:
                raise _GiveUp(f"the model wrote no code in {replies_without_code} replies in a row")
            if not blocks and not feedback:
                feedback.append(_NO_CODE)
            messages.append(Message.user(_status(run, feedback)))
        raise _GiveUp(f"no FINAL after {limits.max_iterations} iterations")
    finally:
        await repl.close()


class _Repl:
    """The run's sandbox, replaced by a fresh one (variables lost, `context` reloaded) when it dies or
    hangs, up to `max_repl_restarts` times."""

    def __init__(self, run: _Run, text: str, limits: SandboxLimits) -> None:
        self.run = run
        self.text = text
        self.limits = limits
        self.restarts = 0
        self.sandbox: Sandbox | None = None

    async def start(self) -> None:
        sandbox = Sandbox(self.text, llm=self.run.answer_prompts, limits=self.limits)
        try:
            await sandbox.start()
        except SandboxError as exc:
            raise _GiveUp(f"the REPL could not start: {exc}") from exc
        self.sandbox = sandbox
        if not self.run.layers:
            self.run.layers = sandbox.layers
            active = ", ".join(layer.name for layer in sandbox.layers if layer.active)
            self.run.emit("started", f"sandbox layers: {active}")

    async def close(self) -> None:
        if self.sandbox is not None:
            await self.sandbox.close()

    async def _failed(self, exc: SandboxError) -> str:
        """Restart after a failure, or give up; returns what the model is told."""
        if self.run.fatal is not None:
            raise self.run.fatal from exc
        self.restarts += 1
        if self.restarts > self.run.limits.max_repl_restarts:
            raise _GiveUp(f"the REPL failed {self.restarts} times; last: {exc}") from exc
        self.run.emit("repl_restart", str(exc).splitlines()[0])
        await self.close()
        await self.start()
        return f"{exc}\nThe REPL was restarted: `context` is loaded again, but the variables you made are gone."

    async def run_blocks(self, blocks: list[str]) -> tuple[list[str], str | None]:
        """Run the blocks in order until one answers or fails: what each showed, and the answer if any."""
        feedback: list[str] = []
        for n, code in enumerate(blocks, 1):
            assert self.sandbox is not None
            self.run.emit("block", f"block {n} of {len(blocks)}, {len(code)} characters")
            try:
                result = await self.sandbox.run(code)
            except SandboxError as exc:
                told = await self._failed(exc)
                feedback.append(f"Block {n} failed: {told} Blocks after this one did not run.")
                break
            if self.run.fatal is not None:
                raise self.run.fatal
            feedback.append(_show(n, result))
            if result.final is not None and result.final.strip():
                return feedback, result.final
        return feedback, None

    async def final_answer(self, final: tuple[str, str], feedback: list[str]) -> str | None:
        """The answer a FINAL/FINAL_VAR in the reply's prose gives, or None with the reason in `feedback`."""
        kind, value = final
        if kind == "answer":
            if not value:
                feedback.append("FINAL() was empty: put the answer inside the parentheses.")
            return value or None
        assert self.sandbox is not None
        try:
            found = await self.sandbox.get_var(value)
        except SandboxError as exc:
            feedback.append(f"FINAL_VAR({value}) failed: {await self._failed(exc)}")
            return None
        if found is None:
            feedback.append(f"FINAL_VAR({value}): there is no variable {value!r} in the REPL.")
        return found


def _opening(run: _Run, text: str, question: str) -> str:
    lines = text.count("\n") + 1
    tokens = int(len(text) / chars_per_token(text, run.counter))
    preview = text[:300].replace("```", "'''")
    return (
        f"The question: {question}\n\n"
        f"`context` holds {len(text):,} characters ({lines:,} lines, about {tokens:,} tokens). "
        f"It begins:\n```\n{preview}\n```\n\n"
        "You have not looked at it yet: start by exploring `context` with code, and answer only once you know."
    )


def _show(n: int, result: BlockResult) -> str:
    body = result.output
    if result.truncated:
        body += f"\n[... {result.output_chars - len(result.output):,} more characters not shown]"
    if result.error:
        body += ("\n" if body else "") + result.error
    return f"Output of block {n}:\n```\n{body.rstrip() or '(no output)'}\n```"


def _status(run: _Run, feedback: list[str]) -> str:
    limits = run.limits
    left = limits.max_iterations - run.iterations
    status = (
        f"Replies left: {left}. Sub-model calls used: {run.sub_calls} of {limits.max_sub_calls}. "
        f"Tokens used: {run.usage.total_tokens:,} of {limits.max_tokens:,}."
    )
    if left == 1:
        status += " This is your last reply: give FINAL(...) with the best answer you have."
    return "\n\n".join([*feedback, status])


def _fit(run: _Run, system: str, messages: list[Message]) -> list[Message]:
    """The conversation, with the oldest block outputs dropped while it is over the window. The question
    (first message) and the latest exchange are always kept."""
    budget = run.prompt_tokens - run.counter.count(system)
    sizes = [count_message(m, run.counter) for m in messages]
    total = sum(sizes)
    if total <= budget:
        return messages
    fitted = list(messages)
    for i in range(1, len(fitted) - 2):
        if total <= budget:
            break
        if fitted[i].role == "user":
            stub = Message.user("[the output of this step was removed to save space]")
            total -= sizes[i] - count_message(stub, run.counter)
            fitted[i] = stub
    return fitted


def chars_per_token(text: str, counter: TokenCounter, *, sample: int = 20_000) -> float:
    """Characters per token of `text`, counted exactly on up to three samples (start, middle, end): a
    100 MB text is measured in milliseconds, and a text that changes kind halfway is not judged by its head."""
    if len(text) <= 3 * sample:
        pieces = [text]
    else:
        middle = len(text) // 2
        pieces = [text[:sample], text[middle : middle + sample], text[-sample:]]
    chars = sum(len(p) for p in pieces)
    tokens = sum(counter.count(p) for p in pieces)
    return chars / tokens if chars and tokens else 4.0


def _chars_for(text: str, tokens: int, counter: TokenCounter) -> int:
    """About how many characters of `text` make `tokens` tokens."""
    return max(1, int(tokens * chars_per_token(text, counter)))


async def _map_reduce(run: _Run, text: str, question: str) -> str:
    limits = run.limits
    chunk_tokens, notes_tokens = call_budgets(
        question, run.sub_counter, window=limits.context_window, reply_tokens=limits.max_output_tokens
    )

    def progress(stage: str, done: int, total: int) -> None:
        run.emit("map" if stage == "map" else "reduce", done=done, total=total or None)

    return await map_reduce(
        text,
        question,
        run.ask,
        chunk_tokens=chunk_tokens,
        notes_tokens=notes_tokens,
        counter=run.sub_counter,
        concurrency=limits.sub_call_concurrency,
        progress=progress,
    )
