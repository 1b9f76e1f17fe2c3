from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tether.messages import ToolCallPart, ToolResultPart
from tether.tools import ToolContext, ToolLimits, ToolRegistry, run_tool_call
from tether.tools.builtin import GrepTool, builtin_registry
from tether.tools.builtin.walk import GlobPattern, glob_regex

from ..conftest import Call


def tree(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def age(root: Path, order: list[str]) -> None:
    """Give the files distinct mtimes: the first in `order` is the newest."""
    for i, rel in enumerate(order):
        t = 1_700_000_000 - i * 100
        os.utime(root / rel, (t, t))


PROJECT: dict[str, str | bytes] = {
    "README.md": "# demo\nTODO: write docs\n",
    "src/app.py": "import os\n\ndef main():\n    # TODO: handle errors\n    return os.getcwd()\n",
    "src/util/strings.py": "def shout(s):\n    return s.upper()  # todo lower\n",
    "src/util/data.json": '{"todo": true}\n',
    "tests/test_app.py": "from src.app import main\n\ndef test_main():\n    assert main()\n",
    "assets/logo.bin": b"\x00\x01TODO\x02\x03",
    ".git/config": "[core]\n# TODO in git\n",
    "node_modules/pkg/index.js": "// TODO in node_modules\n",
    ".venv/lib/site.py": "# TODO in venv\n",
    "src/__pycache__/app.cpython-311.pyc": "TODO cached\n",
    ".github/workflows/ci.yml": "# TODO in a dotdir worth searching\n",
}


@pytest.fixture
def project(workspace: Path) -> Path:
    tree(workspace, PROJECT)
    return workspace


# --- glob patterns -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "a.py", True),
        ("*.py", "a.pyc", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/x/a.py", False),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("**/test_*.py", "tests/test_a.py", True),
        ("*.{js,ts}", "a.ts", True),
        ("*.{js,ts}", "a.tsx", False),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file10.txt", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "b.txt", False),
        ("[!ab].txt", "c.txt", True),
        ("a+b(c).txt", "a+b(c).txt", True),
    ],
)
def test_glob_pattern_semantics(pattern: str, path: str, expected: bool) -> None:
    glob = GlobPattern.parse(pattern)
    rel = path[len(glob.base) + 1 :] if glob.base else path
    matched = path.startswith(glob.base) and glob.matches(rel)
    assert matched is expected


def test_glob_pattern_base_and_odd_input() -> None:
    assert GlobPattern.parse("./src/util/*.py").base == "src/util"
    assert GlobPattern.parse("/abs/dir/**/x").base == "/abs/dir"
    assert GlobPattern.parse("*.py").anywhere and not GlobPattern.parse("src/*.py").anywhere
    assert glob_regex("{a,b").fullmatch("a")  # an unclosed brace does not raise
    assert glob_regex("[x").fullmatch("[x")


# --- glob --------------------------------------------------------------------------------------------------


async def test_glob_finds_files_newest_first_and_skips_junk(call: Call, project: Path) -> None:
    age(project, ["tests/test_app.py", "src/util/strings.py", "src/app.py"])
    result = await call("glob", pattern="*.py")
    assert result.content == "tests/test_app.py\nsrc/util/strings.py\nsrc/app.py"
    assert result.metadata["count"] == 3
    assert (await call("glob", pattern="src/*.py")).content == "src/app.py"
    assert (await call("glob", pattern="**/*.json")).content == "src/util/data.json"
    # searching inside a junk directory by name is allowed
    assert (await call("glob", pattern="*.js", path="node_modules")).content == "node_modules/pkg/index.js"
    assert (await call("glob", pattern="*.yml")).content == ".github/workflows/ci.yml"


async def test_glob_with_no_match_and_with_a_cap(workspace: Path, ctx: ToolContext) -> None:
    tree(workspace, {f"f{i:03d}.txt": "" for i in range(30)})
    ctx.limits = ToolLimits(glob_results=10)
    reg = builtin_registry()
    result = await run_tool_call(reg, ToolCallPart(id="1", name="glob", arguments={"pattern": "*.txt"}), ctx)
    assert len(result.content.split("\n\n")[0].splitlines()) == 10
    assert result.content.endswith("[20 more files not shown; use a narrower pattern or path]")
    none = await run_tool_call(reg, ToolCallPart(id="2", name="glob", arguments={"pattern": "*.rs"}), ctx)
    assert none.content == "no files match '*.rs' in ." and not none.is_error


