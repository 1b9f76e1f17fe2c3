"""The audit trail through a real server (uvicorn on loopback, a SQLite store, real runs of a scripted model):
each thing the issue names makes its record with who did it, `GET /audit` answers the bearer token only
(not the web page's cookie, not a share link, not a server without a token), and the chain verifies."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from tether.client import TetherClient
from tether.errors import RemoteError
from tether.events import Done
from tether.server import ServerSettings
from tether.server.guard import COOKIE, cookie_value

from .conftest import asks, serve
from .test_security import request

TOKEN = "an-audit-test-token-of-some-length"


async def test_a_real_server_records_who_did_what(tmp_path: Path) -> None:
    with serve(tmp_path, asks("the config"), ServerSettings(token=TOKEN)) as served:
        # refused requests: no token (a failed sign-in), a wrong one, a foreign Host
        status, _, text = request(served, "GET", "/sessions")
        assert status == 401 and "a bearer token is required" in json.loads(text)["error"]["message"]
        status, _, text = request(served, "GET", "/sessions", headers={"Authorization": "Bearer wrong-wrong-wrong"})
        assert status == 401 and "not the server's bearer token" in json.loads(text)["error"]["message"]
        assert request(served, "GET", "/health", headers={"Host": "evil.example"})[0] == 403
        sign_in = json.dumps({"token": "not-the-token-at-all"}).encode()
        json_type = {"Content-Type": "application/json"}
        assert request(served, "POST", "/auth/session", headers=json_type, body=sign_in)[0] == 401
        async with TetherClient(served.url, token=TOKEN) as client:
            created = await client.create_session(str(served.workspace), prompt="change it")
            assert created.run is not None
            sid = created.session.id
            events = client.events(sid, after=created.run.after)
            async for event in events:
                if type(event).__name__ == "ApprovalRequested":
                    break
            await client.answer(sid, "ch1", approved=True)
            async for event in events:
                if isinstance(event, Done):
                    break
            await events.aclose()
            fork = await client.fork(sid, at=1)
            await client.revert(sid, 1, reason="start again")
            await client.export(sid)
            share = await client.share(sid)
            assert request(served, "GET", f"/share/{share.token}")[0] == 200
            await client.revoke_share(sid, share.id)
            await client.delete_session(fork.id)

            records = await client.audit(limit=1000)
            kinds = [r.kind for r in records]
            for kind in (
                "server.unauthorized",
                "server.refused",
                "session.created",
                "approval.requested",
                "approval.answered",
                "tool.call",
                "session.forked",
                "session.reverted",
                "session.exported",
                "share.created",
                "share.opened",
                "share.revoked",
                "session.deleted",
            ):
                assert kind in kinds, (kind, kinds)
            unauthorized = [r for r in records if r.kind == "server.unauthorized"]
            assert len(unauthorized) == 3 and unauthorized[0].outcome == "401 unauthorized"
            assert unauthorized[2].detail["path"] == "/auth/session"  # the web page's sign-in, failed
            assert unauthorized[0].actor == "anonymous 127.0.0.1" and unauthorized[0].detail["path"] == "/sessions"
            (refused,) = [r for r in records if r.kind == "server.refused"]
            assert refused.outcome == "403 forbidden_host"
            (call,) = [r for r in records if r.kind == "tool.call"]
            assert call.session_id == sid and call.outcome == "ok"
            assert call.detail["tool"] == "change" and call.detail["decided_by"] == "person: user"
            assert call.detail["arguments"] == {"what": "the config"} and call.detail["duration_ms"] >= 0
            (answered,) = [r for r in records if r.kind == "approval.answered"]
            assert answered.outcome == "approved" and answered.detail["by"] == "user"
            (created_record,) = [r for r in records if r.kind == "session.created" and r.session_id == sid]
            assert created_record.actor == "token 127.0.0.1"
            (opened,) = [r for r in records if r.kind == "share.opened"]
            assert opened.actor.startswith("share ") and share.token not in json.dumps(opened.detail)
            assert all(share.token not in json.dumps([r.detail, r.actor]) for r in records)
            # filters, as the CLI has them
            assert {r.session_id for r in await client.audit(session=sid, limit=1000)} == {sid}
            assert {r.kind for r in await client.audit(kind="share", limit=1000)} == {
                "share.created",
                "share.opened",
                "share.revoked",
            }
            assert (await client.verify_audit()).ok
        # the web page's cookie opens the other routes, not the audit trail
        cookie = {"Cookie": f"{COOKIE}={cookie_value(TOKEN)}"}
        assert request(served, "GET", "/health", headers=cookie)[0] == 200
        status, _, text = request(served, "GET", "/audit", headers=cookie)
        assert status == 403 and json.loads(text)["error"]["code"] == "forbidden"
        assert "--token-required" in json.loads(text)["error"]["message"]  # an option `tether serve` has
        assert request(served, "GET", "/audit")[0] == 401
        assert request(served, "GET", "/share/../audit")[0] in (401, 404)


async def test_a_server_without_a_token_does_not_serve_the_trail(tmp_path: Path) -> None:
    with serve(tmp_path) as served:
        async with TetherClient(served.url) as client:
            with pytest.raises(RemoteError) as refused:
                await client.audit()
            assert refused.value.status == 403
        assert request(served, "GET", "/audit/verify")[0] == 403


async def test_a_server_delivers_to_its_sinks_and_reports_their_lag(tmp_path: Path) -> None:
    from tether.config import Config, SinkConfig
    from tether.runtime.doctor import sink_findings

    out = tmp_path / "events"
    config = Config(sinks=[SinkConfig(name="files", type="file", path=str(out))])
    with serve(tmp_path, config=config) as served:
        async with TetherClient(served.url) as client:
            created = await client.create_session(str(served.workspace), prompt="hello")
            assert created.run is not None
            [e async for e in client.events(created.session.id, after=created.run.after, until_done=True)]
            deadline = time.monotonic() + 60
            lines: list[dict[str, object]] = []
            while time.monotonic() < deadline:
                path = out / "events.jsonl"
                lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
                if lines and max(int(str(line["seq"])) for line in lines) >= 2:  # the answer's events
                    break
                await asyncio.sleep(0.05)
            assert {line["session_id"] for line in lines} == {created.session.id}
            health = (await client.health()).sinks
            assert health is not None and health["files"].error is None and health["files"].delivered >= 1
    (finding,) = await asyncio.to_thread(sink_findings, str(tmp_path / "server.db"), config)  # as `tether doctor`
    assert finding.status == "ok" and "files (file): 0 entries of 0 sessions behind" in finding.detail
