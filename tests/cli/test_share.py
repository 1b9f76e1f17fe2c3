"""`tether share` end to end on a real SQLite file: a link made (whole with --server or a running `tether
serve` known here, else its path and how to serve it), listed without its token, revoked by id, token or
link with no server running; bad input ends in one clear line."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tether import Message, SqliteStore
from tether.cli.main import cli
from tether.cli.share import parse_duration
from tether.errors import NotFound
from tether.paths import tether_home
from tether.runtime.sharing import open_share

from .test_sessions import failed


def ok(result: Result) -> str:
    """What the command printed to stdout (its notes go to stderr), after it succeeded."""
    assert result.exit_code == 0, result.output
    return result.stdout


def tether(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args], env={"TETHER_SERVER": ""})


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "tether.db"


def make_session(db: Path) -> str:
    async def main() -> str:
        async with SqliteStore(db) as store:
            info = await store.create_session(title="to share")
            await store.append(info.id, [Message.user("hello")])
            return info.id

    return asyncio.run(main())


def opens(db: Path, token: str) -> bool:
    async def main() -> bool:
        async with SqliteStore(db) as store:
            try:
                await open_share(store, token)
            except NotFound:
                return False
            return True

    return asyncio.run(main())


def test_share_prints_a_link_that_opens_until_revoked(db: Path) -> None:
    sid = make_session(db)
    result = tether(db, "share", sid[-7:], "--server", "https://tether.example/base/")
    url = ok(result).strip().splitlines()[0]
    assert url.startswith("https://tether.example/base/share/")
    token = url.rsplit("/", 1)[1]
    assert len(token) >= 43 and opens(db, token)
    assert "shown this once" in result.stderr and "--revoke shr_" in result.stderr
    listed = ok(tether(db, "share", "--list", sid))
    assert "live" in listed and token not in listed
    ok(tether(db, "share", "--revoke", url))  # by the link itself, with no server running
    assert not opens(db, token)
    assert "revoked" in ok(tether(db, "share", "--list"))


def test_revoke_by_id_or_token_and_json(db: Path) -> None:
    sid = make_session(db)
    made: dict[str, Any] = json.loads(ok(tether(db, "share", sid, "--expires", "1d12h", "--json")))
    assert made["url"] is None and made["path"] == "/share/" + made["token"]
    assert made["expires_at"] == pytest.approx(time.time() + 36 * 3600, abs=60)
    other: dict[str, Any] = json.loads(ok(tether(db, "share", sid, "--json")))
    revoked = json.loads(ok(tether(db, "share", "--revoke", made["id"], "--json")))
    assert revoked["id"] == made["id"] and revoked["revoked_at"]
    ok(tether(db, "share", "--revoke", other["token"]))
    assert not opens(db, made["token"]) and not opens(db, other["token"])
    shares = json.loads(ok(tether(db, "share", "--list", "--json")))["shares"]
    assert [s["id"] for s in shares] == [made["id"], other["id"]] and "token" not in json.dumps(shares)


def test_without_a_server_it_prints_the_path_and_how_to_serve_it(db: Path) -> None:
    sid = make_session(db)
    result = tether(db, "share", sid)
    assert ok(result).startswith("/share/") and "No `tether serve` is running here" in result.stderr


def test_a_running_serve_known_here_gives_the_whole_link(db: Path) -> None:
    sid = make_session(db)
    record = tether_home() / "server.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    # a live process (this one) serving the same store
    record.write_text(json.dumps({"url": "http://127.0.0.1:7999", "pid": os.getpid(), "store": str(db)}))
    assert ok(tether(db, "share", sid)).startswith("http://127.0.0.1:7999/share/")
    # another store's server, or one that died, is not used
    record.write_text(json.dumps({"url": "http://127.0.0.1:7999", "pid": os.getpid(), "store": "/other.db"}))
    assert ok(tether(db, "share", sid)).startswith("/share/")
    record.write_text(json.dumps({"url": "http://127.0.0.1:7999", "pid": 2**22 + 12345, "store": str(db)}))
    assert ok(tether(db, "share", sid)).startswith("/share/")
    record.write_text("{not json")
    assert ok(tether(db, "share", sid)).startswith("/share/")


def test_bad_input_is_one_clear_line(db: Path) -> None:
    sid = make_session(db)
    failed(tether(db, "share"), "give the session to share", 2)
    failed(tether(db, "share", sid, "--expires", "soon"), "--expires takes a duration", 2)
    failed(tether(db, "share", sid, "--expires", "20y"), "--expires takes a duration", 2)
    failed(tether(db, "share", sid, "--expires", "99999w"), "1 second to 10 years")
    failed(tether(db, "share", "--list", "--revoke", "x"), "not both", 2)
    failed(tether(db, "share", sid, "--revoke", "shr_01JD8X3Q5T9N2C7KZ6W4M0R1YB"), "leave out the session", 2)
    failed(tether(db, "share", "--revoke", "shr_01JD8X3Q5T9N2C7KZ6W4M0R1YB"), "no share")
    failed(tether(db, "share", "--revoke", "../../etc/passwd"), "neither a share id")
    failed(tether(db, "share", "ses_01JD8X3Q5T9N2C7KZ6W4M0R1YB"), "no session")
    failed(tether(db, "share", "--list", "../x"), "invalid session id")


def test_durations() -> None:
    assert parse_duration("90s") == 90 and parse_duration("30m") == 1800 and parse_duration("24h") == 86400
    assert parse_duration("7d") == 7 * 86400 and parse_duration("2w") == 14 * 86400
    assert parse_duration("1d12h") == 36 * 3600 and parse_duration("1.5h") == 5400
    assert parse_duration("never") is None


def test_with_tether_serve_running_the_link_is_whole_and_opens(db: Path, tmp_path: Path) -> None:
    """A real `python -m tether serve` in its own process: it notes its address in the tether home, `tether
    share` prints the whole link, the link opens with no token; a revoke from the CLI stops it at once; SIGTERM
    stops the server and its note goes with it."""
    import signal
    import socket
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    sid = make_session(db)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "TETHER_STORE": str(db)}
    server = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    record = tether_home() / "server.json"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    server.stderr.read() if server.stderr else ""
                )
                time.sleep(0.1)
        url = ok(tether(db, "share", sid)).strip()
        assert url.startswith(f"http://127.0.0.1:{port}/share/")
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and "to share" in page.read().decode()
        ok(tether(db, "share", "--revoke", url))
        with pytest.raises(urllib.error.HTTPError) as gone:
            urllib.request.urlopen(url, timeout=30)
        assert gone.value.code == 404
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=60)
    assert server.returncode == -signal.SIGTERM and not record.exists()
