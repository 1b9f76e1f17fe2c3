"""Skills: folders with a ``SKILL.md`` (frontmatter ``name`` and ``description``, then instructions) that a
model loads when a task calls for them. Looked for in the workspace's ``.tether/skills/``, ``.agents/skills/``
and ``.claude/skills/``, then the user's ``skills/`` in the tether home; a project's skill wins over the
user's of the same name. The catalogue (name and description of each) goes into the system prompt; the
`skill` tool loads one's body and lists its files (or reads one of them). Approval rules name them:
``skill(NAME)``.

Parsing is lenient: a frontmatter of ``key: value`` lines (quoted or not, ``>``/``|`` blocks), a missing name
taken from the folder, a missing description from the body's first line. A skill that cannot be read is a
warning, never a crash."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..errors import ToolError
from ..paths import tether_home
from ..tools.base import ToolContext, ToolOutput

PROJECT_FOLDERS = (".tether/skills", ".agents/skills", ".claude/skills")
SKILL_FILE = "SKILL.md"
MAX_SKILL_BYTES = 256 * 1024
"""A SKILL.md (or a file the tool reads) larger than this is read to this size."""
MAX_FILES = 200
MAX_SKILLS = 500
DESCRIPTION_CHARS = 400
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    folder: str
    source: str
    """``project`` or ``user``."""


@dataclass
class Skills:
    skills: dict[str, Skill] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def catalogue(self) -> str:
        if not self.skills:
            return ""
        lines = [f"- {s.name}: {s.description}" for s in self.skills.values()]
        return (
            "# Skills\n\nLoad one with the `skill` tool when a task calls for it (it gives its instructions and "
            "files):\n" + "\n".join(lines)
        )


def parse_frontmatter(text: str) -> tuple[dict[str, str], str, str | None]:
    """``(fields, body, problem)`` of a SKILL.md: the ``key: value`` lines between the leading ``---`` lines;
    without a frontmatter, no fields and the whole text. `problem` says what could not be read."""
    if not text.startswith("---"):
        return {}, text, None
    lines = text.split("\n")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        return {}, text, "its frontmatter has no closing ---"
    fields: dict[str, str] = {}
    key: str | None = None
    block: list[str] = []
    problem = None

    def close() -> None:
        if key is not None and block:
            fields[key] = " ".join(b.strip() for b in block if b.strip())

    for raw in lines[1:end]:
        if key is not None and (raw.startswith((" ", "\t")) or not raw.strip()):
            block.append(raw)
            continue
        close()
        key, block = None, []
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$", raw)
        if m is None:
            problem = problem or f"a frontmatter line it cannot read: {raw[:60]!r}"
            continue
        name, value = m.group(1).lower(), m.group(2).strip()
        if value in (">", "|", ">-", "|-", ""):
            key, block = name, []
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[name] = value
    close()
    return fields, "\n".join(lines[end + 1 :]), problem


def _read(path: Path, limit: int = MAX_SKILL_BYTES) -> str:
    with open(path, "rb") as f:
        data = f.read(limit)
    return data.decode("utf-8", errors="replace")


def find_skills(workspace: str | os.PathLike[str], home: Path | None = None) -> Skills:
    """Every skill of the workspace and the user (see the module docstring)."""
    out = Skills()
    ws = Path(os.path.realpath(workspace))
    places = [(ws / p, "project") for p in PROJECT_FOLDERS]
    places.append(((home if home is not None else tether_home()) / "skills", "user"))
    for base, source in places:
        try:
            folders = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
        except OSError as exc:
            out.warnings.append(f"skills in {base} skipped: {exc.strerror or exc}")
            continue
        for folder in folders[:MAX_SKILLS]:
            path = folder / SKILL_FILE
            if not path.exists() and not path.is_symlink():
                continue
            try:
                text = _read(path)
            except OSError as exc:
                out.warnings.append(f"skill {path} skipped: {exc.strerror or exc}")
                continue
            fields, body, problem = parse_frontmatter(text)
            if problem is not None:
                out.warnings.append(f"skill {path}: {problem}")
            name = fields.get("name") or folder.name
            if not _NAME.match(name):
                out.warnings.append(f"skill {path} skipped: its name {name[:60]!r} is not 1-64 letters, digits, _ . -")
                continue
            description = fields.get("description") or next(
                (ln.strip("# ").strip() for ln in body.splitlines() if ln.strip()), ""
            )
            if not description:
                out.warnings.append(f"skill {path} skipped: it has no description")
                continue
            if name in out.skills:
                continue  # a project's (found first) wins over the user's of the same name
            out.skills[name] = Skill(name, description[:DESCRIPTION_CHARS], str(folder), source)
    return out


@dataclass
class SkillTool:
    """`skill`: a skill's instructions and the list of its files; with `file`, one of its files."""

    skills: Skills
    name: str = "skill"
    read_only: bool = True
    bulk: bool = False
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The skill's name, from the catalogue"},
            "file": {"type": "string", "description": "A file of the skill to read (a path inside its folder)"},
        },
        "required": ["name"],
        "additionalProperties": False,
    }

    @property
    def description(self) -> str:
        names = ", ".join(self.skills.skills)
        return (
            f"Load a skill: its instructions and the list of its files (or, with file, one of them). Skills: {names}."
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        skill = self.skills.skills.get(str(args.get("name", "")))
        if skill is None:
            raise ToolError(f"no skill named {args.get('name')!r}; the skills are: {', '.join(self.skills.skills)}")
        folder = Path(skill.folder).resolve()
        wanted = args.get("file")
        if wanted:
            path = (folder / str(wanted)).resolve()
            if not path.is_relative_to(folder) or not path.is_file():
                raise ToolError(f"{wanted!r} is not a file of the skill {skill.name}")
            try:
                return ToolOutput(_read(path), metadata={"skill": skill.name, "file": str(path.relative_to(folder))})
            except OSError as exc:
                raise ToolError(f"cannot read {wanted}: {exc.strerror or exc}") from None
        try:
            _, body, _ = parse_frontmatter(_read(folder / SKILL_FILE))
        except OSError as exc:
            raise ToolError(f"cannot read the skill {skill.name}: {exc.strerror or exc}") from None
        files = _files(folder)
        listing = "\n".join(f"- {f}" for f in files) or "(none besides SKILL.md)"
        text = f"# Skill {skill.name}\n(folder: {folder})\n\n{body.strip()}\n\n## Its files\n{listing}"
        return ToolOutput(text, metadata={"skill": skill.name, "files": len(files)})


def _files(folder: Path) -> list[str]:
    out: list[str] = []
    for root, dirs, names in os.walk(folder):  # os.walk does not follow symlinked folders: no loop
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            rel = (Path(root) / n).relative_to(folder).as_posix()
            if rel != SKILL_FILE:
                out.append(rel)
            if len(out) >= MAX_FILES:
                return out
    return out
