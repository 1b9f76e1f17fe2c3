"""Shared fixtures. `store` runs a test once per backend: the conformance suite is every test that uses it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.store import MemoryStore, SqliteStore, Store

BACKENDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may touch the user's real tether data or pick up their API keys."""
    home = tmp_path_factory.mktemp("tether-home")
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.delenv("TETHER_STORE", raising=False)
    for key in list(os.environ):
        if key.endswith("_API_KEY"):
            monkeypatch.delenv(key, raising=False)


def make_store(kind: str, path: Path, request: pytest.FixtureRequest | None = None) -> Store:
    """A store of `kind`; PostgreSQL's is on an empty database with tether's schema (`postgres_store_url`)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(path / "tether.db")
    if kind == "postgres" and request is not None:
        from tether.store.postgres import PostgresStore

        return PostgresStore(request.getfixturevalue("postgres_store_url"))
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s = make_store(request.param, tmp_path, request)
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


# --- a real PostgreSQL: a throwaway cluster per test session, a fresh database per test ------------------------

POSTGRES_ENV = "TETHER_TEST_POSTGRES"
"""A running PostgreSQL server to use instead of starting one: a `postgresql://` URL of a role allowed to
create databases (each test gets a database of its own there, dropped after it). Unset: the tests start their
own cluster with the initdb/pg_ctl of Debian's `postgresql` package (/usr/lib/postgresql/*/bin)."""


def _postgres_bin(debian: Path = Path("/usr/lib/postgresql"), path: str | None = None) -> Path:
    """The folder with initdb, pg_ctl and postgres: PATH first, then Debian's versioned folders (newest)."""
    import shutil

    on_path = shutil.which("pg_ctl", path=path)
    if on_path and shutil.which("initdb", path=path):
        return Path(on_path).parent
    found = sorted(
        (p.parent for p in debian.glob("*/bin/initdb") if (p.parent / "pg_ctl").is_file()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not found:
        raise RuntimeError(
            "no PostgreSQL for the tests: install Debian's postgresql package (apt-get install -y postgresql: its "
            "initdb and pg_ctl land in /usr/lib/postgresql/<version>/bin), or name a running server in "
            f"{POSTGRES_ENV}=postgresql://user@host:port/db"
        )
    return found[-1]


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: as root, its programs run as the `postgres` user (runuser)."""
    import shutil

    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        raise RuntimeError("running as root without runuser: PostgreSQL must be started as the postgres user")
    return [runuser, "-u", "postgres", "--"]


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_cluster(folder: Path) -> tuple[str, list[str]]:
    """initdb + pg_ctl start in `folder` (owned by the user that runs the server); the server's URL and the
    command that stops it."""

    bin_dir = _postgres_bin()
    prefix = _as_postgres_user()
    if prefix:
        import pwd

        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
    data = folder / "data"
    done = subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
         "--locale=C", "--no-sync"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr[-2000:]}")
    last = ""
    for _ in range(5):  # a port taken between _free_port and the server's bind: another port
        port = _free_port()
        # fsync off: a throwaway cluster need not survive the machine's crash (a writer's SIGKILL, which the
        # tests do, is the client's; synchronous_commit stays on, so a commit is acknowledged after its WAL)
        options = (
            f"-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={folder} "
            "-c max_connections=300 -c fsync=off -c full_page_writes=off -c shared_buffers=32MB"
        )
        done = subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-o", options,
             "-w", "-t", "60", "start"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode == 0:
            stop = [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
            return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop
        log = folder / "server.log"
        last = (done.stderr or "") + (log.read_text(errors="replace")[-2000:] if log.exists() else "")
    raise RuntimeError(f"pg_ctl start failed: {last}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The URL (its `postgres` database) of a PostgreSQL server for this test session: the one named in
    TETHER_TEST_POSTGRES, or a cluster started here (initdb + pg_ctl, a few seconds) and removed at the end."""
    import shutil
    import tempfile

    named = os.environ.get(POSTGRES_ENV)
    if named:
        yield named
        return
    # not under pytest's tmp folder: that one is private to root, and the server runs as postgres
    folder = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    watchdog: subprocess.Popen[bytes] | None = None
    try:
        url, stop = _start_cluster(folder)
        watchdog = _watchdog(stop, folder)
        try:
            yield url
        finally:
            subprocess.run(stop, capture_output=True, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if watchdog is not None and watchdog.stdin is not None:
            watchdog.stdin.close()  # its work is done: it finds nothing to stop
            watchdog.wait(timeout=120)


_WATCHDOG = """
import shutil, subprocess, sys
sys.stdin.buffer.read()  # the end of the pipe: the test session is over, or was killed
stop, folder = sys.argv[1:-1], sys.argv[-1]
subprocess.run(stop, capture_output=True, timeout=120)
shutil.rmtree(folder, ignore_errors=True)
"""


def _watchdog(stop: list[str], folder: Path) -> subprocess.Popen[bytes]:
    """A process that stops the cluster and removes its folder once this test session ends, however it
    ends: a pytest killed with SIGKILL (or a helper's whole-suite run stopped midway) otherwise leaves its
    server running. It waits for the end of a pipe that only this process holds, in a session of its own
    (a Ctrl-C to the terminal's process group does not stop it before it has done its work)."""
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, *stop, str(folder)], stdin=subprocess.PIPE, start_new_session=True
    )


def _with_database(url: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@pytest.fixture
def postgres_url(postgres_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A `postgresql://` URL of an empty database of this test's own, dropped (with its connections) after it."""
    import re
    import uuid

    import psycopg

    stem = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    name = f"t_{stem}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(postgres_server, name)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _postgres_tether_db(postgres_server: str) -> str:
    """One database of this test session with tether's schema (made by opening a store on it once)."""
    import uuid

    import psycopg

    from tether.store.postgres import PostgresStore

    name = f"tether_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _with_database(postgres_server, name)
    PostgresStore(url)  # migrates; its pool is never opened, nothing to close
    return url


@pytest.fixture
def postgres_store_url(_postgres_tether_db: str) -> str:
    """A `postgresql://` URL of a database with tether's schema and no rows: the session's one, emptied before
    each test (every table but the schema's version truncated; a connection left over by an earlier test is
    ended first). Much faster than a database per test (CREATE DATABASE takes ~0.3 s here), for the hundreds of
    tests the `store` fixture runs."""
    import psycopg

    with psycopg.connect(_postgres_tether_db, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema()"
                " AND tablename <> 'tether_schema'"
            ).fetchall()
        ]
        if tables:
            conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")
    return _postgres_tether_db
