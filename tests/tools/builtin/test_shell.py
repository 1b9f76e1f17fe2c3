from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from tether.messages import ToolCallPart
from tether.redaction import Redactor, SecretPolicy
from tether.tools import ToolContext, ToolRegistry, open_artifact, read_artifact_bytes, run_tool_call
from tether.tools.base import ToolLimits
from tether.tools.builtin.shell import WATCHER

from ..conftest import Call


def gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for a reaper has ended too)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_for_file(path: Path) -> str:
    for _ in range(500):
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


async def eventually_gone(pid: int) -> bool:
    # a SIGKILLed process is reaped by init asynchronously; give it a moment (not a timing assertion)
    for _ in range(200):
        if gone(pid):
            return True
        await asyncio.sleep(0.01)
    return False


async def test_output_and_exit_code(call: Call, workspace: Path) -> None:
    result = await call("bash", command="echo out; echo err >&2; exit 3")
    assert result.content == "out\nerr\n[exit code 3]"
    assert result.metadata["exit_code"] == 3
    assert not result.is_error  # the command ran; its exit status is for the model to read
    ok = await call("bash", command="pwd")
    assert ok.content == f"{workspace.resolve()}\n[exit code 0]"
    assert ok.metadata["exit_code"] == 0


async def test_no_output_and_no_trailing_newline(call: Call) -> None:
    assert (await call("bash", command="true")).content == "(no output)\n[exit code 0]"
    assert (await call("bash", command="printf abc")).content == "abc\n[exit code 0]"


async def test_stdin_is_closed(call: Call) -> None:
    result = await call("bash", command='read -r x; echo "got:$x"; cat')
    assert result.content == "got:\n[exit code 0]"


async def test_pagers_and_prompts_are_disabled(call: Call) -> None:
    result = await call("bash", command='echo "$PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT"')
    assert result.content == "cat cat 0\n[exit code 0]"


async def test_killed_by_a_signal(call: Call) -> None:
    result = await call("bash", command="kill -SEGV $$")
    assert result.content == "(no output)\n[killed by signal SIGSEGV]"
    assert result.metadata["exit_code"] == -signal.SIGSEGV


async def test_bad_arguments(call: Call) -> None:
    assert "command is empty" in (await call("bash", command="  ")).content
    result = await call("bash", command="true", timeout=0)
    assert result.is_error and "timeout must be more than 0 and at most 600" in result.content
    assert (await call("bash", command="true", timeout=601)).is_error
    assert (
        await call("bash")
    ).content == "bash: missing required argument 'command' (expected: command, timeout?, description?)"


async def test_timeout_kills_the_whole_process_group(call: Call, workspace: Path) -> None:
    result = await call("bash", command="sleep 100 & echo $! > child.pid; echo started; wait", timeout=1)
    assert result.is_error
    assert result.content == ("started\n[timed out after 1 s; the command and its child processes were killed]")
    assert result.metadata["timed_out"] is True and result.metadata["exit_code"] is None
    assert await eventually_gone(int((workspace / "child.pid").read_text()))


async def test_children_that_ignore_sigterm_are_killed_too(call: Call, workspace: Path) -> None:
    result = await call("bash", command="trap '' TERM; sleep 100 & echo $! > child.pid; wait", timeout=0.5)
    assert result.metadata["timed_out"] is True
    assert await eventually_gone(int((workspace / "child.pid").read_text()))


async def test_abort_kills_the_command(registry: ToolRegistry, ctx: ToolContext, workspace: Path) -> None:
    call = ToolCallPart(id="1", name="bash", arguments={"command": "sleep 100 & echo $! > child.pid; wait"})
    task = asyncio.create_task(run_tool_call(registry, call, ctx))
    pid = int(await wait_for_file(workspace / "child.pid"))
    ctx.abort.set()
    result = await task
    assert result.is_error and result.metadata["aborted"] is True
    assert result.content == "(no output)\n[aborted; the command and its child processes were killed]"
    assert await eventually_gone(pid)


