"""The wire vocabulary of tether's HTTP API, one module for every side of it: the server's routes
(`tether.server`), its OpenAPI document and the typed client (`tether.client`) all use these types, and none
of them is written twice. No web framework is imported here.

Request bodies are pydantic models in strict mode (a JSON `false` is no integer and ``"5"`` no number; the
framework validates them and writes their schemas into the spec), with every constraint the server holds
stated in their schema: id patterns, absolute paths, enumerated values. What the routes answer are msgspec
structs, like every type of the runtime they carry (`SessionInfo`, `Entry`, the events), so that an answer
and its schema come from the same type (`msgspec.json.schema_components`). Errors are `ErrorBody`: the
`code`, message and `details()` of the tether exception (`tether.errors`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from .context.derive import Omission
from .context.tokens import TokenEstimate
from .messages import Entry, Message
from .runtime.activity import ActivityStatus
from .runtime.launch import WIRE_OPTIONS, RunRequest
from .runtime.memory import Note
from .runtime.rules import Mode
from .runtime.sharing import MAX_EXPIRY
from .store.records import Lease, SessionInfo, Share

MAX_SEQ = 2**53 - 1
"""The largest entry number a request may name (what JSON numbers hold exactly, and far more than a journal)."""
MAX_EVENT = 2**63 - 1
"""The largest event number a request may name."""

SESSION_REF = r"^[A-Za-z0-9_]{6,35}$"
"""A session as every face names it: a full id (``ses_`` and 26 characters) or a unique piece of one, at least
six characters (`runtime.lookup.find_session`)."""
ABSOLUTE_PATH = r"^/[^\u0000]*$"
"""A path on the server, absolute (no NUL: no file system takes one)."""
EVENT_NUMBER = r"^[0-9]{1,18}$"
"""An event number as a header gives it (`Last-Event-ID`)."""
RULE = r"^[A-Za-z0-9_.*-]+(\(.*\S.*\))?$"
"""An approval rule: ``TOOL`` or ``TOOL(PATTERN)``, such as ``bash(git status*)`` (a tool name may hold glob
characters: ``mcp__*``)."""
CURSOR = r"^[A-Za-z0-9_-]{1,500}$"
"""A page's `next_cursor` (base64url): one this store did not give names no page (404)."""
PATTERNS = {
    CURSOR: "is not a cursor (give the next_cursor of a page)",
    SESSION_REF: "is not a session id (a full id, or at least its last 6 characters)",
    ABSOLUTE_PATH: "is not an absolute path",
    EVENT_NUMBER: "is not an event number",
    RULE: "is not a rule: write TOOL or TOOL(PATTERN), such as bash(git status*)",
}
"""What a value that does not match each pattern is, said to a person."""

# --- requests ----------------------------------------------------------------------------------------------


TOOLS = r"^ *[A-Za-z0-9_.-]+ *(, *[A-Za-z0-9_.-]+ *)*$"
"""A comma list of tool names (or ``none``)."""


def _whole(value: Any) -> Any:
    # JSON Schema counts 3.0 as the integer 3, and so does the spec: a whole float is taken as its integer;
    # strict mode refuses everything else that is not an integer (true, "3", 3.5)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Whole = Annotated[int, BeforeValidator(_whole)]
