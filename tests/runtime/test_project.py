"""A project in a run (the real loop, a scripted model): its AGENTS.md, skills catalogue and memory notes in
the system prompt, read fresh at each run (a change between runs is seen); the `skill` tool under
`skill(NAME)` rules; the `memory` tool keeping a note that the next run's model is shown; `tether context`'s
account of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether import Message, Session, ToolCallPart
from tether.config import Config
from tether.events import Done, Progress, ToolCallComplete
from tether.providers.base import ModelRequest
from tether.providers.scripted import ScriptedProvider
from tether.runtime.operations import context_view
from tether.runtime.rules import Rules, layered
from tether.store import SqliteStore
from tether.tools.base import ToolRegistry


def calls(name: str, arguments: dict[str, Any]) -> Any:
    def respond(request: ModelRequest) -> Message | str:
        start = max(i for i, m in enumerate(request.messages) if m.role == "user")
        results = [r for m in request.messages[start:] for r in m.tool_results]
        if not results:
            return Message.assistant(tool_calls=[ToolCallPart(id="p1", name=name, arguments=arguments)])
        return "result: " + results[-1].content

    return respond


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "proj"
    (ws / ".git").mkdir(parents=True)
    (ws / "AGENTS.md").write_text("Always run `make check` before you finish.")
    skill = ws / ".claude" / "skills" / "deploy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: deploy\ndescription: How to ship this project\n---\nRun ./ship.sh --prod.\n"
    )
    return ws


async def run(session: Session, respond: Any, rules: Rules) -> tuple[list[Any], ScriptedProvider]:
    provider = ScriptedProvider([respond, respond])
    events = [
        e
        async for e in session.stream(
            "go", provider=provider, model="m", tools=ToolRegistry(), rules=rules, config=Config(), project=True
        )
    ]
    return events, provider


async def test_instructions_skills_and_memory_reach_the_model(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    store = SqliteStore(tmp_path / "t.db")
    try:
        session = await Session.create(store, directory=str(ws))
        events, provider = await run(session, calls("skill", {"name": "deploy"}), Rules())
        system = provider.requests[0].system or ""
        assert "Always run `make check`" in system and "- deploy: How to ship this project" in system
        assert {t.name for t in provider.requests[0].tools} == {"skill", "memory"}
        done = [e for e in events if isinstance(e, Done)][-1]
        assert "Run ./ship.sh --prod." in done.text  # the skill's body, loaded (read-only: allowed by default)

        # the model keeps a note (allowed by a rule); the next run is shown it, and the changed AGENTS.md
        events, _ = await run(
            session,
            calls("memory", {"action": "remember", "text": "ship only on Tuesdays"}),
            layered([("t", {"allow": ["memory"]})]),
        )
        assert [e for e in events if isinstance(e, Done)][-1].text.startswith("result: remembered mem_")
        (ws / "AGENTS.md").write_text("Use the staging cluster first.")
        _, provider = await run(session, "ok", Rules())
        system = provider.requests[0].system or ""
        assert "ship only on Tuesdays" in system and "Use the staging cluster first." in system
        assert "make check" not in system

        view = await context_view(store, session.id, config=Config(), model="openai/gpt-4.1")
        [agents] = view.project["instructions"]
        assert agents["path"].endswith("AGENTS.md") and agents["tokens"] > 3
        assert view.project["skills"][0]["name"] == "deploy" and view.project["memory"] == {"notes": 1, "shown": 1}
    finally:
        await store.close()


async def test_a_skill_rule_gates_the_skill_tool_and_a_bad_file_is_a_warning(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    (ws / ".tether" / "skills" / "broken").mkdir(parents=True)
    (ws / ".tether" / "skills" / "broken" / "SKILL.md").write_text("---\nname: broken\n")
    store = SqliteStore(tmp_path / "t.db")
    try:
        session = await Session.create(store, directory=str(ws))
        events, _ = await run(
            session, calls("skill", {"name": "deploy"}), layered([("t", {"deny": ["skill(deploy)"]})])
        )
        [complete] = [e for e in events if isinstance(e, ToolCallComplete)]
        assert complete.denied and "skill(deploy)" in complete.preview
        warnings = [e.detail for e in events if isinstance(e, Progress) and e.what == "project"]
        assert any("no closing ---" in w for w in warnings)
    finally:
        await store.close()


async def test_a_run_without_project_reads_nothing(tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    store = SqliteStore(tmp_path / "t.db")
    try:
        session = await Session.create(store, directory=str(ws))
        provider = ScriptedProvider(["hi"])
        _ = [e async for e in session.stream("go", provider=provider, model="m", tools=ToolRegistry(), config=Config())]
        assert provider.requests[0].system is None and provider.requests[0].tools == []
    finally:
        await store.close()


async def test_a_run_reads_the_same_project_without_counting_its_tokens(tmp_path: Path) -> None:
    """A run's start asks for the text and tools only; `tether context` for the account too."""
    from tether.runtime.project import project_context

    ws = workspace(tmp_path)
    store = SqliteStore(tmp_path / "t.db")
    try:
        full = await project_context(store, ws, Config(), home=tmp_path / "home")
        lean = await project_context(store, ws, Config(), home=tmp_path / "home", with_report=False)
    finally:
        await store.close()
    assert lean.text == full.text and "make check" in lean.text and "deploy" in lean.text
    assert [t.name for t in lean.tools] == [t.name for t in full.tools] == ["skill", "memory"]
    assert lean.report == {}
    assert full.report["instructions"][0]["tokens"] > 0 and full.report["tokens"] > 0
