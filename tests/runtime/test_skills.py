"""Skills: found in the workspace's .tether/.agents/.claude skills folders and the user's, project over user;
lenient frontmatter (quotes, blocks, a missing name or description), a bad one a warning; the `skill` tool
loads a body and lists files, reads a file inside the skill and nothing outside it; a symlink loop in a
skill's folder, a huge SKILL.md and one that is not UTF-8 do not break anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.errors import ToolError
from tether.runtime.skills import SkillTool, find_skills, parse_frontmatter
from tether.store.memory import MemoryStore
from tether.tools.base import ToolContext


def skill(base: Path, folder: str, text: str | bytes) -> Path:
    d = base / folder
    d.mkdir(parents=True, exist_ok=True)
    path = d / "SKILL.md"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return d


def test_frontmatter_is_read_leniently() -> None:
    fields, body, problem = parse_frontmatter(
        '---\nname: "pdf"\ndescription: >\n  Fill PDF\n  forms.\n---\nBody here\n'
    )
    assert (
        fields == {"name": "pdf", "description": "Fill PDF forms."} and body.strip() == "Body here" and problem is None
    )
    fields, body, problem = parse_frontmatter("---\nname: x\nthis is not a field\n---\nB")
    assert fields == {"name": "x"} and problem is not None and "cannot read" in problem
    fields, body, problem = parse_frontmatter("---\nname: x\nno end")
    assert fields == {} and problem == "its frontmatter has no closing ---"
    assert parse_frontmatter("# Just markdown\n") == ({}, "# Just markdown\n", None)


def test_where_skills_come_from_and_precedence(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "home"
    skill(ws / ".tether" / "skills", "deploy", "---\nname: deploy\ndescription: Ship it (project)\n---\nSteps.")
    skill(ws / ".claude" / "skills", "review", "---\ndescription: Review code\n---\nHow to review.")
    skill(ws / ".agents" / "skills", "nodesc", "---\nname: nodesc\n---\n\n# Lint everything\nrest")
    skill(home / "skills", "deploy", "---\nname: deploy\ndescription: Ship it (user)\n---\n")
    skill(home / "skills", "notes", "---\nname: notes\ndescription: Take notes\n---\n")
    skill(ws / ".tether" / "skills", "broken", "---\nname: broken\ndescription: half")
    skill(ws / ".tether" / "skills", "bad name", "---\nname: bad name!\ndescription: x\n---\n")
    skill(ws / ".tether" / "skills", "empty", "")
    found = find_skills(ws, home)
    assert set(found.skills) == {"deploy", "review", "nodesc", "notes", "broken"}
    assert found.skills["deploy"].description == "Ship it (project)" and found.skills["deploy"].source == "project"
    assert found.skills["review"].name == "review"  # from the folder
    assert found.skills["nodesc"].description == "Lint everything"  # from the body's first line
    assert found.skills["broken"].description == "---"  # no closing ---: the whole text is the body
    warnings = "\n".join(found.warnings)
    assert "no closing ---" in warnings and "bad name" in warnings and "no description" in warnings
    catalogue = found.catalogue()
    assert "- deploy: Ship it (project)" in catalogue and "Ship it (user)" not in catalogue


async def test_the_skill_tool(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    folder = skill(ws / ".tether" / "skills", "pdf", "---\nname: pdf\ndescription: PDFs\n---\nUse forms.py.\n")
    (folder / "forms.py").write_text("print('fill')\n")
    (folder / "ref").mkdir()
    (folder / "ref" / "spec.md").write_text("spec")
    os.symlink(folder, folder / "ref" / "loop")  # a folder that contains itself
    (tmp_path / "secret.txt").write_text("not yours")
    tool = SkillTool(find_skills(ws, tmp_path / "home"))
    ctx = ToolContext(workspace=ws, session_id="s", store=MemoryStore())
    out = await tool.run({"name": "pdf"}, ctx)
    assert "Use forms.py." in out.content and "- forms.py" in out.content and "- ref/spec.md" in out.content
    assert "name: pdf" not in out.content  # the frontmatter is not the body
    assert (await tool.run({"name": "pdf", "file": "forms.py"}, ctx)).content == "print('fill')\n"
    with pytest.raises(ToolError, match="not a file of the skill"):
        await tool.run({"name": "pdf", "file": "../../secret.txt"}, ctx)
    with pytest.raises(ToolError, match="no skill named"):
        await tool.run({"name": "nope"}, ctx)
    assert "pdf" in tool.description


def test_huge_and_not_utf8_skill_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    skill(ws / ".tether" / "skills", "big", b"---\nname: big\ndescription: Big one\n---\n" + b"y" * (20 * 1024 * 1024))
    skill(ws / ".tether" / "skills", "latin", b"---\nname: latin\ndescription: caf\xe9\n---\n")
    found = find_skills(ws, tmp_path / "home")
    assert found.skills["big"].description == "Big one"
    assert found.skills["latin"].description == "caf\ufffd"
    loop = ws / ".tether" / "skills" / "looped"
    loop.mkdir()
    os.symlink(loop / "SKILL.md", loop / "SKILL.md")
    again = find_skills(ws, tmp_path / "home")
    assert "looped" not in again.skills and any("looped" in w for w in again.warnings)
