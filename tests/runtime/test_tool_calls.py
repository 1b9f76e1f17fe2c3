"""Running a step's tool calls: the permission decision comes before every call (a refused call is not run
and the model reads why), results are journaled as they come, in the model's order."""

from __future__ import annotations

from pathlib import Path

from tether import Message, Session, ToolCallPart
from tether.events import Done, ToolCallComplete
from tether.providers.scripted import ScriptedProvider
from tether.runtime.permission import Permission
from tether.store import Store
from tether.tools.base import ToolContext, ToolRegistry, function_tool


async def test_the_permission_decision_comes_before_each_call(store: Store, tmp_path: Path) -> None:
    ran: list[str] = []

    @function_tool
    async def shell(command: str) -> str:
        """Run a command."""
        ran.append(command)
        return f"ran {command}"

    asked: list[tuple[str, str]] = []

    async def decide(call: ToolCallPart, ctx: ToolContext) -> Permission:
        asked.append((call.name, str(call.arguments.get("command"))))
        assert ctx.session_id == session.id  # the decision knows where it is asked
        if "rm" in call.arguments.get("command", ""):
            return Permission(False, "rm is not allowed here")
        return Permission(True)

    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(
        [
            Message.assistant(
                tool_calls=[
                    ToolCallPart(id="c1", name="shell", arguments={"command": "ls"}),
                    ToolCallPart(id="c2", name="shell", arguments={"command": "rm -rf /"}),
                ]
            ),
            "done",
        ]
    )
    events = [
        e
        async for e in session.stream(
            "clean up", provider=provider, model="m", tools=ToolRegistry([shell]), permission=decide
        )
    ]
    assert isinstance(events[-1], Done)
    assert asked == [("shell", "ls"), ("shell", "rm -rf /")] and ran == ["ls"]
    complete = {e.call_id: e for e in events if isinstance(e, ToolCallComplete)}
    assert complete["c1"].success and not complete["c2"].success
    results = {r.call_id: r for m in await session.messages() for r in m.tool_results}
    assert results["c2"].is_error and "rm is not allowed here" in results["c2"].content
    assert results["c2"].metadata["error"] == "denied"
    seen = {r.call_id: r.content for m in provider.requests[1].messages for r in m.tool_results}
    assert seen["c1"] == "ran ls" and "rm is not allowed here" in seen["c2"]  # the model reads why


async def test_without_a_check_every_call_runs(store: Store, tmp_path: Path) -> None:
    ran: list[str] = []

    @function_tool
    async def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "ok"

    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(
        [Message.assistant(tool_calls=[ToolCallPart(id="c1", name="note", arguments={"text": "a"})]), "done"]
    )
    events = [e async for e in session.stream("go", provider=provider, model="m", tools=ToolRegistry([note]))]
    assert isinstance(events[-1], Done) and ran == ["a"]


async def test_a_permission_check_that_fails_refuses_the_call(store: Store, tmp_path: Path) -> None:
    ran: list[str] = []

    @function_tool
    async def note(text: str) -> str:
        """Write a note."""
        ran.append(text)
        return "ok"

    async def broken(call: ToolCallPart, ctx: ToolContext) -> Permission:
        raise RuntimeError("rules file unreadable")

    session = await Session.create(store, directory=tmp_path)
    provider = ScriptedProvider(
        [Message.assistant(tool_calls=[ToolCallPart(id="c1", name="note", arguments={"text": "a"})]), "done"]
    )
    events = [
        e
        async for e in session.stream("go", provider=provider, model="m", tools=ToolRegistry([note]), permission=broken)
    ]
    assert isinstance(events[-1], Done) and ran == []  # the run goes on; the call never ran
    (result,) = [r for m in await session.messages() for r in m.tool_results]
    assert result.is_error and "permission check failed (RuntimeError: rules file unreadable)" in result.content
