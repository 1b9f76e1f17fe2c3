"""ARCHITECTURE.md against the tree: every module under `src/tether` (every .py file, and every folder) is
named in it by its path, and every module, folder or file it names exists. A room added, moved or removed
without the document changing fails here with the list of names."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from tether.runtime.manager import SessionManager

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tether"
DOC = ROOT / "ARCHITECTURE.md"

SPAN = re.compile(r"`([^`\n]+)`")
PATHLIKE = re.compile(r"^(?:src/tether/|tether/)?(?:[\w.-]+/)*(?:[\w.-]+\.(?:py|md)|[\w-]+/)$")
"""A span that names a file or a folder: ``runtime/lease.py``, ``store/``, ``tests/test_layers.py``."""


def doc_spans(text: str) -> set[str]:
    return {m.group(1).strip() for m in SPAN.finditer(text)}


def tree_names() -> set[str]:
    """Every .py file and every folder under src/tether, as a path relative to it (folders end with /)."""
    names: set[str] = set()
    for path in SRC.rglob("*"):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(SRC).as_posix()
        if path.is_dir():
            names.add(rel + "/")
        elif path.suffix == ".py":
            names.add(rel)
    return names


def unnamed(names: set[str], spans: set[str]) -> list[str]:
    """The names of the tree that no span of the document names: ``runtime/lease.py`` is named by
    ``runtime/lease.py``, ``tether/runtime/lease.py`` or ``src/tether/runtime/lease.py``, and by a bare
    ``lease.py`` only while no other module has that file name (``memory.py`` names none of the three)."""
    named = {s.removeprefix("src/").removeprefix("tether/") for s in spans}
    files = Counter(n.rsplit("/", 1)[-1] for n in names if not n.endswith("/"))
    return sorted(
        n for n in names if n not in named and not (files[n.rsplit("/", 1)[-1]] == 1 and n.rsplit("/", 1)[-1] in named)
    )


def repository_files() -> set[str]:
    """The file names of the repository's own code, tests, benchmarks and documents."""
    return {p.name for top in ("src", "tests", "bench", "docs", "scripts") for p in (ROOT / top).rglob("*")} | {
        p.name for p in ROOT.glob("*")
    }


def missing(spans: set[str], names: set[str], files: set[str] | None = None) -> list[str]:
    """The spans that look like a path and name nothing here: not a module or folder of the package (by its
    path), not a file or folder of the repository (by its path from the root, or a bare file name that one of
    its files has: ``test_layers.py``)."""
    basenames = {n.rsplit("/", 1)[-1] for n in names if not n.endswith("/")} | (files or set())
    out = []
    for span in sorted(spans):
        if not PATHLIKE.match(span):
            continue
        rel = span.removeprefix("src/").removeprefix("tether/")
        if rel in names or (ROOT / span).exists() or ("/" not in span and span in basenames):
            continue
        out.append(span)
    return out


def test_every_module_is_named_in_architecture_md() -> None:
    left_out = unnamed(tree_names(), doc_spans(DOC.read_text(encoding="utf-8")))
    assert not left_out, f"ARCHITECTURE.md does not name {len(left_out)} module(s) by path: {', '.join(left_out)}"


def test_every_name_in_architecture_md_exists() -> None:
    gone = missing(doc_spans(DOC.read_text(encoding="utf-8")), tree_names(), repository_files())
    assert not gone, f"ARCHITECTURE.md names {len(gone)} file(s) that are not in the tree: {', '.join(gone)}"


def test_the_checks_catch_what_they_are_for() -> None:
    """The two checks on a made-up document: a module it leaves out, a file it names that is not there."""
    names = {"runtime/", "runtime/lease.py", "runtime/loop.py", "runtime/memory.py", "cli/memory.py", "messages.py"}
    text = "`runtime/` holds `runtime/lease.py`, `loop.py` and `memory.py`; `tether/messages.py`; see `DESIGN.md`"
    spans = doc_spans(text)
    assert unnamed(names, spans) == ["cli/memory.py", "runtime/memory.py"]  # a bare name two modules have
    odd = {"runtime/gone.py", "pacing.py", "test_layers.py", "RunRequest", "a b"}
    assert missing(spans | odd, names, {"test_layers.py"}) == ["DESIGN.md", "pacing.py", "runtime/gone.py"]


MANAGER_ROOMS = ("manager.py", "manager_base.py", "queueing.py", "peers.py", "following.py", "asking.py", "watching.py")
"""`SessionManager` and its rooms by job (ARCHITECTURE.md, Many sessions)."""


def test_no_room_of_the_session_manager_is_over_400_lines() -> None:
    """The manager was split into rooms by job; a room that grows past 400 lines is two jobs again."""
    sizes = {name: len((SRC / "runtime" / name).read_text(encoding="utf-8").splitlines()) for name in MANAGER_ROOMS}
    assert all(size <= 400 for size in sizes.values()), sizes
    rooms = {
        c.__module__.rsplit(".", 1)[-1] + ".py" for c in SessionManager.__mro__ if c.__module__.startswith("tether.")
    }
    assert rooms <= set(MANAGER_ROOMS), rooms - set(MANAGER_ROOMS)  # a new room is counted here too
