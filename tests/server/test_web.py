"""The web page in a real browser: Debian's Chromium driven by Playwright, against a real server on loopback
(the conftest's, with a scripted model and gated tools, so that a run is a real run held where the test
wants it). The list, opening a session, watching a live run, answering an approval, cancelling, forking
and reverting; a dropped connection mid-run that loses nothing and repeats nothing (the rendered transcript
is compared with the journal, seq by seq); paging through a session of 10,000 messages; the keyboard; the
token traded for a cookie; untrusted text that stays text. Every page is checked for console errors.

Screenshots go to `$TETHER_SCREENSHOTS` when set (a folder), else to the test's tmp dir. Chromium is
required, not optional: without it these tests fail and say how to install it."""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect, sync_playwright

from tether import Message, ToolCallPart
from tether.messages import Compaction, Entry, Revert, TextPart, ThinkingPart, ToolResultPart
from tether.providers.base import ModelRequest
from tether.providers.scripted import ScriptedResponse
from tether.runtime.handle import SessionHandle
from tether.server import ServerSettings
from tether.server.guard import COOKIE, cookie_value

from .conftest import GATES, Served, serve

CHROMIUM = os.environ.get("TETHER_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TOKEN = "web-test-token-0123456789abcdef"
WAIT = 20_000
"""Milliseconds an expectation waits for the page (a bound on a hang, not a timing: it passes at once)."""


def agent(request: ModelRequest) -> Message | str | ScriptedResponse:
    """The scripted model: what it does depends on the last prompt. `change X` calls `change` (which asks
    first), `wait G` calls `wait_for` at gate G, anything else is answered in Markdown."""
    prompt = next(m.text for m in reversed(request.messages) if m.role == "user" and m.text)
    last = request.messages[-1]
    if last.role == "tool":
        result = last.tool_results[0].content
        return f"Done: **{result}**.\n\n```python\nprint('ok')\n```\n\n- one\n- two"
    if prompt.startswith("change "):
        call = ToolCallPart(id=f"ch{len(request.messages)}", name="change", arguments={"what": prompt[7:]})
        return Message.assistant("I will change it.", tool_calls=[call])
    if prompt.startswith("stream "):  # paced as a model streams, so that the page is seen mid-answer
        words = " ".join(f"word{i}" for i in range(60))
        thought = ThinkingPart(text="Thinking it over. " * 6)
        answer = Message(role="assistant", parts=[thought, TextPart(text=f"**Streaming** {words} END")])
        return ScriptedResponse(message=answer, chunk_delay=0.05)
    if prompt.startswith("wait "):
        call = ToolCallPart(id=f"w{len(request.messages)}", name="wait_for", arguments={"gate": prompt[5:]})
        return Message.assistant(tool_calls=[call])
    return f"You said *{prompt}*. Here is `code` and a list:\n\n1. first\n2. second"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(
            f"the browser tests need Chromium and there is none at {CHROMIUM}: install it "
            "(Debian: apt-get install chromium) or set TETHER_CHROMIUM to its path"
        )
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ["TETHER_SCREENSHOTS"]) if os.environ.get("TETHER_SCREENSHOTS") else tmp_path / "shots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def tab(browser: Browser, *, width: int = 1360, height: int = 860, expected: str | None = None) -> Iterator[Page]:
    """A page in a fresh context; on the way out, fails if its console logged an error or a script threw.
    `expected`: a pattern of the errors the test provokes itself (a request it made fail)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error" and not (expected and re.search(expected, message.text)):
            errors.append(f"console: {message.text}")

    page.on("console", console)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    page.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
    try:
        yield page
        page.wait_for_timeout(50)  # let a last console message arrive
        assert errors == [], f"the page logged errors: {errors}"
    finally:
        context.close()


def create(served: Served, title: str, entries: list[Any] | None = None, **fields: Any) -> str:
    fields.setdefault("directory", served.workspace)

    async def make() -> str:
        handle = await SessionHandle.create(served.state.store, title=title, **fields)
        if entries:
            await served.state.store.append(handle.id, entries)
        return handle.id

    sid: str = served.call(make())
    return sid


def journal(served: Served, session_id: str) -> list[Entry]:
    entries: list[Entry] = served.call(served.state.store.read(session_id, 1, None))
    return entries


def rendered_seqs(page: Page) -> list[int]:
    return [int(s) for s in page.eval_on_selector_all("#entries > li[data-seq]", "els => els.map(e => e.dataset.seq)")]


def assert_matches_journal(page: Page, served: Served, session_id: str) -> None:
    """Every journal entry is on the page once, in order, and each tool call once."""
    entries = journal(served, session_id)
    expect(page.locator("#entries > li[data-seq]")).to_have_count(len(entries), timeout=WAIT)
    assert rendered_seqs(page) == [e.seq for e in entries]
    calls = [p.id for e in entries if isinstance(e.body, Message) for p in e.body.tool_calls]
    shown = page.eval_on_selector_all("#entries details.tool", "els => els.map(e => e.dataset.call)")
    assert sorted(shown) == sorted(calls)


def open_session(page: Page, served: Served, session_id: str) -> None:
    page.goto(f"{served.url}/#/s/{session_id}")
    expect(page.locator("#session")).to_be_visible(timeout=WAIT)


# --- the main path -----------------------------------------------------------------------------------------


def test_list_open_watch_approve_cancel_fork(browser: Browser, tmp_path: Path, shots: Path) -> None:
    GATES["web-live"] = threading.Event()
    GATES["web-cancel"] = threading.Event()
    with serve(tmp_path, agent) as served:
        older = create(served, "Tidy the README", [Message.user("tidy it"), Message.assistant("Tidied.")])
        parent = create(served, "Fix the flaky parser test", [Message.user("find the flaky test")])
        create(served, "Look for the race", [Message.user("look")], parent_id=parent)
        with tab(browser) as page:
            page.goto(served.url)
            rows = page.locator(".session-row")
            expect(rows).to_have_count(2, timeout=WAIT)  # the child is nested, folded
            expect(page.locator(".expander")).to_have_text(re.compile(r"\+ 1"))
            page.locator(".expander").click()
            expect(rows).to_have_count(3)
            expect(page.locator("#session-list ul .session-row")).to_contain_text("Look for the race")
            # open a session: its transcript
            page.get_by_text("Tidy the README").click()
            expect(page.locator("#title")).to_have_text("Tidy the README")
            expect(page.locator("#entries")).to_contain_text("Tidied.")
            assert page.url.endswith(f"#/s/{older}")

            # a live run: the tool call shows as running while it waits at a gate, then the answer comes
            page.locator("#prompt").fill("wait web-live")
            page.locator("#prompt").press("Enter")
            running = page.locator("details.tool .tool-state.running")
            expect(running).to_have_count(1, timeout=WAIT)
            expect(page.locator("#status")).to_have_text("running")
            expect(page.locator(".session-row[aria-current=true] .st.running")).to_have_count(1, timeout=WAIT)
            expect(page.locator("#cancel")).to_be_enabled()
            GATES["web-live"].set()
            expect(page.locator("#entries")).to_contain_text("gate web-live opened", timeout=WAIT)
            expect(page.locator("#entries .md code").last).to_have_text("print('ok')")
            expect(page.locator("#status")).to_have_text("idle", timeout=WAIT)
            assert_matches_journal(page, served, older)

            # an approval: the call waits; the card's "Allow once" lets it run
            page.locator("#prompt").fill("change the config")
            page.locator("#send").click()
            card = page.locator(".approval")
            expect(card).to_be_visible(timeout=WAIT)
            expect(card).to_contain_text("change wants to run")
            expect(page.locator("#status")).to_have_text("waiting for approval")
            page.screenshot(path=str(shots / "approval.png"))
            card.get_by_role("button", name="Allow once").click()
            expect(card).to_have_count(0)
            expect(page.locator("#entries")).to_contain_text("changed the config", timeout=WAIT)
            expect(page.locator("#entries")).to_contain_text("Allowed by user (once)")
            # in its place: with the call it decided, not as a line below it
            expect(page.locator("#entries details.tool .approval-note.allowed")).to_contain_text(
                "Allowed by user (once)"
            )
            expect(page.locator("#entries details.tool summary .tool-approval")).to_have_text("allowed")
            expect(page.locator("#status")).to_have_text("idle", timeout=WAIT)
            assert_matches_journal(page, served, older)

            # cancel a run held at a gate
            page.locator("#prompt").fill("wait web-cancel")
            page.locator("#prompt").press("Enter")
            expect(running).to_have_count(1, timeout=WAIT)
            page.locator("#cancel").click()
            expect(page.locator(".run-error")).to_have_text("The run was cancelled.", timeout=WAIT)
            expect(page.locator("#status")).to_have_text("idle", timeout=WAIT)
            expect(page.locator("#cancel")).to_be_disabled()
            assert_matches_journal(page, served, older)
            page.locator("#entries details.tool").first.click()  # open one call: its arguments and output
            page.screenshot(path=str(shots / "session.png"))

            # fork at the first answer: a new session with entries 1..2, opened, in the list
            first_answer = page.locator("#entries > li.assistant").first
            first_answer.hover()
            first_answer.get_by_role("button", name="Fork from here").click()
            expect(page).not_to_have_url(re.compile(older), timeout=WAIT)
            fork_id = page.url.rsplit("/", 1)[1]
            expect(page.locator("#meta")).to_contain_text(f"fork of {older[:12]} at #2", timeout=WAIT)
            expect(page.locator(".session-row[aria-current=true]")).to_have_count(1, timeout=WAIT)
            assert [e.seq for e in journal(served, fork_id)] == [1, 2]
            assert_matches_journal(page, served, fork_id)
        GATES["web-cancel"].set()


def test_revert_at_a_message_dims_what_it_hides(browser: Browser, tmp_path: Path) -> None:
    with serve(tmp_path, agent) as served:
        sid = create(
            served,
            "Revert me",
            [Message.user("one"), Message.assistant("first answer"), Message.user("two"), Message.assistant("second")],
        )
        with tab(browser) as page:
            open_session(page, served, sid)
            target = page.locator('#entries > li[data-seq="2"]')
            target.hover()
            button = target.locator("button.revert")
            button.click()
            expect(button).to_have_text("Click again to revert")  # a second click confirms
            button.click()
            expect(page.locator("#entries")).to_contain_text("Reverted to #2", timeout=WAIT)
            expect(page.locator("#entries > li.reverted")).to_have_count(2)
            assert_matches_journal(page, served, sid)
        entries = journal(served, sid)
        assert isinstance(entries[-1].body, Revert) and entries[-1].body.to_seq == 2


# --- what a transcript shows -------------------------------------------------------------------------------------

DIFF = """--- a/parser/tokens.py
+++ b/parser/tokens.py
@@ -41,7 +41,9 @@ def read_number(self):
     start = self.pos
