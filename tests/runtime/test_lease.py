"""A run holds its session: one run per session across processes. Real `tether run` processes (a scripted
model that has `bash` run commands) against one SQLite file: a second run is refused with the holder named,
or waits; a killed holder is taken over; a cancel or a pause asked from another process reaches the run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tether.errors import SessionBusy
from tether.messages import Checkpoint, Marker, Message
from tether.runtime.lease import LeaseTerms, RunLease, held_for_edit, process_alive
from tether.store import SqliteStore

DRIVER = """
import os, sys
from tether import Message, ToolCallPart
from tether.providers.catalog import unknown_model
from tether.providers.registry import ResolvedModel
from tether.providers.scripted import ScriptedProvider
import tether.runtime.launch as launch

command, steps = os.environ["TEST_COMMAND"], int(os.environ.get("TEST_STEPS", "1"))

def respond(request):
    done = sum(1 for m in request.messages[-2 * steps - 2:] if m.role == "tool")
    if done >= steps:
        return "finished"
    step = ToolCallPart(id=f"c{len(request.messages)}", name="bash", arguments={"command": command.format(n=done)})
    return Message.assistant(tool_calls=[step])

provider = ScriptedProvider(respond)
launch.resolve_provider = lambda model=None, **_: ResolvedModel(provider, "test", unknown_model("scripted", "test"))
from tether.cli.main import cli
cli(sys.argv[1:], prog_name="tether")
"""


class Tether:
    """`tether` processes on one store, with a scripted model whose tool calls run `command` in bash."""

    def __init__(self, tmp_path: Path) -> None:
        self.db = tmp_path / "t.db"
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.home = tmp_path / "home"
        self.home.mkdir()
        # the scripted model's commands are these tests' own: no one is at a terminal to approve them
        (self.home / "config.toml").write_text('[permissions]\nallow = ["bash"]\n')

    def env(self, command: str, steps: int) -> dict[str, str]:
        return {**os.environ, "TETHER_HOME": str(self.home), "TEST_COMMAND": command, "TEST_STEPS": str(steps)}

    def start(self, *args: str, command: str = "true", steps: int = 1) -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", DRIVER, "--store", f"sqlite:///{self.db}", *args]
        return subprocess.Popen(
            argv, cwd=self.work, env=self.env(command, steps), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def run(self, *args: str, command: str = "true", steps: int = 1, timeout: float = 60) -> tuple[int, str, str]:
        proc = self.start(*args, command=command, steps=steps)
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err

    def session_id(self) -> str:
        code, out, err = self.run("--json", "sessions", "--all")
        assert code == 0, err
        return str(json.loads(out)[0]["id"])

    def entries(self, session_id: str) -> list[object]:
        async def read() -> list[object]:
            async with SqliteStore(self.db) as store:
                return [e.body for e in await store.read(session_id)]

        return asyncio.run(read())

    def lease_holder(self, session_id: str) -> str | None:
        async def read() -> str | None:
            async with SqliteStore(self.db) as store:
                lease = await store.get_lease(session_id)
                return lease.holder if lease is not None else None

        return asyncio.run(read())


def wait_for(predicate: object, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def tether(tmp_path: Path) -> Tether:
    return Tether(tmp_path)


@pytest.mark.slow
def test_a_second_run_is_refused_with_the_holder_named_or_waits(tether: Tether) -> None:
    marker, go = tether.work / "started", tether.work / "go"
    # the first run's command holds the session until the test says go (a sleep raced a loaded machine)
    first = tether.start("run", "work slowly", command=f"touch {marker}; until [ -e {go} ]; do sleep 0.05; done")
    wait_for(marker.exists, what="the first run's command")
    sid = tether.session_id()
    code, _, err = tether.run("run", "--session", sid, "me too")
    assert code == 3, err
    line = err.strip().splitlines()[-1]
    assert f"session {sid} is busy: run run_" in line and f"pid {first.pid}" in line and " since " in line
    assert "--wait" in line
    # with --wait, the second run runs once the first is done: both prompts, in order, nothing interleaved
    second = tether.start("run", "--session", sid, "--wait", "after you", command="echo second")
    assert second.stderr is not None
    said = second.stderr.readline()  # the line it prints as it starts to wait, before the first is let go
    go.touch()
    _, rest = second.communicate(timeout=60)
    err = said + rest
    assert second.returncode == 0, err
    assert first.wait(30) == 0
    users = [b.text for b in tether.entries(sid) if isinstance(b, Message) and b.role == "user"]
    assert users == ["work slowly", "after you"]
    assert "waiting for it to finish" in err
    assert tether.lease_holder(sid) is None  # both gave the session back


@pytest.mark.slow
def test_a_killed_holder_is_taken_over_without_running_its_call_again(tether: Tether) -> None:
    log = tether.work / "deploys.log"
    holder = tether.start("run", "deploy", command=f"echo prod >> {log}; sleep 3600")
    wait_for(log.exists, what="the deploy to start")
    sid = tether.session_id()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    assert tether.lease_holder(sid) is not None  # its lease outlives it ...
    code, _, err = tether.run("run", "--continue")  # ... but its process is gone: taken over at once
    assert code == 0, err
    assert log.read_text() == "prod\n"  # the killed call was not run again
    results = [r for b in tether.entries(sid) if isinstance(b, Message) for r in b.tool_results]
    assert len(results) == 1 and results[0].is_error and "interrupted" in results[0].content


async def test_a_lease_of_another_machine_is_waited_out_until_it_expires(tmp_path: Path) -> None:
    """A holder on another host cannot be seen to be dead: its lease is taken over once it expires."""
    async with SqliteStore(tmp_path / "t.db") as store:
        sid = (await store.create_session()).id
        await store.acquire_lease(sid, "run_elsewhere", ttl=1.2, pid=1, host="another-machine")
        with pytest.raises(SessionBusy, match="another-machine"):
            await RunLease(store, sid, "run_here", LeaseTerms(ttl=5)).acquire()
        told: list[SessionBusy] = []
        started = time.monotonic()
        lease = await RunLease(store, sid, "run_here", LeaseTerms(ttl=5, wait=10)).acquire(told.append)
        assert lease.holder == "run_here" and time.monotonic() - started > 0.5
        assert [b.holder for b in told] == ["run_elsewhere"]  # told once, who it waits for


@pytest.mark.slow
def test_a_cancel_from_another_process_stops_the_run_within_a_second(tether: Tether) -> None:
    marker = tether.work / "started"
    # the job is found by its command line: in the sandbox, `$!` is a number of the sandbox's own
    runner = tether.start("run", "a long job", command=f"sleep 3607 & touch {marker}; wait")
    wait_for(marker.exists, what="the long command")
    wait_for(lambda: bool(sleeping("3607")), what="the job to be seen")
    sid = tether.session_id()
    code, out, err = tether.run("sessions", "cancel", sid)
    asked = time.monotonic()
    assert code == 0 and "asked run run_" in out and "to cancel" in out, err
    runner.wait(20)
    assert time.monotonic() - asked < 5  # within a second of its poll, plus the process's own exit
    assert runner.returncode == 1 and "cancelled from another process" in runner.stderr.read()  # type: ignore[union-attr]
    results = [r for b in tether.entries(sid) if isinstance(b, Message) for r in b.tool_results]
    assert len(results) == 1 and results[0].is_error and "aborted" in results[0].content
    assert tether.lease_holder(sid) is None
    wait_for(lambda: not sleeping("3607"), what="the cancelled command's process to be killed")
    code, _, err = tether.run("sessions", "cancel", sid)
    assert code == 1 and "no run is working in session" in err


def sleeping(seconds: str) -> list[int]:
    """The live `sleep SECONDS` processes (zombies excepted)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] == ["sleep", seconds] and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.pid)
    return found


