"""What the export tests compare: a session seen through what a Claude Code transcript or a Codex rollout
can carry (`carried`), so that `import(export(x))` can be checked against `x` part by part: messages with
their roles, text, thinking (where the format keeps it), tool calls with their arguments and results with
their errors, attachments, model, usage, timestamps to the millisecond; compaction summaries; the title,
the directory. Written apart from the exporters (its own placement of compactions and its own filter of
what each format holds), so a test fails when the exporter drops or bends something it should carry."""

from __future__ import annotations

import importlib.util
import io
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tether.importers.claude_code import import_claude_code
from tether.importers.claude_code_export import export_claude_code
from tether.importers.codex import import_codex
from tether.importers.codex_export import export_codex
from tether.importers.foreign_export import ExportReport
from tether.messages import (
    Compaction,
    Entry,
    FilePart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    TitleChange,
    ToolCallPart,
    ToolResultPart,
)
from tether.store import Store
from tether.store.reverts import active_entries


def _holds_thinking(fmt: str, part: ThinkingPart) -> bool:
    if fmt == "claude-code":
        return part.provider in (None, "anthropic") and bool(part.signature or part.redacted)
    return part.provider == "openai"


def _part(fmt: str, part: Any) -> tuple[Any, ...] | None:
    if isinstance(part, TextPart):
        return ("text", part.text)
    if isinstance(part, ThinkingPart):
        if not _holds_thinking(fmt, part):
            return None
        return ("thinking", part.text, part.signature, part.redacted)
    if isinstance(part, ToolCallPart):
        return ("call", part.id, part.name, part.arguments, part.raw_arguments)
    if isinstance(part, ToolResultPart):
        return ("result", part.call_id, part.content, part.is_error, part.name)
    if isinstance(part, ImagePart):
        return ("image", part.media_type, part.data, part.uri)
    if isinstance(part, FilePart):
        return None if fmt == "codex" else ("file", part.media_type, part.data, part.uri, part.name)
    raise AssertionError(part)


def _message(fmt: str, entry: Entry, m: Message) -> tuple[Any, ...]:
    parts = tuple(p for p in (_part(fmt, part) for part in m.parts) if p is not None)
    usage = None
    if m.usage is not None:
        u = m.usage
        cache_write = u.cache_write_tokens if fmt == "claude-code" else 0
        reasoning = u.reasoning_tokens if fmt == "codex" else 0
        cost = u.cost if fmt == "claude-code" else None  # Codex keeps no cost: its importer prices tokens
        usage = (u.input_tokens, u.output_tokens, u.cache_read_tokens, cache_write, reasoning, cost)
    assistant = m.role == "assistant"
    finish = m.finish_reason if fmt == "claude-code" and assistant else None
    return (m.role, parts, m.model if assistant else None, usage, finish, round(entry.created_at * 1000))


def _placed(entries: list[Entry]) -> list[Entry]:
    """Each compaction just before the first entry it keeps (what a tool that cuts its context at the
    compaction needs to see the kept tail after the summary)."""

    def key(entry: Entry) -> tuple[int, int, int]:
        if isinstance(entry.body, Compaction):
            return (min(entry.body.first_kept_seq, entry.seq), 0, entry.seq)
        return (entry.seq, 1, entry.seq)

    return sorted(entries, key=key)


def _answered(entries: list[Entry]) -> list[Entry]:
    """A call that never got a result gets an error result right after its message (both tools' APIs
    refuse a call without one), as the export promises."""
    from tether.importers.foreign_export import NO_RESULT

    got = {r.call_id for e in entries if isinstance(e.body, Message) for r in e.body.tool_results}
    out: list[Entry] = []
    for entry in entries:
        out.append(entry)
        if isinstance(entry.body, Message):
            results = [
                ToolResultPart(call_id=call.id, content=NO_RESULT, is_error=True, name=call.name)
                for call in entry.body.tool_calls
                if call.id not in got
            ]
            if results:
                out.append(Entry(entry.seq, entry.created_at, Message.tool(*results)))
    return out


