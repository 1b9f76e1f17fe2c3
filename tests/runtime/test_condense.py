"""The RLM hand-off for tool outputs: what is never condensed is decided before anything is read back, so a
command's flood of output is not loaded whole to learn that `bash` is never condensed."""

from __future__ import annotations

from pathlib import Path

from tether import Message, Session, ToolCallPart
from tether.events import Done
from tether.providers.catalog import ModelInfo
from tether.providers.scripted import ScriptedProvider
from tether.store import SqliteStore

WINDOW = ModelInfo(provider="scripted", model="m", context_window=200_000, max_output_tokens=8_000)


class ReadCountingStore(SqliteStore):
    """A real SQLite store that counts the artifacts read back."""

    reads = 0

    async def get_artifact(self, artifact_id: str) -> bytes:
        self.reads += 1
        return await super().get_artifact(artifact_id)


async def test_an_oversized_bash_output_is_never_read_back(tmp_path: Path) -> None:
    store = ReadCountingStore(tmp_path / "t.db")
    try:
        session = await Session.create(store, directory=tmp_path)
        flood = ToolCallPart(id="c1", name="bash", arguments={"command": "seq 1 2000000"})  # 14.9 MB
        provider = ScriptedProvider([Message.assistant("", tool_calls=[flood]), "counted"])
        events = [e async for e in session.stream("count", provider=provider, model="m", model_info=WINDOW)]
        assert isinstance(events[-1], Done) and events[-1].text == "counted"
        (result,) = [r for m in await session.messages() for r in m.tool_results]
        assert result.metadata["truncated"] is True and result.metadata["original_bytes"] == 14_888_896
        assert store.reads == 0
    finally:
        await store.close()
