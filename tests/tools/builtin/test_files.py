from __future__ import annotations

import ctypes
import os
import stat
import threading
from pathlib import Path

import pytest

from tether.tools import ToolContext
from tether.tools.builtin.text import looks_binary

from ..conftest import Call


def numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


# --- read --------------------------------------------------------------------------------------------------


async def test_read_numbers_lines_like_cat_n(call: Call, workspace: Path) -> None:
    (workspace / "a.txt").write_text("alpha\nbeta\n\tgamma\n")
    result = await call("read", path="a.txt")
    assert not result.is_error
    assert result.content == "     1\talpha\n     2\tbeta\n     3\t\tgamma"
    assert result.metadata["lines"] == [1, 3] and result.metadata["total_lines"] == 3


async def test_read_line_ranges(call: Call, workspace: Path) -> None:
    (workspace / "n.txt").write_text(numbered(100))
    result = await call("read", path="n.txt", offset=10, limit=3)
    assert result.content == (
        "    10\tline 10\n    11\tline 11\n    12\tline 12\n\n[lines 10-12 of 100. Read more with offset=13]"
    )
    last = await call("read", path="n.txt", offset=99)
    assert last.content == "    99\tline 99\n   100\tline 100"
    past = await call("read", path="n.txt", offset=101)
    assert past.is_error and past.content == "read: offset 101 is past the end of n.txt (100 lines)"
    bad = await call("read", path="n.txt", offset=0)
    assert bad.is_error and "must be at least 1" in bad.content


async def test_read_pages_large_files(call: Call, workspace: Path, ctx: ToolContext) -> None:
    (workspace / "big.txt").write_text(numbered(10_000))
    first = await call("read", path="big.txt")
    shown_to = first.metadata["lines"][1]
    # a page stops within the output limits (so the runner has nothing to cut) and says where to go on
    assert 1_000 < shown_to <= ctx.limits.read_lines
    assert "truncated" not in first.metadata
    assert len(first.content) <= ctx.limits.output_chars
    assert first.content.count("\n") < ctx.limits.output_lines
    assert first.content.endswith(f"[lines 1-{shown_to:,} of 10,000. Read more with offset={shown_to + 1}]")
    second = await call("read", path="big.txt", offset=shown_to + 1, limit=5)
    assert second.content.startswith(f"{shown_to + 1:>6}\tline {shown_to + 1}\n")

    # wide lines: the page stops early, within the output limit, and says where to go on
    (workspace / "wide.txt").write_text("".join(f"{i:05d} " + "w" * 500 + "\n" for i in range(1, 1_001)))
    wide = await call("read", path="wide.txt")
    assert len(wide.content) <= ctx.limits.output_chars and "truncated" not in wide.metadata
    shown_to = wide.metadata["lines"][1]
    assert shown_to < 1_000
    assert wide.content.endswith(f"Read more with offset={shown_to + 1}]")
    nxt = await call("read", path="wide.txt", offset=shown_to + 1, limit=1)
    assert nxt.content.startswith(f"{shown_to + 1:>6}\t{shown_to + 1:05d} ")


async def test_read_cuts_very_long_lines(call: Call, workspace: Path) -> None:
    (workspace / "min.js").write_text("a" * 10_000 + "\nshort\n")
    result = await call("read", path="min.js")
    first, second = result.content.split("\n")[:2]
    assert first == "     1\t" + "a" * 2_000 + " ... [line cut: 10,000 characters]"
    assert second == "     2\tshort"


