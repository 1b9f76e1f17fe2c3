"""The durable prompt queue through real `tether serve` processes (SQLite store, the loopback model of
cluster.py): a server killed with SIGKILL with two prompts queued (202 queued) behind a long run runs them
after its restart, once each, in order; with two workers, a prompt that lands on the worker that does not
run the session is queued in the store and run by the one that does (the relay shows who queued and who
ran each); a worker killed with prompts queued leaves them to the other worker, which runs each once."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cluster import MODEL, LoopbackModel, Node, call, home_with_config, start_node, until

pytestmark = pytest.mark.slow


@pytest.fixture
def model(tmp_path: Path) -> Iterator[LoopbackModel]:
    workspace = tmp_path / "work"
    workspace.mkdir()
    m = LoopbackModel(workspace)
    try:
        yield m
    finally:
        m.close()


def entries(node: Node, sid: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = call(node.url, "GET", f"/sessions/{sid}/entries").json()["entries"]
    return out


def user_texts(node: Node, sid: str) -> list[str]:
    return [e["body"]["parts"][0]["text"] for e in entries(node, sid) if e["body"].get("role") == "user"]


def asked(model: LoopbackModel, text: str) -> int:
    """How many model calls answered the prompt `text` first (a prompt run twice is asked twice)."""
    with model.lock:
        return sum(
            1
            for body in model.requests
            if [m for m in body["messages"] if m["role"] == "user"][-1]["content"] == text
            and body["messages"][-1]["role"] == "user"
        )


async def hold_run(node: Node, model: LoopbackModel) -> str:
    """A session whose run streams a long answer (about 20 s) after a tool call; returns its id once it does."""
    body = {"directory": str(model.workspace), "prompt": "hold this", "model": MODEL}
    sid: str = call(node.url, "POST", "/sessions", json=body).json()["session"]["id"]

    def streaming() -> bool:
        return len(entries(node, sid)) >= 3 and any(len(r["messages"]) >= 3 for r in model.requests[-1:])

    await until(streaming, 60, "the run to stream its second answer")
    return sid


def idle(node: Node, sid: str, count: int) -> bool:
    view = call(node.url, "GET", f"/sessions/{sid}").json()
    return bool(view["status"] == "idle" and view["lease"] is None and view["session"]["entry_count"] >= count)


async def test_a_server_killed_with_prompts_queued_runs_them_after_its_restart_once_each_in_order(
    tmp_path: Path, model: LoopbackModel
) -> None:
    home = home_with_config(tmp_path / "home")
    store = f"sqlite:///{tmp_path / 't.db'}"
    node = start_node(home, store, model.url, workers=1)
    try:
        sid = await hold_run(node, model)
        for text in ("say 3", "say 4"):
            r = call(node.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": text, "model": MODEL})
            assert r.status_code == 202 and r.json()["queued"] is True, r.text
        os.kill(node.process.pid, signal.SIGKILL)
        node.process.wait(30)
    finally:
        node.stop()
    node = start_node(home, store, model.url, workers=1)
    try:
        await until(lambda: user_texts(node, sid)[-1:] == ["say 4"] and idle(node, sid, 8), 60, "the queue to run")
        assert user_texts(node, sid) == ["hold this", "say 3", "say 4"]
        assert asked(model, "say 3") == 1 and asked(model, "say 4") == 1
        answers = [e["body"] for e in entries(node, sid) if e["body"].get("role") == "assistant"]
        assert [a["parts"][0]["text"] for a in answers[-2:]] == ["w0 w1 w2 ", "w0 w1 w2 w3 "]
        with sqlite3.connect(tmp_path / "t.db") as db:
            assert db.execute("SELECT count(*) FROM prompt_queue").fetchone() == (0,)
    finally:
        node.stop()


def relay_rows(db: Path, kind: str) -> list[tuple[int, int]]:
    """(pid of the worker that wrote it, n) of the relay's rows of `kind`."""
    with sqlite3.connect(f"{db}.relay") as conn:
        rows = conn.execute("SELECT origin, n FROM relay WHERE kind = ? ORDER BY id", (kind,)).fetchall()
    return [(int(str(origin).split(":")[1]), int(n)) for origin, n in rows]


async def post_until_one_lands_elsewhere(node: Node, sid: str, db: Path, runner: int) -> list[str]:
    """Prompts, each on a new connection (SO_REUSEPORT spreads them), until at least one landed on the other
    worker (which queued it for the runner: a "queued" row of its own in the relay)."""
    posted: list[str] = []
    for i in range(40):
        text = f"say {i + 1}"
        r = call(node.url, "POST", f"/sessions/{sid}/prompt", json={"prompt": text, "model": MODEL})
        assert r.status_code == 202 and r.json()["queued"] is True, r.text
        posted.append(text)
        if len(posted) >= 4 and any(pid != runner for pid, _ in relay_rows(db, "queued")):
            return posted
    raise AssertionError("no prompt reached the other worker in 40 connections")


@pytest.fixture
def two_workers(tmp_path: Path, model: LoopbackModel) -> Iterator[tuple[Node, Path]]:
    home = home_with_config(tmp_path / "home")
    node = start_node(home, f"sqlite:///{tmp_path / 't.db'}", model.url, workers=2)
    try:
        yield node, tmp_path / "t.db"
    finally:
        node.stop()


async def test_a_prompt_to_the_other_worker_is_run_by_the_worker_that_runs_the_session(
    two_workers: tuple[Node, Path], model: LoopbackModel
) -> None:
    node, db = two_workers
    sid = await hold_run(node, model)
    runner = int(call(node.url, "GET", f"/sessions/{sid}").json()["lease"]["pid"])
    posted = await post_until_one_lands_elsewhere(node, sid, db, runner)
    with sqlite3.connect(db) as conn:  # queued durably, in order, before each 202
        assert conn.execute("SELECT count(*) FROM prompt_queue WHERE session_id = ?", (sid,)).fetchone() == (
            len(posted),
        )
    call(node.url, "POST", f"/sessions/{sid}/pause")  # the long answer stops at its next step
    await until(lambda: user_texts(node, sid)[-1:] == posted[-1:] and idle(node, sid, 3), 120, "the queue to run")
    assert user_texts(node, sid) == ["hold this", *posted]
    assert all(asked(model, text) == 1 for text in posted)
    ran = relay_rows(db, "ran")  # the end of each queued prompt's run, posted by the worker that ran it
    assert len(ran) == len(posted) and {pid for pid, _ in ran} == {runner}
    forwarded = [n for pid, n in relay_rows(db, "queued") if pid != runner]
    assert forwarded and set(forwarded) <= {n for _, n in ran}


async def test_a_worker_killed_with_prompts_queued_leaves_them_to_the_other_which_runs_each_once(
    two_workers: tuple[Node, Path], model: LoopbackModel
) -> None:
    node, db = two_workers
    sid = await hold_run(node, model)
    victim = int(call(node.url, "GET", f"/sessions/{sid}").json()["lease"]["pid"])
    posted = await post_until_one_lands_elsewhere(node, sid, db, victim)
    os.kill(victim, signal.SIGKILL)
    await until(lambda: user_texts(node, sid)[-1:] == posted[-1:] and idle(node, sid, 3), 120, "the takeover")
    assert user_texts(node, sid) == ["hold this", *posted]
    assert all(asked(model, text) == 1 for text in posted)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM prompt_queue").fetchone() == (0,)