async def test_glob_stays_in_the_workspace(call: Call, workspace: Path) -> None:
    (workspace.parent / "secret.py").write_text("x")
    (workspace / "leak.py").symlink_to(workspace.parent / "secret.py")
    (workspace / "inner.py").write_text("x")
    (workspace / "alias.py").symlink_to(workspace / "inner.py")
    # the link that leads out is left out; the one that stays inside is a file like any other
    assert sorted((await call("glob", pattern="*.py")).content.splitlines()) == ["alias.py", "inner.py"]
    for bad in [{"path": ".."}, {"path": str(workspace.parent)}, {"pattern": "../*.py"}]:
        result = await call("glob", **{"pattern": "*.py", **bad})
        assert result.is_error and result.metadata["error"] == "outside_workspace", bad


# --- grep --------------------------------------------------------------------------------------------------


@pytest.fixture(params=["python", "ripgrep"])
def grep_call(request: pytest.FixtureRequest, ctx: ToolContext) -> Call:
    if request.param == "ripgrep" and shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed here; the pure-Python engine is tested")
    reg = ToolRegistry([GrepTool(use_ripgrep=request.param == "ripgrep")])
    counter = 0

    async def run(name: str, **args: object) -> ToolResultPart:
        nonlocal counter
        counter += 1
        return await run_tool_call(reg, ToolCallPart(id=str(counter), name=name, arguments=args), ctx)

    return run


async def test_grep_files_mode_newest_first(grep_call: Call, project: Path) -> None:
    age(project, ["src/app.py", "README.md", ".github/workflows/ci.yml"])
    result = await grep_call("grep", pattern="TODO")
    assert result.content == "src/app.py\nREADME.md\n.github/workflows/ci.yml"
    assert result.metadata["count"] == 3


async def test_grep_lines_mode(grep_call: Call, project: Path) -> None:
    result = await grep_call("grep", pattern="todo", output_mode="lines", case_insensitive=True, path="src")
    assert result.content == (
        "src/app.py:\n  4:     # TODO: handle errors\n\n"
        'src/util/data.json:\n  1: {"todo": true}\n\n'
        "src/util/strings.py:\n  2:     return s.upper()  # todo lower"
    )
    assert result.metadata["count"] == 3


async def test_grep_glob_filter_and_a_single_file(grep_call: Call, project: Path) -> None:
    result = await grep_call("grep", pattern="(?i)todo", glob="*.py")
    assert sorted(result.content.splitlines()) == ["src/app.py", "src/util/strings.py"]
    single = await grep_call("grep", pattern="def \\w+", path="src/app.py", output_mode="lines")
    assert single.content == "src/app.py:\n  3: def main():"


async def test_grep_no_match_and_bad_regex(grep_call: Call, project: Path) -> None:
    result = await grep_call("grep", pattern="nothing-like-this")
    assert result.content == "no matches for /nothing-like-this/ in ." and not result.is_error
    bad = await grep_call("grep", pattern="(unclosed")
    assert bad.is_error and bad.content.startswith("grep: invalid regular expression '(unclosed'")
    missing = await grep_call("grep", pattern="x", path="nope")
    assert missing.is_error and missing.content == "grep: no such file or directory: nope"


async def test_grep_caps_results(grep_call: Call, workspace: Path, ctx: ToolContext) -> None:
    ctx.limits = ToolLimits(grep_results=5)
    tree(workspace, {"many.txt": "hit\n" * 20, **{f"f{i}.txt": "hit\n" for i in range(8)}})
    lines = await grep_call("grep", pattern="hit", output_mode="lines", path="many.txt")
    assert lines.content.count("  ") == 5 and lines.metadata["truncated"] is True
    assert lines.content.endswith("[more than 5 matching lines; use a narrower pattern, path or glob]")
    files = await grep_call("grep", pattern="hit")
    assert len(files.content.split("\n\n")[0].splitlines()) == 5 and files.metadata["truncated"] is True
    exact = await grep_call("grep", pattern="hit", output_mode="lines", glob="f[0-4].txt")
    assert exact.metadata == {"count": 5, "truncated": False, "duration": exact.metadata["duration"]}


