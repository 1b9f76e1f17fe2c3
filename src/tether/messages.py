"""Messages and the journal entries that hold them: a tagged union of small typed parts (`kind` is the tag),
usage with exact cost, and one adapter (`encode_*` / `decode_*`) to and from JSON. Pure data, no I/O."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Literal

import msgspec

from .errors import InvalidInput

Role = Literal["system", "user", "assistant", "tool"]


class _Part(msgspec.Struct, tag_field="kind", omit_defaults=True, kw_only=True):
    pass


class TextPart(_Part, tag="text"):
    text: str


class ThinkingPart(_Part, tag="thinking"):
    """Model reasoning. `signature` (Anthropic) or `redacted` data must be replayed unchanged."""

    text: str = ""
    signature: str | None = None
    redacted: str | None = None
    provider: str | None = None


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are not JSON: kept, they would be stored as null and silently change the call
    raise ValueError(f"{name} is not valid JSON")


class ToolCallPart(_Part, tag="tool_call"):
    """A call the model made. `arguments` is the parsed JSON; when the model's string did not parse,
    `arguments` is None and `raw_arguments` keeps the string as it came."""

    id: str
    name: str
    arguments: Any = None
    raw_arguments: str | None = None

    @classmethod
    def from_raw(cls, id: str, name: str, raw: str) -> ToolCallPart:
        """Parse a provider's argument string, keeping it verbatim if it is not JSON."""
        text = raw.strip()
        if not text:
            return cls(id=id, name=name, arguments={})
        try:
            arguments = json.loads(text, parse_constant=_refuse_constant)
            _encoder.encode(arguments)  # "\ud83d" parses to a lone surrogate, which no store can hold
            return cls(id=id, name=name, arguments=arguments)
        except ValueError:  # UnicodeEncodeError included
            return cls(id=id, name=name, arguments=None, raw_arguments=raw)

    @property
    def arguments_ok(self) -> bool:
        return self.raw_arguments is None

    def arguments_json(self) -> str:
        """The arguments as a JSON string, for replay to a provider."""
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(self.arguments if self.arguments is not None else {}, ensure_ascii=False)


class ToolResultPart(_Part, tag="tool_result"):
    call_id: str
    content: str
    is_error: bool = False
    name: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class ImagePart(_Part, tag="image"):
    media_type: str
    data: bytes | None = None
    uri: str | None = None


class FilePart(_Part, tag="file"):
    media_type: str
    data: bytes | None = None
    uri: str | None = None
    name: str | None = None


Part = TextPart | ThinkingPart | ToolCallPart | ToolResultPart | ImagePart | FilePart


class Usage(msgspec.Struct, omit_defaults=True, kw_only=True):
    """Token counts of one model call (or a sum of them) and its cost in US dollars, exact."""

    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: Decimal | None = None
    estimated: bool = False
    """The counts are tether's own (its tokenizer over what was sent and what came back): the provider
    reported none. A sum is estimated when any of its terms is."""

    def __add__(self, other: Usage) -> Usage:
        cost: Decimal | None
        if self.cost is None and other.cost is None:
            cost = None
        else:
            cost = (self.cost or Decimal(0)) + (other.cost or Decimal(0))
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost=cost,
            estimated=self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ToolSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A tool as a model sees it: a name, what it does, and its parameters as a JSON schema object."""

    name: str
    description: str
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})


# --- journal entries -------------------------------------------------------------------------------------


class _Body(msgspec.Struct, tag_field="kind", omit_defaults=True, kw_only=True):
    pass


class Message(_Body, tag="message"):
    """One message of a conversation. A message is also the body of a ``message`` journal entry."""

    role: Role
    parts: list[Part] = msgspec.field(default_factory=list)
    model: str | None = None
    provider: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", parts=[TextPart(text=text)])

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", parts=[TextPart(text=text)])

    @classmethod
    def assistant(cls, text: str = "", *, tool_calls: list[ToolCallPart] | None = None) -> Message:
        parts: list[Part] = [TextPart(text=text)] if text else []
        parts.extend(tool_calls or [])
        return cls(role="assistant", parts=parts)

    @classmethod
    def tool(cls, *results: ToolResultPart) -> Message:
        return cls(role="tool", parts=list(results))

    @property
    def text(self) -> str:
        """The text parts joined; thinking and tool parts are left out."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.parts if isinstance(p, ToolResultPart)]


class Revert(_Body, tag="revert"):
    """Makes the active history what it was right after entry `to_seq`: the entries after it, this one
    included, are hidden but stay stored. A later revert to the seq just before this one undoes it."""

    to_seq: int
    reason: str | None = None


class TitleChange(_Body, tag="title"):
    title: str