-    while self.peek().isdigit():
+    while self.pos < len(self.text) and self.peek().isdigit():
         self.pos += 1
+    if start == self.pos:
+        raise ParseError(f"expected a digit at {start}")
     return int(self.text[start:self.pos])
"""


def worked_session(served: Served) -> tuple[str, str]:
    """A session as an agent leaves one: thinking, a read, an edit with its diff, a shell run, a sub-agent,
    a compaction, a final answer in Markdown."""
    read = ToolCallPart(id="r1", name="read", arguments={"path": "parser/tokens.py"})
    edit = ToolCallPart(
        id="e1",
        name="edit",
        arguments={"path": "parser/tokens.py", "old_string": "while self.peek()", "new_string": "while self.pos < n"},
    )
    run = ToolCallPart(id="b1", name="bash", arguments={"command": "pytest -q tests/test_tokens.py"})
    task = ToolCallPart(id="t1", name="task", arguments={"description": "Look for other unbounded peeks"})
    parent = create(served, "Fix the flaky tokenizer test", [], directory="/home/ana/src/tokenizer")
    child = create(
        served,
        "Look for other unbounded peeks",
        [Message.user("Look for other unbounded peeks"), Message.assistant("Only `read_number` had one.")],
        parent_id=parent,
        directory="/home/ana/src/tokenizer",
    )
    answer = (
        "The test was flaky because `read_number` read **past the end** of the input when a number ended the "
        "text: `peek()` then returned the last character again.\n\n"
        "Fixed in `parser/tokens.py`:\n\n"
        "```python\nwhile self.pos < len(self.text) and self.peek().isdigit():\n    self.pos += 1\n```\n\n"
        "| test | before | after |\n| --- | --- | --- |\n| `test_tokens.py` | 1 failed in 20 | 20 passed |\n"
    )
    served.call(
        served.state.store.append(
            parent,
            [
                Message.user("tests/test_tokens.py fails about one run in twenty. Find out why and fix it."),
                Message(
                    role="assistant",
                    model="anthropic/claude-sonnet-4-5",
                    parts=[
                        ThinkingPart(text="A flaky tokenizer test: probably input-dependent. Read the tokenizer."),
                        TextPart(text="Let me read the tokenizer first."),
                        read,
                    ],
                ),
                Message.tool(
                    ToolResultPart(
                        call_id="r1",
                        name="read",
                        content="41  start = self.pos\n42  while self.peek().isdigit():\n43      self.pos += 1",
                        metadata={"duration": 0.004},
                    )
                ),
                Message(role="assistant", model="anthropic/claude-sonnet-4-5", parts=[edit, task]),
                Message.tool(
                    ToolResultPart(
                        call_id="e1",
                        name="edit",
                        content="edited parser/tokens.py: replaced 1 occurrence (line 42)",
                        metadata={"duration": 0.011, "diff": DIFF},
                    ),
                    ToolResultPart(
                        call_id="t1",
                        name="task",
                        content=f"Only read_number had one.\n\n[sub-agent session {child}: completed in 1 step]",
                        metadata={"duration": 9.2, "child_id": child},
                    ),
                ),
                Compaction(
                    summary="The user asked to fix a flaky test; the tokenizer was read and edited.",
                    first_kept_seq=4,
                    strategy="model",
                    tokens_before=48210,
                    tokens_after=6120,
                ),
                Message(role="assistant", model="anthropic/claude-sonnet-4-5", parts=[run]),
                Message.tool(
                    ToolResultPart(
                        call_id="b1",
                        name="bash",
                        content="....................                                    [100%]\n20 passed in 0.41s",
                        metadata={"duration": 1.43},
                    )
                ),
                Message(role="assistant", model="anthropic/claude-sonnet-4-5", parts=[TextPart(text=answer)]),
            ],
        )
    )
    return parent, child


def test_a_transcript_shows_calls_diffs_thinking_markers_and_sub_agents(
    browser: Browser, tmp_path: Path, shots: Path
) -> None:
    with serve(tmp_path, agent) as served:
        create(served, "Add a --json flag to the export", [Message.user("add --json"), Message.assistant("Added.")])
        parent, child = worked_session(served)
        with tab(browser) as page:
            open_session(page, served, parent)
            entries = page.locator("#entries")
            expect(entries).to_contain_text("20 passed", timeout=WAIT)
            thinking = page.locator("details.thinking")
            expect(thinking).to_have_count(1)
            assert thinking.get_attribute("open") is None  # folded
            calls = page.locator("details.tool")
            expect(calls).to_have_count(4)
            for call in ("r1", "e1", "t1", "b1"):  # each call holds its own output, none left running
                expect(page.locator(f'details.tool[data-call="{call}"] .tool-state')).to_have_class(
                    re.compile(r"\bok\b")
                )
            page.locator('details.tool[data-call="e1"] summary').click()
            expect(page.locator('details.tool[data-call="e1"] pre.diff .add')).to_have_count(3)
            expect(page.locator('details.tool[data-call="e1"] pre.diff .del')).to_have_count(1)
            expect(entries).to_contain_text("Compacted (model) · 48210 → 6120 tokens · kept from #4")
            expect(page.locator("#entries table td").first).to_have_text("test_tokens.py")
            # the sub-agent's run, nested under its call
            page.locator('details.tool[data-call="t1"] summary').click()
            page.get_by_role("button", name="Show the sub-agent run").click()
            expect(page.locator('details.tool[data-call="t1"] .child')).to_contain_text("Only read_number had one.")
            # the child in the list, under its parent; the chip beside the title, never over it
            title = page.locator(".session-item.has-kids > .session-row .t").bounding_box()
            chip = page.locator(".expander").bounding_box()
            assert title is not None and chip is not None and title["x"] + title["width"] <= chip["x"]
            page.locator(".expander").click()
            expect(page.locator("#session-list ul .session-row")).to_contain_text("Look for other unbounded peeks")
            page.locator('details.tool[data-call="t1"] summary').click()  # fold it again for the picture
            page.locator('#entries > li[data-seq="1"]').evaluate("el => el.scrollIntoView({block: 'start'})")
            page.evaluate("document.activeElement.blur()")
            page.mouse.move(5, 840)
            expect(page.locator('#entries > li[data-seq="4"] .entry-actions')).to_have_css("opacity", "0")
            page.screenshot(path=str(shots / "transcript.png"))
            assert_matches_journal(page, served, parent)
            assert child


def test_an_answer_is_seen_as_it_streams_then_once_as_journaled(browser: Browser, tmp_path: Path) -> None:
    with serve(tmp_path, agent) as served:
        sid = create(served, "Streaming", [Message.user("hi"), Message.assistant("hello")])
        with tab(browser) as page:
            open_session(page, served, sid)
            page.locator("#prompt").fill("stream it")
            page.locator("#prompt").press("Enter")
            live = page.locator("#live .live-block.assistant")
            expect(live).to_contain_text("Streaming", timeout=WAIT)  # mid-answer: the run still goes
            expect(page.locator("#live details.thinking")).to_contain_text("Thinking it over.")
            assert "END" not in (live.text_content() or "")
            expect(page.locator("#entries")).to_contain_text("word59 END", timeout=WAIT)
            expect(page.locator("#live .live-block")).to_have_count(0)
            assert (page.locator("#transcript").text_content() or "").count("word59 END") == 1
            expect(page.locator("#entries details.thinking")).to_have_count(1)
            assert_matches_journal(page, served, sid)


# --- a dropped connection --------------------------------------------------------------------------------------


def test_a_connection_dropped_mid_run_loses_nothing_and_repeats_nothing(browser: Browser, tmp_path: Path) -> None:
    """The browser goes offline while a run waits at a gate; the run goes on and ends while it is away
    (tool result, answer, done); back online, EventSource reconnects with its Last-Event-ID and the page
    shows every entry of the journal once, the answer once, and the run as ended."""
    GATES["web-drop"] = threading.Event()
    with serve(tmp_path, agent) as served:
        sid = create(served, "Survive a drop", [Message.user("hello"), Message.assistant("hi")])
        with tab(browser, expected="net::ERR_INTERNET_DISCONNECTED") as page:  # its reconnects, while offline
            open_session(page, served, sid)
            page.locator("#prompt").fill("wait web-drop")
            page.locator("#prompt").press("Enter")
            expect(page.locator("details.tool .tool-state.running")).to_have_count(1, timeout=WAIT)
            page.context.set_offline(True)
            page.wait_for_function("() => !navigator.onLine")
            GATES["web-drop"].set()
            done = served.call(_wait_idle(served, sid))
            assert done
            assert "gate web-drop opened" not in (page.locator("#entries").text_content() or "")
            page.context.set_offline(False)
            expect(page.locator("#entries")).to_contain_text("gate web-drop opened", timeout=WAIT)
            expect(page.locator("#status")).to_have_text("idle", timeout=WAIT)
            assert_matches_journal(page, served, sid)
            text = page.locator("#transcript").text_content() or ""
            assert text.count("gate web-drop opened") == 2  # the tool's output, and the answer quoting it
            assert page.locator("#live .live-block").count() == 0


async def _wait_idle(served: Served, session_id: str) -> bool:
    import asyncio

    for _ in range(2000):
        if await served.state.manager.status(session_id) == "idle":
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_stream_the_server_ends_mid_run_is_resumed_by_last_event_id(browser: Browser, tmp_path: Path) -> None:
    """The server ends the page's event stream while the run waits at a gate (as a proxy or a restart of the
    connection would); the browser's EventSource reconnects by itself with `Last-Event-ID`, the server
    replays what came meanwhile, and the page shows the journal once."""
    GATES["web-server-drop"] = threading.Event()
    with serve(tmp_path, agent) as served:
        sid = create(served, "Dropped by the server", [Message.user("hello"), Message.assistant("hi")])
        with tab(browser) as page:
            streams: list[Request] = []
            page.on("request", lambda r: streams.append(r) if f"/sessions/{sid}/events" in r.url else None)
            open_session(page, served, sid)
            page.locator("#prompt").fill("wait web-server-drop")
            page.locator("#prompt").press("Enter")
            expect(page.locator("details.tool .tool-state.running")).to_have_count(1, timeout=WAIT)
            expect(page.locator("#session")).to_have_attribute("data-stream-opens", "1")
            assert len(streams) == 1

            async def end_streams() -> int:
                entry = served.state.manager._sessions[sid]  # the server's side of the page's stream
                ended = list(entry.subscribers)
                for subscriber in ended:
                    subscriber.close()
                return len(ended)

            assert served.call(end_streams()) == 1
            GATES["web-server-drop"].set()  # the run goes on and ends while the page is away (or coming back)
            expect(page.locator("#entries")).to_contain_text("gate web-server-drop opened", timeout=WAIT)
            expect(page.locator("#status")).to_have_text("idle", timeout=WAIT)
            expect(page.locator("#session")).to_have_attribute("data-stream-opens", "2", timeout=WAIT)
            assert len(streams) == 2 and int(streams[1].all_headers()["last-event-id"]) > 0  # resumed where it was
            assert_matches_journal(page, served, sid)
            assert (page.locator("#transcript").text_content() or "").count("gate web-server-drop opened") == 2


# --- 10,000 messages ------------------------------------------------------------------------------------------


def test_a_session_of_ten_thousand_messages_is_paged(browser: Browser, tmp_path: Path) -> None:
    """Only the tail is rendered; earlier pages come as the reader scrolls up, each entry once."""
    bodies: list[Any] = []
    for i in range(5000):
        bodies += [Message.user(f"question {i}"), Message.assistant(f"answer {i}")]
    with serve(tmp_path, agent) as served:
        sid = create(served, "Long one", bodies)
        with tab(browser) as page:
            open_session(page, served, sid)
            expect(page.locator("#entries")).to_contain_text("answer 4999", timeout=WAIT)
            assert len(rendered_seqs(page)) == 100
            page.locator("#transcript").evaluate("el => el.scrollTop = 0")
            expect(page.locator("#entries > li[data-seq]")).to_have_count(200, timeout=WAIT)
            # the button, pressed where the reader is (a real click would scroll it into view first: at the
            # top, where scrolling loads a page by itself, and then one page or two come, by timing)
            page.locator("#load-earlier").evaluate("el => el.click()")
            expect(page.locator("#entries > li[data-seq]")).to_have_count(300, timeout=WAIT)
            seqs = rendered_seqs(page)
            assert seqs == list(range(10_000 - 299, 10_001))


# --- the keyboard ---------------------------------------------------------------------------------------------


def test_the_page_works_from_the_keyboard(browser: Browser, tmp_path: Path) -> None:
    with serve(tmp_path, agent) as served:
        sid = create(served, "Keyboard only", [Message.user("hi"), Message.assistant("hello")])
        with tab(browser) as page:
            page.goto(served.url)
            expect(page.locator(".session-row")).to_have_count(1, timeout=WAIT)
            page.locator("body").press("/")
            expect(page.locator("#search")).to_be_focused()
            page.keyboard.press("Tab")
            expect(page.locator("#directory")).to_be_focused()
            page.keyboard.press("Tab")
            expect(page.locator(".session-row")).to_be_focused()
            page.keyboard.press("Enter")
            expect(page.locator("#title")).to_have_text("Keyboard only", timeout=WAIT)
            page.locator("#prompt").focus()
            page.keyboard.type("first line")
            page.keyboard.press("Shift+Enter")
            page.keyboard.type("second line")
            expect(page.locator("#prompt")).to_have_value("first line\nsecond line")
            page.keyboard.press("Enter")
            expect(page.locator("#entries")).to_contain_text("You said first line", timeout=WAIT)
            expect(page.locator("#prompt")).to_have_value("")
            expect(page.locator("#prompt")).to_be_focused()
            # a tool call opens with Enter on its summary
            page.keyboard.press("Escape")
            page.locator("body").press("n")
            expect(page.locator("#new-dialog")).to_be_visible()
            page.keyboard.press("Escape")
            expect(page.locator("#new-dialog")).to_be_hidden()
            # a new session from the dialog, by keyboard
            page.locator("body").press("n")
            expect(page.locator("#new-prompt")).to_be_focused()  # the directory is filled in already
            page.keyboard.type("hello there")
            page.keyboard.press("Tab")
            page.keyboard.press("Tab")
            expect(page.get_by_role("button", name="Create")).to_be_focused()
            page.keyboard.press("Enter")
            expect(page.locator("#entries")).to_contain_text("You said hello there", timeout=WAIT)
            assert sid not in page.url


# --- share ---------------------------------------------------------------------------------------------------


def test_the_share_button_makes_a_link_that_opens_the_transcript(browser: Browser, tmp_path: Path, shots: Path) -> None:
    """The button posts `{"expires_in": seconds|null}` to `POST /sessions/{id}/shares` and shows the link; the
    link opens the read-only transcript (the share view), and the share is in the store with its expiry."""
    with serve(tmp_path, agent) as served:
        sid = create(served, "Share me", [Message.user("hi"), Message.assistant("hello from the agent")])
        with tab(browser) as page:
            open_session(page, served, sid)
            page.locator("#share").click()
            dialog = page.locator("#share-dialog")
            expect(dialog).to_be_visible()
            page.locator("#share-create").click()
            url = page.locator("#share-url")
            expect(url).to_have_value(re.compile(re.escape(served.url) + r"/share/\S{22,}"), timeout=WAIT)
            expect(page.locator("#share-expires")).to_contain_text("Expires")
            page.screenshot(path=str(shots / "share.png"))
            day_link = url.input_value()
            page.locator("#share-expiry").select_option("")
            page.locator("#share-create").click()
            expect(page.locator("#share-expires")).to_contain_text("Never expires", timeout=WAIT)
            forever_link = url.input_value()
            assert forever_link != day_link
            page.keyboard.press("Escape")
            expect(dialog).to_be_hidden()
            page.goto(forever_link)
            expect(page.locator("body")).to_contain_text("hello from the agent", timeout=WAIT)
            assert page.locator("#prompt, #share, #session-list").count() == 0  # the transcript and nothing else
        shares = served.call(served.state.store.list_shares(sid))
        assert len(shares) == 2
        assert sorted(s.expires_at is None for s in shares) == [False, True]
        day = next(s for s in shares if s.expires_at is not None)
        assert day.expires_at is not None and abs(day.expires_at - day.created_at - 86400) < 5


# --- untrusted text -------------------------------------------------------------------------------------------


def test_transcript_text_cannot_run_script(browser: Browser, tmp_path: Path) -> None:
    """Markdown is sanitized, tool output is text: script tags, handlers, javascript: links and images
    from elsewhere never run or load."""
    attack = (
        "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"
        "[click](javascript:window.__pwned=3) <a href='#' onclick='window.__pwned=4'>a</a>"
        "<iframe src='javascript:1'></iframe><b style='color:red'>bold</b>"
    )
    call = ToolCallPart(id="x1", name="look", arguments={"what": "<img src=x onerror=alert(1)>"})
    result = ToolResultPart(call_id="x1", name="look", content="<b>not bold</b><script>window.__pwned=5</script>")
    with serve(tmp_path, agent) as served:
        sid = create(
            served,
            "<img src=x onerror='window.__pwned=6'>",
            [
                Message.user(attack),
                Message(role="assistant", parts=[ThinkingPart(text=attack), TextPart(text=attack)]),
                Message.assistant(tool_calls=[call]),
                Message.tool(result),
                Compaction(summary=attack, first_kept_seq=2, strategy="mechanical"),
            ],
        )
        with tab(browser) as page:
            open_session(page, served, sid)
            expect(page.locator("#entries")).to_contain_text("bold", timeout=WAIT)
            page.locator("details.tool").click()
            expect(page.locator("details.tool pre.text").last).to_have_text(
                "<b>not bold</b><script>window.__pwned=5</script>"
            )
            assert page.evaluate("window.__pwned") is None
            assert page.locator("#entries script, #entries img, #entries iframe, #session-list img").count() == 0
            assert page.locator("#entries [onclick], #entries [onerror], #entries [style]").count() == 0
            hrefs = page.eval_on_selector_all("#entries a", "els => els.map(a => a.getAttribute('href'))")
            assert not any(h and h.lower().startswith("javascript") for h in hrefs)


def test_an_id_in_a_crafted_link_cannot_steer_the_page_to_another_session(browser: Browser, tmp_path: Path) -> None:
    """A link from elsewhere may open the page (the guard lets the navigation in); an id in its fragment that
    holds `/..` must stay one path segment in every request, or a prompt typed there would go elsewhere."""
    with serve(tmp_path, agent) as served:
        mine, other = create(served, "mine"), create(served, "other")
        before = len(journal(served, other))
        with tab(browser, expected="404|Not Found|not found") as page:
            page.goto(f"{served.url}/#/s/{mine}%2F..%2F{other}")
            expect(page.locator("#session")).to_be_visible(timeout=WAIT)
            page.locator("#prompt").fill("rm -rf /")
            with page.expect_response(lambda r: "/prompt" in r.url, timeout=WAIT) as sent:
                page.locator("#send").click()
            assert sent.value.status == 404 and "%2F" in sent.value.url
        assert len(journal(served, other)) == before
        assert journal(served, mine) == []


# --- the token and the cookie -------------------------------------------------------------------------------------


def test_the_token_in_the_link_becomes_an_httponly_cookie(browser: Browser, tmp_path: Path) -> None:
    with serve(tmp_path, agent, ServerSettings(token=TOKEN)) as served:
        create(served, "Behind a token", [Message.user("hi")])
        with tab(browser) as page:
            page.goto(f"{served.url}/#token={TOKEN}")
            expect(page.locator(".session-row")).to_have_count(1, timeout=WAIT)
            assert TOKEN not in page.url  # gone from the address bar (and it never went over the wire)
            cookies = {c["name"]: c for c in page.context.cookies()}
            assert cookies[COOKIE]["httpOnly"] and cookies[COOKIE]["sameSite"] == "Strict"
            assert cookies[COOKIE]["value"] == cookie_value(TOKEN) != TOKEN
            assert page.evaluate("document.cookie") == ""  # no script can read it
            page.get_by_text("Behind a token").click()
            expect(page.locator("#entries")).to_contain_text("hi", timeout=WAIT)
            expect(page.locator("#connection")).to_contain_text("live", timeout=WAIT)  # the event feed, by cookie
        # no token: the page asks for it (the wrong one typed first is refused: that 401 is expected)
        with tab(browser, expected=r"status of 401 \(Unauthorized\)") as page:
            page.goto(served.url)
            dialog = page.locator("#token-dialog")
            expect(dialog).to_be_visible(timeout=WAIT)
            page.locator("#token-input").fill("wrong-token-wrong-token")
            page.locator("#token-input").press("Enter")
            expect(page.locator("#token-error")).to_be_visible(timeout=WAIT)
            page.locator("#token-input").fill(TOKEN)
            page.locator("#token-input").press("Enter")
            expect(dialog).to_be_hidden(timeout=WAIT)
            expect(page.locator(".session-row")).to_have_count(1, timeout=WAIT)
        with tab(browser) as page:  # the signed-in link pasted into a tab that asks for the token
            page.goto(served.url)
            expect(page.locator("#token-dialog")).to_be_visible(timeout=WAIT)
            expect(page.locator("#sessions-empty")).to_be_hidden()  # nothing is said of sessions not read
            page.goto(f"{served.url}/#token={TOKEN}")  # the same document: only the fragment changes
            expect(page.locator("#token-dialog")).to_be_hidden(timeout=WAIT)
            expect(page.locator(".session-row")).to_have_count(1, timeout=WAIT)
            assert TOKEN not in page.url


def test_the_cookie_is_checked_like_the_token(tmp_path: Path) -> None:
    """Over HTTP: a wrong cookie is refused; the right one is refused from a foreign Origin or Host; the page
    and its files are served without a token (they hold no data), nothing outside the page's folder is."""
    with serve(tmp_path, agent, ServerSettings(token=TOKEN)) as served, httpx2.Client(base_url=served.url) as client:
        assert client.get("/sessions").status_code == 401
        wrong = client.get("/sessions", headers={"Cookie": f"{COOKIE}={cookie_value('another-token-entirely')}"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
        raw = client.get("/sessions", headers={"Cookie": f"{COOKIE}={TOKEN}"})  # the token itself is no cookie
        assert raw.status_code == 401
        good = {"Cookie": f"{COOKIE}={cookie_value(TOKEN)}"}
        assert client.get("/sessions", headers=good).status_code == 200
        odd = {"Cookie": 'other="a b; c=\\"; ' + good["Cookie"]}  # another app's cookie on this host, malformed
        assert client.get("/sessions", headers=odd).status_code == 200
        foreign = client.post(
            "/sessions", json={"directory": str(served.workspace)}, headers={**good, "Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "forbidden_origin"
        rebound = client.get("/sessions", headers={**good, "Host": "evil.example"})
        assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "forbidden_host"
        assert client.post("/auth/session", json={"token": "nope-nope-nope-nope"}).status_code == 401
        exchanged = client.post("/auth/session", json={"token": TOKEN})
        assert exchanged.status_code == 200
        set_cookie = exchanged.headers["set-cookie"].lower()
        assert "httponly" in set_cookie and "samesite=strict" in set_cookie and TOKEN.lower() not in set_cookie
        assert client.get("/auth/session").json() == {"token_required": True, "authenticated": True}
        client.cookies.clear()
        assert client.get("/auth/session").json() == {"token_required": True, "authenticated": False}
        page = client.get("/")
        assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
        assert client.get("/ui/app.js").status_code == 200
        assert client.get("/ui/vendor/marked.LICENSE.txt").status_code == 200
        for path in ("/ui/../settings.py", "/ui/%2e%2e/guard.py", "/ui/web.py", "/ui/nothing.js"):
            assert client.get(path).status_code in (401, 404), path


def test_an_answer_a_killed_run_was_streaming_shows_marked_interrupted(browser: Browser, tmp_path: Path) -> None:
    """A run killed mid-answer left its saved stream (`tether.runtime.streaming`): opening the session on the
    page journals it, and the page shows it, marked."""
    with serve(tmp_path, agent) as served:
        sid = create(served, "Killed mid-answer", [Message.user("explain the bug")])
        saved = Message(role="assistant", parts=[TextPart(text="The bug is in the par")], metadata={"partial": True})
        served.call(served.state.store.save_stream(sid, 1, saved))
        with tab(browser) as page:
            open_session(page, served, sid)
            expect(page.locator("#entries")).to_contain_text("The bug is in the par", timeout=WAIT)
            expect(page.locator("#entries .cut-note")).to_have_text(
                "[interrupted: tether stopped while the model was answering]"
            )
            assert_matches_journal(page, served, sid)
