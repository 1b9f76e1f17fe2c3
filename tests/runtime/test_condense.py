"""The RLM hand-off: an input is oversized when the run's model's own tokenizer says so (its provider's, where it
offers one), not another vocabulary or the character count, and RLM's calls are sized by the same count; and
what is never condensed is decided before anything is read back, so a command's flood of output is not
loaded whole to learn that `bash` is never condensed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether import Message, Session, ToolCallPart
from tether.events import Done, Event, RlmProgress
from tether.messages import Marker
from tether.providers.base import ModelRequest
from tether.providers.catalog import ModelInfo
from tether.providers.scripted import ScriptedProvider
from tether.store import SqliteStore, Store
from tether.tools.base import ToolRegistry, function_tool

SMALL = ModelInfo(provider="scripted", model="small", context_window=6_000, max_output_tokens=1_000)
"""RLM takes a message over 35% of this window: 2,100 tokens."""


class Bytes:
    """A byte-level tokenizer: a token per UTF-8 byte, three per Chinese character, one per digit."""

    source = "bytes"

    def count(self, text: str) -> int:
        return len(text.encode("utf-8"))


class OwnTokenizer(ScriptedProvider):
    """A scripted model with its own tokenizer (`TokenCounting`), as the embedded model has. Requests without
    tools come from RLM and finish at once; the agent's own call answers."""

    def __init__(self) -> None:
        super().__init__(lambda request: "FINAL(an account of it)" if not request.tools else "done")

    def token_counter(self, model: str) -> Bytes:
        return Bytes()


def fits(request: ModelRequest, window: int) -> bool:
    text = (request.system or "") + "".join(m.text for m in request.messages)
    return Bytes().count(text) + (request.max_output_tokens or 0) <= window


@function_tool(read_only=True)
async def look(what: str) -> str:
    """Look at something."""
    return f"{what} looks fine"


TOOLS = ToolRegistry([look])


@pytest.fixture
async def session(store: Store, tmp_path: Path) -> Session:
    return await Session.create(store, directory=tmp_path)


@pytest.mark.parametrize(
    "message",
    [
        # 2,700 digits: 900 tokens by o200k_base, 2,700 by this model's count
        "The readings:\n" + "\n".join(f"{n * 7919 % 10**8:08d}" for n in range(300)),
        # 1,000 characters, fewer than 2,100, but 3,000 tokens by this model's count
        "总结这份文件" * 166,
    ],
    ids=["digits", "fewer-characters-than-the-limit"],
)
async def test_a_message_oversized_by_the_models_own_count_goes_to_rlm(session: Session, message: str) -> None:
    provider = OwnTokenizer()
    events: list[Event] = [
        e async for e in session.stream(message, provider=provider, model="m", tools=TOOLS, model_info=SMALL)
    ]
    assert isinstance(events[-1], Done) and events[-1].text == "done"
    assert any(isinstance(e, RlmProgress) and e.stage == "input" for e in events)
    assert [e.body.name for e in await session.entries() if isinstance(e.body, Marker)] == ["condensed"]
    rlm_calls = [r for r in provider.requests if not r.tools]
    assert rlm_calls and all(fits(r, SMALL.context_window) for r in rlm_calls)


async def test_a_message_that_fits_by_the_models_own_count_is_left_alone(session: Session) -> None:
    provider = OwnTokenizer()
    message = "The readings:\n" + "\n".join(f"{n:08d}" for n in range(200))  # 1,813 tokens by its count
    events = [e async for e in session.stream(message, provider=provider, model="m", tools=TOOLS, model_info=SMALL)]
    assert isinstance(events[-1], Done) and not any(isinstance(e, RlmProgress) for e in events)
    assert len(provider.requests) == 1


# --- what is never condensed is never read back -------------------------------------------------------

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