@dataclass
class Carried:
    title: str | None
    directory: str | None
    items: list[tuple[Any, ...]]
    titles: list[str]


async def carried(store: Store, session_id: str, fmt: str) -> Carried:
    """Session `session_id` as far as format `fmt` holds it (active history, markers and checkpoints left
    out; for Codex, a step's several results as one run of results, since Codex writes one item each)."""
    info = await store.get_session(session_id)
    items: list[tuple[Any, ...]] = []
    titles: list[str] = []
    model: str | None = None  # Codex names the model per turn: a message without one gets the one before
    placed = _answered(_placed(await active_entries(store, session_id)))
    latest = -1  # ms
    for i, entry in enumerate(placed):
        body = entry.body
        at = entry.created_at
        if isinstance(body, Compaction) and i + 1 < len(placed):
            at = min(at, placed[i + 1].created_at)  # moved before what it keeps, it takes that one's time
        if fmt == "claude-code" and isinstance(body, Message | Compaction):
            # Claude Code's line times only grow; a compaction's boundary line takes the millisecond before it
            latest = max(round(at * 1000), latest + (2 if isinstance(body, Compaction) else 1))
            at = latest / 1000
        entry = Entry(entry.seq, at, body)
        if isinstance(body, Message):
            item = _message(fmt, entry, body)
            if body.role == "assistant" and not item[1] and not body.metadata.get("codex", {}).get("items"):
                continue  # nothing the format carries: not written
            if fmt == "codex" and body.role == "assistant":
                model = body.model or model
                item = (*item[:2], model, *item[3:])
            if fmt == "codex" and body.role == "tool" and items and items[-1][0] == "tool":
                prev = items.pop()
                item = ("tool", prev[1] + item[1], None, None, None, prev[5])
            items.append(item)
        elif isinstance(body, Compaction):
            items.append(("compaction", body.summary, round(entry.created_at * 1000)))
        elif isinstance(body, TitleChange):
            titles.append(body.title)
    return Carried(info.title, info.directory, items, titles)


async def export_to(store: Store, session_id: str, fmt: str, folder: Path) -> tuple[Path, ExportReport]:
    buf = io.BytesIO()
    exporter = export_claude_code if fmt == "claude-code" else export_codex
    report = await exporter(store, session_id, buf)
    name = (
        f"{report.target_id}.jsonl" if fmt == "claude-code" else f"rollout-2025-01-01T00-00-00-{report.target_id}.jsonl"
    )
    path = folder / name
    path.write_bytes(buf.getvalue())
    return path, report


async def round_trip(store: Store, session_id: str, fmt: str, folder: Path) -> tuple[str, ExportReport]:
    """Export `session_id` in `fmt` and import the file into another store, as another machine's tether
    would (this store knows the session, so its import of the file adds nothing: `test_continuation`); the
    copy is then moved into `store` as it is, for the test to compare. The new session's id and the
    export's report. The import must read every line."""
    from tether.store.memory import MemoryStore

    path, report = await export_to(store, session_id, fmt, folder)
    importer = import_claude_code if fmt == "claude-code" else import_codex
    other = MemoryStore()
    result = await importer(other, path)
    assert result.outcome == "imported" and not result.problems, result.problems
    assert result.session_id is not None and result.sessions == [result.session_id]
    info = await other.get_session(result.session_id)
    assert info.metadata["imported"]["exported_from"] == session_id  # the copy says where it came from
    await store.import_session(info, await other.read(info.id))
    return result.session_id, report


async def assert_round_trip(store: Store, session_id: str, fmt: str, folder: Path) -> ExportReport:
    """import(export(x)) equals x on what `fmt` carries: every message, compaction and title, in order."""
    back, report = await round_trip(store, session_id, fmt, folder)
    want, got = await carried(store, session_id, fmt), await carried(store, back, fmt)
    assert got.items == want.items
    assert got.directory == want.directory
    assert got.title == want.title
    assert got.titles[: len(want.titles)] == want.titles  # the export may add the session's title at the end
    return report


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "exported"
    out.mkdir()
    return out


