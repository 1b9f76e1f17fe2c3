"""What faces share besides runs: the context a session's next step would see, with the configuration's
settings, and compacting now through the session handle."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether import Message
from tether.config import parse_config
from tether.errors import ConfigError
from tether.messages import Compaction
from tether.runtime.operations import compact_now, context_view
from tether.store import Store


async def long_session(store: Store, tmp_path: Path, turns: int = 60) -> str:
    info = await store.create_session(directory=str(tmp_path), model="local/smollm2-135m")
    for i in range(turns):
        await store.append(info.id, [Message.user(f"question {i} " + "words " * 40), Message.assistant(f"answer {i}")])
    return info.id


async def test_the_view_uses_the_configuration_and_writes_nothing(store: Store, tmp_path: Path) -> None:
    sid = await long_session(store, tmp_path, turns=3)
    before = await store.get_session(sid)
    view = await context_view(store, sid, config=parse_config("[context]\nreserved_output = 100\n"))
    assert view.model == "local/smollm2-135m" and view.budget.reserved_output == 100
    assert len(view.tokens) == len(view.derived.messages) == 6
    assert await store.get_session(sid) == before


async def test_compact_now_mechanically_journals_a_compaction(store: Store, tmp_path: Path) -> None:
    sid = await long_session(store, tmp_path)
    result = await compact_now(store, sid, config=parse_config(""), mechanical=True)
    assert result.ok and result.strategy == "deterministic" and result.entry is not None
    (last,) = await store.read(sid, result.entry.seq, result.entry.seq)
    assert isinstance(last.body, Compaction) and (await store.get_session(sid)).entry_count == result.entry.seq


async def test_a_summarizer_that_cannot_be_used_says_how_to_do_without(store: Store, tmp_path: Path) -> None:
    sid = await long_session(store, tmp_path, turns=3)
    with pytest.raises(ConfigError, match="--mechanical"):
        await compact_now(store, sid, config=parse_config(""), model="openai/gpt-5.5")
