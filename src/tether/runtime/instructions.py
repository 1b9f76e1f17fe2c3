"""Project instructions: what a project tells every agent that works in it, read fresh as each run starts and
added to its system prompt.

Which files, in the order they are combined (most general first, so that the nearest is read last):

1. the user's own ``AGENTS.md`` in the tether home (for every project);
2. from the repository root (the nearest folder above the workspace with a ``.git``; without one, the
   workspace alone) down to the workspace, in each folder ``AGENTS.md``, or ``CLAUDE.md`` where there is no
   ``AGENTS.md``.

Past `max_chars` in all, the farthest file is cut first (the user's, then the repository root's...), from its
end, so what is nearest the work survives. A file that cannot be read (a symlink loop, a folder, no
permission) is skipped with a warning; one that is not UTF-8 is read with replacement characters and a
warning; a huge one is read no further than the cap."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import tether_home

NAMES = ("AGENTS.md", "CLAUDE.md")
"""The file a folder's instructions are in, by preference: ``CLAUDE.md`` only where there is no ``AGENTS.md``."""
DEFAULT_MAX_CHARS = 40_000
MAX_FOLDERS = 64
"""Folders walked up from the workspace at most, looking for the repository root."""


@dataclass(frozen=True)
class InstructionFile:
    """One file as it went into the prompt: its path, where it sits (``user``, ``repository``, ``folder``,
    ``workspace``), its text as used, and how many characters were cut off its end (the size cap)."""

    path: str
    scope: str
    text: str
    chars: int
    cut: int = 0


@dataclass
class Instructions:
    files: list[InstructionFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The files as one block for the system prompt, each under its path."""
        blocks = [f"## Instructions from {f.path}\n\n{f.text.strip()}" for f in self.files if f.text.strip()]
        if not blocks:
            return ""
        return "# Project instructions\n\n" + "\n\n".join(blocks)


def repository_root(workspace: Path) -> Path | None:
    """The nearest folder from `workspace` up that holds ``.git`` (a folder or a worktree's file)."""
    here = workspace
    for _ in range(MAX_FOLDERS):
        if (here / ".git").exists():
            return here
        if here.parent == here:
            return None
        here = here.parent
    return None


def instruction_paths(workspace: str | os.PathLike[str], home: Path | None = None) -> list[tuple[Path, str]]:
    """The files to read, farthest first, with their scope (see the module docstring)."""
    found: list[tuple[Path, str]] = []
    user = (home if home is not None else tether_home()) / "AGENTS.md"
    if user.is_file():
        found.append((user, "user"))
    ws = Path(os.path.realpath(workspace))
    root = repository_root(ws) or ws
    folders: list[Path] = []
    here = ws
    while True:
        folders.append(here)
        if here == root or here.parent == here:
            break
        here = here.parent
    for folder in reversed(folders):
        scope = "workspace" if folder == ws else ("repository" if folder == root else "folder")
        for name in NAMES:
            candidate = folder / name
            if candidate.is_file() or candidate.is_symlink():
                found.append((candidate, scope))
                break
    return found


def read_instructions(
    workspace: str | os.PathLike[str], *, max_chars: int = DEFAULT_MAX_CHARS, home: Path | None = None
) -> Instructions:
    """The project's instructions for a run in `workspace`, within `max_chars` (see the module docstring)."""
    out = Instructions()
    read: list[tuple[Path, str, str]] = []
    for path, scope in instruction_paths(workspace, home):
        try:
            with open(path, "rb") as f:
                data = f.read(max_chars * 4 + 4)  # enough for max_chars characters of any UTF-8
                more = f.read(1)
        except OSError as exc:
            out.warnings.append(f"instructions {path} skipped: {exc.strerror or exc}")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="replace")
            if not more:  # a character cut at the read's end is not the file's fault
                out.warnings.append(f"instructions {path} is not UTF-8: its bad bytes read as U+FFFD")
        if more:
            out.warnings.append(f"instructions {path} is larger than the cap: read to {max_chars:,} characters")
        read.append((path, scope, text))
    total = sum(len(t) for _, _, t in read)
    excess = max(0, total - max_chars)
    for path, scope, text in read:  # farthest first: cut from the farthest until the rest fits
        cut = min(excess, len(text))
        excess -= cut
        kept = text[: len(text) - cut]
        if cut:
            out.warnings.append(f"instructions {path} cut by {cut:,} characters to fit [instructions] max_chars")
        out.files.append(InstructionFile(str(path), scope, kept, len(text), cut))
    return out
