"""The HTML transcript (`tether.transcript_html`): one self-contained page that holds what a session says
(text as Markdown, tool calls folded with their arguments and output, errors, thinking, compaction, reverts,
sub-agents, times, the model) and nothing that runs: every text from the transcript is escaped, and the
page loads nothing from anywhere."""

from __future__ import annotations

import asyncio
import io
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.messages import (
    APPROVAL_DECISION_MARKER,
    APPROVAL_REQUEST_MARKER,
    Compaction,
    Marker,
    Message,
    Revert,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from tether.store import MemoryStore, Store
from tether.transcript_html import CSP, CSS, export_html, html_chunks, markdown_html

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class Page(HTMLParser):
    """What a page holds, as a browser's parser sees it: its elements with their attributes, and its text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.open: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def all(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]

    @property
    def body_text(self) -> str:
        return "".join(self.text)


async def build_session(store: Store, title: str = f"A title {XSS}") -> str:
    """A session with every kind of thing a transcript shows, with script in every place text comes from."""
    info = await store.create_session(title=title, directory="/work/repo", model="test-model", agent="build")
    call = ToolCallPart(id="c1", name="bash", arguments={"command": f"echo '{XSS}'"})
    failing = ToolCallPart(id="c2", name="edit", arguments={"path": "a.py"})
    child = ToolCallPart(id="c3", name="task", arguments={"prompt": "look around"})
    answer = Message(
        role="assistant",
        parts=[
            ThinkingPart(text="I should *run* the command"),
            TextPart(text=f"Running it. {XSS} [click](javascript:alert(1)) ![pixel](http://evil.example/p.png)"),
            call,
            failing,
            child,
        ],
        model="test-model",
        usage=Usage(input_tokens=1200, output_tokens=34),
    )
    await store.append(
        info.id,
        [
            Message.user(f"Please **fix** it\n\n```python\nprint('{XSS}')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |"),
            answer,
            Marker(name=APPROVAL_REQUEST_MARKER, data={"call_id": "c2", "tool": "edit", "reason": "writes a file"}),
            Marker(name=APPROVAL_DECISION_MARKER, data={"call_id": "c2", "approved": False, "by": "user"}),
            Message.tool(
                ToolResultPart(call_id="c1", content=f"out {XSS}\nline 2", name="bash"),
                ToolResultPart(call_id="c2", content="not run: the user did not allow it", is_error=True),
                ToolResultPart(
                    call_id="c3",
                    content="found it",
                    metadata={"child_id": "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", "agent": "explore", "outcome": "done"},
                ),
            ),
            Message.assistant("A wrong turn"),
            Revert(to_seq=5, reason=f"bad {XSS}"),
            Compaction(summary=f"The user wanted a fix. {XSS}", first_kept_seq=3),
            Message.assistant(f"Done. {XSS}"),
        ],
    )
    return info.id


async def render(store: Store, sid: str, *, raw: bool = False) -> str:
    out = io.StringIO()
    await export_html(store, sid, out, raw=raw)
    return out.getvalue()


async def test_the_page_holds_the_transcript(store: Store) -> None:
    sid = await build_session(store)
    text = await render(store, sid)
    page = Page(text)
    body = page.body_text
    assert "Please fix it" in body.replace("**", "") and page.all("strong")
    assert "Running it." in body and "Done." in body and "test-model" in body
    assert "1,200 in / 34 out tokens" in body
    # tool calls fold open to their arguments and output, the failed one marked, the sub-agent noted
    assert len(page.all("details")) >= 5
    assert "bash(command=" in body and "line 2" in body
    assert "not run: the user did not allow it" in body and "✗ error" in body
    assert any("failed" in (a.get("class") or "") for a in page.all("details"))
    assert "approval asked: writes a file" in body and "✗ denied by user" in body
    assert "↳ sub-agent session ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB (explore) · done" in body
    assert "I should run the command" in body.replace("*", "")  # thinking, folded
    assert any("thinking" in (a.get("class") or "") for a in page.all("details"))
    assert "Compaction: entries before #3 summarized" in body
    assert "Reverted to entry 5 (entry 6 hidden)" in body and "A wrong turn" not in body
    assert page.all("table") and page.all("time")
    assert "/work/repo" in body  # an export names the directory; a share does not (tests/server/test_share.py)


async def test_raw_shows_reverted_entries_marked(store: Store) -> None:
    sid = await build_session(store)
    page = Page(await render(store, sid, raw=True))
    assert "A wrong turn" in page.body_text
    assert any("reverted" in (a.get("class") or "") for a in page.all("article"))


async def test_script_in_a_transcript_stays_text(store: Store) -> None:
    sid = await build_session(store)
    text = await render(store, sid)
    page = Page(text)
    # the only elements are the renderer's own: no script, no image, no handler, no javascript: link
    assert not page.all("script") and not page.all("img") and not page.all("iframe")
    assert all(not k.startswith("on") for _, attrs in page.tags for k in attrs)
    hrefs = [a.get("href") or "" for a in page.all("a")]
    # the renderer's anchors, and the picture left as a link (nothing loads it) that leaks no referrer
    assert {h for h in hrefs if not h.startswith("#e")} == {"http://evil.example/p.png"}
    assert [a.get("rel") for a in page.all("a") if a.get("href") == "http://evil.example/p.png"] == [
        "noopener noreferrer nofollow"
    ]
    # ... and what was sent shows as text, in the title, a message, an argument, an output, a summary
    assert page.body_text.count('<script>alert("x")</script>') >= 6
    assert "<title>A title &lt;script&gt;" in text
    assert "javascript:" not in " ".join(hrefs) and "[click](javascript:alert(1))" in page.body_text


async def test_the_page_loads_nothing_and_runs_nothing(store: Store) -> None:
    sid = await build_session(store)
    page = Page(await render(store, sid))
    metas = {a.get("http-equiv") or a.get("name"): a.get("content") for a in page.all("meta")}
    policy = metas["Content-Security-Policy"] or ""
    assert "default-src 'none'" in policy and "script-src" not in policy and "'unsafe-inline'" not in policy
    assert metas["referrer"] == "no-referrer"
    assert not page.all("link") and not page.all("script")
    assert "frame-ancestors 'none'" in CSP and "url(" not in CSS and "@import" not in CSS


def test_markdown_links_are_kept_safe() -> None:
    assert 'rel="noopener noreferrer nofollow"' in markdown_html("[a](https://example.com)")
    for scheme in ("javascript:alert(1)", "vbscript:x", "data:text/html;base64,PHNjcmlwdD4=", "ms-msdt:x", "/sessions"):
        assert "<a" not in markdown_html(f"[a]({scheme})")
    assert "<img" not in markdown_html("![a](https://example.com/a.png)")
    assert "href" not in markdown_html("[a]()")  # an empty link would lead back into the page (hypothesis found it)
    assert "&lt;b&gt;" in markdown_html("<b>raw</b>")
    aligned = markdown_html("| a | b |\n|:--|--:|\n| 1 | 2 |")
    assert 'class="align-right"' in aligned and "style=" not in aligned  # the page allows no inline style


async def test_an_empty_session_and_a_long_one(store: Store, tmp_path: Path) -> None:
    empty = (await store.create_session()).id
    assert "no messages yet" in await render(store, empty)
    sid = (await store.create_session(title="long")).id
    await store.append(sid, [Message.user(f"message {i}") for i in range(2000)])
    page = Page(await render(store, sid))
    assert len(page.all("article")) == 2000 and "message 1999" in page.body_text


async def test_a_huge_tool_output_is_cut_with_a_note(store: Store) -> None:
    sid = (await store.create_session()).id
    call = ToolCallPart(id="c1", name="cat", arguments={"path": "big"})
    await store.append(
        sid,
        [Message.assistant(tool_calls=[call]), Message.tool(ToolResultPart(call_id="c1", content="x" * 200_000))],
    )
    text = await render(store, sid)
    assert "150,000 more characters" in text and len(text) < 100_000


TAGS = {
    *("html", "head", "meta", "title", "style", "body", "main", "header", "footer", "h1", "h2", "h3", "h4"),
    *("h5", "h6", "dl", "dt", "dd", "div", "article", "span", "a", "time", "p", "details", "summary", "pre"),
    *("code", "strong", "em", "s", "ul", "ol", "li", "blockquote", "hr", "br", "table", "thead", "tbody"),
    *("tr", "th", "td"),
}
"""Every element the renderer writes: anything else came from a transcript."""
ATTRIBUTES = {"class", "id", "href", "rel", "datetime", "lang", "charset", "http-equiv", "content", "name", "start"}
PIECES = [
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '"><svg onload=alert(1)>', "<style>", "</style>",
    "javascript:alert(1)", "[a](", ")", "](", "![p](", "<", ">", "&", '"', "'", "`", "```", "\n", "\n\n", "|",
    "|---|", "|:-:|", "* ", "1. ", "    ", "# ", "> ", "~~", "**", "_", "http://e.x/", "data:text/html,",
    "<!--", "-->", "<![CDATA[", "\\", "&lt;", "&#x3c;script", "\x00", "\u2028", "]]>", "</textarea>",
]  # fmt: skip
untrusted = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=20).map("".join)


@given(title=untrusted, text=untrusted, output=untrusted, argument=untrusted, summary=untrusted)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_nothing_a_transcript_says_becomes_markup(
    title: str, text: str, output: str, argument: str, summary: str
) -> None:
    """Whatever text a title, a message, a tool's argument or output, thinking, a summary or a revert holds, the
    page has only the renderer's own elements and attributes, and links only to the web."""

    async def main() -> str:
        store = MemoryStore()
        sid = (await store.create_session(title=title or None)).id
        call = ToolCallPart(id="c1", name="bash", arguments={"command": argument})
        bad = ToolCallPart(id="c2", name="edit", raw_arguments=argument + "{")
        await store.append(
            sid,
            [
                Message.user(text),
                Message(role="assistant", parts=[ThinkingPart(text=text), TextPart(text=summary), call, bad]),
                Message.tool(ToolResultPart(call_id="c1", content=output), ToolResultPart(call_id="c9", content=text)),
                Compaction(summary=summary, first_kept_seq=1),
                Marker(name=argument or "m", data={"seq": output}),
                Revert(to_seq=1, reason=output),
            ],
        )
        return await render(store, sid, raw=True)

    text_out = asyncio.run(main())
    page = Page(text_out)
    for tag, attrs in page.tags:
        assert tag in TAGS, tag
        assert set(attrs) <= ATTRIBUTES, (tag, attrs)
        href = attrs.get("href")
        if href is not None:
            assert href.startswith("#e") or href.lower().startswith(("http://", "https://", "mailto:")), href
    assert text_out.count("<style>") == 1 and text_out.count("</style>") == 1


async def test_sub_agents_nest_under_their_call_only_when_asked(store: Store) -> None:
    parent = (await store.create_session(title="parent")).id
    call = ToolCallPart(id="t1", name="task", arguments={"prompt": "look around"})
    child = await store.create_session(parent_id=parent, agent="explore", metadata={"task": {"call_id": "t1"}})
    grandchild = await store.create_session(parent_id=child.id, metadata={"task": {"call_id": "g1"}})
    await store.append(grandchild.id, [Message.user("deepest"), Message.assistant("grandchild words")])
    inner = ToolCallPart(id="g1", name="task", arguments={"prompt": "deeper"})
    await store.append(
        child.id,
        [
            Message.user("look around"),
            Message.assistant(tool_calls=[inner]),
            Message.tool(ToolResultPart(call_id="g1", content="deeper done")),
            Message.assistant("child words"),
        ],
    )
    done = ToolResultPart(call_id="t1", content="child words", metadata={"child_id": child.id, "agent": "explore"})
    await store.append(parent, [Message.user("go"), Message.assistant(tool_calls=[call]), Message.tool(done)])

    out = io.StringIO()
    await export_html(store, parent, out, children=True)
    nested = out.getvalue()
    page = Page(nested)
    assert "grandchild words" in nested and f"Sub-agent session {child.id} (explore)" in nested
    ids = [a["id"] for _, a in page.tags if a.get("id")]
    assert len(ids) == len(set(ids))  # each session's entries have ids of their own
    assert {f"#{i}" for i in ids} >= {a["href"] for a in page.all("a") if (a.get("href") or "").startswith("#")}
    # the child's transcript sits inside the call's <details>, before it closes
    call_at = nested.index("task(prompt=")
    assert nested.index("child words", nested.index("Sub-agent session")) > call_at
    assert nested.index("</details>", nested.index("grandchild words")) > nested.index("grandchild words")

    flat = await render(store, parent)
    assert "grandchild words" not in flat and f"sub-agent session {child.id}" in flat
    shared = "".join([piece async for piece in html_chunks(store, parent, shared=True, children=True)])
    assert "child words" in shared and "look around" in shared and "deepest" not in shared  # a share never nests


async def test_answers_that_stop_short_say_why(store: Store) -> None:
    """An answer a kill cut (journaled from its saved stream), one the output limit cut, one a cancel cut."""
    from tether import Session
    from tether.messages import INTERRUPTED_ANSWER

    session = await Session.create(store, directory="/w")
    killed = Message(
        role="assistant",
        parts=[TextPart(text="The bug is in the par")],
        finish_reason="interrupted",
        metadata={"partial": True, INTERRUPTED_ANSWER: True, "cut_calls": [{"id": "c2", "name": "write"}]},
    )
    limited = Message(role="assistant", parts=[TextPart(text="one two thr")], finish_reason="length")
    await session.append(Message.user("q"), killed, Message.user("again"), limited)
    page = await render(store, session.id)
    assert "[interrupted: tether stopped while the model was answering; a call to write was cut mid-arguments]" in page
    assert "[cut off at the output limit]" in page
    assert page.count('class="note err cut"') == 2
