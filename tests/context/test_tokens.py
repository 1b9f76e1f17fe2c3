"""Token counting: exact counts equal tiktoken's, offline; the heuristic stands in when the vocabularies are
missing; message, tool-call and tool-spec overheads; the per-entry cache."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.context import tokens
from tether.context.tokens import (
    HEURISTIC,
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    BpeCounter,
    HeuristicCounter,
    TokenCache,
    bpe_counter,
    count_message,
    count_messages,
    count_tools,
    encoding_for_model,
    get_counter,
    load_ranks,
    tiktoken_encoding,
    tokens_over,
)
from tether.errors import InvalidInput, MissingExtra
from tether.messages import Entry, ImagePart, Message, TextPart, ToolCallPart, ToolResultPart, ToolSpec

CODE = '''def fib(n: int) -> int:
    """The n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


class Cache(dict[str, int]):
    def __missing__(self, key: str) -> int:
        value = self[key] = len(key) * 31 % 17
        return value
'''
PROSE = (
    "Jon: Hey Gina! We haven't talked in a few days. Been busy with the new dance studio, honestly. "
    "Gina: Oh wow, that sounds exciting! How is it going so far? I remember you were worried about the "
    "lease and whether the neighbours would complain about the music in the evenings.\n"
)
JSON_OUTPUT = json.dumps(
    {
        "reservation_id": "ZFA04Y",
        "user_id": "mia_li_3668",
        "flights": [{"origin": "JFK", "destination": "SEA", "date": "2024-05-20", "price": 1012}] * 6,
        "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    }
)


@pytest.fixture(scope="module")
def o200k() -> BpeCounter:
    return bpe_counter("o200k_base")


@pytest.fixture(scope="module")
def reference() -> object:
    """tiktoken itself, built from the bundled vocabulary: the reference every engine must match."""
    return tiktoken_encoding("o200k_base")


def test_known_token_ids_offline(reference: object) -> None:
    # Published ids: the vocabulary is tiktoken's own, not a look-alike.
    assert reference.encode_ordinary("hello world") == [24912, 2375]  # type: ignore[attr-defined]
    assert tiktoken_encoding("cl100k_base").encode_ordinary("hello world") == [15339, 1917]


def test_vocabulary_digest_matches_tiktoken() -> None:
    ranks = load_ranks("cl100k_base")
    assert len(ranks) == 100_256
    assert ranks[b"hello"] == 15339


def test_patterns_and_special_tokens_match_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Our copies of tiktoken's definitions agree with tiktoken_ext (fed our ranks instead of a download)."""
    import tiktoken_ext.openai_public as public

    monkeypatch.setattr(public, "load_tiktoken_bpe", lambda url, expected_hash=None: {b"x": 0})
    for name in ("o200k_base", "cl100k_base"):
        spec = getattr(public, name)()
        assert spec["pat_str"] == tokens._PATTERNS[name]
        assert spec["special_tokens"] == tokens._SPECIAL_TOKENS[name]


@pytest.mark.parametrize("text", [CODE, PROSE, JSON_OUTPUT, "日本語のテキスト, Привет мир", "<|endoftext|> ok", ""])
def test_counts_equal_tiktoken(o200k: BpeCounter, reference: object, text: str) -> None:
    assert o200k.count(text) == len(reference.encode_ordinary(text))  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_counts_equal_tiktoken_on_any_text(text: str) -> None:
    counter = bpe_counter("o200k_base")
    ref = _reference_o200k()
    assert counter.count(text) == len(ref.encode_ordinary(text))


_REF: list[object] = []


def _reference_o200k() -> object:
    if not _REF:
        _REF.append(tiktoken_encoding("o200k_base"))
    return _REF[0]


def test_lone_surrogates_are_counted_not_raised(o200k: BpeCounter) -> None:
    assert o200k.count("a\ud800b") == 3


def test_source_names_the_encoding() -> None:
    assert get_counter("o200k_base").source == "tiktoken:o200k_base"
    assert get_counter("cl100k_base").source == "tiktoken:cl100k_base"
    assert HEURISTIC.source == "heuristic"


def test_encoding_for_model() -> None:
    assert encoding_for_model("openai/gpt-4o-mini") == "o200k_base"
    assert encoding_for_model("openai/gpt-4.1") == "o200k_base"
    assert encoding_for_model("gpt-4-turbo") == "cl100k_base"
    assert encoding_for_model("gpt-3.5-turbo") == "cl100k_base"
    assert encoding_for_model("anthropic/claude-sonnet-4-5") == "o200k_base"
    assert encoding_for_model(None) == "o200k_base"


def test_unknown_encoding_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="unknown encoding"):
        get_counter("p50k_base")
    with pytest.raises(InvalidInput):
        bpe_counter("nope")


def test_tiktoken_engine_is_the_fallback_and_agrees(monkeypatch: pytest.MonkeyPatch, o200k: BpeCounter) -> None:
    """Without the Rust counter, the tiktoken engine counts the same."""
    monkeypatch.setattr(tokens, "_rust_count", lambda encoding: None)
    tokens._bpe_counter.cache_clear()
    try:
        slow = bpe_counter("o200k_base")
        assert slow.engine == "tiktoken"
        for text in (CODE, PROSE, JSON_OUTPUT):
            assert slow.count(text) == o200k.count(text)
    finally:
        tokens._bpe_counter.cache_clear()


def test_missing_extras_fall_back_to_the_heuristic(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def missing(encoding: str = "o200k_base") -> BpeCounter:
        raise MissingExtra("tokens", "bpe-openai")

    monkeypatch.setattr(tokens, "bpe_counter", missing)
    monkeypatch.setattr(tokens, "_warned_missing", False)
    with caplog.at_level("WARNING", logger="tether.context"):
        counter = get_counter()
        get_counter()
    assert counter is HEURISTIC
    assert sum("estimates" in r.message for r in caplog.records) == 1


def test_missing_package_raises_missing_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tokens, "_package_dir", lambda: None)
    with pytest.raises(MissingExtra, match="tokens"):
        load_ranks("o200k_base")
    monkeypatch.setattr(tokens, "_package_dir", lambda: tmp_path)  # installed, but its data is gone
    with pytest.raises(MissingExtra, match="tokens"):
        load_ranks("o200k_base")


def test_a_tampered_vocabulary_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cl100k_base.tiktoken.gz").write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.setattr(tokens, "_package_dir", lambda: tmp_path)
    with pytest.raises(MissingExtra, match="does not match"):
        load_ranks("cl100k_base")


def test_counting_does_not_import_the_bpe_openai_package() -> None:
    """Its __init__ loads every vocabulary into Python (seconds, tens of MB); counting needs none of it."""
    code = (
        "import sys; from tether.context.tokens import bpe_counter; "
        "c = bpe_counter('o200k_base'); assert c.count('hello world') == 2, c; "
        "print(c.engine, 'bpe_openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["bpe-openai", "False"]


@pytest.mark.parametrize(("text", "low", "high"), [(CODE, 0.8, 1.25), (PROSE, 0.85, 1.2), (JSON_OUTPUT, 0.8, 1.25)])
def test_heuristic_is_close_on_code_prose_and_json(o200k: BpeCounter, text: str, low: float, high: float) -> None:
    ratio = HEURISTIC.count(text) / o200k.count(text)
    assert low <= ratio <= high, ratio


def test_heuristic_counts_non_ascii_more_than_chars_over_four() -> None:
    text = "这是一个测试句子，用于估计中文文本的令牌数量。" * 10
    assert HEURISTIC.count(text) > len(text) / 4
    assert HEURISTIC.count("") == 0


def test_message_overheads(o200k: BpeCounter) -> None:
    message = Message.user("hello world")
    assert count_message(message, o200k) == MESSAGE_OVERHEAD + 2
    assert count_messages([message, message], o200k) == REQUEST_OVERHEAD + 2 * (MESSAGE_OVERHEAD + 2)
    with_system = count_messages([message], o200k, system="You are terse.")
    assert with_system == count_messages([message], o200k) + MESSAGE_OVERHEAD + o200k.count("You are terse.")


def test_tool_call_arguments_are_counted(o200k: BpeCounter) -> None:
    small = ToolCallPart(id="c1", name="write", arguments={"path": "a.py", "content": "x"})
    big = ToolCallPart(id="c1", name="write", arguments={"path": "a.py", "content": CODE * 5})
    raw = ToolCallPart.from_raw("c2", "write", '{"path": broken')
    n_small = count_message(Message.assistant(tool_calls=[small]), o200k)
    n_big = count_message(Message.assistant(tool_calls=[big]), o200k)
    assert n_big - n_small >= o200k.count(CODE * 5) * 0.9
    assert count_message(Message.assistant(tool_calls=[raw]), o200k) == (
        MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD + o200k.count("write") + o200k.count('{"path": broken')
    )


def test_tool_results_and_images(o200k: BpeCounter) -> None:
    result = Message.tool(ToolResultPart(call_id="c1", content=JSON_OUTPUT))
    assert count_message(result, o200k) > o200k.count(JSON_OUTPUT)
    image = Message(role="user", parts=[TextPart(text="see"), ImagePart(media_type="image/png", uri="x.png")])
    assert count_message(image, o200k) >= tokens.IMAGE_TOKENS


def test_tool_specs_are_counted(o200k: BpeCounter) -> None:
    spec = ToolSpec(
        name="bash",
        description="Run a shell command in the workspace and return its output.",
        parameters={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    )
    one = count_tools([spec], o200k)
    assert count_tools([], o200k) == 0
    assert one > o200k.count(spec.description)
    assert count_tools([spec, spec], o200k) == 2 * one - tokens.TOOLS_OVERHEAD
    assert count_messages([], o200k, tools=[spec]) == REQUEST_OVERHEAD + one


class _SpyCounter:
    source = "spy"

    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return len(text)


def test_cache_counts_each_entry_once() -> None:
    cache = TokenCache()
    spy = _SpyCounter()
    entry = Entry(7, 1.0, Message.user("hello"))
    assert isinstance(entry.body, Message)
    first = cache.parts("ses_x", entry, entry.body, spy)
    again = cache.parts("ses_x", entry, entry.body, spy)
    assert first == again == (5,)
    assert spy.calls == 1 and cache.hits == 1 and cache.misses == 1
    cache.parts(None, entry, entry.body, spy)  # no session: nothing to key by, counted afresh
    assert spy.calls == 2


def test_cache_keys_by_counter_and_commit_time() -> None:
    cache = TokenCache()
    spy = _SpyCounter()
    entry = Entry(1, 1.0, Message.user("hello"))
    other_time = Entry(1, 2.0, Message.user("hello!"))  # the same seq in a session recreated under the id
    assert isinstance(entry.body, Message) and isinstance(other_time.body, Message)
    assert cache.parts("s", entry, entry.body, spy) == (5,)
    assert cache.parts("s", other_time, other_time.body, spy) == (6,)

    class Doubling(_SpyCounter):
        source = "doubling"

        def count(self, text: str) -> int:
            return 2 * len(text)

    assert cache.parts("s", entry, entry.body, Doubling()) == (10,)
    assert cache.parts("s", entry, entry.body, spy) == (5,)


def test_cache_is_bounded() -> None:
    cache = TokenCache(max_entries=10)
    spy = _SpyCounter()
    for seq in range(1, 50):
        entry = Entry(seq, 0.0, Message.user("x"))
        assert isinstance(entry.body, Message)
        cache.parts("s", entry, entry.body, spy)
    assert len(cache) <= 10
    with pytest.raises(InvalidInput):
        TokenCache(max_entries=0)


class Recorded:
    """A byte-level counter that records the length of every text it was asked to count."""

    source = "bytes"

    def __init__(self) -> None:
        self.counted: list[int] = []

    def count(self, text: str) -> int:
        self.counted.append(len(text))
        return len(text.encode("utf-8"))


def test_tokens_over_counts_only_where_the_size_leaves_it_open() -> None:
    counter = Recorded()
    assert not tokens_over("a" * 99, 100, counter)  # fewer bytes than the limit: under, whatever the vocabulary
    assert tokens_over("a" * 801, 100, counter)  # more than eight characters a token: over
    assert counter.counted == []
    assert not tokens_over("a" * 100, 100, counter) and tokens_over("a" * 101, 100, counter)
    assert counter.counted == [100, 101]


def test_tokens_over_counts_a_text_of_few_characters_and_many_bytes() -> None:
    counter = Recorded()
    text = "总结" * 40  # 80 characters, 240 bytes: a byte-level vocabulary spends 240 tokens on it
    assert tokens_over(text, 100, counter) and counter.counted == [80]


class _ValueCounter:
    """A counter that compares by value and so has no hash (a provider's own may be such)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ValueCounter)

    __hash__ = None  # type: ignore[assignment]

    def count(self, text: str) -> int:
        return len(text.split())


def test_tools_counted_again_give_the_same_tokens_and_a_changed_tool_its_own() -> None:
    counter = HeuristicCounter()
    spec = ToolSpec(name="grep", description="search files", parameters={"type": "object", "properties": {}})
    first = count_tools([spec], counter)
    assert count_tools([spec], counter) == first
    wider = ToolSpec(name="grep", description="search files for a pattern, by line", parameters=spec.parameters)
    assert count_tools([wider], counter) > first  # a new description: counted anew
    deeper = ToolSpec(
        name="grep",
        description=spec.description,
        parameters={"type": "object", "properties": {"pattern": {"type": "string"}}},
    )
    assert count_tools([deeper], counter) > first  # a new schema too
    odd = _ValueCounter()
    assert count_tools([spec], odd) == tokens.TOOLS_OVERHEAD + tokens.TOOL_SPEC_OVERHEAD + 1 + 2 + odd.count(
        '{"type":"object","properties":{}}'
    )