class Checkpoint(_Body, tag="checkpoint"):
    """Where a run stopped (step limit, cancel): enough for `--continue` to pick it up."""

    objective: str
    done: str = ""
    next_action: str = ""
    reason: str = "step_limit"
    steps: int = 0


class Compaction(_Body, tag="compaction"):
    """A summary that stands in, in derived contexts, for the active entries before `first_kept_seq`."""

    summary: str
    first_kept_seq: int
    strategy: str = "model"
    tokens_before: int | None = None
    tokens_after: int | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class Marker(_Body, tag="marker"):
    """Anything else worth journaling (approvals, run events, imports): a name and data. What the data holds
    for each name tether writes is a typed body in `tether.markers`, which writes and reads them."""

    name: str
    data: dict[str, Any] = msgspec.field(default_factory=dict)


INTERRUPTED_MARKER = "interrupted"
"""`tether.markers.Interrupted`: a user message got no answer."""
ERROR_MARKER = "error"
"""`tether.markers.ErrorRecord`: an error another tool wrote into its session."""
APPROVAL_REQUEST_MARKER = "approval_request"
"""`tether.markers.ApprovalRequest`: a tool call waits for a person's decision."""
APPROVAL_DECISION_MARKER = "approval_decision"
"""`tether.markers.ApprovalDecision`: the answer to a request."""


INTERRUPTED_ANSWER = "interrupted"
"""``metadata["interrupted"] = True`` (and ``finish_reason="interrupted"``) on an assistant message: tether
stopped (a crash, a kill) while the model streamed it; what had been made durable of it was journaled by
whoever took the session next (`tether.runtime.streaming`). It ends where the last save did; a tool call
whose arguments were still coming is in ``metadata["cut_calls"]``, never among its parts."""


USAGE_ESTIMATED = "usage_estimated"
"""Session metadata: True once any of its counts is tether's own, a provider having reported none
(`tether.runtime.usage`; `tether sessions` marks its tokens ~)."""


def cut_reason(message: Message) -> str | None:
    """Why an assistant message stops short, in words for people (transcripts, `sessions show`, exports):
    interrupted by a crash or kill, cancelled, or cut at the output limit; None for a whole answer."""
    if message.role != "assistant":
        return None
    if message.metadata.get(INTERRUPTED_ANSWER) is True or message.finish_reason == "interrupted":
        return "interrupted: tether stopped while the model was answering"
    if message.finish_reason == "cancelled":
        return "cancelled while the model was answering"
    if message.finish_reason == "length":
        return "cut off at the output limit"
    return None


EntryBody = Message | Revert | TitleChange | Checkpoint | Compaction | Marker
ENTRY_KINDS: frozenset[str] = frozenset({"message", "revert", "title", "checkpoint", "compaction", "marker"})


class Entry(msgspec.Struct, frozen=True):
    """A stored journal entry: its dense position in the session, when it was committed, and its body."""

    seq: int
    created_at: float
    body: EntryBody

    @property
    def kind(self) -> str:
        return _KIND_OF[type(self.body)]

    @property
    def message(self) -> Message | None:
        return self.body if isinstance(self.body, Message) else None


_KIND_OF: dict[type, str] = {
    Message: "message",
    Revert: "revert",
    TitleChange: "title",
    Checkpoint: "checkpoint",
    Compaction: "compaction",
    Marker: "marker",
}


def kind_of(body: EntryBody) -> str:
    return _KIND_OF[type(body)]


_encoder = msgspec.json.Encoder(decimal_format="string")
_body_decoder: msgspec.json.Decoder[EntryBody] = msgspec.json.Decoder(EntryBody)
_message_decoder: msgspec.json.Decoder[Message] = msgspec.json.Decoder(Message)


def encode_body(body: EntryBody) -> bytes:
    """JSON bytes of an entry body (its ``kind`` tag included); `InvalidInput` if a text is not valid Unicode."""
    try:
        return _encoder.encode(body)
    except UnicodeEncodeError as e:  # a lone surrogate: it has no UTF-8 form, so it cannot be stored
        raise InvalidInput(f"cannot store text that is not valid Unicode: {e}") from None


def decode_body(data: bytes | str) -> EntryBody:
    """Decode an entry body; raises `msgspec.DecodeError` / `msgspec.ValidationError` on bad data."""
    return _body_decoder.decode(data)


def encode_json(value: Any) -> bytes:
    return _encoder.encode(value)


def to_builtins(value: Any) -> Any:
    """Plain JSON-ready Python objects (dicts, lists, strings) for any struct in this module."""
    return msgspec.to_builtins(value)  # Decimal becomes a string


def convert(value: Any, type_: Any) -> Any:
    """The inverse of `to_builtins`."""
    return msgspec.convert(value, type_)
