"""Sessions rendered for people: the Markdown transcript and the one-line forms of calls and outcomes."""

from __future__ import annotations

import io

from tether import Message, ToolCallPart, ToolResultPart
from tether.store import Store
from tether.transcript import call_signature, export_markdown, result_outcome

from .importers.test_tether_json import rich_session


async def test_markdown_transcript(store: Store) -> None:
    session = await rich_session(store)
    await session.append(
        Message.assistant(tool_calls=[ToolCallPart(id="c9", name="bash", arguments={"command": "seq 100"})]),
        Message.tool(ToolResultPart(call_id="c9", content="\n".join(str(i) for i in range(1, 101)))),
        Message.assistant("here is a fence: ```python\nx\n```"),
    )
    out = io.StringIO()
    await export_markdown(store, session.id, out)
    md = out.getvalue()
    assert md.startswith("# A rich session\n")
    assert "## User" in md and "## Assistant · gpt-4o-mini" in md
    assert "**read**" not in md  # entry 4, the tool results, was reverted
    assert '→ `bash(command="seq 100")`' in md
    assert "**bash** ✓" in md  # the result is named after its call
    assert "\n20\n" in md and "\n21\n" not in md
    assert "(80 more lines)" in md
    assert "> ↶ Reverted to entry 3 (entry 4 hidden): try again" in md
    assert "<summary>Compaction" in md and "> • approval" in md and "> Title changed to “A rich session”" in md
    assert "[file text/csv d.csv]" in md

    raw = io.StringIO()
    await export_markdown(store, session.id, raw, raw=True)
    text = raw.getvalue()
    assert "## Tool *(reverted)*\n\n**read** ✓" in text
    assert "<details><summary>Thinking</summary>\n\nhmm\n\n</details>" in text
    assert 'read(path="src/a.py")' in text and 'bash(unparsed: {"command": "ls)' in text
    assert "**bash** ✗ error" in text


def test_code_fences_outgrow_the_backticks_they_hold() -> None:
    from tether.transcript import _fence

    assert _fence("plain") == "```"
    assert _fence("has ``` inside") == "````"
    assert _fence("`````") == "``````"


def test_call_signature() -> None:
    assert call_signature(ToolCallPart(id="1", name="read", arguments={"path": "src/a.py"})) == 'read(path="src/a.py")'
    assert call_signature(ToolCallPart(id="1", name="noop")) == "noop()"
    assert call_signature(ToolCallPart(id="1", name="f", arguments=[1, 2])) == "f([1, 2])"
    long = call_signature(ToolCallPart(id="1", name="write", arguments={"text": "x" * 500, "path": "a"}))
    assert len(long) <= 100 and long.startswith('write(text="xxx') and "…" in long
    raw = call_signature(ToolCallPart.from_raw("1", "bash", '{"command": \n"ls'))
    assert raw == 'bash(unparsed: {"command": "ls)'


def test_result_outcome() -> None:
    assert result_outcome(None) == "… no result"
    assert result_outcome(ToolResultPart(call_id="1", content="done")) == "✓ done"
    assert result_outcome(ToolResultPart(call_id="1", content="a\nb\nc")) == "✓ 3 lines"
    assert result_outcome(ToolResultPart(call_id="1", content="")) == "✓ (empty)"
    failed = ToolResultPart(call_id="1", content="Traceback\n  ...\nValueError: nope\n", is_error=True)
    assert result_outcome(failed) == "✗ ValueError: nope"
    assert result_outcome(ToolResultPart(call_id="1", content="===== 1 failed =====", is_error=True)) == "✗ 1 failed"
