"""Project instructions: AGENTS.md over CLAUDE.md in each folder from the repository root to the workspace,
the user's own file first, the size cap cutting the farthest file first, and files that are a symlink loop,
huge, or not UTF-8 (a warning, never a crash)."""

from __future__ import annotations

import os
from pathlib import Path

from tether.runtime.instructions import read_instructions, repository_root


def tree(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    home.mkdir()
    repo = tmp_path / "repo"
    ws = repo / "pkg" / "app"
    ws.mkdir(parents=True)
    (repo / ".git").mkdir()
    return home, ws


def test_order_and_precedence(tmp_path: Path) -> None:
    home, ws = tree(tmp_path)
    repo = ws.parent.parent
    (home / "AGENTS.md").write_text("USER rules")
    (repo / "AGENTS.md").write_text("ROOT agents")
    (repo / "CLAUDE.md").write_text("ROOT claude, not read: AGENTS.md is there")
    (ws.parent / "CLAUDE.md").write_text("PKG claude, read: no AGENTS.md here")
    (ws / "AGENTS.md").write_text("APP agents")
    (tmp_path / "AGENTS.md").write_text("ABOVE the repository: never read")
    found = read_instructions(ws, home=home)
    assert [(Path(f.path).relative_to(tmp_path).as_posix(), f.scope) for f in found.files] == [
        ("home/AGENTS.md", "user"),
        ("repo/AGENTS.md", "repository"),
        ("repo/pkg/CLAUDE.md", "folder"),
        ("repo/pkg/app/AGENTS.md", "workspace"),
    ]
    text = found.text()
    assert text.index("USER rules") < text.index("ROOT agents") < text.index("PKG claude") < text.index("APP agents")
    assert "not read" not in text and "never read" not in text
    assert found.warnings == []


def test_outside_a_repository_only_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "plain" / "dir"
    ws.mkdir(parents=True)
    (tmp_path / "plain" / "AGENTS.md").write_text("PARENT")
    (ws / "CLAUDE.md").write_text("HERE")
    assert repository_root(ws) is None or repository_root(ws) != ws
    found = read_instructions(ws, home=tmp_path / "nohome")
    assert [f.text for f in found.files] == ["HERE"]


def test_the_cap_cuts_the_farthest_first(tmp_path: Path) -> None:
    home, ws = tree(tmp_path)
    (home / "AGENTS.md").write_text("u" * 300)
    (ws.parent.parent / "AGENTS.md").write_text("r" * 300)
    (ws / "AGENTS.md").write_text("w" * 300)
    found = read_instructions(ws, max_chars=700, home=home)
    assert [(f.scope, len(f.text), f.cut) for f in found.files] == [
        ("user", 100, 200),
        ("repository", 300, 0),
        ("workspace", 300, 0),
    ]
    tight = read_instructions(ws, max_chars=250, home=home)
    assert [(f.scope, len(f.text)) for f in tight.files] == [("user", 0), ("repository", 0), ("workspace", 250)]
    assert any("cut by" in w for w in tight.warnings)


def test_symlink_loop_huge_and_not_utf8(tmp_path: Path) -> None:
    home, ws = tree(tmp_path)
    loop = ws.parent.parent / "AGENTS.md"
    os.symlink(loop, loop)  # points at itself
    (ws.parent / "AGENTS.md").write_bytes(b"caf\xe9 latin-1 \xff text")
    with open(ws / "AGENTS.md", "wb") as f:
        f.write(b"x" * (50 * 1024 * 1024))  # 50 MB
    found = read_instructions(ws, max_chars=1000, home=home)
    warnings = "\n".join(found.warnings)
    assert "skipped" in warnings and str(loop) in warnings
    assert "not UTF-8" in warnings
    assert "larger than the cap" in warnings
    assert sum(len(f.text) for f in found.files) <= 1000
    # the huge nearest file fills the cap: the farther ones were cut whole
    assert [(f.scope, f.cut) for f in found.files] == [("folder", 19), ("workspace", 3004)]
    (ws / "AGENTS.md").unlink()
    latin = next(f for f in read_instructions(ws, max_chars=1000, home=home).files if f.scope == "folder")
    assert latin.text == "caf\ufffd latin-1 \ufffd text"


def test_a_change_between_reads_is_seen(tmp_path: Path) -> None:
    home, ws = tree(tmp_path)
    (ws / "AGENTS.md").write_text("first version")
    assert "first version" in read_instructions(ws, home=home).text()
    (ws / "AGENTS.md").write_text("second version")
    assert "second version" in read_instructions(ws, home=home).text()
