"""Share links on a real server on loopback, with a token set: made, listed and revoked behind the token; the
share view open without it, showing one session's transcript and nothing else, under strict headers; a
share token reaches no other session and no other route; revoked, expired, deleted and unknown links all get
the same 404, at once."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tether.client import TetherClient
from tether.errors import NotFound
from tether.messages import Message, ToolCallPart, ToolResultPart
from tether.runtime.sharing import hash_token
from tether.server import ServerSettings

from .conftest import Served, serve
from .test_security import code, request

TOKEN = "a-test-token-of-some-length"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "Content-Type": "application/json"}


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Served]:
    with serve(tmp_path, settings=ServerSettings(token=TOKEN)) as served:
        yield served


def session(server: Served, *texts: str, title: str = "shared session") -> str:
    async def make() -> str:
        store = server.state.store
        info = await store.create_session(title=title, directory=str(server.workspace), model="test-model")
        await store.append(
            info.id, [Message.user(t) if i % 2 == 0 else Message.assistant(t) for i, t in enumerate(texts)]
        )
        return info.id

    return str(server.call(make()))


def share(server: Served, sid: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    status, _, text = request(
        server, "POST", f"/sessions/{sid}/shares", headers=JSON, body=json.dumps(body or {}).encode()
    )
    assert status == 201, text
    made: dict[str, Any] = json.loads(text)
    return made


class Links(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_a_share_link_shows_the_transcript_and_nothing_else(guarded: Served) -> None:
    sid = session(guarded, "what is **up**", "all *fine* here")
    made = share(guarded, sid)
    assert made["session_id"] == sid and made["id"].startswith("shr_") and made["expires_at"] is None
    assert len(made["token"]) >= 43  # 256 bits, url-safe base64
    assert made["url"] == f"{guarded.url}/share/{made['token']}"
    status, headers, text = request(guarded, "GET", f"/share/{made['token']}")  # no bearer token
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "what is <strong>up</strong>" in text and "all <em>fine</em> here" in text
    # strict headers: nothing loads, no frame, no referrer carries the token away, no cache keeps it
    policy = headers["content-security-policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy and "script-src" not in policy
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"
    assert "no-store" in headers["cache-control"] and headers["x-content-type-options"] == "nosniff"
    # read-only: no script, form, button or input; no link but to its own entries; not the directory
    page = Links(text)
    assert not [t for t, _ in page.tags if t in ("script", "form", "button", "input", "textarea", "iframe")]
    assert all((a.get("href") or "").startswith("#e") for t, a in page.tags if t == "a")
    assert str(guarded.workspace) not in text and TOKEN not in text


def test_the_listing_shows_no_tokens_and_revoking_stops_the_link_at_once(guarded: Served) -> None:
    sid = session(guarded, "hello", "hi")
    made, other = share(guarded, sid), share(guarded, sid, {"expires_in": 3600})
    status, _, text = request(guarded, "GET", f"/sessions/{sid}/shares", headers=AUTH)
    assert status == 200
    listed = json.loads(text)["shares"]
    assert [s["id"] for s in listed] == [made["id"], other["id"]]
    assert listed[1]["expires_at"] == pytest.approx(time.time() + 3600, abs=60)
    assert made["token"] not in text and other["token"] not in text and "token" not in text
    status, _, text = request(guarded, "DELETE", f"/sessions/{sid}/shares/{made['id']}", headers=AUTH)
    assert status == 200 and json.loads(text)["revoked_at"] is not None
    assert request(guarded, "GET", f"/share/{made['token']}")[0] == 404  # the next request already
    assert request(guarded, "GET", f"/share/{other['token']}")[0] == 200  # the other link lives on
    # a revoke changed the store: it holds for the CLI and any other process at once (read per request)
    assert guarded.call(guarded.state.store.share_by_token(hash_token(made["token"]))).revoked_at is not None


def test_revoked_expired_deleted_and_unknown_links_get_one_answer(guarded: Served) -> None:
    sid = session(guarded, "hello", "hi")
    revoked = share(guarded, sid)
    request(guarded, "DELETE", f"/sessions/{sid}/shares/{revoked['id']}", headers=AUTH)
    expired = "e" * 43
    guarded.call(guarded.state.store.create_share(sid, hash_token(expired), expires_at=time.time() - 1))
    doomed_sid = session(guarded, "to be deleted")
    doomed = share(guarded, doomed_sid)
    assert request(guarded, "GET", f"/share/{doomed['token']}")[0] == 200
    assert request(guarded, "DELETE", f"/sessions/{doomed_sid}", headers=AUTH)[0] == 200
    tokens = [revoked["token"], expired, doomed["token"], "u" * 43, "short", "x" * 200, "%00", "%2e%2e"]
    answers = {request(guarded, "GET", f"/share/{t}")[::2] for t in tokens}
    assert len(answers) == 1, answers
    status, text = answers.pop()
    assert (status, code(text)) == (404, "not_found")
    # a browser gets a page that says so, the same for each
    pages = {request(guarded, "GET", f"/share/{t}", headers={"Accept": "text/html"})[::2] for t in tokens}
    assert len(pages) == 1 and "does not open a session" in pages.pop()[1]


def test_a_share_token_reaches_no_other_session_and_no_other_route(guarded: Served) -> None:
    mine = session(guarded, "my secret-free chat", title="mine")
    theirs = session(guarded, "someone else's words", title="theirs")
    made = share(guarded, mine)
    token = made["token"]
    status, _, text = request(guarded, "GET", f"/share/{token}")
    assert status == 200 and "my secret-free chat" in text and "someone else" not in text and theirs not in text
    as_bearer = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for method, path, body in [
        ("GET", f"/sessions/{theirs}", None),
        ("GET", f"/sessions/{mine}", None),
        ("GET", f"/sessions/{mine}/entries", None),
        ("GET", "/sessions", None),
        ("GET", f"/sessions/{mine}/export?format=html", None),
        ("POST", f"/sessions/{mine}/prompt", b'{"prompt": "rm -rf /"}'),
        ("POST", f"/sessions/{mine}/shares", b"{}"),
        ("DELETE", f"/sessions/{mine}/shares/{made['id']}", None),
        ("DELETE", f"/sessions/{mine}", None),
        ("PATCH", f"/sessions/{mine}", b'{"title": "x"}'),
    ]:
        status, _, text = request(guarded, method, path, headers=as_bearer, body=body)
        assert (status, code(text)) == (401, "unauthorized"), (method, path)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, _, text = request(guarded, method, f"/share/{token}", headers=as_bearer, body=b"{}")
        assert status == 405, (method, status)
    # nothing under /share/ but the view: other paths are 404, and never a session's data
    for path in [
        f"/share/{token}/../../sessions/{theirs}",
        f"/share/{token}/..%2F..%2Fsessions%2F{theirs}",
        f"/share/../sessions/{theirs}",
        f"/share/%2e%2e/sessions/{theirs}",
        f"/share/{token}/entries",
        f"/share/{token}%00",
        "/share/",
    ]:
        status, _, text = request(guarded, "GET", path)
        assert status == 404 and "someone else" not in text, (path, status)
    assert request(guarded, "GET", f"/sessions/{mine}", headers=AUTH)[0] == 200  # the real token still works


def test_a_link_followed_from_another_site_opens_but_a_foreign_page_cannot_read_it(guarded: Served) -> None:
    sid = session(guarded, "hello")
    token = share(guarded, sid)["token"]
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Accept": "text/html"}
    assert request(guarded, "GET", f"/share/{token}", headers=navigation)[0] == 200
    fetched = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    assert request(guarded, "GET", f"/share/{token}", headers=fetched)[0] == 403
    assert request(guarded, "GET", f"/share/{token}", headers={"Host": "evil.example"})[0] == 403  # rebinding
    status, _, text = request(guarded, "GET", "/sessions", headers={**AUTH, "Sec-Fetch-Site": "cross-site"})
    assert (status, code(text)) == (403, "forbidden_origin")


def test_a_link_to_the_web_page_from_another_site_opens_it_and_nothing_else(guarded: Served) -> None:
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    status, headers, text = request(guarded, "GET", "/", headers=navigation)
    assert status == 200 and "text/html" in headers["content-type"] and "ses_" not in text
    framed = {**navigation, "Sec-Fetch-Dest": "iframe"}
    assert request(guarded, "GET", "/", headers=framed)[0] == 403
    fetched = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}
    assert request(guarded, "GET", "/", headers=fetched)[0] == 403
    assert request(guarded, "POST", "/", headers=navigation)[0] == 403  # a form posted from elsewhere
    for path in ("/sessions", "/approvals", "/events"):  # the page only: what it asks for is same-origin
        assert request(guarded, "GET", path, headers=navigation)[0] == 403, path


def test_bad_share_requests_get_typed_errors(guarded: Served) -> None:
    sid = session(guarded, "hello")
    missing = "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"
    cases = [
        ("POST", f"/sessions/{missing}/shares", b"{}", 404, "session_not_found"),
        ("POST", f"/sessions/{sid}/shares", b'{"expires_in": 0}', 422, "invalid_request"),
        ("POST", f"/sessions/{sid}/shares", b'{"expires_in": -5}', 422, "invalid_request"),
        ("POST", f"/sessions/{sid}/shares", b'{"expires_in": 1e300}', 422, "invalid_request"),
        ("POST", f"/sessions/{sid}/shares", b'{"expires": 60}', 422, "invalid_request"),
        ("DELETE", f"/sessions/{sid}/shares/shr_01JD8X3Q5T9N2C7KZ6W4M0R1YB", None, 404, "not_found"),
        ("DELETE", f"/sessions/{sid}/shares/..%2F..", None, 404, "not_found"),
        ("DELETE", f"/sessions/{sid}/shares/shr_..", None, 404, "unknown_name"),  # a share link that opens none: 404
        ("GET", f"/sessions/{missing}/shares", None, 404, "session_not_found"),
    ]
    for method, path, body, status, error in cases:
        got, _, text = request(guarded, method, path, headers=JSON, body=body)
        assert (got, code(text)) == (status, error), (method, path, text)
    # a share of one session cannot be revoked through another
    other = session(guarded, "other")
    made = share(guarded, other)
    got, _, text = request(guarded, "DELETE", f"/sessions/{sid}/shares/{made['id']}", headers=AUTH)
    assert (got, code(text)) == (404, "not_found")
    assert request(guarded, "GET", f"/share/{made['token']}")[0] == 200


def test_the_export_route_writes_the_html_page(guarded: Served) -> None:
    sid = session(guarded, "export <b>me</b>", "done")
    status, headers, text = request(guarded, "GET", f"/sessions/{sid}/export?format=html", headers=AUTH)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert f'filename="{sid}.html"' in headers["content-disposition"]
    assert "export &lt;b&gt;me&lt;/b&gt;" in text and text.rstrip().endswith("</html>")
    assert str(guarded.workspace) in text  # the owner's export names the directory; a share does not


def test_a_share_and_the_export_of_a_long_session_stream(tmp_path: Path) -> None:
    with serve(tmp_path) as server:
        sid = session(server, *[f"message number {i}" for i in range(3000)])
        token = share(server, sid)["token"]
        status, headers, text = request(server, "GET", f"/share/{token}")
        assert status == 200 and "content-length" not in headers  # streamed, not built whole
        assert text.count("<article") == 1000 and "message number 999" in text  # a page of it
        assert 'href="?from=1001">Next: entries 1,001 to 2,000 of 3,000' in text
        status, headers, text = request(server, "GET", f"/sessions/{sid}/export?format=html")
        assert status == 200 and "content-length" not in headers
        assert text.count("<article") == 3000 and "message number 2999" in text  # the file holds it all


async def test_the_client_makes_lists_and_revokes_shares(guarded: Served) -> None:
    sid = session(guarded, "through the client")
    async with TetherClient(guarded.url, token=TOKEN) as client:
        made = await client.share(sid, expires_in=600)
        assert made.url == f"{guarded.url}/share/{made.token}" and made.expires_at is not None
        assert [s.id for s in await client.shares(sid)] == [made.id]
        assert request(guarded, "GET", f"/share/{made.token}")[0] == 200
        assert (await client.revoke_share(sid, made.id)).revoked_at is not None
        assert request(guarded, "GET", f"/share/{made.token}")[0] == 404
        assert b"through the client" in await client.export(sid, format="html")
        with pytest.raises(NotFound):
            await client.revoke_share(sid, "shr_01JD8X3Q5T9N2C7KZ6W4M0R1YB")


CHROMIUM = Path("/usr/bin/chromium")
TABLE = "| file | lines |\n|:--|--:|\n| a.py | 12 |"  # aligned columns: classes, not inline style


def test_chromium_opens_the_share_and_the_exported_file_with_nothing_else(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Real Chromium: the share view and an exported file open with no console error, load nothing but the
    page itself (the style sheet passes the page's own policy: its hash), and script in a message stays
    text. The screenshots are left in a temporary directory (printed) to look at."""
    if not CHROMIUM.exists():  # the README's test command installs it: its absence is a failure, not a skip
        pytest.fail(f"the browser tests need Chromium and there is none at {CHROMIUM}: apt-get install chromium")
    import playwright.sync_api as playwright  # the dev extra

    shots = tmp_path_factory.mktemp("share-screenshots")
    with serve(tmp_path) as server:
        sid = session(
            server, f"Please fix `test_io`, it **fails**:\n\n{TABLE}", "Found it: a race. <script>alert(1)</script>"
        )
        token = share(server, sid)["token"]
        exported = tmp_path / "session.html"
        status, _, text = request(server, "GET", f"/sessions/{sid}/export?format=html")
        assert status == 200
        exported.write_text(text, encoding="utf-8")
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=str(CHROMIUM),
                args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            try:
                for name, url in [("share", f"{server.url}/share/{token}"), ("export", exported.as_uri())]:
                    page = browser.new_page(viewport={"width": 1000, "height": 800})
                    problems: list[str] = []
                    requests_made: list[str] = []
                    page.on("console", lambda m, problems=problems: problems.append(f"{m.type}: {m.text}"))
                    page.on("pageerror", lambda e, problems=problems: problems.append(f"error: {e}"))
                    page.on("request", lambda r, requests_made=requests_made: requests_made.append(r.url))
                    page.on("dialog", lambda d, problems=problems: problems.append(f"dialog: {d.message}"))
                    page.goto(url)
                    assert page.locator("h1").inner_text() == "shared session"
                    assert "Found it: a race. <script>alert(1)</script>" in page.locator("main").inner_text()
                    assert problems == [], (name, problems)
                    # the style sheet applied (a policy that refused it would leave the default margin)
                    assert page.evaluate("getComputedStyle(document.body).margin") == "0px"
                    align = "getComputedStyle(document.querySelector('td.align-right')).textAlign"
                    assert page.evaluate(align) == "right"
                    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
                    assert requests_made == [url], (name, requests_made)
                    page.close()
            finally:
                browser.close()
    print(f"screenshots in {shots}")


