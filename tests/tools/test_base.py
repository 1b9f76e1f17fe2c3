from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Literal

import pytest

from tether.errors import InvalidInput, OutsideWorkspace, ToolError
from tether.messages import ToolSpec
from tether.store import MemoryStore
from tether.tools import (
    FunctionTool,
    Tool,
    ToolContext,
    ToolLimits,
    ToolOutput,
    function_tool,
    validate_arguments,
)
from tether.tools.builtin import builtin_registry

BUILTINS = ["read", "write", "edit", "bash", "glob", "grep", "list", "question"]


# --- registry ----------------------------------------------------------------------------------------------


def test_builtin_registry_holds_the_builtins_with_their_flags() -> None:
    reg = builtin_registry()
    assert reg.names() == BUILTINS
    for tool in reg:
        assert isinstance(tool, Tool)
        assert tool.bulk is False  # none of the built-ins produce data for RLM
    assert {t.name for t in reg if t.read_only} == {"read", "glob", "grep", "list"}
    assert reg.is_read_only("grep") and not reg.is_read_only("bash") and not reg.is_read_only("nope")


def test_specs_are_tool_specs_with_object_schemas() -> None:
    specs = builtin_registry().specs()
    assert [s.name for s in specs] == BUILTINS
    for spec in specs:
        assert isinstance(spec, ToolSpec)
        assert spec.description
        assert spec.parameters["type"] == "object"
        assert set(spec.parameters.get("required", [])) <= set(spec.parameters["properties"])


def test_registries_are_independent() -> None:
    a, b = builtin_registry(), builtin_registry()
    a.unregister("bash")
    assert "bash" not in a and "bash" in b
    assert a.get("bash") is None


def test_register_refuses_duplicates_bad_names_and_bad_schemas() -> None:
    reg = builtin_registry()
    read = reg.get("read")
    assert read is not None
    with pytest.raises(InvalidInput, match="already registered"):
        reg.register(read)
    reg.register(read, replace=True)
    assert len(reg) == len(BUILTINS)

    bad_name = FunctionTool(name="has space", description="x", parameters={"type": "object"}, fn=_noop)
    with pytest.raises(InvalidInput, match="letters, digits"):
        reg.register(bad_name)
    bad_schema = FunctionTool(name="ok", description="x", parameters={"type": "string"}, fn=_noop)
    with pytest.raises(InvalidInput, match="type 'object'"):
        reg.register(bad_schema)


def test_subset_keeps_order_and_refuses_unknown_names() -> None:
    reg = builtin_registry()
    assert reg.subset(["grep", "read"]).names() == ["grep", "read"]
    with pytest.raises(InvalidInput, match="unknown tools"):
        reg.subset(["read", "fly"])


async def _noop() -> str:
    return ""


# --- validation --------------------------------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean", "default": False},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "maybe": {"type": ["string", "null"]},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def test_validation_accepts_good_arguments_and_fills_defaults() -> None:
    out = validate_arguments(SCHEMA, {"path": "a", "limit": 3, "ratio": 2, "tags": ["x"], "maybe": None})
    assert out == {"path": "a", "limit": 3, "ratio": 2, "tags": ["x"], "maybe": None, "flag": False}


def test_validation_makes_integral_floats_ints() -> None:
    out = validate_arguments(SCHEMA, {"path": "a", "limit": 3.0})
    assert out["limit"] == 3 and isinstance(out["limit"], int)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "missing required argument 'path' (expected: path, limit?"),
        ({"path": "a", "lines": 3}, "unknown argument 'lines' (expected: path,"),
        ({"path": 3}, "argument 'path' must be a string, not integer 3"),
        ({"path": "a", "limit": "10"}, "argument 'limit' must be an integer, not string \"10\""),
        ({"path": "a", "limit": 2.5}, "argument 'limit' must be an integer, not number 2.5"),
        ({"path": "a", "limit": True}, "argument 'limit' must be an integer, not boolean"),
        ({"path": "a", "limit": 0}, "argument 'limit' must be at least 1, not 0"),
        ({"path": "a", "flag": "yes"}, "argument 'flag' must be a boolean (true or false), not string"),
        ({"path": "a", "mode": "c"}, 'argument \'mode\' must be one of "a", "b", not "c"'),
        ({"path": "a", "tags": "x"}, "argument 'tags' must be an array, not string"),
        ({"path": "a", "tags": ["x", 2]}, "argument 'tags': item 1 must be a string, not integer 2"),
        ({"path": "a", "maybe": 1}, "argument 'maybe' must be a string or null, not integer 1"),
        ([1, 2], "arguments must be a JSON object, not array [1, 2]"),
        ("path", 'arguments must be a JSON object, not string "path"'),
    ],
)
def test_validation_errors_say_what_to_fix(args: Any, message: str) -> None:
    with pytest.raises(ToolError) as info:
        validate_arguments(SCHEMA, args)
    assert message in str(info.value)


def test_validation_reports_every_missing_argument() -> None:
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a", "b"]}
    with pytest.raises(ToolError, match="missing required arguments 'a', 'b'"):
        validate_arguments(schema, None)


def test_validation_lets_extra_arguments_through_unless_the_schema_forbids_them() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert validate_arguments(schema, {"a": "x", "b": 1}) == {"a": "x", "b": 1}


# --- function_tool -----------------------------------------------------------------------------------------


