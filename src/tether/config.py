"""The shape of the user's configuration (one TOML file, `config.toml` under the tether home, or
`TETHER_CONFIG`) and its parser. Reading the file is the runtime's job (`tether.runtime.configuration`),
which passes the parsed `Config` to whatever needs it.

    default_model = "anthropic/claude-sonnet-4-5"

    [providers.openai]                 # change a built-in provider
    base_url = "https://my-gateway.example/v1"
    api_key_env = "MY_GATEWAY_KEY"     # the key is read from this variable when the provider is built

    [providers.lab]                    # add an OpenAI-compatible one
    kind = "openai"
    base_url = "http://10.0.0.5:8000/v1"

    [models."openai/my-model"]         # add a model or override the catalog
    context_window = 131072
    input_price = "0.50"               # US dollars per million tokens
    output_price = "1.50"

    [local]
    model_path = "/models/smollm2-360m-instruct.gguf"

    [context]                          # the context engine (per session: metadata["context"])
    auto_compact = false
    compact_threshold = 0.8

    [tools.bash]                       # what a command's environment keeps (see `tether.redaction`)
    allow_env = ["GITHUB_TOKEN"]       # secrets a command may still see (their values are never journaled)
    deny_env = ["DATABASE_URL", "CORP_*"]  # more variables to keep from commands and out of the journal

    [tools]
    search_share = 0.10                # past this share of the window in tool definitions: tool_search

    [sandbox]                          # where commands run (see `tether.tools.sandbox`)
    mode = "workspace-write"           # read-only, workspace-write (the default) or off
    network = ["pypi.org", "files.pythonhosted.org"]  # "off" (the default), "on", or the hosts to reach
    writable = ["~/.cache"]            # more paths commands may write

    [runtime]
    max_parallel_tasks = 4             # sub-agent (`task`) calls of one step that run at once; the others wait
    max_task_depth = 3                 # how deep sub-agents nest: a sub-agent at this depth has no `task` tool
    max_answer_tokens = 40000          # tokens one answer may stream before its step is cut (default: the
                                       # model's output limit and a quarter more)
    stall_timeout = 120                # seconds a model may send nothing before its step is cut (default 600)

    [agents.review]                    # an agent profile: `tether run --agent review`, or the `task` tool's
    description = "reads the change and reports problems"
    system_prompt = "You review code. Report problems; change nothing."
    model = "openai/gpt-4.1"           # default: the model of the run
    tools = ["read", "grep", "glob"]   # default: every tool; `read_only = true` keeps only those that change nothing
    permissions = { deny = ["bash(git push*)"] }  # the agent's own approval rules (allow, ask, deny)

    [mcp.github]                       # an MCP server (stdio): its tools are mcp__github__<tool>
    command = "github-mcp-server"
    args = ["stdio"]
    env = { GITHUB_TOKEN = "{env:GITHUB_TOKEN}" }  # all it gets besides PATH, HOME and the locale
    call_timeout = 120                 # seconds a call may take (startup_timeout: seconds to start, 30)

    [mcp.docs]                         # an MCP server over streamable HTTP
    url = "https://mcp.example.com/mcp"
    headers = { Authorization = "Bearer {env:DOCS_TOKEN}" }  # read when it starts; never journaled

    [instructions]                     # AGENTS.md / CLAUDE.md in the system prompt
    max_chars = 40000                  # past it the farthest file is cut first

    [memory]                           # the memory tool's notes in the system prompt
    max_tokens = 2000

    [permissions]                      # approval rules (see `tether.runtime.rules`); a workspace's own
    allow = ["bash(git status*)", "bash(pytest*)"]  # .tether/config.toml may hold this table too
    ask = ["edit(migrations/**)"]
    deny = ["bash(rm -rf *)", "read(**/secrets/**)"]
    mode = "default"                   # accept-edits, plan, never-ask or bypass
    timeout = 600                      # seconds an approval waits before it counts as a no

Keys belong in the environment; `api_key` is accepted here for people who keep their config private, and is
never shown by `repr`.
"""

from __future__ import annotations

import tomllib
from decimal import Decimal
from typing import Annotated, Any, Literal

import msgspec

from .errors import ConfigError


class ProviderConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Settings of one provider. `kind` ("openai", "anthropic", "local") is needed only for new names."""

    kind: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    timeout: float | None = None
    max_attempts: int | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    default_model: str | None = None

    def __repr__(self) -> str:
        shown = {f: getattr(self, f) for f in self.__struct_fields__ if f != "api_key" and getattr(self, f)}
        if self.api_key:
            shown["api_key"] = "***"
        return "ProviderConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


class ModelConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Catalog overrides for one model; prices in US dollars per million tokens. Unset fields keep the
    catalog's value."""

    context_window: int | None = None
    max_output_tokens: int | None = None
    input_price: Decimal | None = None
    output_price: Decimal | None = None
    cache_read_price: Decimal | None = None
    cache_write_price: Decimal | None = None
    temperature: float | None = None
    supports_temperature: bool | None = None
    supports_tools: bool | None = None
    supports_thinking: bool | None = None
    supports_images: bool | None = None


class LocalConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    model_path: str | None = None
    context_window: int | None = None
    threads: int | None = None


EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_*][A-Za-z0-9_*]*$")]
"""An environment variable's name, or a pattern of them with ``*`` (``AWS_*``)."""


class BashConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[tools.bash]``. A command runs without the environment variables that are secrets (provider keys,
    the ``api_key_env`` of configured providers, names such as ``*_API_KEY``, ``*_TOKEN``, ``*PASSWORD*``:
    `tether.redaction.SECRET_NAME_PATTERNS`) and without `deny_env`, except `allow_env`."""

    allow_env: list[EnvName] = msgspec.field(default_factory=list)
    deny_env: list[EnvName] = msgspec.field(default_factory=list)


class ToolsConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    bash: BashConfig = msgspec.field(default_factory=BashConfig)
    search_share: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    """When the tools' definitions would take more than this share of the model's context window (default
    0.10), the MCP tools are not offered whole: the model gets `tool_search` and loads those it needs
    (0: always; 1: never)."""


HostName = Annotated[
    str, msgspec.Meta(pattern=r"^(\*\.)?[A-Za-z0-9_.-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")
]


class SandboxConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[sandbox]``: where commands run (see `tether.tools.sandbox`). Unset: ``workspace-write``, the
    network off, the best mechanism found (bubblewrap, else Landlock)."""

    mode: Literal["read-only", "workspace-write", "off"] | None = None
    network: Literal["off", "on"] | list[HostName] | None = None
    """``"off"``, ``"on"``, or the hosts commands may reach (``["pypi.org", "*.pythonhosted.org"]``)."""
    writable: list[str] = msgspec.field(default_factory=list)
    """More paths commands may write (``["~/.cache"]``); relative ones are in the workspace."""
    mechanism: Literal["auto", "bwrap", "landlock"] | None = None


PermissionMode = Literal["default", "accept-edits", "plan", "never-ask", "bypass"]


class RulesConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """Approval rules ``TOOL`` or ``TOOL(PATTERN)`` by what they do (checked where the runtime reads them):
    an agent profile's ``[agents.NAME.permissions]``."""

    allow: list[str] = msgspec.field(default_factory=list)
    ask: list[str] = msgspec.field(default_factory=list)
    deny: list[str] = msgspec.field(default_factory=list)


class PermissionsConfig(RulesConfig, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[permissions]``: the approval rules, the permission mode, and how long an approval waits."""

    mode: PermissionMode | None = None
    timeout: Annotated[float, msgspec.Meta(gt=0)] | None = None


class RuntimeConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[runtime]``: how runs hold their sessions, how many sub-agents they may run, and how long one model
    answer may go on."""

    lease_ttl: Annotated[float, msgspec.Meta(ge=1, le=86_400)] | None = None
    """Seconds a run's hold on its session lasts unless renewed (default 30): how long a session stays busy
    after the process running it died."""
    max_parallel_tasks: Annotated[int, msgspec.Meta(ge=1, le=64)] | None = None
    """Sub-agent (`task`) calls of one step that run at once (default 4); the others wait for a place."""
    max_task_depth: Annotated[int, msgspec.Meta(ge=0, le=16)] | None = None
    """How deep sub-agents nest (default 3): a session at this depth is offered no `task` tool (0: none is)."""
    title_model: str | None = None
    """Who titles a session after its first exchange (``"provider/model"``; ``"off"``: nobody). Unset: the
    session's own model, except the embedded local one (too small to title well), which titles only when
    named here."""
    max_answer_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Tokens one model answer may stream (text, thinking and tool-call arguments, as tether counts them)
    before its step is cut, what it said kept (default: the output limit asked of the model and a quarter
    more, for tokenizers differ): a model or server that does not stop at its limit is stopped here."""
    stall_timeout: Annotated[float, msgspec.Meta(gt=0, le=86_400)] | None = None
    """Seconds a model may send nothing, before its first token or between two, before its step is cut
    (default 600, the SDKs' own read timeout: a model may think long before it says anything)."""


McpServerName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,48}$")]


class McpServerConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[mcp.NAME]``: an MCP server whose tools the model gets as ``mcp__NAME__TOOL`` (see `tether.mcp`).
    Either `command` (stdio: `args`, `env`, `cwd`) or `url` (streamable HTTP: `headers`). Values of `env`
    and `headers` may name environment variables, ``{env:VAR}`` or ``${VAR}``, read when the server starts.
    In the user's config, ``enabled = true`` alone (no command, no url) lets a server that a workspace
    defines (its ``.mcp.json`` or ``.tether/config.toml``) start; ``enabled = false`` keeps one off."""

    type: Literal["stdio", "http", "streamable-http"] | None = None
    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    startup_timeout: Annotated[float, msgspec.Meta(gt=0, le=3600)] | None = None
    """Seconds the server has to start and list its tools (default 30)."""
    call_timeout: Annotated[float, msgspec.Meta(gt=0, le=86_400)] | None = None
    """Seconds one tool call may take (default 120); past it the call is an error the model reads."""
    enabled: bool | None = None
    sandbox: bool | None = None
    """A stdio server runs in the commands' sandbox (`[sandbox]`'s mode, the network on) unless ``false``:
    for a server that must reach what the sandbox keeps out (a UNIX socket, files outside the workspace)."""

    def __repr__(self) -> str:
        # header and env values may hold secrets (a token written in place of an {env:VAR})
        shown = {
            f: getattr(self, f) for f in self.__struct_fields__ if f not in ("env", "headers") and getattr(self, f)
        }
        for name in ("env", "headers"):
            if getattr(self, name):
                shown[name] = dict.fromkeys(getattr(self, name), "***")
        return "McpServerConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


class InstructionsConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[instructions]``: the project instructions added to every run's system prompt (`AGENTS.md`, else
    `CLAUDE.md`, from the workspace up to its repository root, and your own `AGENTS.md` in the tether home)."""

    enabled: bool | None = None
    max_chars: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)] | None = None
    """Characters of instructions at most (default 40,000); past it the farthest file is cut first."""


class MemoryConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[memory]``: the notes the `memory` tool keeps, shown in every run's system prompt."""

    enabled: bool | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] | None = None
    """Tokens of notes in the system prompt at most (default 2,000), newest first."""


class AuditConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[audit]``: how long the audit trail keeps its records (``tether audit``)."""

    keep_days: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """Days a record is kept (unset: for good). Older ones are pruned, leaving a record that says so."""


class ArchiveConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[archive]``: the S3-compatible bucket `tether archive` moves sessions to (credentials: the usual
    ``AWS_*`` variables)."""

    bucket: str | None = None
    prefix: str = "tether/"
    endpoint_url: str | None = None
    """A service other than AWS: ``http://127.0.0.1:7480`` (Ceph), ``https://ACCOUNT.r2.cloudflarestorage.com``."""
    region: str | None = None


class SinkConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[[sinks]]``: where every session's durable events go (see `tether.runtime.sinks`)."""

    name: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
    """Its name: the store keeps its position under it (a new name starts from the beginning)."""
    type: Literal["file", "s3", "webhook"]
    path: str | None = None
    """file: the folder of ``events.jsonl`` and its rotated files."""
    max_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 100_000_000
    """file: the size at which the file is rotated."""
    bucket: str | None = None
    prefix: str = "tether/"
    endpoint_url: str | None = None
    region: str | None = None
    url: str | None = None
    """webhook: where each batch is POSTed."""
    headers: dict[str, str] = msgspec.field(default_factory=dict)


AgentName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class AgentConfig(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """``[agents.NAME]``: an agent profile (see `tether.runtime.profiles`). Unset fields keep the built-in
    profile's value (``build``, ``plan``) or the run's (model, system prompt, every tool)."""

    description: str | None = None
    system_prompt: str | None = None
    model: str | None = None
    tools: list[str] | None = None
    read_only: bool | None = None
    permissions: RulesConfig | None = None
    """``[agents.NAME.permissions]``: the agent's own approval rules, a layer over the run's (a sub-agent's
    never allow what its parent's rules would not)."""


class Config(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    default_model: str | None = None
    providers: dict[str, ProviderConfig] = msgspec.field(default_factory=dict)
    models: dict[str, ModelConfig] = msgspec.field(default_factory=dict)
    local: LocalConfig = msgspec.field(default_factory=LocalConfig)
    context: dict[str, Any] = msgspec.field(default_factory=dict)
    """``[context]``: the context engine's settings (`tether.context.ContextSettings` fields, such as
    ``auto_compact = false`` or ``compact_threshold = 0.8``); checked where the engine reads them."""
    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)
    runtime: RuntimeConfig = msgspec.field(default_factory=RuntimeConfig)
    agents: dict[AgentName, AgentConfig] = msgspec.field(default_factory=dict)
    permissions: PermissionsConfig = msgspec.field(default_factory=PermissionsConfig)
    mcp: dict[McpServerName, McpServerConfig] = msgspec.field(default_factory=dict)
    """``[mcp.NAME]``: MCP servers (see `McpServerConfig`)."""
    instructions: InstructionsConfig = msgspec.field(default_factory=InstructionsConfig)
    memory: MemoryConfig = msgspec.field(default_factory=MemoryConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    audit: AuditConfig = msgspec.field(default_factory=AuditConfig)
    archive: ArchiveConfig = msgspec.field(default_factory=ArchiveConfig)
    sinks: list[SinkConfig] = msgspec.field(default_factory=list)


def parse_config(text: str, *, source: str = "<config>") -> Config:
    """Parse config TOML; any mistake is a `ConfigError` that names the source and the place."""
    try:
        # Decimal floats: `input_price = 2.50` must stay exactly 2.50.
        data: dict[str, Any] = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    try:
        return msgspec.convert(data, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
