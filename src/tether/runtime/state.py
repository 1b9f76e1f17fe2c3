"""What one run is told (`RunOptions`) and what it knows as it goes (`RunState`): the session handle, the
provider, the journal it writes through, the context engine, its tools, its secrets, what it has spent.
Every phase of the loop (`prepare`, `model_call`, `tool_calls`, `condense`) works on a `RunState`."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config
from ..context.budget import Budget, ContextSettings
from ..context.engine import ContextEngine, ModelLimits
from ..errors import SessionBusy
from ..ids import new_id
from ..messages import Entry, EntryBody, Message, ToolCallPart, ToolSpec, Usage
from ..providers.base import Provider
from ..providers.registry import KEY_ENVS
from ..redaction import SecretPolicy, config_secrets
from ..tools.base import AskFn, ToolContext, ToolLimits, ToolRegistry
from ..tools.sandbox import Sandbox
from .handle import SessionHandle
from .journal import RunJournal
from .lease import LeaseTerms
from .pacing import Pacer
from .permission import Approver, PermissionCheck
from .profiles import AgentProfile
from .rules import Rules, session_rules
from .toolset import default_registry

if TYPE_CHECKING:
    from ..mcp.manager import McpManager
    from ..providers.registry import ResolvedModel

DEFAULT_MAX_STEPS = 50

ContextFn = Callable[[Sequence[Entry]], Awaitable[list[Message]]]
"""Turns entries into the messages of a model call: an override of the context engine, for tests and for
callers with a policy of their own."""


async def all_messages(entries: Sequence[Entry]) -> list[Message]:
    """Every message of `entries`, as they are: a `ContextFn` that derives nothing."""
    return [e.body for e in entries if isinstance(e.body, Message) and e.body.role != "system"]


@dataclass
class RunOptions:
    """How one run behaves. `model` is the provider's own model id (``gpt-4.1``). Configuration comes in
    here (`config`, read by whoever starts the run); the loop reads no file."""

    model: str
    max_steps: int = DEFAULT_MAX_STEPS
    system_prompt: str | None = None
    tools: ToolRegistry = field(default_factory=default_registry)
    confine_to_workspace: bool = True
    ask: AskFn | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    tool_limits: ToolLimits = field(default_factory=ToolLimits)
    model_info: ModelLimits | None = None
    """The model's context window and output limit (a catalog entry); unknown: conservative guesses."""
    config: Config | None = None
    """The user's configuration: its ``[context]`` settings, and its providers for resolving the context
    setting ``compaction_model``. None: an empty one."""
    context_engine: ContextEngine | None = None
    """Shared across runs to keep its caches; None: one for this run, with `config`'s settings."""
    context: ContextFn | None = None
    """Bypass the context engine (no derivation, no compaction) with a function of the run's entries."""
    resolve_model: Callable[[str], ResolvedModel] | None = None
    """How the run's other models (``provider/model``: ``compaction_model``, ``title_model``, a sub-agent
    profile's) become providers; None: the registry's `resolve_provider` with `config`, as for ``--model``.
    `launch.check_request` sets it from the resolver it was given (a manager's, whose clients its runs share)."""
    permission: PermissionCheck | None = None
    """A program's own decision on each tool call (see `permission`), taken with `rules`: the strictest of
    the two wins. None: `rules` alone decide."""
    rules: Rules | None = None
    """The approval rules and mode (`rules`; `launch` builds them from the configuration and the run's
    flags); the session's own rules are added when the run starts. None: no rules (every call runs unless
    `permission` says otherwise), as for a program that calls `Session.stream` itself."""
    approver: Approver | None = None
    """Who answers when a call must be asked about (`approvals`); None: nobody, and such a call is denied
    with a reason that says how to allow it."""
    approval_timeout: float | None = None
    """Seconds an approval request waits before it counts as a no; None: it waits as long as it takes."""
    pacer: Pacer | None = None
    """Shared by the runs of one event loop (a session manager's): when many are ready at once, a few at a
    time go on, so that the loop keeps serving requests and streams. None: the run never waits for a turn."""
    lease: LeaseTerms | None = field(default_factory=LeaseTerms)
    """How the run holds its session against other runs (see `lease`); None: it takes no lease."""
    on_lease_wait: Callable[[SessionBusy], None] | None = None
    """Told who holds the session when the run waits for it (`LeaseTerms.wait`)."""
    durable_stream: bool = True
    """Save the answer as it streams (`streaming`), so that a kill loses at most its last half second;
    False: only the whole answer is journaled (what a kill loses is the step's streamed part)."""
    secrets: SecretPolicy | None = None
    """Which environment variables are kept from commands and whose values are kept out of the journal;
    None: `run_secrets` of `config` (the providers' key variables, ``[tools.bash]``, secret-looking names)."""
    project: bool = False
    """Read the workspace's instructions (AGENTS.md), skills and memory notes as the run starts, into its
    system prompt (`runtime.project`); `launch` sets it. `project_tools`: and add the `skill` and `memory`
    tools."""
    project_tools: bool = True
    mcp: McpManager | None = None
    """The MCP servers whose tools the run adds to `tools` as it starts (`runtime.mcp.bind_mcp`); shared by
    the runs of a process, ended by whoever made it. None: no MCP tools."""
    untooled: bool = False
    """The run's tools were left to its model, which is offered none unless they are named
    (`ModelInfo.offer_tools`, the embedded 135M model): the run says so as it starts, for every face."""
    sandbox: Sandbox | None = field(default_factory=Sandbox)
    """Where the run's commands run (`tools.sandbox`): by default ``workspace-write`` with the network off,
    by the best mechanism found here; None: unconfined (a program's own choice; `launch` builds it from
    ``[sandbox]`` and ``--sandbox``)."""
    agent: AgentProfile | None = None
    """The agent profile the run works as (its tools, prompt and model are already applied to these
    options); None: ``build``. Sub-agents that name none work as it too."""


