"""The RLM driver with a scripted model: the root's replies are scripted REPL code that really runs in the
sandbox, and sub-model calls are answered by a function of their prompt. The text is large and planted."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

from tether.errors import AuthError
from tether.messages import Usage
from tether.providers import ModelRequest, ScriptedProvider, ScriptedResponse
from tether.providers.scripted import ScriptItem
from tether.rlm import RlmEvent, RlmFinished, RlmLimits, RlmProgress, find_code_blocks, find_final, rlm_answer
from tether.rlm.engine import SUB_SYSTEM
from tether.rlm.mapreduce import ANSWER_SYSTEM, DIRECT_SYSTEM, MAP_SYSTEM, NOTHING
from tether.rlm.sandbox import SandboxLimits
from tether.rlm.sizing import TEMPLATE_TOKENS, text_budget

SECRET = "48151623"


def haystack(size: int = 2_000_000, *, seed: int = 7) -> str:
    """About `size` characters of log-like lines with one planted needle two thirds of the way in."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma", "omega"]
    lines: list[str] = []
    total = 0
    while total < size:
        line = f"{len(lines):07d} " + " ".join(rng.choice(words) for _ in range(12))
        lines.append(line)
        total += len(line) + 1
    lines.insert(len(lines) * 2 // 3, f"NOTICE the vault access code is {SECRET}, keep it safe")
    return "\n".join(lines)


def is_root(request: ModelRequest) -> bool:
    return bool(request.system and "Python REPL" in request.system)


def sub_answer(request: ModelRequest) -> str:
    """A sub-model that reads its prompt: it finds the code when the prompt holds it."""
    prompt = request.messages[-1].text
    if request.system == MAP_SYSTEM:
        found = re.search(r"access code is (\d+)", prompt)
        return f"the access code is {found.group(1)}" if found else NOTHING
    if request.system in (ANSWER_SYSTEM, DIRECT_SYSTEM):
        found = re.search(r"access code is (\d+)", prompt)
        return f"The vault access code is {found.group(1)}." if found else "unknown"
    found = re.search(r"access code is (\d+)", prompt)
    return f"The code is {found.group(1)}." if found else "I see no code."


def model(
    root_replies: list[ScriptItem],
    *,
    sub: Callable[[ModelRequest], str] = sub_answer,
    kind: type[ScriptedProvider] = ScriptedProvider,
) -> ScriptedProvider:
    replies = list(root_replies)

    def respond(request: ModelRequest) -> ScriptItem:
        if is_root(request):
            if not replies:
                raise AssertionError("the root model was asked more often than the script has replies")
            return replies.pop(0)
        return sub(request)

    return kind(respond)


def repl(code: str) -> str:
    return f"Let me look.\n```repl\n{code}\n```"


SEARCH = repl('i = context.find("access code")\nprint(i, len(context))\nsnippet = context[i - 300 : i + 300]')
ASK = repl('answer = llm_query("What is the vault access code? " + snippet)\nprint(answer)')


def root_requests(provider: ScriptedProvider) -> list[ModelRequest]:
    return [r for r in provider.requests if is_root(r)]


def sub_requests(provider: ScriptedProvider) -> list[ModelRequest]:
    return [r for r in provider.requests if r.system == SUB_SYSTEM]


def everything_sent(request: ModelRequest) -> str:
    return (request.system or "") + "".join(m.text for m in request.messages)


async def test_searches_the_text_asks_a_sub_model_and_returns_a_variable() -> None:
    text = haystack()
    provider = model([SEARCH, ASK, "I have it.\nFINAL_VAR(answer)"])
    events: list[RlmEvent] = []

    result = await rlm_answer(text, "What is the vault access code?", provider, model="m", on_event=events.append)

    assert result.answer == f"The code is {SECRET}."
    assert not result.fallback and result.fallback_reason is None
    assert result.iterations == 3 and result.sub_calls == 1
    # The recursion at work: the sub-model read the planted line, the root never saw it.
    assert SECRET in sub_requests(provider)[0].messages[0].text
    assert all(SECRET not in everything_sent(r) for r in root_requests(provider)[:2])
    assert len(text) > 1_000_000 and all(len(everything_sent(r)) < 20_000 for r in root_requests(provider))
    # The block output the root saw: the index of the needle and the length of the text.
    second = root_requests(provider)[1].messages[-1].text
    assert f"{text.find('access code')} {len(text)}" in second
    assert result.input_tokens > 0 and result.output_tokens > 0
    assert {layer.name for layer in result.layers} >= {"rlimits", "audit_hook"}

    stages = [e.stage for e in events if isinstance(e, RlmProgress)]
    assert stages[0] == "started" and stages.count("iteration") == 3 and "sub_calls" in stages
    assert isinstance(events[-1], RlmFinished) and events[-1].answer_chars == len(result.answer)
    assert events[-1].input_tokens == result.input_tokens


async def test_final_in_the_reply_text_ends_the_run() -> None:
    provider = model([SEARCH, ASK, f"The sub-model found it.\n\nFINAL(the code is {SECRET} (from the notice))"])
    result = await rlm_answer(haystack(200_000), "code?", provider, model="m")
    assert result.answer == f"the code is {SECRET} (from the notice)"
    assert result.iterations == 3


async def test_final_called_inside_a_block_ends_the_run() -> None:
    code = 'i = context.find("access code")\nparts = llm_query_batched([context[i-100:i+100], "nothing here"])\nFINAL(parts[0])'
    provider = model([repl(code)])
    result = await rlm_answer(haystack(300_000), "code?", provider, model="m")
    assert result.answer == f"The code is {SECRET}."
    assert result.iterations == 1 and result.sub_calls == 2


async def test_final_var_of_a_missing_variable_is_reported_back() -> None:
    provider = model(["FINAL_VAR(nothing_here)", repl("found = 'x'"), "FINAL_VAR(found)"])
    result = await rlm_answer("some text", "q?", provider, model="m")
    assert result.answer == "x"
    assert "no variable 'nothing_here'" in root_requests(provider)[1].messages[-1].text


async def test_errors_in_blocks_are_shown_to_the_model() -> None:
    provider = model([repl("undefined_name + 1"), "FINAL(done)"])
    await rlm_answer("text", "q?", provider, model="m")
    feedback = root_requests(provider)[1].messages[-1].text
    assert "NameError" in feedback and "undefined_name" in feedback


async def test_iteration_limit_then_map_reduce_fallback() -> None:
    text = haystack(60_000)
    provider = model([repl("print(len(context))")] * 3)
    limits = RlmLimits(max_iterations=3, context_window=8_000, max_output_tokens=500)
    events: list[RlmEvent] = []
    result = await rlm_answer(
        text, "What is the vault access code?", provider, model="m", limits=limits, on_event=events.append
    )

    assert result.fallback and result.fallback_reason == "no FINAL after 3 iterations"
    assert result.iterations == 3
    assert len(root_requests(provider)) == 3
    assert "last reply" in root_requests(provider)[2].messages[-1].text  # the model was told
    maps = [r for r in provider.requests if r.system == MAP_SYSTEM]
    assert len(maps) > 1  # the text really was cut into window-sized chunks
    assert result.answer == f"The vault access code is {SECRET}."
    assert any(isinstance(e, RlmProgress) and e.stage == "fallback" for e in events)
    assert any(isinstance(e, RlmProgress) and e.stage == "map" and e.total == len(maps) for e in events)


async def test_sub_call_limit_is_enforced() -> None:
    code = "got = []\nfor k in range(10):\n    got.append(llm_query(f'q{k}'))\nprint(len(got))"
    provider = model([repl(code), repl("print(llm_query_batched(['a', 'b']))"), "FINAL(partial)"])
    result = await rlm_answer("text", "q?", provider, model="m", limits=RlmLimits(max_sub_calls=3))
    assert result.sub_calls == 3
    assert len(sub_requests(provider)) == 3
    feedback = root_requests(provider)[1].messages[-1].text
    assert "sub-model call limit: 3 of 3 calls used" in feedback
    assert "Sub-model calls used: 3 of 3" in feedback
    assert "sub-model call limit" in root_requests(provider)[2].messages[-1].text  # the batch was refused whole
    assert result.answer == "partial"


async def test_token_budget_stops_the_loop() -> None:
    big_reply = ScriptedResponse(repl("print(1)"), usage=Usage(input_tokens=600, output_tokens=10))
    provider = model([big_reply, big_reply, big_reply])
    result = await rlm_answer("the text", "q?", provider, model="m", limits=RlmLimits(max_tokens=1_000))
    assert result.fallback
    assert result.fallback_reason == "token budget of 1000 spent without FINAL"
    assert len(root_requests(provider)) == 2


async def test_a_model_that_never_writes_code_falls_back() -> None:
    provider = model(["I think the answer is somewhere.", "Still thinking.", "Hmm."])
    result = await rlm_answer(haystack(50_000), "What is the vault access code?", provider, model="m")
    assert result.fallback and result.fallback_reason == "the model wrote no code in 3 replies in a row"
    assert "no ```repl block" in root_requests(provider)[1].messages[-1].text
    assert SECRET in result.answer


async def test_a_repl_that_keeps_hanging_is_restarted_then_abandoned() -> None:
    hang = repl("import time\ntime.sleep(30)")
    provider = model([repl("x = 1"), hang, repl("print(x)"), hang, hang])
    limits = RlmLimits(max_repl_restarts=2, sandbox=SandboxLimits(block_timeout=2.0))
    events: list[RlmEvent] = []
    result = await rlm_answer(
        "text with the access code is 7", "q?", provider, model="m", limits=limits, on_event=events.append
    )
    assert result.fallback and result.fallback_reason is not None
    assert result.fallback_reason.startswith("the REPL failed 3 times")
    restarts = [e for e in events if isinstance(e, RlmProgress) and e.stage == "repl_restart"]
    assert len(restarts) == 2
    after_restart = root_requests(provider)[2].messages[-1].text
    assert "restarted" in after_restart and "variables you made are gone" in after_restart
    assert "NameError" in root_requests(provider)[3].messages[-1].text  # x really was lost
    assert result.answer == "The vault access code is 7."


async def test_wall_clock_limit_falls_back() -> None:
    provider = model([ScriptedResponse(repl("print(1)"), delay=5.0)])
    result = await rlm_answer("the access code is 99", "q?", provider, model="m", limits=RlmLimits(wall_seconds=0.3))
    assert result.fallback and result.fallback_reason == "wall-clock limit of 0.3 s reached without FINAL"
    assert result.answer == "The vault access code is 99."


async def test_without_a_code_model_map_reduce_runs_directly() -> None:
    provider = model([])
    result = await rlm_answer(
        haystack(40_000),
        "code?",
        provider,
        model="m",
        use_repl=False,
        limits=RlmLimits(context_window=4_000, max_output_tokens=500),
    )
    assert result.fallback and result.iterations == 0 and result.layers == []
    assert not root_requests(provider)
    assert result.answer == f"The vault access code is {SECRET}."


async def test_a_sub_model_prompt_too_large_for_its_window_is_refused_in_code() -> None:
    provider = model([repl("print(llm_query(context))"), "FINAL(ok)"])
    limits = RlmLimits(context_window=4_000, max_output_tokens=500)
    result = await rlm_answer(haystack(100_000), "q?", provider, model="m", limits=limits)
    assert result.sub_calls == 0 and not sub_requests(provider)
    assert "Send a smaller piece" in root_requests(provider)[1].messages[-1].text


async def test_authentication_errors_propagate() -> None:
    provider = model([AuthError("bad key", provider="scripted")])
    with pytest.raises(AuthError):
        await rlm_answer("text", "q?", provider, model="m")


async def test_authentication_errors_in_sub_calls_propagate() -> None:
    def refuse(request: ModelRequest) -> str:
        raise AuthError("bad key", provider="scripted")

    provider = model([repl("llm_query('x')"), "FINAL(never)"], sub=refuse)
    with pytest.raises(AuthError):
        await rlm_answer("text", "q?", provider, model="m")


async def test_the_root_conversation_is_kept_inside_the_window() -> None:
    noisy = repl("print('y' * 5000)")
    provider = model([noisy] * 6 + ["FINAL(done)"])
    limits = RlmLimits(context_window=6_000, max_output_tokens=500, max_iterations=8)
    result = await rlm_answer("text", "q?", provider, model="m", limits=limits)
    assert result.answer == "done"
    last = root_requests(provider)[-1]
    assert "removed to save space" in "".join(m.text for m in last.messages)
    assert last.messages[0].text.startswith("The question: q?")  # the question is never dropped


def test_code_blocks_are_found_in_order() -> None:
    reply = "a\n```repl\nx = 1\n```\ntext\n```python\ny = 2\n```\n```bash\nls\n```\n```repl\n\n```"
    assert find_code_blocks(reply) == ["x = 1", "y = 2"]
    assert find_code_blocks("no code") == []


def test_final_is_read_outside_code_only() -> None:
    assert find_final("```repl\nFINAL(inside)\n```") is None
    assert find_final("FINAL(f(x) = (a + b))\nmore") == ("answer", "f(x) = (a + b)")
    assert find_final("  FINAL_VAR('result')") == ("var", "result")
    assert find_final("use FINAL(x) when done") is None  # not at the start of a line
    assert find_final("FINAL(cut off mid answer") == ("answer", "cut off mid answer")
    assert find_final("FINAL_VAR(result)\nFINAL(other)") == ("var", "result")


# --- sized by the model's own tokenizer ---------------------------------------------------------------


class Chars:
    """A byte-level model's tokenizer, near enough: one token a character, about four times o200k_base's
    count of these texts. Sizing them by o200k_base would overflow this model's window fourfold."""

    source = "chars"

    def count(self, text: str) -> int:
        return len(text)


class OwnTokenizer(ScriptedProvider):
    """A scripted model that counts with its own tokenizer (`TokenCounting`), as the embedded model does."""

    def token_counter(self, model: str) -> Chars:
        return Chars()


def tokens_of(request: ModelRequest) -> int:
    """The request's size by the model's own count, the template's tokens and the reply's room included."""
    text = (request.system or "") + "".join(m.text for m in request.messages)
    return len(text) + TEMPLATE_TOKENS + (request.max_output_tokens or 0)


async def test_map_reduce_chunks_are_cut_to_the_models_own_tokenizer() -> None:
    provider = OwnTokenizer(sub_answer)
    limits = RlmLimits(context_window=4_000, max_output_tokens=500)
    text = haystack(60_000)
    result = await rlm_answer(
        text, "What is the vault access code?", provider, model="m", limits=limits, use_repl=False
    )
    assert result.answer == f"The vault access code is {SECRET}."
    maps = [r for r in provider.requests if r.system == MAP_SYSTEM]
    assert len(maps) > len(text) // limits.context_window  # more calls than o200k_base would have made
    assert max(tokens_of(r) for r in provider.requests) <= limits.context_window


async def test_a_sub_model_prompt_is_refused_by_the_models_own_count() -> None:
    # About 1,700 tokens by o200k_base, which fits a 4,000-token window; 6,000 by the model's own count.
    provider = model([repl("print(llm_query(context[:6000]))"), "FINAL(ok)"], kind=OwnTokenizer)
    limits = RlmLimits(context_window=4_000, max_output_tokens=500)
    result = await rlm_answer(haystack(100_000), "q?", provider, model="m", limits=limits)
    assert result.sub_calls == 0 and not sub_requests(provider)
    assert "Send a smaller piece" in root_requests(provider)[1].messages[-1].text
    # and the root was told how much a sub-model takes: in characters of this text, by the model's count
    allowed = text_budget(limits.context_window, limits.max_output_tokens, len(SUB_SYSTEM))
    assert f"up to about {allowed} characters" in (root_requests(provider)[0].system or "")
