"""Walking a workspace: the directories no search should enter (.git, node_modules, virtualenvs, caches),
glob patterns as regexes (``**``, ``{a,b}``, classes), and a walk that prunes the junk and, while the
workspace is confined, skips symlinks that lead out of it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

JUNK_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".eggs",
        ".idea",
        ".DS_Store",
    }
)


def is_junk(name: str) -> bool:
    return name in JUNK_DIRS or name.endswith(".egg-info")


_MAGIC = re.compile(r"[*?\[{]")


@dataclass(frozen=True)
class GlobPattern:
    """A glob split into the directory it can start from (its leading literal components) and the rest.
    A pattern without '/' matches a file name at any depth, as in ripgrep and .gitignore."""

    base: str
    """The literal leading directories ('' for none); a walk can start there."""
    rx: re.Pattern[str]
    anywhere: bool

    @classmethod
    def parse(cls, pattern: str) -> GlobPattern:
        pattern = pattern.strip()
        while pattern.startswith("./"):
            pattern = pattern[2:]
        if "/" not in pattern.rstrip("/"):
            return cls("", glob_regex(pattern.rstrip("/")), True)
        parts = pattern.split("/")
        literal: list[str] = []
        while len(parts) > 1 and not _MAGIC.search(parts[0]):
            literal.append(parts.pop(0))
        base = "/".join(literal) if literal != [""] else "/"
        return cls(base, glob_regex("/".join(parts)), False)

    def matches(self, rel: str) -> bool:
        """Whether `rel` (posix, relative to the base) matches."""
        if self.anywhere:
            return self.rx.fullmatch(rel.rsplit("/", 1)[-1]) is not None
        return self.rx.fullmatch(rel) is not None


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex over posix paths: ``*`` and ``?`` stay within one component, ``**`` crosses
    them, ``[...]`` is a class (``[!...]`` negated), ``{a,b}`` an alternation."""
    out: list[str] = []
    i, n = 0, len(pattern)
    depth = 0
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                at_start = i == 0 or pattern[i - 1] == "/"
                if at_start and pattern.startswith("**/", i):
                    out.append("(?:.*/)?")
                    i += 3
                    continue
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern.startswith("[!", i) or pattern.startswith("[]", i) else i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j + 1
                continue
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    out.extend(")" * depth)  # an unclosed brace: close it rather than fail
    return re.compile("".join(out), re.DOTALL)


def walk_files(
    root: Path,
    *,
    confine_to: Path | None,
    stop: Callable[[], bool] | None = None,
) -> Iterator[Path]:
    """Every file under `root` (which may itself be junk: asking for it by name is a choice), in sorted
    order, pruning junk directories below it. Directory symlinks are not followed; file symlinks are kept
    only if they resolve inside `confine_to` (when given)."""
    for dirpath, dirnames, filenames in os.walk(root):
        if stop is not None and stop():
            return
        dirnames[:] = sorted(d for d in dirnames if not is_junk(d))
        base = Path(dirpath)
        for name in sorted(filenames):
            if is_junk(name):
                continue
            path = base / name
            if path.is_symlink():
                target = path.resolve()
                if not target.is_file() or (confine_to is not None and not target.is_relative_to(confine_to)):
                    continue
            yield path
