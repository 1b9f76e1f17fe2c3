"""The approvals flow: an ask is journaled as a request and emitted as an event, the run waits for its
approver, the answer (once, always for the session, always for the project, no, no with a message, a
timeout) is journaled before the call runs or comes back to the model as a clear error; a request without a
decision survives a cancel and a real process killed while it waits, and the next run asks again: the
tool never runs without a yes. A scripted model, the real loop and stores, and real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether import Message, Session, ToolCallPart
from tether.events import ApprovalRequested, ApprovalResolved, Done, Event, ToolCallComplete
from tether.messages import APPROVAL_DECISION_MARKER, APPROVAL_REQUEST_MARKER, Marker
from tether.providers.base import ModelRequest
from tether.providers.scripted import ScriptedProvider
from tether.runtime.approvals import journaled_requests
from tether.runtime.journal import replay_events
from tether.runtime.permission import ALLOWED, Answer, ApprovalRequest, Permission
from tether.runtime.rules import SESSION_RULES_KEY, Rules, layered
from tether.store import SqliteStore, Store
from tether.tools.base import ToolContext, ToolRegistry, function_tool

DEPLOYED: list[str] = []


@function_tool
async def deploy(target: str) -> str:
    """Deploy to a target."""
    DEPLOYED.append(target)
    return f"deployed to {target}"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    DEPLOYED.clear()


def deploying(*targets: str) -> Any:
    """A model that deploys to each of `targets` in turn (one call a step), then reports the results (of
    this prompt's calls)."""

    def respond(request: ModelRequest) -> Message | str:
        start = max(i for i, m in enumerate(request.messages) if m.role == "user")
        results = [r for m in request.messages[start:] for r in m.tool_results]
        if len(results) < len(targets):
            n = len(results)
            call = ToolCallPart(id=f"d{n}", name="deploy", arguments={"target": targets[n]})
            return Message.assistant(tool_calls=[call])
        return "results: " + " | ".join(r.content for r in results)

    return respond


class Person:
    """An approver that gives the answers it is told, in order, and remembers what it was asked."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []

    async def __call__(self, request: ApprovalRequest) -> Answer:
        self.asked.append(request)
        assert DEPLOYED == [] or len(self.asked) > 1  # nothing ran before the first answer
        return self.answers.pop(0)


async def run(session: Session, provider: ScriptedProvider, prompt: str | None = "go", **options: Any) -> list[Event]:
    options.setdefault("rules", Rules())
    options.setdefault("config", None)
    return [
        e async for e in session.stream(prompt, provider=provider, model="m", tools=ToolRegistry([deploy]), **options)
    ]


def markers(entries: list[Any], name: str) -> list[dict[str, Any]]:
    return [e.body.data for e in entries if isinstance(e.body, Marker) and e.body.name == name]


async def test_a_yes_is_journaled_before_the_call_runs(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    person = Person(Answer(True))
    events = await run(session, ScriptedProvider(deploying("prod")), approver=person)

    assert DEPLOYED == ["prod"] and isinstance(events[-1], Done)
    (asked,) = person.asked
    assert (asked.session_id, asked.call_id, asked.tool, asked.arguments) == (
        session.id,
        "d0",
        "deploy",
        {"target": "prod"},
    )
    assert asked.reason == "deploy asks by default" and asked.suggestion == ("deploy",)
    kinds = [type(e).__name__ for e in events if isinstance(e, ApprovalRequested | ApprovalResolved | ToolCallComplete)]
    assert kinds == ["ApprovalRequested", "ApprovalResolved", "ToolCallComplete"]
    entries = await store.read(session.id)
    (request,) = markers(entries, APPROVAL_REQUEST_MARKER)
    (decision,) = markers(entries, APPROVAL_DECISION_MARKER)
    assert request["call_id"] == decision["call_id"] == "d0"
    assert decision == {"call_id": "d0", "approved": True, "by": "user", "scope": "once"}
    order = [e.seq for e in entries if isinstance(e.body, Marker)] + [
        e.seq for e in entries if isinstance(e.body, Message) and e.body.tool_results
    ]
    assert order == sorted(order)  # request, decision, then the result
    (result,) = [r for m in await session.messages() for r in m.tool_results]
    assert result.metadata["approval"] == "approved" and not result.is_error
    # the approval events are durable: the journal gives them again, equal field by field
    replayed = [
        e async for e in replay_events(store, session.id) if isinstance(e, ApprovalRequested | ApprovalResolved)
    ]
    assert replayed == [e for e in events if isinstance(e, ApprovalRequested | ApprovalResolved)]


async def test_a_no_with_a_message_is_what_the_model_reads(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(deploying("prod"))
    events = await run(session, provider, approver=Person(Answer(False, message="deploy to staging first")))

    assert DEPLOYED == []
    (result,) = [r for m in await session.messages() for r in m.tool_results]
    assert result.is_error and result.metadata == {"error": "denied", "approval": "denied"}
    assert result.content == "deploy: not run: the user did not allow it, and said: deploy to staging first"
    seen = [r.content for m in provider.requests[-1].messages for r in m.tool_results]
    assert seen == [result.content]
    (resolved,) = [e for e in events if isinstance(e, ApprovalResolved)]
    assert not resolved.approved and resolved.message == "deploy to staging first"
    (complete,) = [e for e in events if isinstance(e, ToolCallComplete)]
    assert complete.denied and "deploy to staging first" in complete.preview


async def test_a_plain_no(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    await run(session, ScriptedProvider(deploying("prod")), approver=Person(Answer(False)))
    (result,) = [r for m in await session.messages() for r in m.tool_results]
    assert result.content == "deploy: not run: the user did not allow it" and DEPLOYED == []


async def test_with_nobody_to_ask_a_call_is_denied_with_how_to_allow_it(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    await run(session, ScriptedProvider(deploying("prod")))
    (result,) = [r for m in await session.messages() for r in m.tool_results]
    assert result.is_error and DEPLOYED == []
    assert "nobody is here to answer (no terminal); to allow it: --allow 'deploy'" in result.content
    assert "\n" not in result.content  # one line
    assert markers(await store.read(session.id), APPROVAL_REQUEST_MARKER) == []  # nobody was asked


async def test_an_unanswered_request_times_out_as_a_no(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)

    async def away(request: ApprovalRequest) -> Answer:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    await run(session, ScriptedProvider(deploying("prod")), approver=away, approval_timeout=0.05)
    (result,) = [r for m in await session.messages() for r in m.tool_results]
    assert result.content == "deploy: not run: nobody answered the approval request within 0.05 s"
    (decision,) = markers(await store.read(session.id), APPROVAL_DECISION_MARKER)
    assert decision["approved"] is False and decision["by"] == "timeout" and DEPLOYED == []


async def test_an_approver_that_fails_says_no(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)

    async def broken(request: ApprovalRequest) -> Answer:
        raise OSError("the terminal is gone")

    await run(session, ScriptedProvider(deploying("prod")), approver=broken)
    (result,) = [r for m in await session.messages() for r in m.tool_results]
    assert "the approval could not be asked (OSError: the terminal is gone)" in result.content and DEPLOYED == []


async def test_always_for_the_session_is_kept_with_the_session(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    person = Person(Answer(True, scope="session"))
    await run(session, ScriptedProvider(deploying("prod", "staging")), approver=person)
    assert DEPLOYED == ["prod", "staging"] and len(person.asked) == 1  # the second call was not asked
    info = await store.get_session(session.id)
    assert info.metadata[SESSION_RULES_KEY] == {"allow": ["deploy"]}
    (decision,) = markers(await store.read(session.id), APPROVAL_DECISION_MARKER)
    assert decision["scope"] == "session" and decision["rules"] == ["deploy"]
    # a later run of the session keeps it; another session does not
    again = await Session.open(store, session.id)
    await run(again, ScriptedProvider(deploying("qa")), approver=Person())
    other = await Session.create(store, directory=tmp_path)
    asked = Person(Answer(False))
    await run(other, ScriptedProvider(deploying("dev")), approver=asked)
    assert DEPLOYED == ["prod", "staging", "qa"] and len(asked.asked) == 1


async def test_always_for_the_project_is_saved_to_its_config(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    await run(session, ScriptedProvider(deploying("prod")), approver=Person(Answer(True, scope="project")))
    saved = tmp_path / ".tether" / "config.toml"
    assert saved.read_text() == '\n[permissions]\nallow = ["deploy"]\n'
    (decision,) = markers(await store.read(session.id), APPROVAL_DECISION_MARKER)
    assert decision["scope"] == "project" and decision["note"] == f"saved to {saved}"


async def test_the_strictest_of_a_programs_check_and_the_rules_decides(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)

    async def lenient(call: ToolCallPart, ctx: ToolContext) -> Permission:
        return ALLOWED

    await run(
        session, ScriptedProvider(deploying("prod")), permission=lenient, rules=layered([("t", {"deny": ["deploy"]})])
    )
    assert DEPLOYED == []

    async def asks(call: ToolCallPart, ctx: ToolContext) -> Permission:
        return Permission(False, "deploys need a person", ask=True)

    person = Person(Answer(True))
    await run(
        session,
        ScriptedProvider(deploying("prod")),
        permission=asks,
        rules=layered([("t", {"allow": ["deploy"]})]),
        approver=person,
    )
    assert DEPLOYED == ["prod"] and person.asked[0].reason == "deploys need a person"


async def test_without_rules_a_program_keeps_every_call_running(store: Store, tmp_path: Path) -> None:
    """`Session.stream` in a program of one's own: no rules unless it gives some (`rules=`)."""
    session = await Session.create(store, directory=tmp_path)
    await run(session, ScriptedProvider(deploying("prod")), rules=None)
    assert DEPLOYED == ["prod"]


async def test_a_request_pending_when_the_run_is_cancelled_is_asked_again(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    asked = asyncio.Event()

    async def away(request: ApprovalRequest) -> Answer:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    first = asyncio.create_task(run(session, ScriptedProvider(deploying("prod")), approver=away))
    await asyncio.wait_for(asked.wait(), 30)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert DEPLOYED == []
    (pending,) = await journaled_requests(store, session.id)
    assert pending.call_id == "d0" and pending.tool == "deploy"
    assert [r for m in await session.messages() for r in m.tool_results] == []  # no result: still undecided

    person = Person(Answer(True))
    again = await Session.open(store, session.id)
    events = await run(again, ScriptedProvider(deploying("prod")), None, approver=person)
    assert [r.call_id for r in person.asked] == ["d0"] and DEPLOYED == ["prod"]
    assert isinstance(events[-1], Done) and events[-1].text == "results: deployed to prod"
    assert await journaled_requests(store, session.id) == []


async def test_the_pending_requests_are_read_back_to_the_last_answer_only(store: Store, tmp_path: Path) -> None:
    """`journaled_requests` reads from the end back to the model's last answer, a few entries at a time: the
    requests after it without a decision are pending however many entries they span; one before it is not."""
    info = await store.create_session(directory=str(tmp_path))
    calls = [ToolCallPart(id=f"k{i}", name="deploy", arguments={"target": str(i)}) for i in range(12)]

    def request(call_id: str) -> Marker:
        return Marker(APPROVAL_REQUEST_MARKER, {"call_id": call_id, "tool": "deploy", "reason": "asks"})

    await store.append(
        info.id,
        [
            Message.user("deploy everything"),
            Message.assistant(tool_calls=[ToolCallPart(id="old", name="deploy", arguments={"target": "x"})]),
            request("old"),  # pending once, but an answer came after it: no longer
            Message.assistant("later"),
            Message.user("now all twelve"),
            Message.assistant(tool_calls=calls),
        ],
    )
    body: list[Any] = []
    for i, call in enumerate(calls):
        body.append(request(call.id))
        if i % 3 == 0:
            body.append(Marker(APPROVAL_DECISION_MARKER, {"call_id": call.id, "approved": True}))
    await store.append(info.id, body)  # 16 entries after the answer: more than one chunk read back
    pending = await journaled_requests(store, info.id)
    assert [r.call_id for r in pending] == [c.id for i, c in enumerate(calls) if i % 3]
    assert all(r.session_id == info.id and r.tool == "deploy" for r in pending)
    assert await journaled_requests(store, (await store.create_session(directory=str(tmp_path))).id) == []


# --- a real process killed while it waits --------------------------------------------------------------

DRIVER = """
import asyncio, json, os, sys
from tether import Message, ToolCallPart
from tether.config import Config
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.runtime.launch import RunRequest
from tether.runtime.manager import SessionManager
from tether.runtime.permission import Answer
from tether.store import open_store

marker = os.environ["TEST_MARKER"]

def respond(request):
    if not any(m.role == "tool" for m in request.messages):
        command = f"echo deployed >> {marker}"
        return Message.assistant(tool_calls=[ToolCallPart(id="c1", name="bash", arguments={"command": command})])
    return "done: " + [r.content for m in request.messages for r in m.tool_results][0]

provider = ScriptedProvider(respond)
resolve = lambda model=None, **_: ResolvedModel(provider, "test", unknown_model("scripted", "test"))

async def main():
    store = open_store(sys.argv[1])
    mgr = SessionManager(store, config=Config(), defaults=RunRequest(None, directory=os.getcwd()), resolve=resolve)
    if sys.argv[2] == "start":
        run = await mgr.start(None, "deploy")
        while not await mgr.approvals():
            await asyncio.sleep(0.02)
        print(json.dumps({"session": run.session_id, "status": await mgr.status(run.session_id)}), flush=True)
        await asyncio.Event().wait()  # waits for a person; killed here
    sid = sys.argv[3]
    pending = await mgr.approvals(sid)
    status = await mgr.status(sid)
    run = await mgr.answer(sid, pending[0].call_id, Answer(True))
    outcome = await run.result()
    print(json.dumps({"pending": [p.call_id for p in pending], "status": status, "text": outcome.text}), flush=True)
    await store.close()

asyncio.run(main())
"""


def test_an_approval_pending_in_a_killed_process_is_asked_again_and_the_tool_runs_only_after_a_yes(
    tmp_path: Path,
) -> None:
    db, marker = tmp_path / "t.db", tmp_path / "deployed.txt"
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "home"), "TEST_MARKER": str(marker)}
    argv = [sys.executable, "-c", DRIVER, f"sqlite:///{db}"]
    first = subprocess.Popen(
        [*argv, "start"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line, first.stderr.read() if first.stderr else ""
        started = json.loads(line)
        assert started["status"] == "waiting_for_approval"
        os.kill(first.pid, signal.SIGKILL)  # the process dies while the approval waits
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
    sid = started["session"]
    assert not marker.exists()  # the command never ran

    async def journaled() -> list[str]:
        async with SqliteStore(db) as store:
            return [r.call_id for r in await journaled_requests(store, sid)]

    assert asyncio.run(journaled()) == ["c1"]
    # the dead holder's lease is taken over at once (same machine); the request is listed, answered, run
    second = subprocess.run([*argv, "answer", sid], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    answered = json.loads(second.stdout.strip().splitlines()[-1])
    assert answered["pending"] == ["c1"] and answered["status"] == "waiting_for_approval"
    assert answered["text"].startswith("done: ")
    assert marker.read_text() == "deployed\n"  # run once, after the yes
    assert asyncio.run(journaled()) == []
