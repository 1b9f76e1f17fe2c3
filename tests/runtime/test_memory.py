"""Memory notes: kept durably in the store (who, when, from which session), per project and for the user,
forgotten by a marker, in the system prompt newest first within a token budget, found by recall; the
`memory` tool and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import InvalidInput, NotFound, ToolError
from tether.recall import recall
from tether.runtime.memory import MemoryTool, forget, notes, notes_session_id, prompt_block, remember
from tether.store import SqliteStore
from tether.tools.base import ToolContext


async def test_notes_are_durable_scoped_and_forgotten(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    store = SqliteStore(db)
    first = await remember(store, "run `make db` before the tests", workspace=a, by="model", session="ses_x")
    await remember(store, "the user writes British English", scope="user")
    await remember(store, "b has its own rules", workspace=b)
    await store.close()
    store = SqliteStore(db)  # another process, later
    try:
        seen = await notes(store, a)
        assert [n.text for n in seen] == ["the user writes British English", "run `make db` before the tests"]
        kept = next(n for n in seen if n.id == first.id)
        assert kept.by == "model" and kept.session == "ses_x" and kept.scope == "project" and kept.at > 0
        assert "b has its own rules" not in [n.text for n in seen]
        await forget(store, first.id, a)
        assert [n.text for n in await notes(store, a)] == ["the user writes British English"]
        with pytest.raises(NotFound):
            await forget(store, first.id, a)
        with pytest.raises(InvalidInput):
            await remember(store, "   ", workspace=a)
        with pytest.raises(InvalidInput, match="at most"):
            await remember(store, "x" * 5000, workspace=a)
        # the notes are sessions of their own, with no directory: no `--continue` picks them
        info = await store.get_session(notes_session_id("project", str(a.resolve())))
        assert info.directory is None and info.title == f"memory notes: {a.resolve()}"
        assert await store.last_session(str(a.resolve())) is None
        # recall finds a note as anything said (a forgotten one too: the journal keeps it)
        hits = (await recall(store, "British English")).hits
        assert hits and hits[0].session_id == notes_session_id("user", None)
    finally:
        await store.close()


def test_the_prompt_block_keeps_to_its_budget() -> None:
    from tether.runtime.memory import Note

    many = [
        Note(id=f"mem_{i}", text=f"fact number {i} " + "word " * 20, scope="project", by="user", at=1000.0 - i)
        for i in range(50)
    ]
    block, shown = prompt_block(many, 300)
    assert 0 < shown < 50 and "fact number 0 " in block and "fact number 49 " not in block
    assert f"({50 - shown} older notes not shown" in block
    assert prompt_block(many, 0) == ("", 0)
    assert prompt_block([], 1000) == ("", 0)


async def test_the_memory_tool(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    try:
        ctx = ToolContext(workspace=tmp_path, session_id="ses_01ABCDEFGHJKMNPQRSTVWXYZ0", store=store)
        tool = MemoryTool()
        out = await tool.run({"action": "remember", "text": "deploys go through CI"}, ctx)
        note_id = out.metadata["note"]
        listed = await tool.run({"action": "list"}, ctx)
        assert note_id in listed.content and "by model" in listed.content
        [note] = await notes(store, tmp_path)
        assert note.session == ctx.session_id and note.by == "model"
        assert "forgot" in (await tool.run({"action": "forget", "id": note_id}, ctx)).content
        assert (await tool.run({"action": "list"}, ctx)).content == "no notes"
        with pytest.raises(ToolError, match="no memory note"):
            await tool.run({"action": "forget", "id": "mem_nope"}, ctx)
        assert tool.read_only is False  # it writes: the rules ask about it by default
    finally:
        await store.close()
