"""`tether context ID` and `tether compact ID` end to end, through click's runner on a real SQLite file:
what the model would see, the budget, what was left out; manual compaction (mechanical, and with a model
when one is configured), undo, pins, and bad input ending in one clear line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from tether import Message, Session, SqliteStore, ToolCallPart, ToolResultPart
from tether.cli.main import cli
from tether.messages import Compaction, Marker, Revert
from tether.store import Store

T = TypeVar("T")
CONSTRAINT = "Never edit the generated files under gen/."


def with_db(db: Path, fn: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        async with SqliteStore(db) as store:
            return await fn(store)

    return asyncio.run(main())


def tether(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args])


def ok(result: Result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def failed(result: Result, message: str) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert message in result.output, result.output
    return result.output


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tether.db"


@pytest.fixture
def sid(db: Path) -> str:
    """A session on a 32k-window model (so compaction has work to do), with tool output worth pruning."""

    async def make(store: Store) -> str:
        session = await Session.create(store, directory="/work/gen", model="local/smollm2-135m")
        await session.append(Message.user("Regenerate the client. " + CONSTRAINT))
        for i in range(12):
            await session.append(
                Message.user(f"now step {i}"),
                Message.assistant(
                    tool_calls=[ToolCallPart(id=f"c{i}", name="bash", arguments={"command": f"make gen-{i}"})]
                ),
                Message.tool(ToolResultPart(call_id=f"c{i}", name="bash", content=f"gen {i}\n" + "ok\n" * 1_500)),
            )
        return session.id

    return with_db(db, make)


def context_json(db: Path, sid: str, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok(tether(db, "context", sid, "--json", *args)))
    return data


def test_context_shows_messages_budget_and_estimate(db: Path, sid: str) -> None:
    out = ok(tether(db, "context", sid, "--all"))
    assert f"session {sid}" in out and "model local/smollm2-135m" in out
    assert "reserved for output" in out and "usable" in out
    assert "Regenerate the client." in out and "make gen-11" in out
    data = context_json(db, sid)
    budget = data["budget"]
    assert budget["usable"] == budget["context_window"] - budget["reserved_output"] - budget["safety_margin"]
    assert data["estimate"]["source"] == "tiktoken:o200k_base"
    assert data["fixed_tokens"] > 0  # the run's tools count
    assert data["messages"][0]["seq"] == 1 and data["messages"][0]["role"] == "user"
    assert sum(m["tokens"] for m in data["messages"]) + data["fixed_tokens"] == data["estimate"]["counted"]
    assert data["fits"] is True


def test_context_reports_what_was_dropped_to_fit(db: Path, sid: str) -> None:
    data = context_json(db, sid)
    # 12 outputs of ~1.5k tokens in a ~22k budget: the oldest turns go (whole), and it says so
    actions = {o["action"] for o in data["omissions"]}
    assert "dropped" in actions
    assert data["estimate"]["counted"] <= data["budget"]["usable"]
    out = ok(tether(db, "context", sid))
    assert "left out or changed:" in out and "the oldest turns, to fit the budget" in out


def test_compact_mechanically_then_undo(db: Path, sid: str) -> None:
    before = context_json(db, sid)
    out = ok(tether(db, "compact", sid, "--mechanical"))
    assert "compacted (deterministic)" in out and f"tether compact {sid} --undo" in out
    after = context_json(db, sid)
    assert after["compaction_seq"] is not None
    assert after["needed_tokens"] < before["needed_tokens"]
    assert after["messages"][0]["seq"] is None and CONSTRAINT in json.dumps(after["messages"][0])
    assert any(o["action"] == "summarized" for o in after["omissions"])
    undone = json.loads(ok(tether(db, "compact", sid, "--undo", "--json")))
    assert undone["to_seq"] == after["compaction_seq"] - 1
    assert context_json(db, sid)["compaction_seq"] is None

    async def journal(store: Store) -> list[Any]:
        return [e.body for e in await store.read(sid)]

    bodies = with_db(db, journal)
    assert isinstance(bodies[-2], Compaction) and isinstance(bodies[-1], Revert)  # nothing deleted


def test_compact_json_and_keep(db: Path, sid: str) -> None:
    result = json.loads(ok(tether(db, "compact", sid, "--mechanical", "--keep", "100", "--json")))
    assert result["ok"] is True and result["strategy"] == "deterministic"
    assert result["tokens_after"] < result["tokens_before"]
    assert result["entry"]["body"]["kind"] == "compaction"


def test_compact_with_an_unkeyed_provider_fails_clearly(db: Path, sid: str) -> None:
    failed(tether(db, "compact", sid, "--model", "openai/gpt-4.1"), "--mechanical")


def test_nothing_to_compact_exits_1(db: Path) -> None:
    async def make(store: Store) -> str:
        session = await Session.create(store, directory="/w")
        await session.append(Message.user("hello"))
        return session.id

    small = with_db(db, make)
    out = tether(db, "compact", small, "--mechanical")
    assert out.exit_code == 1 and "not compacted: nothing to compact" in out.output


def test_pin_and_unpin(db: Path, sid: str) -> None:
    ok(tether(db, "context", sid, "--pin", "2"))

    async def last(store: Store) -> Any:
        return (await store.tail(sid, 1))[0].body

    marker = with_db(db, last)
    assert isinstance(marker, Marker) and marker.name == "pin" and marker.data == {"seq": 2}
    ok(tether(db, "context", sid, "--unpin", "2"))
    assert with_db(db, last).name == "unpin"
    failed(tether(db, "context", sid, "--pin", "9999"), "is not a message")


def test_bad_input_is_one_clear_line(db: Path, sid: str) -> None:
    failed(tether(db, "context", "ses_../../etc"), "invalid session id")
    failed(tether(db, "context", "ses_01ARZ3NDEKTSV4RRFFQ69G5FAV"), "no session")
    failed(tether(db, "compact", "ses_01ARZ3NDEKTSV4RRFFQ69G5FAV", "--mechanical"), "no session")
    failed(tether(db, "compact", sid, "--undo"), "no compaction to undo")
    assert tether(db, "compact", sid, "--keep", "0").exit_code == 2


def test_session_settings_show_in_context(db: Path, sid: str) -> None:
    async def off(store: Store) -> None:
        await store.update_session(sid, metadata={"auto_compact": False, "context": {"reserved_output": 1_000}})

    with_db(db, off)
    data = context_json(db, sid)
    assert data["auto_compact"] is False and data["budget"]["reserved_output"] == 1_000
    assert "automatic compaction OFF" in ok(tether(db, "context", sid))

    async def bad(store: Store) -> None:
        await store.update_session(sid, metadata={"context": {"reserved_output": "lots"}})

    with_db(db, bad)
    failed(tether(db, "context", sid), "reserved_output")


@pytest.mark.slow
def test_context_at_80_columns_keeps_every_column_and_says_it_was_never_compacted(
    db: Path, sid: str, terminal80: Any
) -> None:
    screen = terminal80.run("--store", str(db), "context", sid, "--all")
    lines = screen.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert f"session {sid}  model local/smollm2-135m  not compacted" in screen and "mode compacted" not in screen
    header = next(line for line in lines if "content" in line)
    for column in ("#", "entry", "role", "tokens", "content"):
        assert column in header
    data = context_json(db, sid, "--all")
    rows = [line for line in lines if "│" in line and "content" not in line]
    assert len(rows) == len(data["messages"])
    for row, message in zip(rows, data["messages"], strict=True):
        cells = [c.strip() for c in row.split("│")]
        assert cells[1] == str(message["seq"]) and cells[2] == message["role"]
        assert cells[3] and not cells[3].endswith("…")  # the token count whole
