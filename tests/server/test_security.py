"""The server's door: no token off loopback refuses to start; with a token, every route needs it (401
without, or with a wrong one, on loopback too); a foreign Host (DNS rebinding) or Origin (another web page)
is refused; CORS only for the origins configured; ids with `..` or `/` never reach a file or a 500;
oversized bodies are 413, whether they state their length or not."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.client import TetherClient
from tether.errors import ConfigError, RemoteError
from tether.server import ServerSettings
from tether.server.guard import CLIENT_HEADER, COOKIE, cookie_value
from tether.server.settings import is_loopback

from .conftest import Served, serve

TOKEN = "a-test-token-of-some-length"


def request(
    server: Served, method: str, path: str, *, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, dict[str, str], str]:
    """A request as written: http.client sends the Host, Origin and path it is given."""
    connection = http.client.HTTPConnection(server.host, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        sent = {"Host": server.host, **(headers or {})}
        if body is not None and "Transfer-Encoding" not in sent:
            sent["Content-Length"] = str(len(body))
        for name, value in sent.items():
            connection.putheader(name, value)
        connection.endheaders()
        if body is not None:
            if sent.get("Transfer-Encoding") == "chunked":
                for start in range(0, len(body), 65536):
                    chunk = body[start : start + 65536]
                    connection.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                connection.send(b"0\r\n\r\n")
            else:
                connection.send(body)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        connection.close()


def code(text: str) -> str:
    return str(json.loads(text)["error"]["code"])


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Served]:
    with serve(tmp_path, settings=ServerSettings(token=TOKEN)) as served:
        yield served


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "devbox.lan"])
def test_a_bind_off_loopback_without_a_token_refuses_to_start(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="token"):
        ServerSettings(host=host)
    assert ServerSettings(host=host, token=TOKEN).token == TOKEN


def test_loopback_names_need_no_token_and_weak_tokens_are_refused() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert is_loopback(host) and ServerSettings(host=host).token is None
    with pytest.raises(ConfigError, match="16"):
        ServerSettings(token="short")
    with pytest.raises(ConfigError, match="token"):
        ServerSettings(allowed_hosts=("*",))


def test_the_cli_generates_and_prints_a_token_off_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tether serve --host 0.0.0.0` without TETHER_SERVER_TOKEN runs only with a token it made and printed
    (the server itself is not started here: nothing binds a public address in a test)."""
    from click.testing import CliRunner

    import tether.server

    started: list[ServerSettings] = []
    monkeypatch.setattr(tether.server, "serve", lambda settings, **_: started.append(settings))
    monkeypatch.delenv("TETHER_SERVER_TOKEN", raising=False)
    from tether.cli.main import cli

    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 0, result.output
    (settings,) = started
    assert settings.token and settings.token in result.output and settings.host == "0.0.0.0"
    monkeypatch.setenv("TETHER_SERVER_TOKEN", TOKEN)
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert started[1].token == TOKEN and TOKEN not in result.output


@pytest.mark.parametrize(
    "path", ["/health", "/sessions", "/openapi.json", "/events", "/models", "/sessions/ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"]
)
def test_with_a_token_every_route_needs_it_on_loopback_too(guarded: Served, path: str) -> None:
    status, headers, text = request(guarded, "GET", path)
    assert (status, code(text)) == (401, "unauthorized") and headers["www-authenticate"].startswith("Bearer")
    status, _, text = request(guarded, "GET", path, headers={"Authorization": "Bearer not-" + TOKEN})
    assert (status, code(text)) == (401, "unauthorized")
    status, _, text = request(guarded, "GET", path, headers={"Authorization": "Basic " + TOKEN})
    assert status == 401


async def test_the_client_sends_the_token(guarded: Served) -> None:
    async with TetherClient(guarded.url, token=TOKEN) as client:
        assert (await client.health()).status == "ok"
    async with TetherClient(guarded.url, token="wrong-token-wrong-token") as client:
        with pytest.raises(RemoteError) as refused:
            await client.health()
        assert refused.value.status == 401 and refused.value.code == "unauthorized"


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "", "localhost.:1"])
def test_a_foreign_host_is_refused(server: Served, host: str) -> None:
    """A DNS-rebinding page reaches the server under its own name: the Host header says so."""
    status, _, text = request(server, "GET", "/sessions", headers={"Host": host})
    assert (status, code(text)) == (403, "forbidden_host")


@pytest.mark.parametrize("tail", ["@evil.example", "@evil.example:80", " evil.example", ",evil.example", "/x", ":1"])
def test_a_host_header_is_read_whole(server: Served, tail: str) -> None:
    """`127.0.0.1:PORT@evil.example` starts like this server's Host and is not one: the whole header is
    parsed (name or [v6], then an optional port), so nothing after the port is ignored."""
    status, _, text = request(server, "GET", "/sessions", headers={"Host": server.host + tail})
    assert (status, code(text)) == (403, "forbidden_host")


