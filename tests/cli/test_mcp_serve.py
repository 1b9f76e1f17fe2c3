"""`tether mcp serve`, driven by the SDK's own client as Claude Code would drive it: over stdio (the real
command in a subprocess) and over streamable HTTP on loopback. Recall finds sessions imported from Claude
Code (its real transcripts); listing and showing work by id or a piece of one; the tools are read-only (and
say so), and calling every one of them leaves the store's file as it was; known secrets are redacted."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra (pip install 'tether[mcp]')")

from mcp import Client, StdioServerParameters
from tether.importers.sources import import_path
from tether.messages import Message
from tether.store import SqliteStore

SRC = Path(__file__).resolve().parents[2] / "src"
CLAUDE = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code-real" / "projects" / "-scratch-project"
SECRET = "sk-proj-servedsecret-0123456789"


async def make_store(path: Path) -> list[str]:
    """A store with the Claude Code fixture's sessions imported, and one tether session holding a secret."""
    store = SqliteStore(path)
    try:
        ids: list[str] = []
        for file in sorted(CLAUDE.glob("*.jsonl")):
            if file.name.startswith("agent-"):
                continue
            for result in await import_path(store, str(file), "claude-code"):
                if result.session_id:
                    ids.append(result.session_id)
        info = await store.create_session(directory="/work/demo", title="secret holder")
        await store.append(info.id, [Message.user(f"my key is {SECRET} keep it safe"), Message.assistant("noted")])
        # a search brings the full-text index up to date with the entries (it is filled after their commit, by
        # the next append or search): from here on nothing in the file may change, derived index included
        await store.search("anything")
        return ids
    finally:
        await store.close()


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "OPENAI_API_KEY": SECRET}


def digest(path: Path) -> str:
    """What the store holds, every table row by row (the file's bytes also move when SQLite checkpoints its
    write-ahead log on a reader's close, which changes nothing held; and a reader's close may run `PRAGMA
    optimize`, whose query planner statistics in `sqlite_stat1` hold nothing of the store's either)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = [line for line in con.iterdump() if not line.startswith('INSERT INTO "sqlite_stat')]
        return hashlib.sha256("\n".join(rows).encode()).hexdigest()
    finally:
        con.close()


async def exercise(client: Client) -> dict[str, str]:
    """Call every tool the way a model would; the texts by name."""
    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == {"recall", "list_sessions", "show_session"}
    for tool in tools:  # each says it changes nothing
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False

    async def text(name: str, args: dict[str, object]) -> str:
        result = await client.call_tool(name, args)
        assert not result.is_error, result
        return "\n".join(getattr(b, "text", "") for b in result.content)

    return {
        "recall": await text("recall", {"query": "list the files"}),
        "list": await text("list_sessions", {}),
        "search": await text("list_sessions", {"query": "MISSING"}),
        "secret": await text("recall", {"query": "key keep it safe"}),
    }


async def test_stdio_recall_finds_claude_code_sessions_and_nothing_writes(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    ids = await make_store(db)
    assert ids
    before = digest(db)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tether", "--store", str(db), "mcp", "serve"], env=env(), cwd=str(tmp_path)
    )
    async with Client(params) as client:
        texts = await exercise(client)
        assert "LIST the files" in texts["recall"] and any(i in texts["recall"] for i in ids)
        assert "imported from" in texts["list"] and "secret holder" in texts["list"]
        assert any(i in texts["search"] for i in ids)
        assert SECRET not in texts["secret"] and "[redacted:" in texts["secret"]
        listed = next(i for i in ids if i in texts["recall"])
        shown = await client.call_tool("show_session", {"session": listed[-8:], "start": 1, "end": 6})
        body = shown.content[0].text  # type: ignore[union-attr]
        assert body.startswith(listed) and "entries 1-6 of" in body and "#1 " in body
        missing = await client.call_tool("show_session", {"session": "ses_nothing_like_this"})
        assert missing.is_error
        beyond = await client.call_tool("show_session", {"session": listed, "start": 100000})
        assert beyond.is_error and "the session has" in beyond.content[0].text  # type: ignore[union-attr]
    assert digest(db) == before  # no tool changed the store
    store = SqliteStore(db)
    try:
        assert len((await store.list_sessions(limit=100)).items) == len(ids) + 1
    finally:
        await store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_streamable_http_on_loopback(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    ids = await make_store(db)
    before = digest(db)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "--store", str(db), "mcp", "serve", "--http", str(port)],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the server did not listen"
                await asyncio.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            texts = await exercise(client)
            assert any(i in texts["recall"] for i in ids)
            assert SECRET not in texts["secret"]
    finally:
        proc.terminate()
        proc.wait(15)
    assert digest(db) == before


def test_it_listens_on_loopback_only(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "--store",
            str(tmp_path / "t.db"),
            "mcp",
            "serve",
            "--http",
            "0",
            "--host",
            "0.0.0.0",
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "loopback only" in run.stderr
