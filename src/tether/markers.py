"""The typed bodies of journal markers, and the one place they are written into and read out of a `Marker`.

A `Marker` is stored as a name and a JSON object (`messages.Marker`); what that object holds depends on the
name. Each name tether itself writes has a struct here (its fields are the object's keys), `to_marker` makes
the entry of one, and `read`/`parse` give one back from an entry. Reading is tolerant, as a journal outlives
the code that wrote it: an entry that is not a marker, a marker of another name, or one whose object lacks a
field or holds a value of the wrong type reads as None (never an exception), and keys the struct does not
know are ignored. A marker whose name is none of these (another tool's line kept whole by an importer, an
integration's own) stays a free-form `Marker`; `parse` gives None for it.

The stored JSON is what the runtime wrote before these types existed (a default is left out), so journals
on disk read as they did, and an older tether reads what this one writes."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import msgspec

from .messages import (
    APPROVAL_DECISION_MARKER,
    APPROVAL_REQUEST_MARKER,
    ERROR_MARKER,
    INTERRUPTED_MARKER,
    EntryBody,
    Marker,
)

PIN_MARKER = "pin"
UNPIN_MARKER = "unpin"
CONDENSED_MARKER = "condensed"
MCP_MARKER = "mcp_tools"
FORGET_MARKER = "memory_forget"
PYDANTIC_AI_MARKER = "pydantic_ai.message"
OPENAI_AGENTS_MARKER = "openai_agents.item"


class MarkerBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What one kind of marker holds; `marker_name` is the name it is journaled under, `always_written` the
    fields written even when they hold their default (as the runtime always wrote them)."""

    marker_name: ClassVar[str]
    always_written: ClassVar[tuple[str, ...]] = ()


class Interrupted(MarkerBody):
    """User message `seq` got no answer (the run stopped before the model replied, and the next prompt came).
    Derived contexts show the model a short note in its place."""

    marker_name: ClassVar[str] = INTERRUPTED_MARKER
    seq: int


class ErrorRecord(MarkerBody):
    """An error another tool wrote into its session (an API error and its retries, an aborted message),
    shown with its text wherever the session is read; not part of what a model sees. `source` names the
    tool; the importers keep where it came from beside it (`line` and `raw` for a transcript line,
    `message_id`, `error` and `info` for an opencode message)."""

    marker_name: ClassVar[str] = ERROR_MARKER
    message: str = ""
    source: str = ""
    line: int | None = None
    raw: Any = None
    message_id: str | None = None
    error: Any = None
    info: dict[str, Any] | None = None


class ApprovalRequest(MarkerBody):
    """Tool call `call_id` waits for a person's decision. Without a decision after it, it is still pending:
    the next run of the session asks again, and the call never runs before a yes. `suggestion`: the rules
    (as `--allow` writes them) that a yes for the session or the project would add."""

    marker_name: ClassVar[str] = APPROVAL_REQUEST_MARKER
    call_id: str
    tool: str = ""
    arguments: Any = None
    reason: str = ""
    suggestion: list[str] = msgspec.field(default_factory=list)


class ApprovalDecision(MarkerBody):
    """The answer to the request for `call_id`: by whom, for how long (``once``, ``session``, ``project``),
    the rules a lasting yes added, a person's message to the model, a note on where the rules were saved."""

    marker_name: ClassVar[str] = APPROVAL_DECISION_MARKER
    always_written: ClassVar[tuple[str, ...]] = ("by", "scope")
    call_id: str
    approved: bool
    by: str = ""
    scope: str = "once"
    rules: list[str] = msgspec.field(default_factory=list)
    message: str | None = None
    note: str | None = None


class Pin(MarkerBody):
    """Pins message `seq` (as ``metadata["pinned"] = True`` on a message does): compaction keeps it
    verbatim, and derivation drops it only after every unpinned turn."""

    marker_name: ClassVar[str] = PIN_MARKER
    seq: int


class Unpin(MarkerBody):
    """Undoes a `Pin` of message `seq`."""

    marker_name: ClassVar[str] = UNPIN_MARKER
    seq: int


