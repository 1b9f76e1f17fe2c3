"""`TetherSession`, the OpenAI Agents SDK's Session on a tether store: real `Runner.run` turns through the real
`openai` client against a loopback OpenAI-compatible server, against the SDK's own `SQLiteSession` on the same
turns; items as tether entries and back, exactly; pop_item and clear_session as reverts; several writers;
tether's compaction; bad input."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.memory import Session as SdkSession
from agents.memory import SessionSettings
from openai import AsyncOpenAI

import tether
from tether.errors import InvalidInput
from tether.integrations.openai_agents import (
    ITEM_MARKER,
    META_KEY,
    TetherSession,
    entry_to_items,
    item_to_entry,
)
from tether.messages import ImagePart, Marker, Message, Revert, TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from tether.session import Session
from tether.store import MemoryStore, SqliteStore, Store, active_entries

set_tracing_disabled(True)


@function_tool
def noop(n: int) -> str:
    """Does nothing; says what it got."""
    return f"noop saw {n}"


_CLIENTS: list[AsyncOpenAI] = []


@pytest.fixture(autouse=True)
async def _clients_closed() -> AsyncIterator[None]:
    """The SDK clients `make_agent` made are closed after each test, on its loop (one left to the collector is
    closed by its `__del__` on whichever test's loop runs then, and fails there once that loop is closed)."""
    yield
    while _CLIENTS:
        await _CLIENTS.pop().close()


def make_agent(url: str) -> Agent[Any]:
    client = AsyncOpenAI(base_url=url, api_key="sk-loopback", max_retries=0)
    _CLIENTS.append(client)
    return Agent(
        name="helper",
        instructions="Answer briefly.",
        tools=[noop],
        model=OpenAIChatCompletionsModel(model="bench", openai_client=client),
    )


PROMPTS = ["hello", "call the tool please", "thanks", "once more", "and a last one"]


async def test_runner_turns_store_what_sqlitesession_stores(stub_url: str, tmp_path: Path, cli: Any) -> None:
    agent = make_agent(stub_url)
    store = SqliteStore(tmp_path / "tether.db")
    ours = TetherSession("support-42", store=store, directory=str(tmp_path))
    theirs = SQLiteSession("support-42", tmp_path / "sdk.db")
    assert isinstance(ours, SdkSession)  # the SDK's runtime-checkable protocol
    try:
        for prompt in PROMPTS:
            a = await Runner.run(agent, prompt, session=ours)
            b = await Runner.run(agent, prompt, session=theirs)
            assert a.final_output == b.final_output
        items = await ours.get_items()
        assert items == await theirs.get_items()  # the same history, item for item, exactly
        assert [i.get("type") for i in items].count("function_call") == 2  # turns 2 and 4 called the tool
        assert await ours.get_items(limit=3) == items[-3:]
        assert await ours.get_items(limit=0) == await theirs.get_items(limit=0) == []
        assert await ours.get_items(limit=-1) == await theirs.get_items(limit=-1) == items

        # a fresh process's view: the same items, read back from the file
        await store.close()
        store = SqliteStore(tmp_path / "tether.db")
        again = TetherSession("support-42", store=store)
        assert again.tether_id == ours.tether_id
        assert await again.get_items() == items

        # tether's own reading of it: messages, tool calls with parsed arguments, results named after the tool
        entries = await store.read(ours.tether_id)
        messages = [e.body for e in entries if isinstance(e.body, Message)]
        assert len(messages) == len(entries) == len(items)
        assert [m.role for m in messages[:6]] == ["user", "assistant", "user", "assistant", "tool", "assistant"]
        call = messages[3].parts[0]
        assert isinstance(call, ToolCallPart) and call.name == "noop" and call.arguments == {"n": 4}
        result = messages[4].parts[0]
        assert isinstance(result, ToolResultPart) and result.content == "noop saw 4" and result.name == "noop"
        assert messages[1].text.startswith("Done: turn 1") and messages[1].model == "bench"
        assert META_KEY not in messages[0].metadata  # tether's form gives a plain user item back: no copy kept
        assert META_KEY in messages[1].metadata  # the SDK's output message has ids and annotations: kept
        info = await store.get_session(ours.tether_id)
        assert info.agent == "openai-agents" and info.directory == str(tmp_path.resolve())
        assert info.metadata[META_KEY] == {"session_key": "support-42"} and info.title == "hello"
    finally:
        theirs.close()
        await store.close()

    listing = cli("sessions", "--all", store=tmp_path / "tether.db")
    assert listing.returncode == 0, listing.stderr
    assert ours.tether_id in listing.stdout
    shown = cli("sessions", "show", ours.tether_id, store=tmp_path / "tether.db")
    assert shown.returncode == 0, shown.stderr
    assert "call the tool please" in shown.stdout and "noop(n=4)" in shown.stdout and "noop saw 4" in shown.stdout
    found = cli("recall", "tool please", "--json", "--all", store=tmp_path / "tether.db")
    assert found.returncode == 0, found.stderr
    assert ours.tether_id in found.stdout
    exported = cli("sessions", "export", ours.tether_id, "--format", "markdown", store=tmp_path / "tether.db")
    assert exported.returncode == 0, exported.stderr
    assert "call the tool please" in exported.stdout and "noop" in exported.stdout
    context = cli("context", ours.tether_id, store=tmp_path / "tether.db")
    assert context.returncode == 0, context.stderr
    assert "and a last one" in context.stdout


async def test_pop_and_clear_are_reverts_that_keep_the_journal(stub_url: str, tmp_path: Path) -> None:
    agent = make_agent(stub_url)
    async with SqliteStore(tmp_path / "tether.db") as store:
        session = TetherSession("popper", store=store)
        for prompt in PROMPTS[:2]:
            await Runner.run(agent, prompt, session=session)
        before = await session.get_items()
        raw_before = await store.read(session.tether_id)

        popped = await session.pop_item()
        assert popped == before[-1]
        assert await session.get_items() == before[:-1]
        assert await session.pop_item() == before[-2]
        assert await TetherSession("popper", store=store).get_items() == before[:-2]  # a fresh reader agrees

        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.clear_session()  # clearing an empty history is fine

        raw = await store.read(session.tether_id)
        assert raw[: len(raw_before)] == raw_before  # nothing deleted, nothing rewritten
        assert [type(e.body) for e in raw[len(raw_before) :]] == [Revert, Revert, Revert]
        assert await active_entries(store, session.tether_id) == []

        # the SDK goes on after the clear: a new conversation on the same session
        result = await Runner.run(agent, "starting over", session=session)
        items = await session.get_items()
        assert items[0] == {"role": "user", "content": "starting over"}
        assert items[-1]["content"][0]["text"] == result.final_output


async def test_a_tether_session_continues_in_the_sdk(stub_url: str, tmp_path: Path) -> None:
    """A session tether wrote (an assistant message with text and two tool calls, their results) reads as
    SDK items; popping one item of a many-item message keeps the others."""
    async with SqliteStore(tmp_path / "tether.db") as store:
        native = await Session.create(store, directory=str(tmp_path))
        calls = [
            ToolCallPart(id="c1", name="read", arguments={"path": "a.py"}),
            ToolCallPart.from_raw("c2", "bash", "ls -l"),
        ]
        await native.append(
            Message.system("You are terse."),
            Message.user("look at a.py"),
            Message(
                role="assistant", parts=[ThinkingPart(text="hm", signature="sig"), TextPart(text="Reading."), *calls]
            ),
            Message.tool(
                ToolResultPart(call_id="c1", content="print(1)"),
                ToolResultPart(call_id="c2", content="x", is_error=True),
            ),
        )
        session = TetherSession(native.id, store=store)
        assert session.tether_id == native.id
        items = await session.get_items()
        assert items == [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "look at a.py"},
            {"role": "assistant", "content": "Reading."},
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"path": "a.py"}'},
            {"type": "function_call", "call_id": "c2", "name": "bash", "arguments": "ls -l"},
            {"type": "function_call_output", "call_id": "c1", "output": "print(1)"},
            {"type": "function_call_output", "call_id": "c2", "output": "x"},
        ]
        assert await session.pop_item() == items[-1]
        assert await session.get_items() == items[:-1]
        assert await session.pop_item() == items[-2]
        assert await session.pop_item() == items[-3]  # the assistant message's last call: its other items stay
        assert await session.get_items() == items[:-3]
        assert await TetherSession(native.id, store=store).get_items() == items[:-3]

        await Runner.run(make_agent(stub_url), "go on", session=session)
        assert (await session.get_items())[: len(items) - 3] == items[:-3]