def run_secrets(config: Config | None) -> SecretPolicy:
    """The secret policy of a run under `config`: every built-in provider's key variable, the configured
    providers' ``api_key_env``, and the ``[tools.bash]`` lists."""
    return SecretPolicy.from_config(config or Config(), KEY_ENVS.values())


@dataclass(frozen=True)
class Summarizer:
    """Who writes the summaries of a run's automatic compactions, and what it takes in one call."""

    provider: Provider
    model: str
    input_limit: int | None = None
    """None: the run's own budget (the summarizer is the run's model)."""


@dataclass
class RunState:
    """One run's working state. `entries` holds the tail of the active history the run started from plus
    what it appended (for the orphan, objective and checkpoint checks); the context engine keeps its own."""

    session: SessionHandle
    provider: Provider
    options: RunOptions
    journal: RunJournal
    engine: ContextEngine
    tools: ToolRegistry
    specs: list[ToolSpec]
    model_info: ModelLimits
    settings: ContextSettings
    budget: Budget
    summarizer: Summarizer
    run_id: str = field(default_factory=lambda: new_id("run"))
    entries: list[Entry] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    recent_calls: list[str] = field(default_factory=list)
    repeats: set[str] = field(default_factory=set)
    pause_requested: bool = False
    """Another process asked the run to pause: it stops at its next step boundary."""
    project_text: str = ""
    """The project's part of the system prompt (instructions, skills, memory notes), read as the run started."""
    secrets: SecretPolicy = field(init=False)
    rules: Rules | None = field(init=False)
    """The run's rules with the session's own (those an "always, in this session" added)."""
    _workspace: tuple[str, Path] | None = field(default=None, init=False, repr=False)
    """The session's directory and its canonical path, resolved once per run (`tool_context`)."""

    def __post_init__(self) -> None:
        # read once, as the run starts: the secrets of the environment tether runs in, and those that the
        # configuration holds itself; the journal redacts them from everything the run writes
        self.secrets = self.options.secrets or run_secrets(self.options.config)
        if not self.journal.redactor:
            config = self.options.config or Config()
            self.journal.redactor = self.secrets.redactor(os.environ, config_secrets(config))
        rules = self.options.rules
        self.rules = rules.adding(session_rules(self.session.info.metadata)) if rules is not None else None

    @property
    def session_id(self) -> str:
        return self.session.id

    async def append(self, *bodies: EntryBody) -> list[Entry]:
        """Journal through the run's one append path and keep the entries in hand."""
        stored = await self.journal.append(*bodies)
        self.entries.extend(stored)
        return stored

    def tool_context(self) -> ToolContext:
        directory = self.session.info.directory or "."
        if self._workspace is None or self._workspace[0] != directory:
            self._workspace = (directory, Path(directory).expanduser().resolve())
        return ToolContext(
            workspace=self._workspace[1],
            canonical=self._workspace[1],
            session_id=self.session_id,
            store=self.session.store,
            confine_to_workspace=self.options.confine_to_workspace,
            ask=self.options.ask,
            limits=self.options.tool_limits,
            secrets=self.secrets,
            redactor=self.journal.redactor,
            emit=self.journal.note,
            sandbox=self.options.sandbox,
        )

    def objective(self) -> str:
        """The latest user message of the run's history: what the work is for."""
        for entry in reversed(self.entries):
            if isinstance(entry.body, Message) and entry.body.role == "user" and entry.body.text.strip():
                return entry.body.text.strip()
        return ""

    def unanswered_prompt(self) -> int | None:
        """The seq of the last user message when nothing answered it (a run stopped before the model did)."""
        for entry in reversed(self.entries):
            if isinstance(entry.body, Message) and entry.body.role != "system":
                return entry.seq if entry.body.role == "user" else None
        return None

    def unanswered_calls(self) -> list[ToolCallPart]:
        """Tool calls of the last assistant message that have no result after them."""
        answered: set[str] = set()
        for entry in reversed(self.entries):
            body = entry.body
            if not isinstance(body, Message):
                continue
            if body.role == "tool":
                answered.update(r.call_id for r in body.tool_results)
            elif body.role == "assistant":
                return [c for c in body.tool_calls if c.id not in answered]
            else:
                return []
        return []