@pytest.mark.slow
def test_a_pause_from_another_process_stops_at_the_next_step_and_continue_resumes(tether: Tether) -> None:
    steps = tether.work / "steps"
    runner = tether.start("run", "many steps", command=f"echo {{n}} >> {steps}; sleep 0.3", steps=30)
    wait_for(lambda: steps.exists() and len(steps.read_text().split()) >= 2, what="two steps")
    sid = tether.session_id()
    code, out, err = tether.run("sessions", "pause", sid)
    assert code == 0 and "to pause at its next step" in out, err
    assert runner.wait(30) == 0
    assert "Paused, as asked" in runner.stderr.read()  # type: ignore[union-attr]
    bodies = tether.entries(sid)
    assert isinstance(bodies[-1], Checkpoint) and bodies[-1].reason == "paused"
    done_steps = len(steps.read_text().split())
    assert done_steps < 30
    shown = json.loads(tether.run("--json", "sessions", "show", sid)[1])
    assert shown["session"]["state"] == "paused"
    code, _, err = tether.run("run", "--continue", "--session", sid, command=f"echo {{n}} >> {steps}", steps=30)
    assert code == 0, err
    assert json.loads(tether.run("--json", "sessions", "show", sid)[1])["session"]["state"] == "active"
    assert len(steps.read_text().split()) > done_steps  # it went on from where it stopped
    assert not any(isinstance(b, Marker) and b.name == "interrupted" for b in tether.entries(sid))


