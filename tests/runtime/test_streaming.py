"""The streamed part of a step survives a crash (`tether.runtime.streaming`): saved while it streams, by time
and by size, dropped once the answer is journaled; what a killed run left is journaled, marked interrupted,
by the session's next run or by a reader that finds the session free, and the model reads a coherent history
(its cut answer noted, complete calls answered "not run", a call cut mid-arguments never among the parts).
The real kill -9 of `tether run` against a loopback model, 20 times at random points, is at the end."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tether import Session
from tether.context.derive import CUT_NOTE, GO_ON_NOTE, LIMIT_NOTE, STOPPED_NOTE
from tether.events import Done, Event
from tether.messages import INTERRUPTED_ANSWER, Checkpoint, Message, TextPart, ThinkingPart, ToolCallPart, Usage
from tether.providers.base import (
    ModelRequest,
    StreamDone,
    StreamEvent,
    TextPartDelta,
    ToolCallPartDelta,
    ToolCallPartStart,
)
from tether.providers.scripted import ScriptedProvider
from tether.runtime import streaming
from tether.runtime.journal import replay_events
from tether.runtime.lookup import find_session
from tether.runtime.streaming import NOT_RUN
from tether.store import SqliteStore, Store
from tether.tools.base import ToolRegistry
from tether.transcript import export_markdown


class GatedProvider:
    """Streams `events`, then waits for `gate` before its final message (a model still answering)."""

    name = "gated"

    def __init__(self, events: list[StreamEvent], gate: asyncio.Event, final: Message) -> None:
        self.events = events
        self.gate = gate
        self.final = final
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        for event in self.events:
            yield event
        await self.gate.wait()
        yield StreamDone(message=self.final, usage=Usage(output_tokens=3), finish_reason="stop")


async def wait_for_record(store: Store, sid: str, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        record = await store.get_stream(sid)
        if record is not None and record.message.text == text:
            return
        assert time.monotonic() < deadline, f"never saved {text!r}: {record}"
        await asyncio.sleep(0.02)


async def drain(events: AsyncIterator[Event]) -> list[Event]:
    return [e async for e in events]


@pytest.fixture
async def session(store: Store, tmp_path: Path) -> Session:
    return await Session.create(store, directory=tmp_path)


async def test_the_stream_is_saved_by_time_while_it_streams_and_dropped_after_the_answer(session: Session) -> None:
    gate = asyncio.Event()
    provider = GatedProvider(
        [TextPartDelta(text="Hello, "), TextPartDelta(text="wor")], gate, Message.assistant("Hello, world.")
    )
    run = asyncio.ensure_future(drain(session.stream("hi", provider=provider, model="m", tools=ToolRegistry())))
    await wait_for_record(session.store, session.id, "Hello, wor")  # by the timer: 7 + 3 characters only
    record = await session.store.get_stream(session.id)
    assert record is not None and record.after_seq == 1  # the step began after the prompt
    assert [m.role for m in await session.messages()] == ["user"]  # the journal holds no partial
    # a reader while the run lives leaves it alone: the record is the run's answer so far
    info = await find_session(session.store, session.id)
    assert info.entry_count == 1
    gate.set()
    events = await run
    assert isinstance(events[-1], Done)
    assert await session.store.get_stream(session.id) is None
    messages = await session.messages()
    assert [m.text for m in messages] == ["hi", "Hello, world."]
    assert INTERRUPTED_ANSWER not in messages[1].metadata


async def test_a_fast_stream_is_saved_by_size_at_once(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "SAVE_SECONDS", 3600.0)  # no timer: only the size bound can save
    gate = asyncio.Event()
    pieces = [TextPartDelta(text="x" * 100) for _ in range(45)]  # 4,500 characters: one save at 4,100
    provider = GatedProvider(pieces, gate, Message.assistant("x" * 4500))
    run = asyncio.ensure_future(drain(session.stream("go", provider=provider, model="m", tools=ToolRegistry())))
    await wait_for_record(session.store, session.id, "x" * 4100)
    gate.set()
    await run
    assert await session.store.get_stream(session.id) is None


async def test_without_the_durable_stream_nothing_is_saved(session: Session) -> None:
    gate = asyncio.Event()
    provider = GatedProvider([TextPartDelta(text="quiet")], gate, Message.assistant("quiet"))
    run = asyncio.ensure_future(
        drain(session.stream("go", provider=provider, model="m", tools=ToolRegistry(), durable_stream=False))
    )
    await asyncio.sleep(streaming.SAVE_SECONDS * 2.5)
    assert await session.store.get_stream(session.id) is None
    gate.set()
    await run


async def test_tool_call_arguments_in_progress_are_saved_beside_the_text(session: Session) -> None:
    gate = asyncio.Event()
    provider = GatedProvider(
        [
            TextPartDelta(text="Writing it."),
            ToolCallPartStart(id="c9", name="write"),
            ToolCallPartDelta(id="c9", arguments_delta='{"path": "a.txt", "content": "hal'),
        ],
        gate,
        Message.assistant("Writing it."),
    )
    run = asyncio.ensure_future(drain(session.stream("go", provider=provider, model="m", tools=ToolRegistry())))
    deadline = time.monotonic() + 10
    while (record := await session.store.get_stream(session.id)) is None or "cut_calls" not in record.message.metadata:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert record.message.text == "Writing it." and record.message.tool_calls == []
    assert record.message.metadata["cut_calls"] == [
        {"id": "c9", "name": "write", "arguments": '{"path": "a.txt", "content": "hal'}
    ]
    gate.set()
    await run


async def test_secrets_are_redacted_from_the_saved_stream(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-proj-" + "Zq7" * 12
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    gate = asyncio.Event()
    provider = GatedProvider([TextPartDelta(text=f"the key is {secret} ok")], gate, Message.assistant("done"))
    run = asyncio.ensure_future(drain(session.stream("go", provider=provider, model="m", tools=ToolRegistry())))
    deadline = time.monotonic() + 10
    while (record := await session.store.get_stream(session.id)) is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert secret not in record.message.text and record.message.text.startswith("the key is ")
    gate.set()
    await run


# --- what a killed run left ------------------------------------------------------------------------------


def left_answer(text: str, *, calls: list[ToolCallPart] | None = None, cut: bool = False) -> Message:
    """A stream record as a run that died would have left it."""
    metadata: dict[str, Any] = {"partial": True}
    if cut:
        metadata["cut_calls"] = [{"id": "c2", "name": "write", "arguments": '{"path": "x.t'}]
    return Message(
        role="assistant",
        parts=[ThinkingPart(text="let me see"), TextPart(text=text), *(calls or [])],
        model="m",
        provider="scripted",
        finish_reason="cancelled",
        metadata=metadata,
    )


async def test_the_next_run_journals_the_cut_answer_and_the_model_reads_it_noted(session: Session) -> None:
    await session.store.append(session.id, [Message.user("explain the bug")])
    await session.store.save_stream(session.id, 1, left_answer("The bug is in the par"))
    provider = ScriptedProvider(["Sorry, I was cut off: the parser drops the last line."])
    events = await drain(session.stream("go on", provider=provider, model="m", tools=ToolRegistry()))
    assert isinstance(events[-1], Done)
    messages = await session.messages()
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    cut = messages[1]
    assert cut.text == "The bug is in the par" and cut.finish_reason == "interrupted"
    assert cut.metadata[INTERRUPTED_ANSWER] is True and cut.metadata["partial"] is True
    assert await session.store.get_stream(session.id) is None
    sent = provider.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "user"]
    assert sent[1].text == "The bug is in the par" + CUT_NOTE
    # the run's events carried it, and a replay of the journal gives it again (what SSE serves)
    replayed = [e async for e in replay_events(session.store, session.id)]
    assert any(getattr(e, "text", None) == "The bug is in the par" for e in replayed)
    assert any(getattr(e, "text", None) == "The bug is in the par" for e in events)


@pytest.mark.parametrize("how", ["crash", "ctrl-c", "limit"])
async def test_continue_goes_on_with_an_answer_cut_short(session: Session, how: str) -> None:
    """`tether run --continue` after a Ctrl-C or a crash cut a text answer: the model is asked to go on (before,
    the run said "Nothing to continue", as if the answer had ended). The note after the cut stays once the
    next answer is there, so later steps derive the same context, and more."""
    await session.store.append(session.id, [Message.user("explain the bug")])
    if how == "crash":
        await session.store.save_stream(session.id, 1, left_answer("The bug is in the par"))
    elif how == "ctrl-c":  # what a cancel journals: the partial answer as it streamed
        await session.store.append(session.id, [left_answer("The bug is in the par")])
    else:  # what a cut at the step's limit journals: the answer marked cut, then a checkpoint
        cut = msgspec.structs.replace(
            left_answer("The bug is in the par"), finish_reason="length", metadata={"partial": True, "cut": "40000"}
        )
        checkpoint = Checkpoint(objective="explain the bug", done="1 step", next_action="go on", reason="answer_cut")
        await session.store.append(session.id, [cut, checkpoint])
    provider = ScriptedProvider(["ser: it drops the last line.", "Yes."])
    events = await drain(session.stream(None, provider=provider, model="m", tools=ToolRegistry()))
    assert isinstance(events[-1], Done) and events[-1].reason != "nothing_to_do"
    sent = provider.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "user"]
    note = {"crash": CUT_NOTE, "ctrl-c": STOPPED_NOTE, "limit": LIMIT_NOTE}[how]
    assert sent[1].text == "The bug is in the par" + note
    assert sent[2].text == GO_ON_NOTE
    messages = await session.messages()
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]  # the note is not journaled
    assert messages[-1].text == "ser: it drops the last line."
    await drain(session.stream("and now?", provider=provider, model="m", tools=ToolRegistry()))
    again = provider.requests[1].messages
    assert [m.role for m in again] == ["user", "assistant", "user", "assistant", "user"]
    assert (
        again[2].text == GO_ON_NOTE and again[3].text == "ser: it drops the last line." and again[4].text == "and now?"
    )


async def test_a_new_prompt_after_a_cut_answer_gets_no_go_on_note(session: Session) -> None:
    await session.store.append(session.id, [Message.user("explain the bug"), left_answer("The bug is in the par")])
    provider = ScriptedProvider(["Sure."])
    await drain(session.stream("never mind: what is 2+2?", provider=provider, model="m", tools=ToolRegistry()))
    sent = provider.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "user"]
    assert sent[1].text.endswith(STOPPED_NOTE) and sent[2].text == "never mind: what is 2+2?"


async def test_complete_calls_get_a_not_run_result_and_a_cut_call_stays_out_of_the_parts(session: Session) -> None:
    await session.store.append(session.id, [Message.user("fix it")])
    read = ToolCallPart(id="c1", name="read", arguments={"path": "a.py"})
    await session.store.save_stream(session.id, 1, left_answer("Reading first.", calls=[read], cut=True))
    provider = ScriptedProvider(["I will read it again."])
    await drain(session.stream("continue", provider=provider, model="m", tools=ToolRegistry()))
    messages = await session.messages()
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert [c.id for c in messages[1].tool_calls] == ["c1"]  # c2 was cut mid-arguments: metadata only
    assert messages[1].metadata["cut_calls"][0]["name"] == "write"
    result = messages[2].tool_results[0]
    assert result.call_id == "c1" and result.is_error and result.content == NOT_RUN
    sent = provider.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "user"]
    assert all(call.arguments_ok for m in sent for call in m.tool_calls)


async def test_a_reader_journals_what_a_dead_run_left_and_every_face_shows_it(session: Session) -> None:
    await session.store.append(session.id, [Message.user("write a poem")])
    await session.store.save_stream(session.id, 1, left_answer("Roses are red,\nviolets"))
    info = await find_session(session.store, session.id[-8:])
    assert info.entry_count == 2 and await session.store.get_stream(session.id) is None
    entries = await session.store.read(session.id)
    body = entries[-1].body
    assert isinstance(body, Message) and body.finish_reason == "interrupted"
    assert body.text == "Roses are red,\nviolets"
    out = __import__("io").StringIO()
    await export_markdown(session.store, session.id, out)
    assert "Roses are red," in out.getvalue()
    assert "*[interrupted: tether stopped while the model was answering]*" in out.getvalue()
    # a second look changes nothing
    assert (await find_session(session.store, session.id)).entry_count == 2


async def test_a_reader_leaves_a_live_runs_stream_alone(session: Session) -> None:
    await session.store.append(session.id, [Message.user("q")])
    await session.store.save_stream(session.id, 1, left_answer("still coming"))
    await session.store.acquire_lease(session.id, "run_live", ttl=30, pid=os.getpid(), host=socket.gethostname())
    assert (await find_session(session.store, session.id)).entry_count == 1
    assert await session.store.get_stream(session.id) is not None
    await session.store.release_lease(session.id, "run_live")
    assert (await find_session(session.store, session.id)).entry_count == 2


async def test_a_stale_record_is_never_journaled(session: Session) -> None:
    await session.store.append(session.id, [Message.user("q"), Message.assistant("the whole answer")])
    await session.store.save_stream(session.id, 1, left_answer("the whole ans"))  # its answer is seq 2
    assert (await find_session(session.store, session.id)).entry_count == 2
    await drain(session.stream("next", provider=ScriptedProvider(["ok"]), model="m", tools=ToolRegistry()))
    assert [m.text for m in await session.messages()] == ["q", "the whole answer", "next", "ok"]
    assert await session.store.get_stream(session.id) is None


def test_sessions_show_marks_the_interrupted_answer(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tether.cli.main import cli

    db = tmp_path / "t.db"

    async def left_by_a_killed_run() -> str:
        async with SqliteStore(db) as store:
            session = await Session.create(store, directory=tmp_path)
            await store.append(session.id, [Message.user("count to ten")])
            read = ToolCallPart(id="c1", name="read", arguments={"path": "n"})
            await store.save_stream(session.id, 1, left_answer("one two thr", calls=[read], cut=True))
            return session.id

    sid = asyncio.run(left_by_a_killed_run())
    result = CliRunner().invoke(cli, ["--store", str(db), "sessions", "show", sid])
    assert result.exit_code == 0, result.output
    assert "one two thr" in result.output
    assert "[interrupted: tether stopped while the model was answering; a call to write was cut" in result.output


# --- a real kill -9 of `tether run` while a loopback model streams -----------------------------------------

WORDS = [f"w{i:04d} " for i in range(2000)]
"""What the loopback model says, one word a delta: any prefix of it is recognisable."""


class StreamingModel:
    """An OpenAI-compatible chat-completions server on loopback that streams `WORDS` a word every `pace`
    seconds, then a `read` call whose arguments come in small pieces; it records every request body."""

    def __init__(self, pace: float = 0.01) -> None:
        self.pace = pace
        self.bodies: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                owner.bodies.append(body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for chunk in owner.chunks():
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        time.sleep(owner.pace)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                data = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def chunks(self) -> Iterator[bytes]:
        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            data = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]}
            return f"data: {json.dumps(data)}\n\n".encode()

        yield event({"role": "assistant", "content": ""})
        for word in WORDS[:300]:
            yield event({"content": word})
        arguments = json.dumps({"path": "notes-" + "x" * 200 + ".txt"})
        yield event(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read", "arguments": ""}}
                ]
            }
        )
        for i in range(0, len(arguments), 4):
            yield event({"tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + 4]}}]})
        yield event({}, "tool_calls")
        yield b"data: [DONE]\n\n"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Child:
    """`tether run --json` in a subprocess; a thread reads its text deltas with the time each arrived."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
        self.deltas: list[tuple[float, str]] = []
        self.session_id: str | None = None
        self.first = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            self.session_id = self.session_id or event.get("session_id")
            if event.get("type") == "text_delta":
                self.deltas.append((time.monotonic(), event["text"]))
                self.first.set()

    def text_before(self, moment: float) -> str:
        return "".join(text for at, text in list(self.deltas) if at <= moment)

    def kill(self) -> float:
        os.kill(self.proc.pid, signal.SIGKILL)
        moment = time.monotonic()
        self.proc.wait(10)
        self._reader.join(10)
        return moment