def long_session(server: Served, cycles: int) -> str:
    """Two messages, then `cycles` of (prompt, tool call, its result): entry 1,000 is a call whose result is
    entry 1,001, across the first page's end."""

    async def make() -> str:
        store = server.state.store
        info = await store.create_session(title="long", directory=str(server.workspace), model="test-model")
        bodies: list[Message] = [Message.user("start"), Message.assistant("ok")]
        for i in range(cycles):
            call = ToolCallPart(id=f"c{i}", name="read", arguments={"path": f"f{i}.py"})
            bodies += [
                Message.user(f"look at f{i}.py"),
                Message.assistant(tool_calls=[call]),
                Message.tool(ToolResultPart(call_id=call.id, name="read", content=f"contents of f{i}")),
            ]
        for at in range(0, len(bodies), 500):
            await store.append(info.id, bodies[at : at + 500])
        return info.id

    return str(server.call(make()))


ENTRY_ID = re.compile(r' id="(e\d+)"')


def test_a_long_shared_session_is_shown_a_page_at_a_time(guarded: Served) -> None:
    sid = long_session(guarded, 900)  # 2,702 entries
    token = share(guarded, sid)["token"]
    whole = request(guarded, "GET", f"/sessions/{sid}/export?format=html", headers=AUTH)[2]
    pages, path = [], f"/share/{token}"
    while True:
        status, _, text = request(guarded, "GET", path)
        assert status == 200 and text.rstrip().endswith("</html>")
        pages.append(text)
        found = re.search(r'<nav class="pages"><a href="\?from=(\d+)">Next', text)
        if found is None:
            break
        path = f"/share/{token}?from={found.group(1)}"
    assert len(pages) == 3
    assert re.search(
        r'href="\?from=1002">Next: entries 1,002 to 2,001 of 2,702', pages[0]
    )  # the call's result came along
    assert "contents of f332" in pages[0]  # entry 1,001, the result of the call at 1,000
    assert 'href="?">From the first message' in pages[1] and "From the first" not in pages[0]
    shown = [i for page in pages for i in ENTRY_ID.findall(page)]
    assert shown == ENTRY_ID.findall(whole)  # every entry once, in order, as on the one-page export
    assert len(pages[0]) < len(whole) / 2


def test_the_share_views_page_takes_only_a_sane_start(guarded: Served) -> None:
    sid = session(guarded, "one", "two")
    token = share(guarded, sid)["token"]
    for bad in ("0", "-1", "x", str(2**63), "1.5"):
        status, _, text = request(guarded, "GET", f"/share/{token}?from={bad}")
        assert status == 422 and code(text) == "invalid_request", (bad, status, text[:200])
    status, _, text = request(guarded, "GET", f"/share/{token}?from=99")  # past the end: an empty page
    assert status == 200 and "Next:" not in text and ENTRY_ID.findall(text) == []