def test_the_loopback_names_are_answered(server: Served) -> None:
    port = server.url.rsplit(":", 1)[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        status, _, _ = request(server, "GET", "/health", headers={"Host": host})
        assert status == 200, host


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1:1", "http://localhost.evil"])
def test_a_foreign_origin_cannot_drive_the_agent(server: Served, origin: str) -> None:
    body = json.dumps({"directory": str(server.workspace), "prompt": "rm -rf /"}).encode()
    headers = {"Origin": origin, "Content-Type": "text/plain"}
    status, _, text = request(server, "POST", "/sessions", headers=headers, body=body)
    assert (status, code(text)) == (403, "forbidden_origin")
    status, _, _ = request(server, "GET", "/sessions", headers={"Origin": origin})
    assert status == 403
    assert server.call(server.state.store.list_sessions()).items == []


def test_a_cross_site_request_without_an_origin_is_refused(server: Served) -> None:
    status, _, text = request(server, "GET", "/sessions", headers={"Sec-Fetch-Site": "cross-site"})
    assert (status, code(text)) == (403, "forbidden_origin")


def test_the_servers_own_origin_is_allowed_and_cors_is_off(server: Served) -> None:
    status, headers, _ = request(server, "GET", "/sessions", headers={"Origin": server.url})
    assert status == 200 and "access-control-allow-origin" not in headers


def test_cors_answers_only_the_origins_configured(tmp_path: Path) -> None:
    app_origin = "https://app.example"
    with serve(tmp_path, settings=ServerSettings(token=TOKEN, cors_origins=(app_origin,))) as served:
        preflight = {"Origin": app_origin, "Access-Control-Request-Method": "POST"}
        status, headers, _ = request(served, "OPTIONS", "/sessions", headers=preflight)
        assert status == 200 and headers["access-control-allow-origin"] == app_origin
        auth = {"Origin": app_origin, "Authorization": f"Bearer {TOKEN}"}
        status, headers, _ = request(served, "GET", "/sessions", headers=auth)
        assert status == 200 and headers["access-control-allow-origin"] == app_origin
        status, _, _ = request(served, "GET", "/sessions", headers={"Origin": app_origin})
        assert status == 401  # CORS lets the page in; the token is still needed
        status, _, _ = request(served, "GET", "/sessions", headers={**auth, "Origin": "https://other.example"})
        assert status == 403


@pytest.mark.parametrize(
    "path",
    [
        "/sessions/..",
        "/sessions/../../etc/passwd",
        "/sessions/..%2F..%2Fetc%2Fpasswd",
        "/sessions/%2e%2e",
        "/sessions/ses_..%2f/entries",
        "/sessions/a/b/c",
        "/sessions/ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB%00",
        "/sessions/" + "A" * 300,
    ],
)
def test_ids_with_dots_or_slashes_are_refused_cleanly(server: Served, path: str) -> None:
    status, _, text = request(server, "GET", path)
    assert status in (400, 404, 422), (path, status, text)
    assert code(text) in ("invalid_id", "not_found", "session_not_found", "invalid_request")


def test_an_oversized_body_is_413_whether_or_not_it_says_its_length(server: Served) -> None:
    big = json.dumps({"prompt": "x" * (server.settings.max_body + 10)}).encode()
    path = "/sessions/ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB/prompt"
    json_type = {"Content-Type": "application/json"}
    status, _, text = request(server, "POST", path, headers=json_type, body=big)
    assert (status, code(text)) == (413, "payload_too_large")
    status, _, text = request(server, "POST", path, headers={**json_type, "Transfer-Encoding": "chunked"}, body=big)
    assert (status, code(text)) == (413, "payload_too_large")
    status, _, text = request(server, "POST", path, headers={**json_type, "Content-Length": "99999999999"})
    assert (status, code(text)) == (413, "payload_too_large")


def test_an_import_may_be_larger_up_to_its_own_limit(tmp_path: Path) -> None:
    settings = ServerSettings(max_body=1000, max_import_body=200_000)
    with serve(tmp_path, settings=settings) as served:
        padding = b" " * 50_000  # valid JSON whitespace: the size passes the body limit, not the import one
        status, _, text = request(served, "POST", "/sessions/import", body=b"{}" + padding)
        assert status == 422 and code(text) == "import_format_error"
        status, _, text = request(served, "POST", "/sessions/import", body=b"{}" + padding * 5)
        assert (status, code(text)) == (413, "payload_too_large")


def test_a_change_signed_in_by_cookie_needs_an_origin_or_the_client_header(guarded: Served) -> None:
    """A cookie goes with every request a browser makes, a cross-site form's POST with no Origin header
    included (some browsers and proxies leave it out): such a request changes nothing. The page's own
    requests carry its Origin; a program sends the bearer token, or the cookie with `X-Tether-Client`."""
    cookie = {"Cookie": f"{COOKIE}={cookie_value(TOKEN)}", "Content-Type": "application/json"}
    body = json.dumps({"directory": str(guarded.workspace)}).encode()
    status, _, text = request(guarded, "POST", "/sessions", headers=cookie, body=body)
    assert (status, code(text)) == (403, "forbidden_origin")
    assert guarded.call(guarded.state.store.list_sessions()).items == []
    status, _, _ = request(guarded, "DELETE", "/sessions/ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB", headers=cookie)
    assert status == 403
    assert request(guarded, "GET", "/sessions", headers=cookie)[0] == 200  # reading needs no Origin
    status, _, _ = request(guarded, "POST", "/sessions", headers={**cookie, "Origin": guarded.url}, body=body)
    assert status == 201
    status, _, _ = request(guarded, "POST", "/sessions", headers={**cookie, CLIENT_HEADER: "1"}, body=body)
    assert status == 201
    bearer = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    assert request(guarded, "POST", "/sessions", headers=bearer, body=body)[0] == 201
    assert len(guarded.call(guarded.state.store.list_sessions()).items) == 3


def test_a_405_allows_every_method_served_at_the_path(server: Served) -> None:
    status, headers, text = request(server, "PUT", "/sessions/ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB")
    assert (status, code(text)) == (405, "method_not_allowed")
    assert set(headers["allow"].split(", ")) == {"GET", "PATCH", "DELETE"}
    status, headers, _ = request(server, "OPTIONS", "/sessions")
    assert status == 405 and set(headers["allow"].split(", ")) == {"GET", "POST"}