async def test_grep_takes_python_regex_syntax_with_either_engine(grep_call: Call, project: Path) -> None:
    # ripgrep has no look-around; the Python engine answers such patterns
    result = await grep_call("grep", pattern="(?<=# )TODO", output_mode="lines", path="src")
    assert result.content == "src/app.py:\n  4:     # TODO: handle errors"


async def test_grep_stays_in_the_workspace(grep_call: Call, workspace: Path) -> None:
    (workspace.parent / "secret.txt").write_text("password\n")
    (workspace / "leak.txt").symlink_to(workspace.parent / "secret.txt")
    (workspace / "leakdir").symlink_to(workspace.parent)
    result = await grep_call("grep", pattern="password")
    assert result.content == "no matches for /password/ in ."
    for path in ["..", str(workspace.parent), "leak.txt", "leakdir"]:
        refused = await grep_call("grep", pattern="password", path=path)
        assert refused.is_error and refused.metadata["error"] == "outside_workspace", path


async def test_grep_cuts_long_lines(grep_call: Call, workspace: Path) -> None:
    (workspace / "min.js").write_text("var a=1;" * 5_000 + "\n")
    result = await grep_call("grep", pattern="var", output_mode="lines")
    line = result.content.splitlines()[1]
    assert line.startswith("  1: var a=1;") and "... [line cut:" in line
    assert len(line) < 2_100


async def test_grep_searches_stored_outputs(call: Call) -> None:
    out = await call("bash", command="seq 1 200000")
    aid = out.metadata["artifact"]
    result = await call("grep", pattern="^1234[05]$", path=f"artifact://{aid}")
    assert result.content == f"artifact://{aid}:\n  12340: 12340\n  12345: 12345"
    none = await call("grep", pattern="^x", path=f"artifact://{aid}")
    assert none.content == f"no lines match /^x/ in artifact://{aid}"


# --- list --------------------------------------------------------------------------------------------------


async def test_list_shows_a_tree(call: Call, project: Path) -> None:
    result = await call("list")
    assert result.content == "\n".join(
        [
            "./",
            "  .git/ [not listed]",
            "  .github/",
            "    workflows/",
            "      ci.yml",
            "  .venv/ [not listed]",
            "  assets/",
            "    logo.bin",
            "  node_modules/ [not listed]",
            "  src/",
            "    __pycache__/ [not listed]",
            "    util/",
            "      data.json",
            "      strings.py",
            "    app.py",
            "  tests/",
            "    test_app.py",
            "  README.md",
        ]
    )
    sub = await call("list", path="src", ignore=["*.json", "__pycache__"])
    assert sub.content == "src/\n  util/\n    strings.py\n  app.py"


async def test_list_is_capped_breadth_first(workspace: Path, ctx: ToolContext) -> None:
    tree(workspace, {f"top{i}/deep/file{j}.txt": "" for i in range(3) for j in range(5)})
    ctx.limits = ToolLimits(list_entries=6)
    result = await run_tool_call(builtin_registry(), ToolCallPart(id="1", name="list", arguments={}), ctx)
    body = result.content.split("\n\n")[0].splitlines()
    assert body[:4] == ["./", "  top0/", "    deep/", "  top1/"]  # every top-level entry comes before depth
    assert result.metadata["truncated"] is True
    assert result.content.endswith("[stopped at 6 entries; list a subdirectory to see more]")


async def test_list_errors(call: Call, workspace: Path) -> None:
    (workspace / "f.txt").write_text("")
    assert (await call("list", path="f.txt")).content == "list: f.txt is not a directory; use read to see a file"
    assert (await call("list", path="..")).metadata["error"] == "outside_workspace"
    assert (await call("list", path="nope")).content == "list: no such file or directory: nope"