async def test_cancelling_the_call_kills_the_command(registry: ToolRegistry, ctx: ToolContext, workspace: Path) -> None:
    call = ToolCallPart(id="1", name="bash", arguments={"command": "sleep 100 & echo $! > child.pid; wait"})
    task = asyncio.create_task(run_tool_call(registry, call, ctx))
    pid = int(await wait_for_file(workspace / "child.pid"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await eventually_gone(pid)


async def test_background_jobs_do_not_hold_the_call_forever(call: Call, workspace: Path) -> None:
    result = await call("bash", command="sleep 30 & echo $! > bg.pid; echo started")
    pid = int((workspace / "bg.pid").read_text())
    try:
        assert result.metadata["exit_code"] == 0 and result.metadata["detached_output"] is True
        assert result.content.startswith("started\n[exit code 0] [background processes still hold the output")
        assert not gone(pid)  # a background job the user asked for keeps running
    finally:
        os.kill(pid, signal.SIGKILL)
    # with its output redirected, a background job does not delay the call at all
    quiet = await call("bash", command="sleep 30 > /dev/null 2>&1 & echo $! > bg2.pid; echo started")
    os.kill(int((workspace / "bg2.pid").read_text()), signal.SIGKILL)
    assert quiet.content == "started\n[exit code 0]"


class PeakRSS:
    """Samples this process's resident memory from a thread, to catch the peak of an operation."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.base = self.proc.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


async def test_100_mb_of_output_is_cut_saved_and_readable_in_bounded_memory(call: Call, ctx: ToolContext) -> None:
    lines = 1_000_000  # 100 bytes each: 100,000,000 bytes, every chunk different
    script = f"import sys\nw = sys.stdout.write\nfor i in range({lines}):\n    w(f'{{i:09d}} ' + 'x' * 89 + '\\n')\n"
    (ctx.workspace / "gen.py").write_text(script)
    with PeakRSS() as rss:
        result = await call("bash", command=f"{sys.executable} gen.py")
    growth = rss.peak - rss.base
    assert growth < 40 * 1024 * 1024, f"resident memory grew by {growth / 2**20:.1f} MiB"

    assert result.metadata["exit_code"] == 0 and not result.is_error
    assert result.metadata["truncated"] is True
    assert result.metadata["original_bytes"] == 100_000_000
    assert result.metadata["original_lines"] == lines
    assert len(result.content) <= ctx.limits.output_chars
    assert result.content.startswith("000000000 " + "x" * 89 + "\n")
    assert result.content.endswith("000999999 " + "x" * 89 + "\n[exit code 0]")
    aid = result.metadata["artifact"]
    assert "[... " in result.content and f"artifact://{aid}" in result.content

    page = await call("read", path=f"artifact://{aid}", offset=765_433, limit=2)
    assert page.content.split("\n")[:2] == [
        "765433\t000765432 " + "x" * 89,
        "765434\t000765433 " + "x" * 89,
    ]
    last = await call("read", path=f"artifact://{aid}", offset=lines)
    assert last.content == f"{lines:>6}\t000999999 " + "x" * 89
    found = await call("grep", pattern="^000543210 ", path=f"artifact://{aid}")
    assert found.content == f"artifact://{aid}:\n  543211: 000543210 " + "x" * 89


# --- secrets, floods of output, and commands that would outlive tether ----------------------------------


async def test_a_command_gets_the_environment_without_its_secrets(
    registry: ToolRegistry, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_test0123456789abcdef")
    monkeypatch.setenv("LAB_KEY", "lab-key-0123456789")
    monkeypatch.setenv("H12_PLAIN", "kept")
    monkeypatch.setenv("GITHUB_PAT", "ghp_pat0123456789abcdef")  # secrets under names tether does not know
    monkeypatch.setenv("SENTRY_DSN", "https://0123456789abcdef@o1.ingest.sentry.io/42")
    monkeypatch.setenv("MYAPP_KEY", "myapp-secret-0123456789")
    command = ToolCallPart(id="1", name="bash", arguments={"command": "env | cut -d= -f1 | sort"})
    names = (await run_tool_call(registry, command, ctx)).content.split("\n")
    assert "PATH" in names and "HOME" in names
    # an allow-list: nothing but what shells and toolchains need, whatever tether's environment holds
    assert not {
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "LAB_KEY",
        "H12_PLAIN",
        "GITHUB_PAT",
        "SENTRY_DSN",
        "MYAPP_KEY",
    } & set(names)

    ctx.secrets = SecretPolicy(names=frozenset({"LAB_KEY"}), allow=frozenset({"GITHUB_TOKEN", "H12_*", "LAB_KEY"}))
    names = (await run_tool_call(registry, command, ctx)).content.split("\n")
    assert "GITHUB_TOKEN" in names and "H12_PLAIN" in names and "OPENAI_API_KEY" not in names
    assert "LAB_KEY" in names  # named in allow_env: the user's choice, though the journal still hides its value


async def test_a_flood_of_output_keeps_a_bounded_result_and_artifact(registry: ToolRegistry, ctx: ToolContext) -> None:
    """200 MB printed: the command runs to its end, the result stays within its limit, and only the first
    `bash_output_bytes` are saved (memory is the benchmark's: bench/tools.py)."""
    ctx.limits = ToolLimits(bash_output_bytes=16 * 1024 * 1024)
    flood = "head -c 198000000 /dev/zero | tr '\\0' x | fold -w 99; echo; echo the end"  # 2,000,000 lines
    result = await run_tool_call(registry, ToolCallPart(id="1", name="bash", arguments={"command": flood}), ctx)
    assert result.metadata["exit_code"] == 0 and not result.is_error  # it finished
    assert result.metadata["original_bytes"] == 200_000_008
    assert result.metadata["original_lines"] == 2_000_001
    assert len(result.content) <= ctx.limits.output_chars
    assert result.content.endswith("x\nthe end\n[exit code 0]")
    assert result.metadata["saved_bytes"] == 16 * 1024 * 1024
    aid = result.metadata["artifact"]
    assert f"the first 16,777,216 bytes of the {result.metadata['original_bytes']:,}" in result.content
    view = await open_artifact(ctx.store, aid)
    assert view.size == 16 * 1024 * 1024
    saved_lines = view.lines
    page = await run_tool_call(
        registry,
        ToolCallPart(id="2", name="read", arguments={"path": f"artifact://{aid}", "offset": saved_lines - 1}),
        ctx,
    )
    assert page.content.split("\n")[0] == f"{saved_lines - 1:>6}\t" + "x" * 99


async def test_the_saved_output_is_redacted_as_it_is_stored(registry: ToolRegistry, ctx: ToolContext) -> None:
    secret = "ghp_0123456789abcdefABCDEF"
    ctx.redactor = Redactor({"GITHUB_TOKEN": secret})
    ctx.limits = ToolLimits(output_chars=2_000, output_lines=50)
    # 2 MB with the secret everywhere, across every boundary the spool and the chunks make
    command = f"for i in $(seq 1 60000); do printf '%s %s\\n' $i {secret}; done"
    result = await run_tool_call(registry, ToolCallPart(id="1", name="bash", arguments={"command": command}), ctx)
    data = await read_artifact_bytes(ctx.store, result.metadata["artifact"])
    assert secret.encode() not in data and data.count(b" [redacted:GITHUB_TOKEN]\n") == 60000


DRIVER = textwrap.dedent(
    """
    import asyncio, sys
    from tether import Message, Session, ToolCallPart
    from tether.providers.scripted import ScriptedProvider
    from tether.store import SqliteStore

    from tether.tools.sandbox import Sandbox, SandboxPolicy

    async def main():
        store = SqliteStore(sys.argv[1])
        session = await Session.create(store, directory=sys.argv[2])
        mechanism = sys.argv[3]  # "off": unconfined, else the sandbox's mechanism
        sandbox = None if mechanism == "off" else Sandbox(SandboxPolicy(mechanism=mechanism))
        command = (
            "(sleep 1001 &); "                                   # an orphan in the group
            "sh -c 'echo $$ > inner.pid; exec sleep 1002' & "     # a grandchild through another shell
            "echo $$ > shell.pid; touch ready; sleep 1003"        # the shell's own foreground child
        )
        provider = ScriptedProvider([
            Message.assistant("", tool_calls=[ToolCallPart(id="c1", name="bash", arguments={"command": command})]),
            "never reached",
        ])
        async for event in session.stream("go", provider=provider, model="m", sandbox=sandbox):
            print(type(event).__name__, flush=True)

    asyncio.run(main())
    """
)


def group_members(group: int) -> list[int]:
    """Processes (zombies excepted) whose process group is `group`, from /proc."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == group and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return found


@pytest.mark.slow
async def test_commands_die_with_tether_even_by_sigkill(tmp_path: Path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "t.db"), str(tmp_path), "off"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3000):
            if (tmp_path / "ready").exists() and (tmp_path / "inner.pid").exists():
                break
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the command never started")
        group = int((tmp_path / "shell.pid").read_text())
        inner = int((tmp_path / "inner.pid").read_text())
        # the orphan, the grandchild, and the foreground sleep (bash execs its last command, so it is the shell)
        for _ in range(1000):
            if len(group_members(group)) == 3:
                break
            await asyncio.sleep(0.01)
        assert len(group_members(group)) == 3
    finally:
        child.kill()
        child.wait(10)
    for _ in range(1000):  # the watcher acts as soon as it reads end-of-file; init reaps asynchronously
        if not group_members(group) and gone(inner):
            break
        await asyncio.sleep(0.01)
    left = group_members(group)
    for pid in left:  # leave nothing behind on a failure either
        os.kill(pid, signal.SIGKILL)
    assert left == [] and gone(inner)


def sleepers() -> list[int]:
    """The driver's `sleep 100x` processes still alive (zombies excepted), found by their command line."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        sleeping = cmd[:1] == ["sleep"] and cmd[1:] in (["1001"], ["1002"], ["1003"])
        if sleeping and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.pid)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
async def test_sandboxed_commands_die_with_tether_even_by_sigkill(tmp_path: Path, mechanism: str) -> None:
    from tether.tools.sandbox import support

    if support(mechanism).mechanism is None:  # type: ignore[arg-type]
        pytest.fail(f"{mechanism} is not usable here: {support(mechanism).detail}")  # type: ignore[arg-type]
    assert not sleepers()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "t.db"), str(tmp_path), mechanism],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3000):
            if (tmp_path / "ready").exists() and len(sleepers()) == 3:
                break
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"the command never started: {len(sleepers())} sleepers")
    finally:
        child.kill()
        child.wait(10)
    for _ in range(1000):
        if not sleepers():
            break
        await asyncio.sleep(0.01)
    left = sleepers()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


async def test_a_watcher_that_died_is_replaced(call: Call, workspace: Path) -> None:
    await call("bash", command="true")
    first = WATCHER.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    os.waitpid(first, 0)
    result = await call("bash", command="sleep 30 > /dev/null 2>&1 & echo $! > bg.pid")
    assert result.metadata["exit_code"] == 0
    assert WATCHER.pid not in (None, first) and not gone(WATCHER.pid)
    # the new watcher has the group of the background job that is still alive
    os.kill(int((workspace / "bg.pid").read_text()), signal.SIGKILL)
