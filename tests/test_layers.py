"""The house, checked against the code: every module of `src/tether` sits in one layer of ARCHITECTURE.md,
no module imports from a layer above its own, and no two modules import each other, directly or around a
circle. Imports are read from the source (module level, inside functions and under TYPE_CHECKING alike)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

LAYERS: list[tuple[int, tuple[str, ...]]] = [
    # (layer, module prefixes), as in ARCHITECTURE.md; the longest matching prefix wins
    (1, ("tether.messages", "tether.events", "tether.errors", "tether.ids", "tether.paths", "tether.config")),
    (1, ("tether.redaction", "tether.markers")),
    (2, ("tether.store",)),
    (3, ("tether.context", "tether.rlm", "tether.recall", "tether.providers", "tether.tools", "tether.mcp")),
    (4, ("tether.runtime", "tether.session")),
    (
        5,
        (
            "tether.cli",
            "tether.server",
            "tether.client",
            "tether.wire",
            "tether.importers",
            "tether.integrations",
            "tether.transcript",
            "tether.__main__",
        ),
    ),
    (5, ("tether",)),
]


def module_name(path: Path) -> str:
    parts = ["tether", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (layer, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to ARCHITECTURE.md and LAYERS"
    return best[0]


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The tether modules that `path` imports (a `from x import y` naming a submodule counts as that one)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tether"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("tether"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    return {m for m in found if m in modules and m != name}


def graph() -> dict[str, set[str]]:
    paths = sorted(SRC.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def test_every_module_has_a_layer_and_imports_only_its_own_and_lower() -> None:
    upward = [
        f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
        for m, targets in graph().items()
        for t in targets
        if layer_of(t) > layer_of(m)
    ]
    assert upward == []


def test_no_circles_between_modules() -> None:
    edges = graph()
    # a package's __init__ that re-exports its rooms is not a circle with them: rooms never import their
    # package's __init__ here (that would be one), so the plain graph is checked
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                circles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert circles == []


@pytest.mark.parametrize(
    "room", ["tether.runtime.loop", "tether.store.sqlite", "tether.cli.run", "tether.integrations.openai_agents"]
)
def test_the_graph_is_read(room: str) -> None:
    """A check that reads no import would pass anything: these rooms have known imports."""
    edges = graph()
    assert edges[room], room
    assert "tether.runtime.journal" in edges["tether.runtime.loop"]
    assert "tether.store.validate" in edges["tether.store.sqlite"]
    assert "tether.store.reverts" in edges["tether.integrations.openai_agents"]


def test_integrations_are_a_face_that_nothing_below_imports() -> None:
    """tether.integrations sits with the other faces (layer 5): it reaches the store and the vocabulary, and
    no room of the engine imports it (a framework's package must never load with tether)."""
    edges = graph()
    assert layer_of("tether.integrations.pydantic_ai") == 5
    users = sorted(m for m, targets in edges.items() if any(t.startswith("tether.integrations") for t in targets))
    assert all(m.startswith("tether.integrations") for m in users), users