"""An integer of a request body: a JSON integer (or a number with no fraction), never a boolean or a string."""
# Bounds of an optional one go inside its type, before the validator: given to the field of `X | None`, they
# reached the OpenAPI spec as "ge"/"le", which JSON Schema does not know (a client generated from the spec
# allowed max_steps 0, which the server refuses with 422), where the bare `Whole` gets minimum/maximum.
Steps = Annotated[int, Field(ge=1, le=10_000), BeforeValidator(_whole)]
Seq = Annotated[int, Field(ge=0, le=MAX_SEQ), BeforeValidator(_whole)]
KeepTokens = Annotated[int, Field(ge=1, le=10_000_000), BeforeValidator(_whole)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


RuleText = Annotated[str, Field(min_length=1, max_length=500, pattern=RULE)]
"""An approval rule: ``TOOL`` or ``TOOL(PATTERN)``, such as ``bash(git status*)``."""


class RunSettings(_Body):
    """How a run goes: the model, the agent profile, the tools, the step limit, a system prompt. These are
    the wire fields of `RunRequest` (`WIRE_OPTIONS`), which every face builds: `request` makes it."""

    model: str | None = Field(
        default=None, min_length=1, max_length=200, description="provider/model; default: the session's"
    )
    agent: str | None = Field(
        default=None, min_length=1, max_length=100, description="build (default), plan, or [agents.NAME]"
    )
    tools: str | None = Field(
        default=None, max_length=2000, pattern=TOOLS, description="a comma list of tools, or none"
    )
    max_steps: Steps | None = Field(default=None, description="model steps at most (default 50)")
    system_prompt: str | None = Field(default=None, min_length=1, max_length=200_000)
    confirmed: bool = Field(default=False, description="run an imported session without asking (its yes is recorded)")
    permission_mode: Mode | None = Field(
        default=None, description="this run's approval mode (as `tether run --permission-mode`)"
    )
    allow: list[RuleText] = Field(default_factory=list, max_length=200, description="rules allowed in this run")
    deny: list[RuleText] = Field(default_factory=list, max_length=200, description="rules denied in this run")

    def request(self, prompt: str | None = None, **local: Any) -> RunRequest:
        """The `RunRequest` these settings ask for (the fields given; `local`: what the server adds)."""
        given = {
            name: getattr(self, name)
            for name in WIRE_OPTIONS
            if name in self.model_fields_set and getattr(self, name) is not None
        }
        for name in ("allow", "deny"):
            if name in given:
                given[name] = tuple(given[name])
        return RunRequest(prompt, **given, **local)


def run_body(request: RunRequest) -> dict[str, Any]:
    """What a client sends for `request`: its wire fields that differ from a `RunRequest`'s defaults (so that
    the server's defaults hold for the others), as JSON values."""
    defaults = RunRequest(None)
    body: dict[str, Any] = {}
    for name in WIRE_OPTIONS:
        value = getattr(request, name)
        if value != getattr(defaults, name):
            body[name] = list(value) if isinstance(value, tuple) else value
    return body


class AddMcpServer(_Body):
    """An MCP server to add while the server runs (as a ``[mcp.NAME]`` table): a `command` (stdio) or a
    `url` (streamable HTTP). Values of `env` and `headers` may read variables of the server's environment,
    ``{env:VAR}``; they are never shown back."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]{1,48}$")
    command: str | None = Field(default=None, min_length=1, max_length=4096)
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=200)
    env: dict[str, Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=200)
    cwd: str | None = Field(default=None, max_length=4096, pattern=ABSOLUTE_PATH)
    url: str | None = Field(default=None, min_length=1, max_length=4096)
    headers: dict[str, Annotated[str, Field(max_length=8192)]] = Field(default_factory=dict, max_length=100)
    startup_timeout: float | None = Field(default=None, gt=0, le=3600)
    call_timeout: float | None = Field(default=None, gt=0, le=86_400)
    start: bool = Field(default=True, description="start it now, so that the answer says whether it works")

    model_config = ConfigDict(
        json_schema_extra={  # a server is a command or a url
            "anyOf": [
                {"required": ["command"], "properties": {"command": {"type": "string"}}},
                {"required": ["url"], "properties": {"url": {"type": "string"}}},
            ]
        }
    )


class AddNote(_Body):
    """A memory note for a project (`directory`) or for the user everywhere (scope user)."""

    text: str = Field(..., min_length=1, max_length=4000)
    scope: Literal["project", "user"] = "project"
    directory: str | None = Field(
        default=None, max_length=4096, pattern=ABSOLUTE_PATH, description="the project's absolute path"
    )

    model_config = ConfigDict(
        json_schema_extra={  # a project note names its project
            "anyOf": [
                {"required": ["directory"], "properties": {"directory": {"type": "string"}}},
                {"required": ["scope"], "properties": {"scope": {"const": "user"}}},
            ]
        }
    )


class CreateSession(RunSettings):
    """A new session in `directory`; with a `prompt`, its first run starts at once (every option is checked
    before the session is created: a bad one leaves nothing behind)."""

    directory: str = Field(..., max_length=4096, pattern=ABSOLUTE_PATH, description="an absolute path on the server")
    title: str | None = Field(default=None, min_length=1, max_length=500)
    prompt: str | None = Field(default=None, min_length=1)


class PromptRequest(RunSettings):
    prompt: str = Field(..., min_length=1)
    queue: bool = Field(
        default=True,
        description="wait behind a run in progress (queued durably in the store); false: 409 with the holder",
    )
    steer: bool = Field(default=False, description="give the prompt to the run in progress at its next step")


class ResumeRequest(RunSettings):
    prompt: str | None = Field(default=None, min_length=1, description="a prompt to go on with (default: none)")


class SessionRules(_Body):
    """The session's own approval rules (one layer of several: the strictest matching rule of any layer
    wins, deny before ask before allow), e.g. ``bash(git status*)``, ``edit(src/**)``, ``read(**/.env)``."""

    allow: list[RuleText] = Field(default_factory=list, max_length=200)
    ask: list[RuleText] = Field(default_factory=list, max_length=200)
    deny: list[RuleText] = Field(default_factory=list, max_length=200)


class UpdateSession(_Body):
    title: str | None = Field(default=None, min_length=1, max_length=500, description="journaled as a title change")
    state: Literal["active", "paused"] | None = None
    rules: SessionRules | None = Field(
        default=None, description="replace the session's own approval rules (its next run applies them)"
    )


class ForkRequest(_Body):
    at: Seq | None = Field(default=None, description="copy entries 1..at (default: all)")
    title: str | None = Field(default=None, min_length=1, max_length=500)


class RevertRequest(_Body):
    to_seq: Whole = Field(..., ge=0, le=MAX_SEQ, description="hide every entry after this one from the active history")
    reason: str | None = Field(default=None, max_length=2000)


class CompactRequest(_Body):
    model: str | None = Field(default=None, min_length=1, max_length=200, description="the summarizer")
    mechanical: bool = Field(default=False, description="no model: extract the summary")
    keep_tokens: KeepTokens | None = Field(default=None, description="newest tokens kept verbatim")


class RetitleRequest(_Body):
    model: str | None = Field(default=None, min_length=1, max_length=200, description="who writes the title")


class AnswerApproval(_Body):
    """A person's answer to an approval request: yes (how far it reaches) or no, with a message for the model."""

    approved: bool
    scope: Literal["once", "session", "project"] = Field(
        default="once",
        description="once: this call; session: calls like it in this session; project: in this workspace",
    )
    message: str = Field(default="", max_length=10_000, description="what the model is told (what to do instead)")