def test_process_alive() -> None:
    assert process_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not process_alive(child.pid)
    assert not process_alive(0) and not process_alive(-5)


async def test_without_waiting_a_lease_to_wait_for_raises_would_wait(tmp_path: Path) -> None:
    """`acquire(wait=False)`: what the terms would wait for is `WouldWait`; what they would not is busy."""
    from tether.runtime.lease import WouldWait

    async with SqliteStore(tmp_path / "t.db") as store:
        sid = (await store.create_session()).id
        await store.acquire_lease(sid, "run_elsewhere", ttl=30, pid=1, host="another-machine")
        with pytest.raises(WouldWait) as waited:
            await RunLease(store, sid, "run_here", LeaseTerms(ttl=5, wait=10)).acquire(wait=False)
        assert waited.value.busy.holder == "run_elsewhere"
        with pytest.raises(SessionBusy):
            await RunLease(store, sid, "run_here", LeaseTerms(ttl=5)).acquire(wait=False)


class _LosesCancels:
    """A store whose lease reads lose a cancel that comes as they finish, as Python 3.11's `asyncio.wait_for`
    does (psycopg_pool waits for a connection with it): the reader goes on as if it had not been cancelled."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self.reads = 0

    async def get_lease(self, session_id: str) -> object:
        self.reads += 1
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass  # the connection was handed over as the cancel came: wait_for returns it
        return await self._store.get_lease(session_id)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


async def test_a_lease_whose_keeper_loses_its_cancel_is_still_given_back(tmp_path: Path) -> None:
    # the keeper must stop for `release` even when the cancel never reaches it: else the run waits for it
    # for ever, holding the session "running" with a lease renewed every few seconds (seen in bench/nodes.py)
    async with SqliteStore(tmp_path / "t.db") as sqlite:
        store = _LosesCancels(sqlite)
        sid = (await sqlite.create_session()).id
        lease = RunLease(store, sid, "run_here", LeaseTerms(ttl=30))  # type: ignore[arg-type]
        await lease.acquire()
        lease.watch(lambda _: None, lambda _: None)
        while not store.reads:  # the keeper is reading the lease
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.02)  # in the middle of its read
        releasing = asyncio.ensure_future(lease.release())
        done, _ = await asyncio.wait({releasing}, timeout=10)  # (it takes a read and a write)
        if not done:
            releasing.cancel()
        assert done, "release() still waits for a keeper that lost its cancel"
        assert await sqlite.get_lease(sid) is None


# --- an edit's hold -------------------------------------------------------------------------------------


async def test_an_edit_holds_the_session_while_it_lasts_and_gives_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete, revert, compaction or title outside a run: no run starts meanwhile (nor another edit); a
    run that holds the session refuses the edit with its name; the hold is renewed for a long edit."""
    import tether.runtime.lease as lease_module

    async with SqliteStore(tmp_path / "t.db") as store:
        info = await store.create_session()
        async with held_for_edit(store, info.id, what="revert") as held:
            assert held.holder.startswith("revert_")
            with pytest.raises(SessionBusy, match="revert_"):
                await RunLease(store, info.id, "run_x", LeaseTerms()).acquire()
            with pytest.raises(SessionBusy):
                async with held_for_edit(store, info.id):
                    pass
        assert await store.get_lease(info.id) is None  # given back

        run = RunLease(store, info.id, "run_y", LeaseTerms())
        await run.acquire()
        with pytest.raises(SessionBusy, match="run_y"):
            async with held_for_edit(store, info.id):
                raise AssertionError("an edit under a run")
        await run.release()

        monkeypatch.setattr(lease_module, "EDIT_TTL", 3.0)  # renewed at a third of it, looked at every POLL
        async with held_for_edit(store, info.id) as held:
            await asyncio.sleep(4.5)
            lease = await store.get_lease(info.id)
            assert lease is not None and lease.holder == held.holder and lease.expires_at > time.time()


async def test_an_edit_takes_over_from_a_holder_whose_process_is_gone(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "t.db") as store:
        info = await store.create_session()
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        dead_pid = int(gone.stdout)
        await store.acquire_lease(info.id, "run_dead", ttl=600, pid=dead_pid, host=socket.gethostname())
        async with held_for_edit(store, info.id) as held:
            assert held.holder != "run_dead"
        assert await store.get_lease(info.id) is None


async def test_an_edit_that_deletes_its_session_ends_cleanly(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "t.db") as store:
        info = await store.create_session()
        async with held_for_edit(store, info.id, what="delete"):
            assert await store.delete_session(info.id) == [info.id]
        assert (await store.list_sessions()).items == []