async def loop_session(store: Store, directory: Path, *, compact: bool = True) -> str:
    """A session made by tether's own loop (a scripted model): thinking with a signature, text, tool calls
    that succeed and one that fails, a turn that is reverted and redone, a compaction that keeps a tail,
    a title change, a system message, and usage on every step."""
    from decimal import Decimal

    from tether import Session
    from tether.config import parse_config
    from tether.messages import Usage
    from tether.providers.scripted import ScriptedProvider, ScriptedResponse
    from tether.runtime.operations import compact_now
    from tether.tools.base import ToolRegistry, function_tool

    @function_tool(read_only=True)
    async def look(what: str) -> str:
        """Look at something."""
        return f"{what} looks fine"

    @function_tool
    async def boom(why: str) -> str:
        """Fail on purpose."""
        raise RuntimeError(f"exploded: {why}")

    tools = ToolRegistry([look, boom])
    usage = Usage(input_tokens=1200, output_tokens=80, cache_read_tokens=1000, cache_write_tokens=100,
                  cost=Decimal("0.0123"))  # fmt: skip

    def step(message: Message | str) -> ScriptedResponse:
        return ScriptedResponse(message=message, usage=usage, finish_reason="end_turn")

    thinking = ThinkingPart(text="Let me look first.", signature="EqQBCkYIBxgCKkA=", provider="anthropic")
    session = await Session.create(store, directory=directory, model="claude-sonnet-4-5")
    provider = ScriptedProvider(
        [
            step(
                Message(
                    role="assistant",
                    parts=[
                        thinking,
                        TextPart(text="Looking."),
                        ToolCallPart(id="c1", name="look", arguments={"what": 'the tests ✓ \u2028 "quoted"'}),
                        ToolCallPart(id="c2", name="boom", arguments={"why": "on purpose"}),
                    ],
                )
            ),
            step("The tests look fine; boom failed as asked."),
            step("A detour that will be reverted."),
            step("Redone: all good."),
        ],
        name="anthropic",  # what the thinking is attributed to: an Anthropic model signs it
    )
    async for _ in session.stream("check the tests", provider=provider, model="claude-sonnet-4-5", tools=tools):
        pass
    async for _ in session.stream("take a detour", provider=provider, model="claude-sonnet-4-5", tools=tools):
        pass
    info = await session.refresh()
    await session.revert(info.entry_count - 2)
    await session.append(Message.system("The user switched branches."))
    async for _ in session.stream("redo it", provider=provider, model="claude-sonnet-4-5", tools=tools):
        pass
    for i in range(30):
        await session.append(Message.user(f"question {i} " + "words " * 60), Message.assistant(f"answer {i}"))
    if compact:
        result = await compact_now(store, session.id, config=parse_config(""), mechanical=True, keep_tokens=200)
        assert result.ok
    await session.append(Message.user("and after the compaction?"), Message.assistant("still here"))
    await session.set_title("Check the tests")
    return session.id


class RoundTrip:
    """The helpers above, for tests (a conftest is not importable under --import-mode=importlib)."""

    carried = staticmethod(carried)
    export_to = staticmethod(export_to)
    round_trip = staticmethod(round_trip)
    check = staticmethod(assert_round_trip)
    loop_session = staticmethod(loop_session)


@pytest.fixture
def rt() -> RoundTrip:
    return RoundTrip()


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def real_transcripts_script() -> ModuleType:
    """tests/fixtures/make_real_transcripts.py, loaded as a module: what made the real-tool fixtures."""
    spec = importlib.util.spec_from_file_location("make_real_transcripts", FIXTURES / "make_real_transcripts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, blank lines left out."""
    return [json.loads(raw) for raw in path.read_bytes().splitlines() if raw.strip()]