class CreateShare(_Body):
    expires_in: float | None = Field(
        default=None, gt=0, le=MAX_EXPIRY, description="seconds until the link stops; null: until revoked"
    )


# --- answers -----------------------------------------------------------------------------------------------


class ErrorDetail(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: str
    """Stable: the tether exception's `code`, its class in snake case (``session_not_found``, ``session_busy``,
    ``invalid_input``), or one of the server's own (``unauthorized``, ``forbidden_host``,
    ``forbidden_origin``, ``payload_too_large``, ``invalid_request``, ``not_found``, ``method_not_allowed``,
    ``internal``)."""
    message: str
    details: dict[str, Any] = msgspec.field(default_factory=dict)
    """The exception's `details()`: the holder of a busy session (``holder``, ``pid``, ``host``, ``since``,
    ``expires_at``), the fields of a request that failed validation, ..."""


class ErrorBody(msgspec.Struct):
    error: ErrorDetail


class CreatedShare(msgspec.Struct, kw_only=True):
    """A new share link. `token` and `url` are shown this once: the server keeps only a hash of the token."""

    id: str
    session_id: str
    token: str
    url: str
    created_at: float
    expires_at: float | None = None


class ShareList(msgspec.Struct, kw_only=True):
    shares: list[Share]
    """Oldest first, revoked and expired ones too (their `revoked_at`, `expires_at` say so); no tokens."""


class NoteList(msgspec.Struct, kw_only=True):
    notes: list[Note]


class SessionPage(msgspec.Struct, kw_only=True):
    items: list[SessionInfo]
    next_cursor: str | None = None
    """Give it as `cursor` for the next page; null on the last."""
    statuses: dict[str, ActivityStatus] = msgspec.field(default_factory=dict)
    """The sessions of the page with a run in progress in this server, and where each stands (`running`,
    `waiting_for_approval`, `queued`); the others are idle here (`GET /sessions/{id}` says more; `GET /events`
    tells each change)."""


class SessionView(msgspec.Struct, kw_only=True):
    session: SessionInfo
    status: ActivityStatus
    lease: Lease | None = None
    """The run that holds the session now, in this process or another."""


class CreatedSession(msgspec.Struct, kw_only=True):
    session: SessionInfo
    run: RunAccepted | None = None


class RunAccepted(msgspec.Struct, kw_only=True):
    """A prompt taken: follow `GET /sessions/{session_id}/events?after={after}` to see its run (a queued
    prompt's run comes after the runs ahead of it; each run starts with a `run_started` event)."""

    session_id: str
    after: int
    queued: bool = False
    """It waits behind a run in progress (of this server, or of another worker or node of the service), kept
    in the store's durable queue: it runs once, in order, even if the process that took it dies."""
    steered: bool = False
    """It went to the run in progress."""


class Deleted(msgspec.Struct, kw_only=True):
    deleted: list[str]


class Outcome(msgspec.Struct, kw_only=True):
    done: bool
    """False when there was nothing to do (no run in progress to cancel or pause)."""


class EntryPage(msgspec.Struct, kw_only=True):
    entries: list[Entry]
    last_seq: int
    """The session's last entry when read."""


class ContextBudget(msgspec.Struct, kw_only=True):
    context_window: int
    reserved_output: int
    safety_margin: int
    usable: int
    compact_threshold: int


class ContextMessage(msgspec.Struct, kw_only=True):
    seq: int | None
    """The entry the message came from; null for the compaction summary and repaired results."""
    role: str
    tokens: int
    message: Message


class ContextReport(msgspec.Struct, kw_only=True):
    """What the model would see at the session's next step (the same as `tether context --json`)."""

    session_id: str
    model: str
    budget: ContextBudget
    auto_compact: bool
    mode: str
    estimate: TokenEstimate
    needed_tokens: int
    fixed_tokens: int
    fits: bool
    compaction_seq: int | None
    first_kept_seq: int | None
    omissions: list[Omission]
    messages: list[ContextMessage]


class Health(msgspec.Struct, kw_only=True):
    status: Literal["ok"]
    version: str
    store: str
    running: int
    """Sessions with a run in progress in this server."""
    sinks: dict[str, SinkHealth] | None = None
    """The event sinks this server delivers to, by name (absent when none are configured)."""


class SinkHealth(msgspec.Struct, kw_only=True):
    """One event sink: events delivered by this server, how far behind it is, its last error (null: none)."""

    delivered: int
    lag_seconds: float
    error: str | None = None


ExportDocument = dict[str, Any]


class Approval(msgspec.Struct, kw_only=True):
    """A tool call that waits for a person: what it would do, why it asks, the rules an "always" would add."""

    session_id: str
    call_id: str
    tool: str
    arguments: Any
    reason: str
    suggestion: list[str]
    workspace: str


class ApprovalList(msgspec.Struct, kw_only=True):
    approvals: list[Approval]


class Answered(msgspec.Struct, kw_only=True):
    run: RunAccepted | None = None
    """When the request was one a stopped run left in the journal: the run that resumes the session to take
    the answer (null when a run here was waiting on it and goes on)."""