async def test_function_tool_derives_a_schema_and_passes_ctx(tmp_path: Path) -> None:
    @function_tool(read_only=True)
    async def count_words(text: str, ctx: ToolContext, mode: Literal["words", "chars"] = "words") -> str:
        """Count the words or characters of a text.

        Args:
            text: The text to count.
            mode: What to count:
                words or characters.
        """
        return f"{ctx.session_id}:{len(text.split()) if mode == 'words' else len(text)}"

    assert count_words.name == "count_words"
    assert count_words.description == "Count the words or characters of a text."
    assert count_words.read_only and not count_words.bulk
    assert count_words.parameters == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The text to count."},
            "mode": {
                "enum": ["words", "chars"],
                "type": "string",
                "description": "What to count: words or characters.",
                "default": "words",
            },
        },
        "additionalProperties": False,
        "required": ["text"],
    }
    ctx = ToolContext(workspace=tmp_path, session_id="s1", store=MemoryStore())
    out = await count_words.run(validate_arguments(count_words.parameters, {"text": "a b c"}), ctx)
    assert out == ToolOutput("s1:3")


async def test_function_tool_runs_plain_functions_and_takes_overrides(tmp_path: Path) -> None:
    def shout(text: str, times: int | None = None, tags: list[str] | None = None) -> ToolOutput:
        return ToolOutput(text.upper() * (times or 1), metadata={"tags": tags or []})

    tool = function_tool(name="yell", description="Shout.", bulk=True)(shout)
    assert tool.name == "yell" and tool.description == "Shout." and tool.bulk
    assert tool.parameters["properties"]["times"] == {"type": ["integer", "null"]}
    assert tool.parameters["properties"]["tags"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert tool.parameters["required"] == ["text"]
    ctx = ToolContext(workspace=tmp_path, session_id="s", store=MemoryStore())
    assert (await tool.run({"text": "hi", "times": 2}, ctx)).content == "HIHI"
    assert isinstance(builtin_registry().register(tool), FunctionTool)


def test_function_tool_refuses_what_it_cannot_describe() -> None:
    def f(data: bytes) -> str:
        return ""

    with pytest.raises(InvalidInput, match="cannot describe type"):
        function_tool(f)

    class Local:
        pass

    def local(thing: Local) -> str:  # a string annotation naming a class only this function's body knows
        return ""

    with pytest.raises(InvalidInput, match="cannot evaluate the annotation 'Local'"):
        function_tool(local)

    def g(*items: str) -> str:
        return ""

    with pytest.raises(InvalidInput, match=r"\*args"):
        function_tool(g)

    def h(x) -> str:  # type: ignore[no-untyped-def]
        return ""

    with pytest.raises(InvalidInput, match="needs a type annotation"):
        function_tool(h)


async def test_function_tool_with_an_explicit_schema(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    @function_tool(parameters=schema)
    async def double(n: int) -> int:
        return n * 2  # not a str: the tool reports it

    assert double.parameters is schema
    ctx = ToolContext(workspace=tmp_path, session_id="s", store=MemoryStore())
    with pytest.raises(ToolError, match="returned int, expected str or ToolOutput"):
        await double.run({"n": 2}, ctx)


# --- context -----------------------------------------------------------------------------------------------


def test_context_makes_the_workspace_canonical(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    ctx = ToolContext(workspace=link, session_id="s", store=MemoryStore())
    assert ctx.workspace == real.resolve()
    assert ctx.resolve("a/b.txt") == real.resolve() / "a" / "b.txt"
    assert ctx.display(real.resolve() / "a" / "b.txt") == "a/b.txt"
    assert ctx.display(real.resolve()) == "."


def test_a_context_copied_for_a_call_keeps_its_canonical_workspace_and_a_new_one_is_resolved(
    tmp_path: Path,
) -> None:
    real, other = tmp_path / "real", tmp_path / "other"
    real.mkdir()
    other.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "other-link").symlink_to(other)
    ctx = ToolContext(workspace=tmp_path / "link", session_id="s", store=MemoryStore())
    call = dataclasses.replace(ctx, call_id="c1")
    assert call.workspace is ctx.workspace  # the same path: not resolved again
    moved = dataclasses.replace(ctx, workspace=tmp_path / "other-link")
    assert moved.workspace == other.resolve()  # another workspace: resolved, though the copy said canonical
    # a path given as canonical that is not the workspace given is resolved all the same
    odd = ToolContext(workspace=tmp_path / "link", session_id="s", store=MemoryStore(), canonical=other)
    assert odd.workspace == real.resolve()


def test_context_refuses_paths_that_escape(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "secret").write_text("x")
    (ws / "escape").symlink_to(tmp_path / "secret")
    (ws / "dir_escape").symlink_to(tmp_path)
    ctx = ToolContext(workspace=ws, session_id="s", store=MemoryStore())
    for bad in ["../secret", str(tmp_path / "secret"), "escape", "dir_escape/secret", "a/../../secret", "/etc/passwd"]:
        with pytest.raises(OutsideWorkspace, match="outside the workspace"):
            ctx.resolve(bad)
    for bad_value in ["", "a\0b"]:
        with pytest.raises(ToolError):
            ctx.resolve(bad_value)
    with pytest.raises(ToolError, match="only `read` and `grep`"):
        ctx.resolve("artifact://art_00")
    # inside is fine, including a '..' that stays inside
    assert ctx.resolve("a/../b") == ws.resolve() / "b"

    loose = ToolContext(workspace=ws, session_id="s", store=MemoryStore(), confine_to_workspace=False)
    assert loose.resolve("../secret") == (tmp_path / "secret").resolve()
    assert loose.display((tmp_path / "secret").resolve()) == os.fspath((tmp_path / "secret").resolve())


@pytest.mark.parametrize(
    "bad",
    [{"output_chars": 100}, {"output_lines": 3}, {"bash_timeout": 0}, {"bash_timeout": 900}, {"read_lines": 0}],
)
def test_limits_that_cannot_work_are_refused_up_front(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        ToolLimits(**bad)