class Condensed(MarkerBody):
    """Message `seq` (a user message too large for the window, or with `call_id` one result of a bulk tool)
    is shown to the model as `text`, the RLM result with the original's head. The history keeps the
    original; this only changes what is derived. `fallback`: the text came from map-reduce."""

    marker_name: ClassVar[str] = CONDENSED_MARKER
    seq: int
    text: str
    call_id: str | None = None
    fallback: bool = False
    input_tokens: int = 0
    output_tokens: int = 0


class McpServerTools(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One MCP server's tools in a run: their names, and the digest of their definitions."""

    tools: list[str] = msgspec.field(default_factory=list)
    digest: str = ""


class McpToolsChange(msgspec.Struct, kw_only=True):
    """Tools added and removed since the session's last run (both empty: descriptions or parameters changed)."""

    added: list[str] = msgspec.field(default_factory=list)
    removed: list[str] = msgspec.field(default_factory=list)


class McpTools(MarkerBody):
    """The MCP servers and tools a run had, journaled as it starts: each server's tools, what changed since
    the session's last run, the servers that failed (and why), and what `tool_search` saved when the tools
    were offered through it (``deferred``, ``tokens_all``, ``tokens_offered``, ``tokens_saved``)."""

    marker_name: ClassVar[str] = MCP_MARKER
    servers: dict[str, McpServerTools] = msgspec.field(default_factory=dict)
    changed: dict[str, McpToolsChange] = msgspec.field(default_factory=dict)
    failed: dict[str, str] = msgspec.field(default_factory=dict)
    tool_search: dict[str, int] | None = None


class MemoryForget(MarkerBody):
    """Memory note `id` is forgotten (in a notes session): by whom (``user``, ``model``), and when."""

    marker_name: ClassVar[str] = FORGET_MARKER
    id: str
    by: str = ""
    at: float = 0.0


class PydanticAiMessage(MarkerBody):
    """A pydantic-ai message with no part that tether has a meaning for, kept as its JSON."""

    marker_name: ClassVar[str] = PYDANTIC_AI_MARKER
    message: dict[str, Any]


class OpenAiAgentsItem(MarkerBody):
    """An Agents SDK item with no tether meaning (a web search, a computer call...), kept as its JSON."""

    marker_name: ClassVar[str] = OPENAI_AGENTS_MARKER
    item: dict[str, Any]


KINDS: dict[str, type[MarkerBody]] = {
    kind.marker_name: kind
    for kind in (
        Interrupted,
        ErrorRecord,
        ApprovalRequest,
        ApprovalDecision,
        Pin,
        Unpin,
        Condensed,
        McpTools,
        MemoryForget,
        PydanticAiMessage,
        OpenAiAgentsItem,
    )
}
"""Every marker name tether gives a type, to that type."""

B = TypeVar("B", bound=MarkerBody)


def to_marker(body: MarkerBody) -> Marker:
    """The journal entry body of `body`: a `Marker` under its kind's name, with its fields as the data."""
    data: dict[str, Any] = msgspec.to_builtins(body)
    for name in body.always_written:
        data.setdefault(name, msgspec.to_builtins(getattr(body, name)))
    return Marker(name=body.marker_name, data=data)


def read(body: EntryBody | None, kind: type[B]) -> B | None:
    """`body` as a `kind` when it is a marker of that kind's name and its data holds what the kind needs;
    None otherwise (another kind of entry, another name, a body that is not what tether writes)."""
    if not isinstance(body, Marker) or body.name != kind.marker_name:
        return None
    try:
        return msgspec.convert(body.data, kind)
    except (msgspec.ValidationError, TypeError):
        return None


def parse(body: EntryBody | None) -> MarkerBody | None:
    """`body` as the typed marker its name says, or None (not a marker, a name without a type, bad data)."""
    if not isinstance(body, Marker):
        return None
    kind = KINDS.get(body.name)
    return read(body, kind) if kind is not None else None