ODD_ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "see "},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}],
    },
    {
        "role": "user",
        "content": [{"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"}],
    },
    {"role": "system", "content": "sys"},
    {"role": "developer", "content": "dev"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "typed"}]},
    {"role": "assistant", "content": "short"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "no"}],
    },
    {"type": "function_call", "call_id": "c9", "name": "f", "arguments": '{ "spaced" : 1 }', "id": "fc_1"},
    {"type": "function_call", "call_id": "c10", "name": "f", "arguments": "not json"},
    {"type": "function_call_output", "call_id": "c9", "output": [{"type": "input_text", "text": "list output"}]},
    {"type": "function_call_output", "call_id": "c10", "output": "é ✓ \u0000 nul"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "thinking"}],
        "encrypted_content": "gAAA==",
    },
    {"type": "reasoning", "id": "rs_2", "summary": [], "content": [{"type": "reasoning_text", "text": "raw thoughts"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
    {"type": "item_reference", "id": "msg_0"},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "zzz"},
    {"type": "custom_tool_call", "call_id": "ct", "name": "grammar", "input": "raw input"},
]


@pytest.mark.parametrize("item", ODD_ITEMS, ids=lambda i: str(i.get("type") or i.get("role")))
def test_each_item_kind_round_trips_exactly(item: dict[str, Any]) -> None:
    body = item_to_entry(item)
    assert entry_to_items(body) == [item]
    if item.get("type") in ("web_search_call", "item_reference", "compaction", "custom_tool_call"):
        assert isinstance(body, Marker) and body.name == ITEM_MARKER
    else:
        assert isinstance(body, Message)


def test_items_have_their_tether_meaning() -> None:
    image = item_to_entry(ODD_ITEMS[1])
    assert isinstance(image, Message) and image.role == "user" and image.text == "see "
    picture = image.parts[1]
    assert isinstance(picture, ImagePart) and picture.media_type == "image/png"
    assert picture.data == b"\x89PNG\r\n\x1a\n" and picture.uri is None
    dev = item_to_entry(ODD_ITEMS[5])
    assert isinstance(dev, Message) and dev.role == "system" and dev.text == "dev"
    refusal = item_to_entry(ODD_ITEMS[8])
    assert isinstance(refusal, Message) and refusal.role == "assistant" and refusal.text == "no"
    spaced = item_to_entry(ODD_ITEMS[9])
    assert isinstance(spaced, Message) and spaced.tool_calls[0].arguments == {"spaced": 1}
    broken = item_to_entry(ODD_ITEMS[10])
    assert isinstance(broken, Message) and broken.tool_calls[0].raw_arguments == "not json"
    listed = item_to_entry(ODD_ITEMS[11])
    assert isinstance(listed, Message) and listed.tool_results[0].content == "list output"
    thought = item_to_entry(ODD_ITEMS[13])
    assert isinstance(thought, Message)
    part = thought.parts[0]
    assert isinstance(part, ThinkingPart) and part.text == "thinking" and part.redacted == "gAAA=="
    raw = item_to_entry(ODD_ITEMS[14])
    assert isinstance(raw, Message) and raw.parts[0].text == "raw thoughts"  # type: ignore[union-attr]


async def test_every_odd_item_comes_back_from_the_store(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "tether.db") as store:
        session = TetherSession("odd", store=store)
        await session.add_items(ODD_ITEMS)  # type: ignore[arg-type]
        assert await session.get_items() == ODD_ITEMS
        assert await TetherSession("odd", store=store).get_items() == ODD_ITEMS
        assert len(await store.read(session.tether_id)) == len(ODD_ITEMS)


async def test_bad_input_writes_nothing() -> None:
    store = MemoryStore()
    session = TetherSession("bad", store=store)
    await session.add_items([{"role": "user", "content": "ok"}])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="must be a dict"):
        await session.add_items([{"role": "user", "content": "fine"}, "not an item"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        await session.add_items([{"role": "user", "content": "lone \ud83d surrogate"}])  # type: ignore[list-item]
    assert await session.get_items() == [{"role": "user", "content": "ok"}]
    await session.add_items([])  # nothing to do
    with pytest.raises(InvalidInput):
        TetherSession("", store=store)
    assert await TetherSession("never-written", store=store).get_items() == []
    assert await TetherSession("never-written", store=store).pop_item() is None
    await store.close()


async def test_keys_map_to_stable_sessions_and_settings_limit() -> None:
    store = MemoryStore()
    a, b = TetherSession("user-1", store=store), TetherSession("user-1", store=store)
    assert a.tether_id == b.tether_id != TetherSession("user-2", store=store).tether_id
    await a.add_items([{"role": "user", "content": str(i)} for i in range(5)])  # type: ignore[misc]
    await b.add_items([{"role": "user", "content": "5"}])  # type: ignore[list-item]
    limited = TetherSession("user-1", store=store, session_settings=SessionSettings(limit=2))
    assert await limited.get_items() == [{"role": "user", "content": "4"}, {"role": "user", "content": "5"}]
    assert len(await limited.get_items(limit=10)) == 6
    assert len(await a.get_items()) == 6  # a sees b's item
    await store.close()


async def test_writers_in_turn_agree_with_a_fresh_reader(tmp_path: Path) -> None:
    """Two sessions on one session id, each with its own store on the same file (as two processes), add,
    pop and clear at random; the kept items of each always equal what a fresh reader derives from the
    journal, and what a plain list model of the operations says."""
    rng = random.Random(15)
    path = tmp_path / "tether.db"
    async with SqliteStore(path) as s1, SqliteStore(path) as s2:
        writers = [TetherSession("shared", store=s1), TetherSession("shared", store=s2)]
        model: list[dict[str, Any]] = []
        for step in range(300):
            w = rng.choice(writers)
            op = rng.random()
            if op < 0.6:
                new = [{"role": "user", "content": f"{step}.{k}"} for k in range(rng.randint(1, 3))]
                await w.add_items(new)  # type: ignore[arg-type]
                model.extend(new)
            elif op < 0.93:
                popped = await w.pop_item()
                assert popped == (model.pop() if model else None)
            else:
                await w.clear_session()
                model.clear()
            if step % 7 == 0:
                for reader in writers:
                    assert await reader.get_items() == model, step
                fresh = await TetherSession("shared", store=s1).get_items()
                assert fresh == model, step


async def test_reverts_from_elsewhere_are_applied(tmp_path: Path) -> None:
    """Reverts written by tether itself (`tether sessions revert`, an undo) reach the SDK's session,
    including one that shows again what an earlier revert hid."""
    async with SqliteStore(tmp_path / "tether.db") as store:
        session = TetherSession("undo", store=store)
        await session.add_items([{"role": "user", "content": str(i)} for i in range(1, 6)])  # type: ignore[misc]
        assert len(await session.get_items()) == 5
        await store.append(session.tether_id, [Revert(to_seq=2)])  # hides 3..6
        assert [i["content"] for i in await session.get_items()] == ["1", "2"]  # type: ignore[index]
        await store.append(session.tether_id, [Revert(to_seq=5)])  # back to right after 5: all five again
        assert [i["content"] for i in await session.get_items()] == ["1", "2", "3", "4", "5"]  # type: ignore[index]
        later = TetherSession("undo", store=store)
        assert len(await later.get_items()) == 5
        await store.append(session.tether_id, [Revert(to_seq=4)])
        assert len(await later.get_items()) == 4 == len(await session.get_items())


async def test_tether_compaction_shows_as_its_summary(stub_url: str, tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "tether.db"
    agent = make_agent(stub_url)
    store: Store = SqliteStore(path)
    session = TetherSession("long", store=store)
    for i in range(12):
        await Runner.run(agent, f"question {i}: " + "words " * 60, session=session)
    full = await session.get_items()

    compacted = cli("compact", session.tether_id, "--mechanical", "--keep", "300", store=path)
    assert compacted.returncode == 0, compacted.stdout + compacted.stderr
    items = await session.get_items()  # the session read the compaction as it came
    assert items[0]["role"] == "user" and len(items) < len(full)  # type: ignore[typeddict-item]
    tail = items[1:]
    assert tail == full[-len(tail) :]  # the kept items, exactly
    for k in range(len(items) + 2):  # a limit counts the summary as an item
        assert await session.get_items(limit=k) == (items[-k:] if k else [])
    assert await TetherSession("long", store=store).get_items() == items
    assert any(i.get("type") == "function_call_output" for i in full)
    if any(i.get("type") == "function_call_output" for i in tail):  # never an output without its call
        outputs = {i["call_id"] for i in tail if i.get("type") == "function_call_output"}  # type: ignore[typeddict-item]
        calls = {i["call_id"] for i in tail if i.get("type") == "function_call"}  # type: ignore[typeddict-item]
        assert outputs <= calls

    result = await Runner.run(agent, "after the compaction", session=session)  # the agent goes on from it
    assert (await session.get_items())[-1]["content"][0]["text"] == result.final_output  # type: ignore[typeddict-item]
    undone = cli("compact", session.tether_id, "--undo", store=path)
    assert undone.returncode == 0, undone.stderr
    assert await session.get_items() == full  # the undo is a revert to before the compaction
    await store.close()


class RecordingStore(MemoryStore):
    """A MemoryStore that records the ranges `read` is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[int, int | None]] = []

    async def read(self, session_id: str, start: int = 1, end: int | None = None) -> list[Any]:
        self.reads.append((start, end))
        return await super().read(session_id, start, end)


async def test_a_turn_reads_only_what_is_new() -> None:
    """After the first read, `get_items` asks the store only for the entries after the last seq it saw:
    a turn does not re-read the history, however long."""
    store = RecordingStore()
    session = TetherSession("turns", store=store)
    other = TetherSession("turns", store=store)
    for turn in range(50):
        await session.get_items()
        await session.add_items([{"role": "user", "content": f"q{turn}"}, {"role": "assistant", "content": f"a{turn}"}])
    store.reads.clear()
    await session.get_items()
    assert store.reads == [(101, None)]
    await other.add_items([{"role": "user", "content": "from elsewhere"}])  # another writer: 101
    store.reads.clear()
    items = await session.get_items()
    assert store.reads == [(101, None)] and items[-1] == {"role": "user", "content": "from elsewhere"}
    store.reads.clear()
    await session.get_items()
    assert store.reads == [(102, None)]
    await store.close()


WRITER = """
import asyncio, sys
from tether.store import SqliteStore
from tether.integrations.openai_agents import TetherSession

async def main():
    store = SqliteStore(sys.argv[1])
    session = TetherSession("crashy", store=store)
    turn = 0
    while True:
        await session.add_items([
            {"role": "user", "content": f"{turn}.q"},
            {"type": "function_call", "call_id": f"c{turn}", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{turn}", "output": "x" * 2000},
        ])
        turn += 1
        if turn == 20:
            print("running", flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
async def test_a_writer_killed_mid_turn_loses_at_most_that_turn(tmp_path: Path) -> None:
    path = tmp_path / "tether.db"
    env = {**os.environ, "PYTHONPATH": str(Path(tether.__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "running"
        time.sleep(0.3)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    async with SqliteStore(path) as store:
        items = await TetherSession("crashy", store=store).get_items()
        assert len(items) >= 60 and len(items) % 3 == 0  # whole turns only: an add_items is one transaction
        for turn in range(len(items) // 3):
            assert items[3 * turn] == {"role": "user", "content": f"{turn}.q"}
            assert items[3 * turn + 2]["output"] == "x" * 2000  # type: ignore[typeddict-item]


async def test_reading_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    """get_items decodes with the collector off (a long history is tens of thousands of objects, all alive);
    it is on again afterwards, and a program that keeps it off finds it off."""
    import gc

    async with SqliteStore(tmp_path / "gc.db") as store:
        session = TetherSession("gc-user", store=store, directory=str(tmp_path))
        await session.add_items([{"role": "user", "content": "hello"}])
        assert gc.isenabled()
        assert await session.get_items() == [{"role": "user", "content": "hello"}]
        assert gc.isenabled()
        gc.disable()
        try:
            assert len(await session.get_items()) == 1
            assert not gc.isenabled()
        finally:
            gc.enable()


# --- threads and event loops, settings, close -----------------------------------------------------------


def test_threads_each_with_its_own_loop_share_one_session(tmp_path: Path) -> None:
    """The SDK's sessions are shared across threads, each running its own event loop: an `asyncio.Lock`
    waited on from another loop never wakes (the session hung); every item lands, none twice."""
    import asyncio
    import threading

    store = SqliteStore(tmp_path / "t.db")
    session = TetherSession("threads", store=store)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        async def turns() -> None:
            for i in range(8):
                await session.add_items([{"role": "user", "content": f"{n}-{i}"}])  # type: ignore[list-item]
                await session.get_items(limit=3)

        try:
            asyncio.run(turns())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread is stuck on the session's lock"
    assert errors == []

    async def check() -> list[Any]:
        return await session.get_items()

    got = [item["content"] for item in asyncio.run(check())]
    assert sorted(got) == sorted(f"{n}-{i}" for n in range(5) for i in range(8))
    asyncio.run(store.close())


async def test_coroutines_of_one_loop_take_turns_and_a_cancelled_waiter_gives_the_lock_back() -> None:
    import asyncio

    store = MemoryStore()
    session = TetherSession("one-loop", store=store)
    await asyncio.gather(*(session.add_items([{"role": "user", "content": str(i)}]) for i in range(20)))  # type: ignore[list-item]
    waiter = asyncio.ensure_future(session.get_items())
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert sorted(int(item["content"]) for item in await session.get_items()) == list(range(20))
    await store.close()


async def test_settings_are_normalized_as_the_sdk_does() -> None:
    store = MemoryStore()
    assert TetherSession("s", store=store).session_settings == SessionSettings()  # not None
    session = TetherSession("s", store=store, session_settings={"limit": 1})  # a dict, as the SDK takes it
    assert isinstance(session.session_settings, SessionSettings) and session.session_settings.limit == 1
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])  # type: ignore[list-item]
    assert await session.get_items() == [{"role": "user", "content": "b"}]
    session.session_settings = {"limit": 2}  # type: ignore[assignment]  # set later, as callers may
    assert len(await session.get_items()) == 2
    with pytest.raises(TypeError):
        TetherSession("s", store=store, session_settings={"limitt": 1})
    await store.close()


def test_close_works_as_the_sdks_callers_use_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Called without await (as the SDK's callers do, from sync code and from a running loop) the store the
    session opened is closed when `close` returns; awaited it works as well; then the session refuses use."""
    import asyncio

    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TETHER_STORE", raising=False)

    async def use(session: TetherSession) -> None:
        await session.add_items([{"role": "user", "content": "hi"}])  # type: ignore[list-item]

    plain = TetherSession("sync-close")
    asyncio.run(use(plain))
    plain.close()  # from sync code
    assert plain.store._conn is None  # type: ignore[attr-defined]  # the SQLite connection is closed
    with pytest.raises(RuntimeError, match="is closed"):
        asyncio.run(use(plain))

    async def in_loop() -> None:
        session = TetherSession("loop-close")
        await use(session)
        session.close()  # not awaited, inside a running loop
        assert session.store._conn is None  # type: ignore[attr-defined]
        await session.close()  # awaited, and again: nothing more to do
        other = TetherSession("awaited-close")
        await use(other)
        await other.close()
        assert other.store._conn is None  # type: ignore[attr-defined]
        assert [i["content"] for i in await TetherSession("loop-close", store=MemoryStore()).get_items()] == []

    asyncio.run(in_loop())


async def test_a_failed_add_leaves_the_session_usable() -> None:
    store = MemoryStore()
    session = TetherSession("failing", store=store)
    with pytest.raises(TypeError):
        await session.add_items([{"role": "user", "content": object()}])  # type: ignore[list-item]
    await session.add_items([{"role": "user", "content": "after failure"}])  # type: ignore[list-item]
    assert await session.get_items() == [{"role": "user", "content": "after failure"}]
    await store.close()
