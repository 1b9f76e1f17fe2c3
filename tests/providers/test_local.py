"""The embedded provider: SmolLM2-135M through llama-cpp-python. The prompt, schema and answer decoding are
tested on their own; the `local_model` tests run the real model."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import msgspec
import pytest

from tether.context.tokens import get_counter
from tether.errors import ConfigError, ContextOverflow
from tether.messages import Message, ToolCallPart, ToolResultPart, ToolSpec
from tether.providers import ModelRequest, StreamDone, TextPartDelta, ToolCallPartReady, complete
from tether.providers.base import TokenCounting
from tether.providers.local import (
    MAX_DEFAULT_THREADS,
    STUTTER_REPEATS,
    LocalProvider,
    _AnswerStreamer,
    chatml_prompt,
    default_threads,
    find_model_path,
    loops,
    stutters,
    tool_call_schema,
)

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a text file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
LIST_DIR = ToolSpec(
    name="list_dir",
    description="List the files in a directory.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def test_chatml_prompt_shows_earlier_calls_in_the_grammar_format() -> None:
    request = ModelRequest(
        model="smollm2-135m",
        system="Be brief.",
        messages=[
            Message.user("read it"),
            Message.assistant(tool_calls=[ToolCallPart(id="c", name="read_file", arguments={"path": "a"})]),
            Message.tool(ToolResultPart(call_id="c", name="read_file", content="hello")),
        ],
        tools=[READ_FILE],
    )
    prompt = chatml_prompt(request, tools=[READ_FILE])
    assert prompt.startswith(
        "<|im_start|>system\nBe brief.\n\nYou can use these tools:\n- read_file: Read a text file."
    )
    assert '<|im_start|>assistant\n{"tool": "read_file", "arguments": {"path": "a"}}<|im_end|>' in prompt
    # the last turn is a tool result: the small model is told what it is for, so it answers instead of repeating
    assert "<|im_start|>user\nResult of read_file:\nhello\n\nUse this result to answer" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    earlier = chatml_prompt(
        msgspec.structs.replace(request, messages=[*request.messages, Message.user("thanks")]), tools=[READ_FILE]
    )
    assert "<|im_start|>user\nResult of read_file:\nhello<|im_end|>" in earlier  # only the last result is cued


def test_tool_call_schema_per_tool_choice() -> None:
    auto = tool_call_schema([READ_FILE, LIST_DIR], "auto")
    assert [v["properties"].get("tool", {}).get("const") for v in auto["oneOf"]] == ["read_file", "list_dir", None]
    assert auto["oneOf"][2]["properties"] == {"answer": {"type": "string"}}
    required = tool_call_schema([READ_FILE, LIST_DIR], "required")
    assert len(required["oneOf"]) == 2
    forced = tool_call_schema([READ_FILE, LIST_DIR], "list_dir")
    assert forced["properties"]["tool"] == {"const": "list_dir"}
    assert forced["properties"]["arguments"] == LIST_DIR.parameters
    with pytest.raises(ConfigError, match="not among the tools"):
        tool_call_schema([READ_FILE], "delete_everything")


def test_answer_streamer_decodes_json_string_escapes_across_pieces() -> None:
    streamer = _AnswerStreamer()
    pieces = ['{ "ans', 'wer": "Line', " one\\", 'nLine \\"two\\" \\u00e9', '" }']
    text = "".join(streamer.feed(p) for p in pieces)
    assert text == 'Line one\nLine "two" é'
    assert streamer.closed and json.loads(streamer.buffer)["answer"] == text
    tool = _AnswerStreamer()
    assert tool.feed('{"tool": "ls", "arguments": {}}') == "" and not tool.started


def test_a_model_override_that_does_not_exist_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TETHER_LOCAL_MODEL", str(tmp_path / "missing.gguf"))
    with pytest.raises(ConfigError, match=r"missing\.gguf"):
        find_model_path()
    real = tmp_path / "model.gguf"
    real.write_bytes(b"GGUF")
    monkeypatch.setenv("TETHER_LOCAL_MODEL", str(real))
    assert find_model_path("/elsewhere.gguf") == real  # the environment wins over config


def test_without_its_model_file_the_provider_offers_no_tokenizer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TETHER_LOCAL_MODEL", str(tmp_path / "missing.gguf"))
    provider = LocalProvider()
    assert isinstance(provider, TokenCounting)
    assert provider.token_counter("smollm2-135m") is None  # callers estimate; the call says what is missing


# --- the real model -----------------------------------------------------------------------------------


def local() -> LocalProvider:
    pytest.importorskip("llama_cpp", reason="needs the `local` extra: pip install 'tether[local]'")
    return LocalProvider(seed=0, context_window=2048)


@pytest.mark.local_model
async def test_plain_text_answer_streams() -> None:
    provider = local()
    request = ModelRequest(
        model="smollm2-135m",
        messages=[Message.user("What is the capital of France?")],
        max_output_tokens=24,
        temperature=0,
    )
    events = [e async for e in provider.stream(request)]
    deltas = [e.text for e in events if isinstance(e, TextPartDelta)]
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert len(deltas) > 1 and "".join(deltas) == done.message.text
    assert "Paris" in done.message.text
    assert done.usage.input_tokens > 10 and 0 < done.usage.output_tokens <= 24
    assert done.usage.cost == 0
    assert done.message.provider == "local" and done.message.model == "smollm2-135m"


@pytest.mark.parametrize(("usable", "expected"), [(1, 1), (2, 2), (6, 6), (64, MAX_DEFAULT_THREADS)])
def test_generation_threads_default_to_the_cpus_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch, usable: int, expected: int
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(usable)), raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: usable * 4)  # not the machine's count: what this process may use
    assert default_threads() == expected


@pytest.mark.local_model
async def test_the_model_loads_with_the_configured_threads_or_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.providers import local as local_module

    local()  # skips without the `local` extra
    import llama_cpp

    asked: list[object] = []

    class ThreadsLlama(llama_cpp.Llama):
        def __init__(self, *args: object, **kwargs: object) -> None:
            asked.append(kwargs.get("n_threads"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(llama_cpp, "Llama", ThreadsLlama)
    monkeypatch.setattr(local_module, "_models", {})
    request = ModelRequest(model="smollm2-135m", messages=[Message.user("Hi.")], max_output_tokens=2, temperature=0)
    await complete(LocalProvider(context_window=2048), request)
    await complete(LocalProvider(threads=1, context_window=2048), request)
    assert asked == [default_threads(), 1]


@pytest.mark.local_model
async def test_token_counts_are_the_models_own_and_load_the_model_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.providers import local as local_module
    from tether.rlm.sizing import TEMPLATE_TOKENS

    provider = local()  # skips without the `local` extra
    import llama_cpp

    loads: list[int] = []

    class CountedLlama(llama_cpp.Llama):
        def __init__(self, *args: object, **kwargs: object) -> None:
            loads.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(llama_cpp, "Llama", CountedLlama)
    monkeypatch.setattr(local_module, "_models", {})  # none loaded yet in this process, as far as it knows
    counter = provider.token_counter("smollm2-135m")
    assert counter is not None and counter.source == f"llama.cpp:{provider.model_path.name}"
    assert loads == []  # offering a counter loads nothing

    user = "Add 1234567 and 7654321."
    request = ModelRequest(
        model="smollm2-135m", system="Be brief.", messages=[Message.user(user)], max_output_tokens=4, temperature=0
    )
    counted = counter.count(chatml_prompt(request, tools=[]))
    assert len(loads) == 1
    response = await complete(provider, request)
    assert len(loads) == 1  # generation runs on the model that counting loaded
    assert response.usage.input_tokens == counted  # the count is the figure the provider holds to its window
    assert counted - counter.count("Be brief.") - counter.count(user) <= TEMPLATE_TOKENS
    assert counter.count("1234567 7654321") > get_counter().count("1234567 7654321")  # a digit a token


@pytest.mark.local_model
async def test_constrained_tool_call() -> None:
    provider = local()
    request = ModelRequest(
        model="smollm2-135m",
        messages=[Message.user("Read the file README.md")],
        tools=[READ_FILE, LIST_DIR],
        tool_choice="required",
        temperature=0,
        max_output_tokens=64,
    )
    events = [e async for e in provider.stream(request)]
    (ready,) = [e.part for e in events if isinstance(e, ToolCallPartReady)]
    assert ready.name == "read_file"
    assert ready.arguments == {"path": "README.md"}
    done = events[-1]
    assert isinstance(done, StreamDone) and done.finish_reason == "tool_calls"
    assert done.message.tool_calls == [ready]


@pytest.mark.local_model
async def test_auto_tool_choice_can_answer_in_text_and_none_turns_tools_off() -> None:
    provider = local()
    base = {"model": "smollm2-135m", "tools": [READ_FILE], "temperature": 0, "max_output_tokens": 40}
    answer = await complete(provider, ModelRequest(messages=[Message.user("What is the capital of France?")], **base))  # type: ignore[arg-type]
    assert answer.message.tool_calls == [] and "Paris" in answer.message.text
    assert not answer.message.text.lstrip().startswith("{")  # the JSON envelope is not shown

    plain = await complete(
        provider,
        ModelRequest(messages=[Message.user("Read the file README.md")], tool_choice="none", **base),  # type: ignore[arg-type]
    )
    assert plain.message.tool_calls == []


@pytest.mark.local_model
async def test_closing_the_stream_stops_generation_and_frees_the_model() -> None:
    provider = local()
    long = ModelRequest(model="smollm2-135m", messages=[Message.user("Write a long story.")], max_output_tokens=1500)
    stream = provider.stream(long)
    first = await anext(stream)  # type: ignore[call-overload]
    assert isinstance(first, TextPartDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    # Closing returns once the worker has stopped: no generation thread is left running.
    assert not [t for t in threading.enumerate() if t.name == "tether-local-generate"]
    quick = ModelRequest(model="smollm2-135m", messages=[Message.user("Hi")], max_output_tokens=4, temperature=0)
    response = await complete(provider, quick)
    assert 0 < response.usage.output_tokens <= 4


@pytest.mark.local_model
async def test_a_prompt_larger_than_the_context_is_a_context_overflow() -> None:
    provider = local()
    huge = ModelRequest(model="smollm2-135m", messages=[Message.user("word " * 5000)])
    with pytest.raises(ContextOverflow, match="does not fit"):
        await complete(provider, huge)


def test_a_repeated_call_is_recognised_so_the_small_model_answers() -> None:
    from tether.providers.local import repeats_itself

    ls = ToolCallPart(id="a", name="bash", arguments={"command": "ls"})
    again = ToolCallPart(id="b", name="bash", arguments={"command": "ls"})
    other = ToolCallPart(id="c", name="bash", arguments={"command": "pwd"})
    result = Message.tool(ToolResultPart(call_id="b", name="bash", content="a.py"))
    turn = lambda *calls: Message.assistant(tool_calls=list(calls))  # noqa: E731
    assert repeats_itself([Message.user("list"), turn(ls), result, turn(again), result])
    assert not repeats_itself([Message.user("list"), turn(ls), result, turn(other), result])
    assert not repeats_itself([Message.user("list"), turn(ls), result])  # once is not a repeat
    assert not repeats_itself([Message.user("list"), turn(ls), result, turn(again), result, Message.user("more")])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello. You can use it to answer. You can use it to answer. You can use it to answer.", True),
        ("Line one is here\nLine one is here\nLine one is here\n", True),
        ("Hello. You can use it to answer. You can use it to answer.", False),  # twice may be on purpose
        ("Ok. Ok. Ok. Ok.", False),  # short sentences repeat in real answers ("Yes. Yes.")
        ("It reads. It writes. It edits. It reads. It writes. It edits.", False),
        ("You can use it to answer. You can use it to answer. You can use it to answer. Then", True),  # tail unfinished
        ("", False),
    ],
)
def test_loops_sees_a_plain_answer_saying_one_sentence_again(text: str, expected: bool) -> None:
    assert loops(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"tool": "task", "arguments": {"tools": [' + '"todo", ' * STUTTER_REPEATS, True),  # seen, to 512 tokens
        ('{"tool": "task", "arguments": {"tools": [' + '"todo", ' * (STUTTER_REPEATS - 1), False),
        ("Once upon a time " + "the sea " * STUTTER_REPEATS, True),
        ('{"tool": "write", "arguments": {"content": "' + "-" * 400, False),  # a rule: one character
        ("0" * 400, False),
        ("| a | b |\n" + "|---" * 40, False),  # no letter or digit in what repeats
        ("[" + "0, " * 40, False),  # one digit: a list of zeros
        ("The keeper walked the shore and thought of the ships at sea. " * 4, False),  # long: `loops` sees these
        ("", False),
    ],
)
def test_stutters_sees_one_short_piece_said_over_and_over(text: str, expected: bool) -> None:
    assert stutters(text) is expected
    assert stutters("x" * 10_000 + text) is expected  # only the tail is read