LOSS_BOUND = streaming.SAVE_SECONDS + 1.5
"""What a kill may lose, in seconds of the stream as the test read it: the save interval, and room for a
loaded machine (the child's loop and this test's reader thread both run late there)."""


@pytest.mark.slow
async def test_kill_9_while_the_model_streams_keeps_what_was_saved(tmp_path: Path) -> None:
    """20 SIGKILLs at random points of a streamed answer (text, then a tool call's arguments), each on the same
    session: every text delta that arrived more than `LOSS_BOUND` before the kill is in the session, as a
    prefix of what streamed, marked interrupted; the next `--continue` sends the model a coherent history."""
    model = StreamingModel()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f'[providers.lab]\nkind = "openai"\nbase_url = "{model.url}"\n')
    db = tmp_path / "t.db"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(TETHER_HOME=str(home), TETHER_STORE=str(db), PYTHONPATH=os.pathsep.join(sys.path))
    rng = random.Random(26)
    full = "".join(WORDS[:300])
    sid: str | None = None
    kept: list[str] = []  # what each kill left saved
    try:
        for kill in range(20):
            args = ["run", "--json", "-m", "lab/m", *(["--session", sid] if sid else [])]
            child = Child([*args, f"count, please ({kill})"], env, tmp_path)
            if not child.first.wait(60):
                child.kill()
                raise AssertionError(f"no text from the run: {child.proc.stderr.read() if child.proc.stderr else ''}")
            # 300 words at 10 ms or more apart, then the call's arguments: the step streams 3.5 s at least
            time.sleep(rng.uniform(0.05, 3.4))
            moment = child.kill()
            sid = sid or child.session_id
            assert sid is not None
            acknowledged = child.text_before(moment - LOSS_BOUND)
            printed = child.text_before(moment)
            async with SqliteStore(db) as store:
                if kill % 2 == 0:  # even kills: a reader journals it, as `sessions show` does
                    info = await find_session(store, sid)
                    last = (await store.read(sid))[-1].body
                    assert isinstance(last, Message)
                    if last.role == "assistant":
                        assert last.finish_reason == "interrupted" and last.metadata[INTERRUPTED_ANSWER] is True
                    saved = last.text if last.role == "assistant" else ""
                else:  # odd kills: the record waits for the next run's start
                    info = await store.get_session(sid)
                    record = await store.get_stream(sid)
                    valid = record is not None and record.after_seq == info.entry_count
                    saved = record.message.text if record is not None and valid else ""
            assert full.startswith(saved), f"kill {kill}: the saved text is not what streamed"
            assert printed.startswith(saved) or saved.startswith(printed)
            assert len(saved) >= len(acknowledged), (
                f"kill {kill}: {len(printed) - len(saved)} characters lost of {len(printed)}, "
                f"{len(acknowledged)} of them arrived more than {LOSS_BOUND}s before the kill"
            )
            kept.append(saved)
        async with SqliteStore(db) as store:
            await find_session(store, sid)
            messages = [e.body for e in await store.read(sid) if isinstance(e.body, Message)]
        cut = [m.text for m in messages if m.role == "assistant" and m.metadata.get(INTERRUPTED_ANSWER) is True]
        assert cut == [text for text in kept if text]  # every kill's saved part, journaled once, in order
        assert sum(1 for text in kept if text) >= 15  # most kills came after the first save
        # each run after the first sent the model a coherent history: every call with its result, none cut
        # mid-arguments, and each interrupted answer so far ending with the note
        assert len(model.bodies) == 20
        for k, body in enumerate(model.bodies):
            messages_sent = body["messages"]
            answered = {m["tool_call_id"] for m in messages_sent if m["role"] == "tool"}
            for m in messages_sent:
                for call in m.get("tool_calls") or []:
                    assert call["id"] in answered
                    json.loads(call["function"]["arguments"])
            noted = [m for m in messages_sent if m["role"] == "assistant" and CUT_NOTE in str(m.get("content"))]
            assert len(noted) == sum(1 for text in kept[:k] if text)
    finally:
        model.close()


