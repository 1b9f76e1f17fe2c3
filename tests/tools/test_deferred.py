"""`tool_search`: ranking by the words of a tool's name, description and parameters, loading by exact names,
what it loads told to the run, and bad queries refused with a message the model can act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import ToolError
from tether.messages import ToolSpec
from tether.store.memory import MemoryStore
from tether.tools.base import ToolContext
from tether.tools.deferred import ToolSearchTool, defer


def spec(name: str, description: str, *params: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": {p: {"type": "string"} for p in params}},
    )


CATALOG = [
    spec("mcp__github__create_issue", "Create a new issue in a GitHub repository", "repo", "title", "body"),
    spec("mcp__github__list_pull_requests", "List the pull requests of a repository", "repo", "state"),
    spec("mcp__github__get_file_contents", "Read a file of a repository", "repo", "path"),
    spec("mcp__time__get_current_time", "The current time in a time zone", "timezone"),
    spec("mcp__time__convert_time", "Convert a time between time zones", "source_timezone", "time", "target_timezone"),
    *(spec(f"mcp__many__t{i:03d}", f"Numbered tool {i} of the archive", "value") for i in range(50)),
]


def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(workspace=tmp_path, session_id="s", store=MemoryStore())


def test_search_ranks_by_name_description_and_parameters() -> None:
    tool = ToolSearchTool(CATALOG, lambda names: None)
    assert tool.search("create an issue on github")[0].name == "mcp__github__create_issue"
    assert tool.search("pull requests")[0].name == "mcp__github__list_pull_requests"
    assert {s.name for s in tool.search("time zone", 2)} == {"mcp__time__get_current_time", "mcp__time__convert_time"}
    assert tool.search("target_timezone")[0].name == "mcp__time__convert_time"
    assert tool.search("zzzz nothing") == []
    assert "55 tools" in tool.description and "github" in tool.description


async def test_a_search_loads_what_it_found(tmp_path: Path) -> None:
    told: list[list[str]] = []
    tool = ToolSearchTool(CATALOG, told.append)
    out = await tool.run({"query": "current time"}, ctx(tmp_path))
    assert out.metadata["loaded"][0] == "mcp__time__get_current_time"
    assert '"timezone"' in out.content and told == [out.metadata["loaded"]]
    picked = await tool.run({"query": "select:mcp__many__t007,mcp__github__create_issue"}, ctx(tmp_path))
    assert picked.metadata["loaded"] == ["mcp__many__t007", "mcp__github__create_issue"]
    assert {"mcp__many__t007", "mcp__github__create_issue", "mcp__time__get_current_time"} <= tool.loaded
    none = await tool.run({"query": "qqqq"}, ctx(tmp_path))
    assert none.metadata["loaded"] == [] and "no tool matches" in none.content
    with pytest.raises(ToolError, match="no tool named mcp__x"):
        await tool.run({"query": "select:mcp__x"}, ctx(tmp_path))
    with pytest.raises(ToolError, match="query is empty"):
        await tool.run({"query": "  "}, ctx(tmp_path))


def test_defer_only_when_the_definitions_do_not_fit() -> None:
    def count(specs: object) -> int:
        return 10 * len(specs)  # type: ignore[arg-type]

    base = [spec("read", "Read a file", "path")]
    assert defer([*base, *CATALOG], [s.name for s in CATALOG], 10_000, count) is None
    kept, deferred = defer([*base, *CATALOG], [s.name for s in CATALOG], 100, count) or ([], [])
    assert [s.name for s in kept] == ["read"] and len(deferred) == len(CATALOG)
    assert defer(base * 20, [], 10, count) is None  # nothing that could be deferred
