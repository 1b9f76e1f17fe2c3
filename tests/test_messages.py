"""The message vocabulary: parts, usage, journal bodies, and the one JSON adapter. The wire format is pinned
here because stores keep it on disk: a change that breaks these bytes breaks every existing session."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.errors import InvalidInput
from tether.messages import (
    ENTRY_KINDS,
    Checkpoint,
    Compaction,
    Entry,
    EntryBody,
    FilePart,
    ImagePart,
    Marker,
    Message,
    Part,
    Revert,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
    Usage,
    convert,
    decode_body,
    encode_body,
    encode_json,
    kind_of,
    to_builtins,
)

# --- strategies -----------------------------------------------------------------------------------------

text = st.text()  # any code point but lone surrogates: NUL, controls and astral characters included
short = st.text(max_size=12)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(short, inner, max_size=4),
    max_leaves=12,
)
json_object = st.dictionaries(short, json_value, max_size=4)
maybe = st.none() | short
data = st.none() | st.binary(max_size=64)
costs = st.none() | st.decimals(allow_nan=False, allow_infinity=False)
counts = st.integers(0, 2**53)

parts: st.SearchStrategy[Part] = st.one_of(
    st.builds(TextPart, text=text),
    st.builds(ThinkingPart, text=text, signature=maybe, redacted=maybe, provider=maybe),
    st.builds(ToolCallPart, id=short, name=short, arguments=json_value, raw_arguments=st.none() | text),
    st.builds(ToolResultPart, call_id=short, content=text, is_error=st.booleans(), name=maybe, metadata=json_object),
    st.builds(ImagePart, media_type=short, data=data, uri=maybe),
    st.builds(FilePart, media_type=short, data=data, uri=maybe, name=maybe),
)
usages = st.builds(
    Usage,
    input_tokens=counts,
    output_tokens=counts,
    reasoning_tokens=counts,
    cache_read_tokens=counts,
    cache_write_tokens=counts,
    cost=costs,
)
messages = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    parts=st.lists(parts, max_size=5),
    model=maybe,
    provider=maybe,
    usage=st.none() | usages,
    finish_reason=maybe,
    metadata=json_object,
)
bodies: st.SearchStrategy[EntryBody] = st.one_of(
    messages,
    st.builds(Revert, to_seq=st.integers(0, 2**40), reason=st.none() | text),
    st.builds(TitleChange, title=text),
    st.builds(Checkpoint, objective=text, done=text, next_action=text, reason=short, steps=st.integers(0, 10**6)),
    st.builds(
        Compaction,
        summary=text,
        first_kept_seq=st.integers(1, 2**40),
        strategy=short,
        tokens_before=st.none() | counts,
        tokens_after=st.none() | counts,
        metadata=json_object,
    ),
    st.builds(Marker, name=text, data=json_object),
)


# --- round trips ----------------------------------------------------------------------------------------


@given(bodies)
def test_encode_decode_round_trip(body: EntryBody) -> None:
    data = encode_body(body)
    assert decode_body(data) == body
    assert decode_body(data.decode()) == body  # str in, as a TEXT column gives it
    assert encode_body(decode_body(data)) == data  # stable: re-encoding gives the same bytes


@given(bodies)
def test_builtins_round_trip(body: EntryBody) -> None:
    plain = to_builtins(body)
    assert plain["kind"] == kind_of(body)
    assert convert(plain, EntryBody) == body


@given(usages)
def test_usage_cost_stays_exact(usage: Usage) -> None:
    back = decode_body(encode_body(Message(role="assistant", usage=usage)))
    assert isinstance(back, Message) and back.usage is not None
    assert back.usage.cost == usage.cost
    assert (back.usage.cost is None) == (usage.cost is None)


# --- the wire format ------------------------------------------------------------------------------------


def test_wire_format_is_compact_and_tagged() -> None:
    assert encode_body(Message.user("hi")) == b'{"kind":"message","role":"user","parts":[{"kind":"text","text":"hi"}]}'
    body = Message(
        role="assistant",
        parts=[ImagePart(media_type="image/png", data=b"\x00\x01")],
        usage=Usage(input_tokens=1, cost=Decimal("0.10")),
    )
    assert encode_body(body) == (
        b'{"kind":"message","role":"assistant","parts":[{"kind":"image","media_type":"image/png","data":"AAE="}],'
        b'"usage":{"input_tokens":1,"cost":"0.10"}}'
    )
    assert encode_body(Revert(to_seq=3)) == b'{"kind":"revert","to_seq":3}'
    assert encode_json({"cost": Decimal("1.5")}) == b'{"cost":"1.5"}'


def test_nul_and_astral_characters_are_kept_verbatim() -> None:
    odd = "a\x00b😀\U0010ffff\u2028"
    data = encode_body(Message.user(odd))
    assert "😀".encode() in data and b"\\u0000" in data
    assert decode_body(data) == Message.user(odd)


@pytest.mark.parametrize(
    "body",
    [
        Message.user("a\ud800b"),
        Message(role="tool", parts=[ToolResultPart(call_id="c", content="\udfff")]),
        Marker(name="m", data={"k": ["\ud83d"]}),
        TitleChange(title="\udc00"),
    ],
    ids=["text", "tool-result", "marker-data", "title"],
)
def test_lone_surrogates_are_invalid_input(body: EntryBody) -> None:
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        encode_body(body)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"", msgspec.DecodeError),
        (b"{", msgspec.DecodeError),
        (b"\xff\xfe", msgspec.DecodeError),
        (b"[]", msgspec.ValidationError),
        (b'{"role": "user"}', msgspec.ValidationError),
        (b'{"kind": "nonsense"}', msgspec.ValidationError),
        (b'{"kind": "message", "role": "wizard"}', msgspec.ValidationError),
        (b'{"kind": "message", "role": "user", "parts": [{"kind": "text"}]}', msgspec.ValidationError),
        (b'{"kind": "revert", "to_seq": "three"}', msgspec.ValidationError),
        (b'{"kind": "message", "role": "user", "usage": {"cost": "lots"}}', msgspec.ValidationError),
    ],
)
def test_decode_refuses_bad_data(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode_body(data)


def test_unknown_fields_are_ignored() -> None:
    """A newer tether may add fields; an older one still reads the entry."""
    assert decode_body(b'{"kind":"title","title":"t","added_later":1}') == TitleChange(title="t")


# --- parts and helpers ----------------------------------------------------------------------------------


def test_tool_call_from_raw_json() -> None:
    call = ToolCallPart.from_raw("c1", "edit", '  {"path": "ä.py", "n": [1, 2]} ')
    assert call.arguments == {"path": "ä.py", "n": [1, 2]} and call.raw_arguments is None
    assert call.arguments_ok
    assert call.arguments_json() == '{"path": "ä.py", "n": [1, 2]}'


@pytest.mark.parametrize("raw", ["", "   ", "\n"])
def test_tool_call_from_empty_raw(raw: str) -> None:
    call = ToolCallPart.from_raw("c1", "ls", raw)
    assert call.arguments == {} and call.arguments_ok and call.arguments_json() == "{}"


@pytest.mark.parametrize("raw", ['{"path": "a.py", ', "not json", "{'single': 'quotes'}", '{"a": 1}}'])
def test_tool_call_keeps_malformed_arguments_verbatim(raw: str) -> None:
    call = ToolCallPart.from_raw("c1", "edit", raw)
    assert call.arguments is None and call.raw_arguments == raw
    assert not call.arguments_ok
    assert call.arguments_json() == raw  # replayed to the provider exactly as the model wrote it
    assert decode_body(encode_body(Message.assistant(tool_calls=[call]))) == Message.assistant(tool_calls=[call])


def test_tool_call_with_no_arguments_replays_as_empty_object() -> None:
    assert ToolCallPart(id="c", name="n").arguments_json() == "{}"


def test_usage_addition() -> None:
    a = Usage(input_tokens=1, output_tokens=2, reasoning_tokens=3, cache_read_tokens=4, cache_write_tokens=5)
    b = Usage(input_tokens=10, output_tokens=20, reasoning_tokens=30, cache_read_tokens=40, cache_write_tokens=50)
    total = a + b
    assert total == Usage(
        input_tokens=11, output_tokens=22, reasoning_tokens=33, cache_read_tokens=44, cache_write_tokens=55
    )
    assert total.cost is None and total.total_tokens == 33
    with_cost = a + Usage(cost=Decimal("0.1"))
    assert with_cost.cost == Decimal("0.1")
    assert (with_cost + Usage(cost=Decimal("0.2"))).cost == Decimal("0.3")
    assert (Usage(cost=Decimal("0.2")) + a).cost == Decimal("0.2")


def test_message_constructors_and_views() -> None:
    assert Message.system("s") == Message(role="system", parts=[TextPart(text="s")])
    assert Message.user("u").text == "u"
    call = ToolCallPart(id="c1", name="bash", arguments={"cmd": "ls"})
    assistant = Message.assistant("", tool_calls=[call])
    assert assistant.parts == [call] and assistant.text == "" and assistant.tool_calls == [call]
    mixed = Message(
        role="assistant",
        parts=[TextPart(text="a"), ThinkingPart(text="hidden"), call, TextPart(text="b")],
    )
    assert mixed.text == "ab"  # thinking and tool parts are not text
    result = ToolResultPart(call_id="c1", content="out")
    tool = Message.tool(result)
    assert tool.role == "tool" and tool.tool_results == [result] and tool.tool_calls == []


def test_entry_kinds() -> None:
    samples: list[EntryBody] = [
        Message.user("x"),
        Revert(to_seq=0),
        TitleChange(title="t"),
        Checkpoint(objective="o"),
        Compaction(summary="s", first_kept_seq=1),
        Marker(name="m"),
    ]
    assert {kind_of(b) for b in samples} == ENTRY_KINDS
    for body in samples:
        entry = Entry(1, 0.0, body)
        assert entry.kind == kind_of(body) == to_builtins(body)["kind"]
        assert entry.message is (body if isinstance(body, Message) else None)


def test_mutable_defaults_are_not_shared() -> None:
    a, b = Message.user("a"), Message.user("b")
    a.metadata["k"] = 1
    assert b.metadata == {}
    s1, s2 = ToolSpec(name="a", description="d"), ToolSpec(name="b", description="d")
    s1.parameters["properties"]["x"] = {"type": "string"}
    assert s2.parameters == {"type": "object", "properties": {}}


def test_tool_spec_round_trip() -> None:
    spec = ToolSpec(name="bash", description="run", parameters={"type": "object", "required": ["cmd"]})
    assert msgspec.json.decode(msgspec.json.encode(spec), type=ToolSpec) == spec


def test_tool_call_with_an_escaped_lone_surrogate_keeps_the_raw_string() -> None:
    """A model cut off mid-emoji writes "\\ud83d": valid JSON to Python, but no store can hold the result.
    The raw string (plain ASCII) is kept instead, so the message can still be journaled."""
    raw = '{"text": "half an emoji: \\ud83d"}'
    call = ToolCallPart.from_raw("c1", "write", raw)
    assert call.raw_arguments == raw and call.arguments is None
    assert decode_body(encode_body(Message.assistant(tool_calls=[call]))) == Message.assistant(tool_calls=[call])


@given(st.text(), st.text())
def test_from_raw_never_raises_and_always_stores(name: str, raw: str) -> None:
    call = ToolCallPart.from_raw("c", name, raw)
    if call.arguments_ok:
        # from_raw strips what str.strip does (also U+001C..U+001F and other Unicode spaces JSON does not)
        assert call.arguments == (json.loads(raw.strip()) if raw.strip() else {})
    else:
        assert (call.arguments, call.raw_arguments) == (None, raw)
    back: Any = decode_body(encode_body(Message.assistant(tool_calls=[call])))
    assert back.tool_calls[0] == call


@given(json_value)
def test_from_raw_parses_what_json_dumps_wrote(value: Any) -> None:
    call = ToolCallPart.from_raw("c", "n", json.dumps(value))
    assert call.arguments_ok and call.arguments == value
