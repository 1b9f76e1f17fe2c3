"""Typed marker bodies: each kind written and read in one place, journals written before the types still read
the same, and a marker whose body is unknown or malformed never breaks a read (on a real SQLite journal:
transcripts, the HTML page, event replay, pending approvals, the derived context)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tether import markers
from tether.context.derive import derive_context
from tether.events import ApprovalRequested, ApprovalResolved
from tether.messages import Entry, Marker, Message, TitleChange, decode_body, encode_body
from tether.runtime.approvals import undecided
from tether.runtime.journal import replay_events
from tether.store import SqliteStore
from tether.transcript import export_markdown
from tether.transcript_html import export_html

EVERY_KIND: list[markers.MarkerBody] = [
    markers.Interrupted(seq=3),
    markers.ErrorRecord(message="API error 529", source="claude-code", line=7, raw={"type": "system"}),
    markers.ApprovalRequest(call_id="c1", tool="bash", arguments={"command": "ls"}, reason="asks", suggestion=["a"]),
    markers.ApprovalDecision(call_id="c1", approved=True, by="user", scope="session", rules=["bash(ls*)"]),
    markers.Pin(seq=2),
    markers.Unpin(seq=2),
    markers.Condensed(seq=4, text="the gist", call_id="c2", fallback=True, input_tokens=10, output_tokens=3),
    markers.McpTools(
        servers={"fs": markers.McpServerTools(tools=["read"], digest="d1")},
        changed={"fs": markers.McpToolsChange(added=["read"])},
        failed={"web": "did not start"},
        tool_search={"deferred": 4, "tokens_saved": 900},
    ),
    markers.MemoryForget(id="mem_1", by="user", at=1.5),
    markers.PydanticAiMessage(message={"kind": "request", "parts": []}),
    markers.OpenAiAgentsItem(item={"type": "web_search_call"}),
]


def test_every_kind_is_registered_under_its_name() -> None:
    assert {type(b) for b in EVERY_KIND} == set(markers.KINDS.values())
    assert all(markers.KINDS[b.marker_name] is type(b) for b in EVERY_KIND)


@pytest.mark.parametrize("body", EVERY_KIND, ids=lambda b: type(b).__name__)
def test_round_trip_through_the_stored_json(body: markers.MarkerBody) -> None:
    stored = decode_body(encode_body(markers.to_marker(body)))
    assert isinstance(stored, Marker) and stored.name == body.marker_name
    assert markers.parse(stored) == body
    assert markers.read(stored, type(body)) == body


def test_old_journal_shapes_read_as_written() -> None:
    """The JSON the runtime wrote before the types (defaults written out, keys they do not name) reads."""
    request = decode_body(
        b'{"kind":"marker","name":"approval_request","data":{"call_id":"c1","tool":"bash",'
        b'"arguments":{"command":"rm -r x"},"reason":"rm asks","suggestion":[]}}'
    )
    assert markers.parse(request) == markers.ApprovalRequest(
        call_id="c1", tool="bash", arguments={"command": "rm -r x"}, reason="rm asks"
    )
    decision = decode_body(
        b'{"kind":"marker","name":"approval_decision","data":{"call_id":"c1","approved":false,'
        b'"by":"timeout","scope":"once"}}'
    )
    assert markers.parse(decision) == markers.ApprovalDecision(call_id="c1", approved=False, by="timeout")
    bare = Marker(name="approval_decision", data={"call_id": "c1", "approved": True})  # as a test or tool wrote it
    assert markers.parse(bare) == markers.ApprovalDecision(call_id="c1", approved=True)
    mcp = decode_body(
        b'{"kind":"marker","name":"mcp_tools","data":{"servers":{"fs":{"tools":["read"],"digest":"x","tokens":12}}}}'
    )
    parsed = markers.parse(mcp)
    assert isinstance(parsed, markers.McpTools) and parsed.servers["fs"].tools == ["read"]
    opencode_error = Marker(
        name="error",
        data={"message": "MessageAbortedError", "source": "opencode", "message_id": "m1", "error": None},
    )
    assert markers.parse(opencode_error) == markers.ErrorRecord(
        message="MessageAbortedError", source="opencode", message_id="m1"
    )


def test_what_is_written_is_the_shape_older_readers_take() -> None:
    """Defaults are left out, nothing is renamed: an older tether reads a new journal."""
    decision = markers.to_marker(markers.ApprovalDecision(call_id="c", approved=True, by="user"))
    assert decision.data == {"call_id": "c", "approved": True, "by": "user", "scope": "once"}
    assert markers.to_marker(markers.Interrupted(seq=5)).data == {"seq": 5}
    condensed = markers.to_marker(markers.Condensed(seq=1, text="t"))
    assert condensed.data == {"seq": 1, "text": "t"}


MALFORMED: list[tuple[str, dict[str, Any]]] = [
    ("interrupted", {}),
    ("interrupted", {"seq": "three"}),
    ("pin", {"seq": None}),
    ("unpin", {"seq": [1]}),
    ("condensed", {"seq": 1}),
    ("condensed", {"seq": 1, "text": 5}),
    ("approval_request", {"tool": "bash"}),
    ("approval_request", {"call_id": 7, "tool": "bash"}),
    ("approval_request", {"call_id": "c", "suggestion": "not a list"}),
    ("approval_decision", {"call_id": "c", "approved": "yes", "scope": "once"}),
    ("approval_decision", {"call_id": "c", "approved": 1, "scope": "once"}),
    ("error", {"message": ["not", "text"]}),
    ("mcp_tools", {"servers": ["fs"]}),
    ("memory_forget", {"by": "user"}),
    ("pydantic_ai.message", {"message": "text"}),
    ("openai_agents.item", {}),
]


@pytest.mark.parametrize(("name", "data"), MALFORMED, ids=lambda v: str(v))
def test_a_malformed_body_reads_as_none(name: str, data: dict[str, Any]) -> None:
    marker = Marker(name=name, data=data)
    assert markers.parse(marker) is None
    assert markers.read(marker, markers.KINDS[name]) is None


def test_unknown_names_and_other_entries_read_as_none() -> None:
    assert markers.parse(Marker(name="claude-code.progress", data={"line": 3, "raw": {}})) is None
    assert markers.parse(Marker(name="interrupted-ish", data={"seq": 1})) is None
    assert markers.parse(Message.user("hi")) is None
    assert markers.parse(None) is None
    assert markers.read(TitleChange(title="x"), markers.Interrupted) is None
    assert markers.read(markers.to_marker(markers.Pin(seq=1)), markers.Unpin) is None
    with pytest.raises(msgspec.ValidationError):  # writing is strict: a wrong type never reaches the journal
        markers.to_marker(msgspec.convert({"seq": "x"}, markers.Interrupted))


async def test_malformed_and_unknown_markers_do_not_break_any_read(tmp_path: Path) -> None:
    """A real SQLite journal holding every malformed body above, an unknown marker, and well-formed ones
    around them: every face that reads a session reads it, and the well-formed ones still count."""
    store = SqliteStore(tmp_path / "tether.db")
    try:
        info = await store.create_session(directory=str(tmp_path))
        call = markers.ApprovalRequest(call_id="ok", tool="bash", arguments={"command": "ls"}, reason="asks")
        bodies = [
            Message.user("first"),
            *(Marker(name=name, data=data) for name, data in MALFORMED),
            Marker(name="someone.else", data={"anything": [1, {"x": None}]}),
            Message.assistant("answer"),
            markers.to_marker(markers.Interrupted(seq=1)),
            Message.user("second"),
            Message.assistant(),
            markers.to_marker(call),
        ]
        await store.append(info.id, bodies)
        entries: list[Entry] = await store.read(info.id)
        assert len(entries) == len(bodies)

        pending = undecided(entries, info.id)
        assert [p.call_id for p in pending] == ["ok"]

        events = [e async for e in replay_events(store, info.id)]
        asked = [e for e in events if isinstance(e, ApprovalRequested)]
        assert [e.call_id for e in asked] == ["ok"]
        assert not any(isinstance(e, ApprovalResolved) for e in events)

        derived = derive_context(entries)
        assert [m.role for m in derived.messages][:2] == ["user", "assistant"]

        md = io.StringIO()
        await export_markdown(store, info.id, md)
        assert "someone.else" in md.getvalue() and "entry 1 got no answer" in md.getvalue()
        page = io.StringIO()
        await export_html(store, info.id, page)
        assert "entry 1 got no answer" in page.getvalue()
    finally:
        await store.close()
