"""Callers ask for the store role they use: a function whose `Store` parameter only ever has methods of one
role called on it (and is passed nowhere) should ask for that role. mypy --strict proves that the roles
asked for are enough; this test keeps the whole `Store` from coming back where one role does."""

from __future__ import annotations

import ast
from pathlib import Path

from tether.store import protocols

SRC = Path(protocols.__file__).resolve().parents[1]
ROLES = ("Journal", "SearchIndex", "Artifacts", "Leases", "Streams", "Shares", "Audit", "SinkPositions")

LEFT_AS_THEY_ARE = {
    # rooms other work reshapes at the same time (the recall's keys, event numbering); narrow them there
    "recall/backfill.py:backfill",
    "recall/backfill.py:all_sessions",
    "recall/engine.py:_info",
    "recall/keys.py:_hits",
    "runtime/journal.py:replay_events",
}


def role_of_method() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in ROLES:
        role = getattr(protocols, name)
        out.update((m, name) for m in vars(role) if not m.startswith("_"))
    return out


def wider_than_needed(source: str, methods: dict[str, str]) -> list[tuple[str, str]]:
    """(function, the one role it uses) for each `Store` parameter that only calls methods of one role."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            if arg.annotation is None or ast.unparse(arg.annotation) != "Store":
                continue
            parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
            uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == arg.arg]
            called = [parents.get(n) for n in uses]
            if not uses or not all(isinstance(p, ast.Attribute) for p in called):
                continue  # passed on, or not used: what it needs is the callee's to say
            roles = {methods.get(p.attr, "Store") for p in called if isinstance(p, ast.Attribute)}
            if len(roles) == 1 and "Store" not in roles:
                found.append((fn.name, roles.pop()))
    return found


def test_a_function_that_uses_one_role_asks_for_that_role() -> None:
    methods = role_of_method()
    wide = [
        f"{rel}:{fn} (uses only {role})"
        for path in sorted(SRC.rglob("*.py"))
        for rel in [path.relative_to(SRC).as_posix()]
        for fn, role in wider_than_needed(path.read_text(encoding="utf-8"), methods)
        if f"{rel}:{fn}" not in LEFT_AS_THEY_ARE
    ]
    assert not wide, "ask for the role, not the whole Store: " + ", ".join(wide)


def test_the_check_finds_a_whole_store_where_one_role_does() -> None:
    methods = role_of_method()
    source = """
async def one(store: Store, sid: str):
    return await store.get_session(sid), await store.read(sid)
async def two(store: Store, sid: str):
    return await store.get_session(sid), await store.get_lease(sid)
async def passed(store: Store, sid: str):
    return await other(store, sid)
async def narrow(store: Journal, sid: str):
    return await store.get_session(sid)
"""
    assert wider_than_needed(source, methods) == [("one", "Journal")]
