"""`tether archive` against the real S3 service (the `s3` fixture): a directory's sessions archived, listed as
archived, `sessions show` and `run --session` saying how to bring one back, `--restore` bringing it back
exactly; bad input is one clear line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tether.cli.main import cli
from tether.messages import Message
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
from tether.store import SqliteStore
from tether.store.objects import Bucket


@pytest.fixture
def scripted_model(monkeypatch: pytest.MonkeyPatch) -> ScriptedProvider:
    """A run's model: scripted, with nothing to answer (a run that reached it would fail on it)."""
    provider = ScriptedProvider(name="scripted")

    def resolve(model: str | None = None, **_: object) -> ResolvedModel:
        return ResolvedModel(provider=provider, model=model or "test", info=unknown_model("scripted", "test"))

    monkeypatch.setattr("tether.runtime.launch.resolve_provider", resolve)
    return provider


pytestmark = pytest.mark.slow


def tether(db: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args], env={"TETHER_SERVER": "", **(env or {})})


def seed(db: Path, directory: str, n: int) -> list[str]:
    async def main() -> list[str]:
        async with SqliteStore(db) as store:
            ids = []
            for i in range(n):
                info = await store.create_session(directory=directory, title=f"s{i}")
                await store.append(info.id, [Message.user(f"q{i}"), Message.assistant(f"a{i}")])
                ids.append(info.id)
            return ids

    return asyncio.run(main())


def state(db: Path, sid: str) -> Any:
    async def main() -> Any:
        async with SqliteStore(db) as store:
            return await store.get_session(sid), await store.read(sid)

    return asyncio.run(main())


def test_archive_a_directory_and_restore_one(tmp_path: Path, s3: Bucket, scripted_model: Any) -> None:
    db = tmp_path / "t.db"
    work = tmp_path / "proj"
    work.mkdir()
    ids = seed(db, str(work), 3)
    before = {sid: state(db, sid) for sid in ids}
    env = {"TETHER_ARCHIVE_BUCKET": s3.config.bucket, "AWS_ENDPOINT_URL": str(s3.config.endpoint_url)}
    result = tether(db, "archive", "--dir", str(work), "--json", env=env)
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    assert {x["session_id"] for x in lines} == set(ids) and all(x["entries"] == 2 for x in lines)
    shown = tether(db, "sessions", "show", ids[0])
    assert shown.exit_code == 1 and f"tether archive --restore {ids[0]}" in shown.output
    ran = tether(db, "run", "--session", ids[0], "hello")
    assert (
        ran.exit_code == 2 and f"is archived in s3://{s3.config.bucket}/" in ran.output and not scripted_model.requests
    )
    assert tether(db, "sessions", "--dir", str(work)).stdout.count("[archived]") == 3
    listed = json.loads(tether(db, "sessions", "--dir", str(work), "--json").stdout)
    assert {s["id"] for s in listed} == set(ids) and all("archived" in s["metadata"] for s in listed)
    again = tether(db, "archive", "--restore", ids[0][-8:], env=env)
    assert again.exit_code == 0 and f"Restored {ids[0]} (2 entries)" in again.output
    assert state(db, ids[0]) == before[ids[0]]


def test_bad_input_is_one_clear_line(tmp_path: Path, s3: Bucket) -> None:
    db = tmp_path / "t.db"
    (sid,) = seed(db, str(tmp_path), 1)
    assert "name the sessions to archive" in tether(db, "archive").output
    assert "no bucket" in tether(db, "archive", sid).output
    assert "--restore takes one session" in tether(db, "archive", sid, "--restore", sid).output
    missing = tether(
        db,
        "archive",
        sid,
        env={"TETHER_ARCHIVE_BUCKET": "no-such-bucket-cli", "AWS_ENDPOINT_URL": str(s3.config.endpoint_url)},
    )
    assert missing.exit_code == 1 and "create the bucket" in missing.output and "Traceback" not in missing.output
    assert tether(db, "archive", "--restore", sid).output.strip().endswith("is not archived")