async def test_read_edge_cases(call: Call, workspace: Path) -> None:
    (workspace / "empty.txt").write_text("")
    assert (await call("read", path="empty.txt")).content == "[empty.txt is empty]"
    (workspace / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree")
    assert (await call("read", path="crlf.txt")).content == "     1\tone\n     2\ttwo\n     3\tthree"
    (workspace / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    assert (await call("read", path="latin1.txt")).content == "     1\tcaf\ufffd"
    (workspace / "sub").mkdir()
    result = await call("read", path="sub")
    assert result.is_error and "sub is a directory; use list" in result.content


async def test_read_missing_file_suggests_near_names(call: Call, workspace: Path) -> None:
    (workspace / "config.yaml").write_text("x")
    result = await call("read", path="config.yml")
    assert result.is_error
    assert result.content == "read: file not found: config.yml; did you mean 'config.yaml'?"
    result = await call("read", path="nowhere/x.txt")
    assert "the directory nowhere does not exist either" in result.content


async def test_read_refuses_binary_files(call: Call, workspace: Path) -> None:
    (workspace / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    result = await call("read", path="logo.png")
    assert result.is_error
    assert result.content == "read: logo.png is a binary file (image/png, 272 bytes); read shows text files only"
    (workspace / "data.bin").write_bytes(bytes([1, 2, 3, 4, 5, 6]) * 100)
    assert (await call("read", path="data.bin")).is_error


def test_binary_sniffing() -> None:
    assert looks_binary(b"abc\0def")
    assert looks_binary(bytes(range(1, 32)) * 4)
    assert not looks_binary(b"")
    assert not looks_binary("plain text, été, ✓\n\tindented\r\n".encode())
    assert not looks_binary("caf\xe9".encode("latin-1"))
    assert not looks_binary(b"\x1b[31mred\x1b[0m\n")  # colored terminal output is text


async def test_read_artifacts_by_line_range(call: Call, ctx: ToolContext) -> None:
    text = numbered(100_000)
    big = await call("bash", command="seq -f 'line %g' 1 100000")
    aid = big.metadata["artifact"]
    assert f'read(path="artifact://{aid}"' in big.content
    page = await call("read", path=f"artifact://{aid}", offset=50_000, limit=2)
    assert page.content == (
        " 50000\tline 50000\n 50001\tline 50001\n\n[lines 50,000-50,001 of 100,000. Read more with offset=50002]"
    )
    assert page.metadata == {
        "path": f"artifact://{aid}",
        "lines": [50_000, 50_001],
        "total_lines": 100_000,
        "duration": page.metadata["duration"],
    }
    assert (await ctx.store.get_artifact(aid)) == text.encode()


async def test_read_refuses_bad_artifact_ids(call: Call) -> None:
    result = await call("read", path="artifact://nope")
    assert result.is_error and "'nope' is not an artifact id" in result.content
    missing = "art_" + "0" * 64
    result = await call("read", path=f"artifact://{missing}")
    assert result.is_error and result.content == f"read: no stored output {missing}"


# --- write -------------------------------------------------------------------------------------------------


async def test_write_creates_parents_and_reports_bytes(call: Call, workspace: Path) -> None:
    result = await call("write", path="deep/er/new.txt", content="héllo\nworld\n")
    assert not result.is_error
    assert result.content == "wrote 13 bytes (2 lines) to deep/er/new.txt (new file)"
    assert (workspace / "deep/er/new.txt").read_bytes() == "héllo\nworld\n".encode()
    assert result.metadata["created"] is True and result.metadata["bytes"] == 13


async def test_write_replaces_whole_and_keeps_the_mode(call: Call, workspace: Path) -> None:
    script = workspace / "run.sh"
    script.write_text("old content that is longer\n")
    script.chmod(0o755)
    result = await call("write", path="run.sh", content="#!/bin/sh\r\necho hi\r\n")
    assert result.content == "wrote 20 bytes (2 lines) to run.sh (replaced its previous 27 bytes)"
    assert script.read_bytes() == b"#!/bin/sh\r\necho hi\r\n"  # no newline translation
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert [p.name for p in workspace.iterdir()] == ["run.sh"]  # no temp file left behind


async def test_write_follows_a_link_inside_the_workspace(call: Call, workspace: Path) -> None:
    (workspace / "real.txt").write_text("a")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    await call("write", path="alias.txt", content="b")
    assert (workspace / "real.txt").read_text() == "b"
    assert (workspace / "alias.txt").is_symlink()


async def test_write_and_edit_refuse_text_that_is_not_valid_unicode(call: Call, workspace: Path) -> None:
    result = await call("write", path="s.txt", content="a\ud800b")
    assert (
        result.is_error and result.content == "write: content holds '\\ud800' at character 1, which is not valid text"
    )
    assert not (workspace / "s.txt").exists()
    (workspace / "t.txt").write_text("abc")
    result = await call("edit", path="t.txt", old_string="b", new_string="\udfff")
    assert result.is_error and (workspace / "t.txt").read_text() == "abc"


async def test_write_errors(call: Call, workspace: Path) -> None:
    (workspace / "d").mkdir()
    assert (await call("write", path="d", content="x")).content == "write: d is a directory"
    (workspace / "f").write_text("x")
    result = await call("write", path="f/inner.txt", content="x")
    assert result.is_error and "a file is in the way" in result.content


# --- edit --------------------------------------------------------------------------------------------------


async def test_edit_replaces_a_unique_match(call: Call, workspace: Path) -> None:
    f = workspace / "m.py"
    f.write_text("def a():\n    return 1\n\n\ndef b():\n    return 2\n")
    result = await call("edit", path="m.py", old_string="    return 2\n", new_string="    return 3\n")
    assert not result.is_error
    assert f.read_text() == "def a():\n    return 1\n\n\ndef b():\n    return 3\n"
    assert result.content.startswith("edited m.py: replaced 1 occurrence (line 6). The changed part now reads:\n")
    assert "     6\t    return 3" in result.content
    assert result.metadata["replacements"] == 1
    assert "-    return 2\n+    return 3\n" in result.metadata["diff"]


async def test_edit_with_no_match_says_why(call: Call, workspace: Path) -> None:
    f = workspace / "m.py"
    f.write_text("def a():\n    return 1\n")
    result = await call("edit", path="m.py", old_string="return 9", new_string="return 3")
    assert result.is_error
    assert result.content == "edit: old_string was not found in m.py; read the file again and copy the text exactly"
    result = await call("edit", path="m.py", old_string="  return 1  ", new_string="return 3")
    assert "when leading/trailing whitespace is ignored" in result.content
    result = await call("edit", path="m.py", old_string="def a():\n  return 1", new_string="x")
    assert "its first line matches line 1, but what follows differs" in result.content
    assert f.read_text() == "def a():\n    return 1\n"


async def test_edit_with_several_matches_counts_them(call: Call, workspace: Path) -> None:
    f = workspace / "m.py"
    f.write_text("x = 1\ny = 1\nz = 1\n")
    result = await call("edit", path="m.py", old_string="= 1", new_string="= 2")
    assert result.is_error
    assert result.content == (
        "edit: old_string occurs 3 times in m.py (at lines 1, 2, 3); include more surrounding text to make it "
        "unique, or pass replace_all=true to replace every occurrence"
    )
    assert f.read_text() == "x = 1\ny = 1\nz = 1\n"
    result = await call("edit", path="m.py", old_string="= 1", new_string="= 2", replace_all=True)
    assert result.content.startswith("edited m.py: replaced 3 occurrences (line 1, 2, 3)")
    assert f.read_text() == "x = 2\ny = 2\nz = 2\n"


async def test_edit_keeps_crlf_line_endings(call: Call, workspace: Path) -> None:
    f = workspace / "w.txt"
    f.write_bytes(b"first\r\nsecond\r\nthird\r\n")
    result = await call("edit", path="w.txt", old_string="first\nsecond\n", new_string="1st\n2nd\nextra\n")
    assert not result.is_error, result.content
    assert f.read_bytes() == b"1st\r\n2nd\r\nextra\r\nthird\r\n"


async def test_edit_refusals(call: Call, workspace: Path) -> None:
    (workspace / "a.txt").write_text("abc")
    assert "old_string is empty" in (await call("edit", path="a.txt", old_string="", new_string="x")).content
    assert "are the same" in (await call("edit", path="a.txt", old_string="a", new_string="a")).content
    assert "file not found" in (await call("edit", path="b.txt", old_string="a", new_string="b")).content
    (workspace / "bin").write_bytes(b"\0\1\2abc")
    assert "binary file" in (await call("edit", path="bin", old_string="abc", new_string="x")).content
    (workspace / "l1.txt").write_bytes("caf\xe9 abc".encode("latin-1"))
    result = await call("edit", path="l1.txt", old_string="abc", new_string="x")
    assert result.is_error and "is not UTF-8 text" in result.content


# --- confinement -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["read", "write", "edit"])
async def test_file_tools_refuse_paths_outside_the_workspace(call: Call, workspace: Path, tool: str) -> None:
    outside = workspace.parent / "outside.txt"
    outside.write_text("secret\n")
    (workspace / "link.txt").symlink_to(outside)
    (workspace / "linkdir").symlink_to(workspace.parent)
    args = {"write": {"content": "pwned"}, "edit": {"old_string": "secret", "new_string": "pwned"}}.get(tool, {})
    for path in ["../outside.txt", str(outside), "link.txt", "linkdir/outside.txt", "/etc/hostname"]:
        result = await call(tool, path=path, **args)
        assert result.is_error, (tool, path)
        assert result.metadata["error"] == "outside_workspace"
        assert "is outside the workspace" in result.content
    assert outside.read_text() == "secret\n"
    assert not (workspace.parent / "pwned").exists()


async def test_unconfined_context_may_leave_the_workspace(workspace: Path, ctx: ToolContext) -> None:
    from tether.messages import ToolCallPart
    from tether.tools import run_tool_call
    from tether.tools.builtin import builtin_registry

    outside = workspace.parent / "outside.txt"
    outside.write_text("open\n")
    ctx.confine_to_workspace = False
    result = await run_tool_call(
        builtin_registry(), ToolCallPart(id="1", name="read", arguments={"path": os.fspath(outside)}), ctx
    )
    assert result.content == "     1\topen"


# --- a path swapped for a symlink between the check and the open ------------------------------------------


def _exchanger(a: Path, b: Path, stop: threading.Event) -> threading.Thread:
    """A thread that swaps `a` and `b` (a directory and a symlink to one outside) as fast as it can, with
    renameat2(RENAME_EXCHANGE): an attacker with a process of its own in the workspace."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, exchange = -100, 2

    def swap() -> None:
        while not stop.is_set():
            libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), exchange)

    return threading.Thread(target=swap, daemon=True)


@pytest.mark.slow
async def test_a_symlink_swapped_in_during_the_call_never_moves_a_read_or_a_write_outside(
    call: Call, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("OUTSIDE\n")
    (workspace / "dir").mkdir()
    (workspace / "dir" / "secret.txt").write_text("inside\n")
    (workspace / "swap").symlink_to(outside)
    stop = threading.Event()
    swapper = _exchanger(workspace / "dir", workspace / "swap", stop)
    swapper.start()
    read_escapes = write_escapes = reads_ok = writes_ok = 0
    try:
        for i in range(3000):
            read = await call("read", path="dir/secret.txt")
            read_escapes += "OUTSIDE" in read.content
            reads_ok += "inside" in read.content
            written = await call("write", path=f"dir/new{i}.txt", content="x")
            writes_ok += not written.is_error
            write_escapes += (outside / f"new{i}.txt").exists()
    finally:
        stop.set()
        swapper.join(10)
    assert read_escapes == 0 and write_escapes == 0
    assert not list(outside.glob("new*")) and not list(outside.glob(".new*"))
    assert reads_ok > 0 and writes_ok > 0  # the race ran: some calls went through between swaps
