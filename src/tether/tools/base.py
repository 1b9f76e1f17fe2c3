"""What a tool is: the `Tool` protocol, the `ToolContext` a call runs in, the `ToolOutput` it returns, the
`ToolRegistry` the loop looks tools up in, argument validation against a tool's JSON schema, and
`function_tool`, which turns a plain (async) function into a tool."""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
import types
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Union, get_args, get_origin, overload, runtime_checkable

from ..errors import InvalidInput, OutsideWorkspace, ToolError
from ..events import Event
from ..messages import ToolSpec
from ..redaction import Redactor, SecretPolicy
from ..store.protocols import Store
from .output import MIN_LIMIT, MIN_LINES
from .sandbox import Sandbox

AskFn = Callable[[str], Awaitable[str]]


@dataclass(frozen=True)
class ToolLimits:
    """The bounds every built-in tool keeps to. One object per run, so a user can tighten them all at once."""

    bash_timeout: float = 120.0
    """Seconds a command may run when the call does not say."""
    bash_max_timeout: float = 600.0
    """The most a call may ask for."""
    output_chars: int = 30_000
    """A result longer than this is cut to head + tail; the whole of it goes to an artifact."""
    output_lines: int = 2_000
    """The same, counted in lines."""
    bash_output_bytes: int = 128 * 1024 * 1024
    """Bytes of a command's output saved for `read`; past them its output is counted and its tail kept for
    the result, but not saved, so a command that prints without end costs bounded memory and disk."""
    read_lines: int = 2_000
    """Lines `read` returns when the call gives no limit."""
    line_chars: int = 2_000
    """Longer lines are cut by `read` and `grep` (minified files would otherwise flood the context)."""
    glob_results: int = 100
    grep_results: int = 100
    """Files (files mode) or matching lines (lines mode)."""
    list_entries: int = 500

    def __post_init__(self) -> None:
        # refused here, when a run is configured, rather than as a failure inside every tool call
        if self.output_chars < MIN_LIMIT:
            raise InvalidInput(f"output_chars must be at least {MIN_LIMIT}, not {self.output_chars}")
        if self.output_lines < MIN_LINES:
            raise InvalidInput(f"output_lines must be at least {MIN_LINES}, not {self.output_lines}")
        if not 0 < self.bash_timeout <= self.bash_max_timeout:
            raise InvalidInput("bash_timeout must be more than 0 and at most bash_max_timeout")
        for name in ("bash_output_bytes", "read_lines", "line_chars", "glob_results", "grep_results", "list_entries"):
            if getattr(self, name) < 1:
                raise InvalidInput(f"{name} must be at least 1")


@dataclass
class ToolContext:
    """Where and for whom a tool call runs.

    `workspace` is made canonical (symlinks resolved) once here, so that confinement checks compare like
    with like. `ask` is how the `question` tool reaches a human; None means nobody can answer. `abort` is
    set by whoever cancels the run; long tools (bash, grep) stop early when it is set. `secrets` says which
    environment variables a command must not see; `redactor` takes known secret values out of what a tool
    saves in the store itself (an oversized output's artifact), as the run's journal does for the rest.
    `call_id` and `emit` say which call it is and how to report on it while it runs."""

    workspace: Path
    session_id: str
    store: Store
    confine_to_workspace: bool = True
    ask: AskFn | None = None
    limits: ToolLimits = field(default_factory=ToolLimits)
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    secrets: SecretPolicy = field(default_factory=SecretPolicy)
    redactor: Redactor = field(default_factory=Redactor)
    call_id: str = ""
    """The id of the call this context is for (empty outside a run's tool calls)."""
    emit: Callable[[Event], None] | None = None
    """Reports a live event of the call into the run's stream while it runs (numbered there): a sub-agent
    starting, an approval being asked for. None: nobody listens."""
    sandbox: Sandbox | None = None
    """Where the commands of the call run (`sandbox`); None: unconfined, as a program that runs its own tools
    chose (a run's options give one by default)."""

    canonical: Path | None = field(default=None, repr=False, compare=False)
    """The workspace as it was made canonical: when `workspace` is that very path, it is not resolved again
    (a run resolves its workspace once, not at every call's context; `dataclasses.replace` with another
    workspace resolves that one)."""

    def __post_init__(self) -> None:
        if self.canonical is None or self.canonical is not self.workspace:
            self.workspace = self.canonical = Path(self.workspace).expanduser().resolve()

    def resolve(self, value: str) -> Path:
        """A path argument as a canonical absolute path (relative paths are taken from the workspace).

        Symlinks are resolved before the check, so a link inside the workspace that points outside is
        refused like the outside path itself. Raises `OutsideWorkspace` while confinement is on."""
        if not isinstance(value, str) or not value:
            raise ToolError("a path must be a non-empty string")
        if "\0" in value:
            raise ToolError(f"path {value!r} contains a NUL byte")
        if value.startswith("artifact://"):
            raise ToolError(f"{value} is a stored artifact; only `read` and `grep` can open artifacts")
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = self.workspace / path
        resolved = path.resolve()
        if self.confine_to_workspace and not resolved.is_relative_to(self.workspace):
            raise OutsideWorkspace(
                f"{value!r} is outside the workspace {self.workspace} (resolved to {resolved}); "
                "tools may only touch files inside it"
            )
        return resolved

    def display(self, path: Path) -> str:
        """How a path is shown to the model: relative to the workspace when inside it."""
        try:
            rel = path.relative_to(self.workspace)
        except ValueError:
            return str(path)
        return rel.as_posix() if rel.parts else "."

    def check_abort(self) -> None:
        """Raise `ToolError` if the run was cancelled; for loops in long tools."""
        if self.abort.is_set():
            raise ToolError("aborted")