async def test_the_recovered_history_fits_every_provider_s_message_shape(session: Session) -> None:
    """What the model is sent after a kill, in OpenAI's and Anthropic's wire shapes: the cut answer with its
    note, its complete call answered "not run", no call cut mid-arguments, the turns alternating."""
    from tether.providers.anthropic import to_anthropic_messages
    from tether.providers.openai import to_openai_messages

    await session.store.append(session.id, [Message.user("fix it")])
    read = ToolCallPart(id="c1", name="read", arguments={"path": "a.py"})
    await session.store.save_stream(session.id, 1, left_answer("Reading first.", calls=[read], cut=True))
    provider = ScriptedProvider(["Done."])
    await drain(session.stream("go on", provider=provider, model="m", tools=ToolRegistry()))
    sent = provider.requests[0].messages

    wire = to_openai_messages(sent)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "user"]
    assert wire[1]["content"].startswith("Reading first.") and CUT_NOTE in wire[1]["content"]
    assert [c["id"] for c in wire[1]["tool_calls"]] == ["c1"] and wire[2]["tool_call_id"] == "c1"

    _, shaped = to_anthropic_messages(sent)
    assert [m["role"] for m in shaped] == ["user", "assistant", "user"]  # the result rides the next user turn
    blocks = shaped[1]["content"]
    said = "".join(b["text"] for b in blocks if b["type"] == "text")
    assert said.startswith("Reading first.") and CUT_NOTE in said
    assert [b["id"] for b in blocks if b["type"] == "tool_use"] == ["c1"] and blocks[-1]["type"] == "tool_use"
    assert [b["tool_use_id"] for b in shaped[2]["content"] if b["type"] == "tool_result"] == ["c1"]
    assert all(b.get("name") != "write" for b in blocks)  # the call cut mid-arguments is not there
