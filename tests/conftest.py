"""Shared fixtures. `store` runs a test once per backend: the conformance suite is every test that uses it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.store import MemoryStore, SqliteStore, Store

BACKENDS = ["memory", "sqlite"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may touch the user's real tether data or pick up their API keys."""
    home = tmp_path_factory.mktemp("tether-home")
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.delenv("TETHER_STORE", raising=False)
    for key in list(os.environ):
        if key.endswith("_API_KEY"):
            monkeypatch.delenv(key, raising=False)


def make_store(kind: str, path: Path) -> Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(path / "tether.db")
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = make_store(request.param, tmp_path)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = SqliteStore(tmp_path / "tether.db")
    try:
        yield s
    finally:
        await s.close()


# --- a real S3 service: Ceph's RADOS Gateway on loopback ------------------------------------------------------

S3_ENDPOINT_ENV = "TETHER_TEST_S3_ENDPOINT"
"""Where a running S3-compatible service is (its keys in TETHER_TEST_S3_KEY / TETHER_TEST_S3_SECRET); unset:
the one `s3-server-up.sh` starts on http://127.0.0.1:7480, started here when it is not running."""
S3_DEFAULT = "http://127.0.0.1:7480"
S3_KEYS = ("TESTACCESSKEY", "TESTSECRETKEY123")


def _answers(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=3).close()
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False


def _s3_script() -> Path:
    given = os.environ.get("TETHER_S3_SERVER_UP")
    candidates = [Path(given)] if given else []
    root = Path(__file__).resolve().parent.parent
    candidates += [root.parent / "shared" / "tools" / "s3-server-up.sh", Path("/work/shared/tools/s3-server-up.sh")]
    for path in candidates:
        if path.is_file():
            return path
    raise RuntimeError(
        "no S3 service for the tests: set TETHER_TEST_S3_ENDPOINT, or install Ceph "
        "(apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw ceph-common) and put "
        "s3-server-up.sh in ../shared/tools (or name it in TETHER_S3_SERVER_UP)"
    )


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real S3 endpoint for the session: the one named, one already running, or one started here (Ceph's
    RADOS Gateway, about 20 s) and stopped at the end."""
    import signal
    import subprocess

    named = os.environ.get(S3_ENDPOINT_ENV)
    if named:
        yield named
        return
    if _answers(S3_DEFAULT):
        yield S3_DEFAULT
        return
    folder = tmp_path_factory.mktemp("ceph")
    done = subprocess.run(["bash", str(_s3_script()), str(folder)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0 or not _answers(S3_DEFAULT):
        raise RuntimeError(f"s3-server-up.sh failed ({done.returncode}): {done.stderr[-2000:]}")
    try:
        yield S3_DEFAULT
    finally:
        for pid_file in (folder / "run").glob("*.pid"):
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    """A fresh bucket on the real S3 service, with the service's keys in the environment."""
    import re
    import uuid

    from tether.store.objects import Bucket, BucketConfig

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", os.environ.get("TETHER_TEST_S3_KEY", S3_KEYS[0]))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", os.environ.get("TETHER_TEST_S3_SECRET", S3_KEYS[1]))
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    bucket = Bucket(BucketConfig(f"t-{name}-{uuid.uuid4().hex[:8]}", "tether/", s3_endpoint))
    bucket.create()
    return bucket