@dataclass
class ToolOutput:
    """What a tool returns. `metadata` is JSON-ready data for UIs and the journal (exit_code, duration,
    truncated, artifact...); the model sees only `content`."""

    content: str
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Tool(Protocol):
    """A tool the model can call.

    `read_only` tools change nothing, so the loop may run several at once; the others run one at a time,
    in the order the model asked. `bulk` marks output that is data rather than a view of the workspace
    (a fetched web page): it may later be handed to RLM processing instead of being shown whole."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def bulk(self) -> bool: ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput: ...


_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")


class ToolRegistry:
    """The tools a run offers, by name, in the order they were registered."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool, *, replace: bool = False) -> Tool:
        """Add a tool; a second tool with the same name is refused unless `replace`. Returns the tool."""
        if not _NAME_RE.match(tool.name):
            # providers accept only these characters in tool names
            raise InvalidInput(f"tool name {tool.name!r} must be 1-64 letters, digits, '_' or '-'")
        schema = tool.parameters
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise InvalidInput(f"tool {tool.name!r}: parameters must be a JSON schema with type 'object'")
        if tool.name in self._tools and not replace:
            raise InvalidInput(f"a tool named {tool.name!r} is already registered (pass replace=True)")
        self._tools[tool.name] = tool
        return tool

    def unregister(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def is_read_only(self, name: str) -> bool:
        """Whether a call to `name` may run concurrently with others (unknown tools: no)."""
        tool = self._tools.get(name)
        return bool(tool is not None and tool.read_only)

    def is_parallel(self, name: str) -> bool:
        """Whether calls to `name` in one step run together although it is not read-only: a tool says so
        with a ``parallel = True`` attribute (the `task` tool: each call works in a session of its own)."""
        return bool(getattr(self._tools.get(name), "parallel", False))

    def specs(self) -> list[ToolSpec]:
        """The tools as the model sees them."""
        return [ToolSpec(name=t.name, description=t.description, parameters=t.parameters) for t in self]

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry with only the named tools (e.g. a read-only agent); unknown names are refused."""
        wanted = list(names)
        missing = [n for n in wanted if n not in self._tools]
        if missing:
            raise InvalidInput(f"unknown tools {missing}; available: {', '.join(self._tools)}")
        return ToolRegistry(self._tools[n] for n in wanted)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)


# --- argument validation -------------------------------------------------------------------------------

_JSON_TYPES: dict[str, str] = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _json_type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _matches(value: Any, expected: str) -> bool:
    actual = _json_type_of(value)
    if expected == "number":
        return actual in ("integer", "number") and math.isfinite(value)
    if expected == "integer" and actual == "number":
        return float(value).is_integer()
    return actual == expected


def _check_value(name: str, value: Any, schema: dict[str, Any]) -> Any:
    """Check one argument against its property schema (type, enum, minimum/maximum, the item type of an
    array); returns it, an integral float made an int where an integer is wanted."""
    expected = schema.get("type")
    types_ = [expected] if isinstance(expected, str) else list(expected) if isinstance(expected, list) else []
    if types_ and not any(_matches(value, t) for t in types_):
        want = " or ".join(_JSON_TYPES.get(t, t) for t in types_)
        raise ToolError(f"argument {name!r} must be {want}, not {_json_type_of(value)} {_preview(value)}")
    if isinstance(value, float) and "integer" in types_ and "number" not in types_:
        value = int(value)
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        raise ToolError(
            f"argument {name!r} must be one of {', '.join(json.dumps(e) for e in enum)}, not {_preview(value)}"
        )
    if _json_type_of(value) in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if isinstance(low, int | float) and value < low:
            raise ToolError(f"argument {name!r} must be at least {low}, not {value}")
        if isinstance(high, int | float) and value > high:
            raise ToolError(f"argument {name!r} must be at most {high}, not {value}")
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, dict) and isinstance(items.get("type"), str):
        for i, item in enumerate(value):
            if not _matches(item, items["type"]):
                raise ToolError(
                    f"argument {name!r}: item {i} must be {_JSON_TYPES.get(items['type'], items['type'])}, "
                    f"not {_json_type_of(item)} {_preview(item)}"
                )
    return value


def _preview(value: Any, width: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= width else text[: width - 3] + "..."


def validate_arguments(schema: dict[str, Any], args: Any) -> dict[str, Any]:
    """Check a call's arguments against a tool's JSON schema: an object, required keys present, unknown keys
    refused where the schema says `additionalProperties: false`, and each top-level argument's type, enum,
    bounds and array item type. Not a full JSON-schema validator: enough that a model gets a message it can act on.

    Returns a new dict with the schema's defaults filled in; raises `ToolError`."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolError(f"arguments must be a JSON object, not {_json_type_of(args)} {_preview(args)}")
    props: dict[str, Any] = schema.get("properties") or {}
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    missing = [r for r in required if r not in args]
    if missing:
        noun = "argument" if len(missing) == 1 else "arguments"
        raise ToolError(f"missing required {noun} {', '.join(repr(m) for m in missing)}{_expected(props, required)}")
    if schema.get("additionalProperties") is False:
        unknown = [k for k in args if k not in props]
        if unknown:
            noun = "argument" if len(unknown) == 1 else "arguments"
            raise ToolError(f"unknown {noun} {', '.join(repr(u) for u in unknown)}{_expected(props, required)}")
    out: dict[str, Any] = {}
    for key, value in args.items():
        sub = props.get(key)
        out[key] = _check_value(key, value, sub) if isinstance(sub, dict) else value
    for key, sub in props.items():
        if key not in out and isinstance(sub, dict) and "default" in sub:
            out[key] = sub["default"]
    return out


def _expected(props: dict[str, Any], required: list[str]) -> str:
    if not props:
        return ""
    names = [f"{k}{'' if k in required else '?'}" for k in props]
    return f" (expected: {', '.join(names)})"


# --- tools from functions ------------------------------------------------------------------------------


@dataclass
class FunctionTool:
    """A tool whose work is a Python function, called with the validated arguments as keywords (plus
    `ctx=` when the function takes a `ctx` parameter). The function may be async or plain (plain ones run
    in a worker thread) and may return a `str` or a `ToolOutput`."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    read_only: bool = False
    bulk: bool = False
    takes_ctx: bool = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        kwargs = dict(args)
        if self.takes_ctx:
            kwargs["ctx"] = ctx
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**kwargs)
        else:
            result = await asyncio.to_thread(self.fn, **kwargs)
        if isinstance(result, ToolOutput):
            return result
        if isinstance(result, str):
            return ToolOutput(result)
        raise ToolError(f"tool returned {type(result).__name__}, expected str or ToolOutput")


@overload
def function_tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def function_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    read_only: bool = False,
    bulk: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def function_tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    read_only: bool = False,
    bulk: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool from a function, as `@function_tool` or `@function_tool(read_only=True, ...)`.

    The name defaults to the function's, the description to its docstring (without an ``Args:`` section,
    whose lines describe the parameters instead). Without `parameters`, the JSON schema is derived from the
    signature: str, int, float, bool, list[...], dict, Literal[...] and ``X | None``; parameters without a
    default are required. A parameter named `ctx` receives the `ToolContext` and is not shown to the model.
    """

    def build(f: Callable[..., Any]) -> FunctionTool:
        doc = inspect.getdoc(f) or ""
        summary, arg_docs = _split_docstring(doc)
        sig = inspect.signature(f)
        takes_ctx = "ctx" in sig.parameters
        schema = parameters if parameters is not None else _schema_from_signature(f, sig, arg_docs)
        tool = FunctionTool(
            name=name or f.__name__,
            description=description or summary or (name or f.__name__),
            parameters=schema,
            fn=f,
            read_only=read_only,
            bulk=bulk,
            takes_ctx=takes_ctx,
        )
        if not _NAME_RE.match(tool.name):
            raise InvalidInput(f"tool name {tool.name!r} must be 1-64 letters, digits, '_' or '-'")
        return tool

    if fn is not None:
        return build(fn)
    return build


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$", re.MULTILINE)
_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the description, {parameter: its description}) from a Google-style docstring."""
    m = _ARGS_HEADER.search(doc)
    if not m:
        return doc.strip(), {}
    summary = doc[: m.start()].strip()
    arg_docs: dict[str, str] = {}
    current: str | None = None
    for line in doc[m.end() :].splitlines():
        if line.strip() and not line.startswith((" ", "\t")):
            break  # the next section
        am = _ARG_LINE.match(line)
        if am:
            current = am.group(1)
            arg_docs[current] = am.group(2).strip()
        elif current and line.strip():
            arg_docs[current] += " " + line.strip()
    return summary, arg_docs


def _schema_from_signature(f: Callable[..., Any], sig: inspect.Signature, arg_docs: dict[str, str]) -> dict[str, Any]:
    annotations = inspect.get_annotations(f)
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in sig.parameters.items():
        if pname == "ctx":
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise InvalidInput(f"{f.__name__}: *args and **kwargs cannot be tool parameters")
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise InvalidInput(f"{f.__name__}: parameter {pname!r} is positional-only; tools take keywords")
        if pname not in annotations:
            raise InvalidInput(f"{f.__name__}: parameter {pname!r} needs a type annotation")
        prop = _schema_for(_annotation(f, pname, annotations[pname]), f"{f.__name__}.{pname}")
        if pname in arg_docs:
            prop["description"] = arg_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        elif param.default is not None:
            prop["default"] = param.default
        props[pname] = prop
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _annotation(f: Callable[..., Any], pname: str, annotation: Any) -> Any:
    """One parameter's annotation evaluated (under `from __future__ import annotations` it is a string).
    Done per parameter, so that `ctx`'s annotation need not be importable where the tool is defined."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, getattr(f, "__globals__", {}))
    except Exception as e:
        raise InvalidInput(
            f"{f.__name__}.{pname}: cannot evaluate the annotation {annotation!r} ({e}); use types defined "
            "at module level, or pass parameters= explicitly"
        ) from None


_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(tp: Any, where: str) -> dict[str, Any]:
    if tp in _PRIMITIVES:
        return {"type": _PRIMITIVES[tp]}
    origin = get_origin(tp)
    args = get_args(tp)
    if tp is list or origin is list:
        return {"type": "array", "items": _schema_for(args[0], where)} if args else {"type": "array"}
    if tp is dict or origin is dict:
        return {"type": "object"}
    if origin is Literal:
        kinds = {_PRIMITIVES.get(type(a)) for a in args}
        out: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1 and None not in kinds:
            out["type"] = kinds.pop()
        return out
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = _schema_for(rest[0], where)
            if isinstance(inner.get("type"), str):
                inner["type"] = [inner["type"], "null"]
            return inner
    if tp is Any:
        return {}
    raise InvalidInput(f"{where}: cannot describe type {tp!r} as a JSON schema; pass parameters= explicitly")
