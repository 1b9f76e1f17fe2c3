"""The RLM sandbox against real escape attempts: a real child process, a real listening socket, real files.

Each boundary is checked twice where the kernel allows: with every layer on, and with the Python audit hook
turned off, to show that the kernel layers (namespaces, Landlock, seccomp) hold by themselves.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import textwrap
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.errors import SandboxError
from tether.rlm.sandbox import Sandbox, SandboxLimits

REPO = Path(__file__).resolve().parents[2]
LAYERS = {"rlimits", "namespaces", "tmpfs", "landlock", "seccomp", "audit_hook"}


async def echo(prompts: list[str]) -> list[str]:
    return [f"echo:{p}" for p in prompts]


@pytest.fixture
async def repl() -> AsyncIterator[Sandbox]:
    async with Sandbox("the context", llm=echo) as sandbox:
        yield sandbox


def _active(sandbox: Sandbox) -> set[str]:
    return {layer.name for layer in sandbox.layers if layer.active}


async def test_reports_every_layer(repl: Sandbox) -> None:
    assert {layer.name for layer in repl.layers} == LAYERS
    assert {"rlimits", "audit_hook"} <= _active(repl)
    assert all(layer.detail for layer in repl.layers)


async def test_runs_code_with_context_and_keeps_state(repl: Sandbox) -> None:
    first = await repl.run("n = len(context)\nprint(context.upper())")
    assert first.output == "THE CONTEXT\n"
    assert first.error is None and first.final is None
    second = await repl.run("n * 2")  # a trailing expression is shown, like at a prompt
    assert second.output == "22\n"


async def test_errors_come_back_as_tracebacks_of_the_block(repl: Sandbox) -> None:
    result = await repl.run("x = 1\n1 / 0")
    assert result.error is not None
    assert "ZeroDivisionError" in result.error and "<block 1>" in result.error
    syntax = await repl.run("def (:")
    assert syntax.error is not None and "SyntaxError" in syntax.error
    assert (await repl.run("x")).output == "1\n"  # the REPL lives on


@pytest.mark.parametrize("audit_hook", [True, False], ids=["all-layers", "kernel-only"])
async def test_network_is_refused(audit_hook: bool) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        async with Sandbox("", llm=echo, audit_hook=audit_hook) as sandbox:
            if not audit_hook and not _active(sandbox) & {"namespaces", "landlock", "seccomp"}:
                pytest.skip("this kernel allows no network layer; only the audit hook guards the network here")
            code = f"""
                import socket
                for attempt in range(3):
                    try:
                        s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
                        print("connected")
                    except OSError as exc:
                        print("refused", type(exc).__name__)
            """
            result = await sandbox.run(textwrap.dedent(code))
        assert "connected" not in result.output
        assert result.output.count("refused") == 3 or (result.error and "sandbox" in result.error)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing arrived: the connection never left the sandbox
    finally:
        listener.close()


@pytest.mark.parametrize("audit_hook", [True, False], ids=["all-layers", "kernel-only"])
async def test_writes_outside_the_work_directory_are_refused(tmp_path: Path, audit_hook: bool) -> None:
    tag = uuid.uuid4().hex
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    targets = [elsewhere / f"x-{tag}", Path.home() / f".tether-rlm-probe-{tag}", REPO / f"tether-rlm-probe-{tag}"]
    async with Sandbox("", llm=echo, audit_hook=audit_hook) as sandbox:
        if not audit_hook and "landlock" not in _active(sandbox):
            pytest.skip("Landlock is not available: only the audit hook guards files here")
        code = f"""
            import os
            for path in {[str(t) for t in targets]!r}:
                for how, attempt in [
                    ("open", lambda: open(path, "w").write("x")),
                    ("os.open", lambda: os.close(os.open(path, os.O_WRONLY | os.O_CREAT))),
                    ("mkdir", lambda: os.mkdir(path)),
                    ("symlink", lambda: os.symlink("/etc/passwd", path)),
                ]:
                    try:
                        attempt()
                        print("WROTE", how, path)
                    except OSError as exc:
                        print("refused", how, exc.errno)
        """
        result = await sandbox.run(textwrap.dedent(code))
    try:
        assert "WROTE" not in result.output, result.output
        assert result.output.count("refused") == 4 * len(targets)
        for target in targets:
            assert not os.path.lexists(target)
    finally:
        for target in targets:  # never leave litter in a real home or the repo, even when the test fails
            if target.is_dir() and not target.is_symlink():
                target.rmdir()
            elif os.path.lexists(target):
                target.unlink()


async def test_writes_inside_the_work_directory_work(repl: Sandbox) -> None:
    code = """
        import os
        os.mkdir("notes")
        with open("notes/a.txt", "w") as f:
            f.write("kept")
        os.rename("notes/a.txt", "notes/b.txt")
        print(sorted(os.listdir("notes")))
    """
    result = await repl.run(textwrap.dedent(code))
    assert result.error is None and result.output == "['b.txt']\n"
    assert (await repl.run("print(open('notes/b.txt').read())")).output == "kept\n"


async def test_reads_outside_are_refused_when_landlock_holds(tmp_path: Path, repl: Sandbox) -> None:
    if "landlock" not in _active(repl):
        pytest.skip("Landlock is not available: reads are not restricted here")
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    result = await repl.run(f"print(open({str(secret)!r}).read())")
    assert "do not read" not in result.output
    assert result.error is not None and "PermissionError" in result.error


async def test_no_secrets_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-must-not-leak")
    async with Sandbox("", llm=echo) as sandbox:
        result = await sandbox.run(
            "import os\nprint(sorted(os.environ))\nprint(any('sk-' in v for v in os.environ.values()))"
        )
    assert "OPENAI_API_KEY" not in result.output
    assert result.output.endswith("False\n")


async def test_processes_signals_and_ctypes_are_refused(repl: Sandbox) -> None:
    code = """
        import os, subprocess
        for name, attempt in [
            ("subprocess", lambda: subprocess.run(["true"])),
            ("system", lambda: os.system("true")),
            ("fork", os.fork),
            ("exec", lambda: os.execv("/bin/true", ["true"])),
            ("kill-parent", lambda: os.kill(os.getppid(), 0)),
        ]:
            try:
                attempt()
                print("ALLOWED", name)
            except OSError as exc:
                print("refused", name)
        try:
            import ctypes
            print("ALLOWED ctypes")
        except ImportError:
            print("refused ctypes")
    """
    result = await repl.run(textwrap.dedent(code))
    assert "ALLOWED" not in result.output, result.output
    assert result.output.count("refused") == 6


async def test_runaway_loop_is_interrupted_and_the_repl_lives_on() -> None:
    async with Sandbox("", llm=echo, limits=SandboxLimits(cpu_seconds_per_block=1)) as sandbox:
        result = await sandbox.run("x = 1\nwhile True:\n    pass")
        assert result.error is not None and "CPU time" in result.error
        assert sandbox.alive
        after = await sandbox.run("x + 1")
        assert after.error is None and after.output == "2\n", after


async def test_a_block_gets_its_whole_cpu_budget_when_the_time_used_so_far_is_just_under_a_second() -> None:
    # The soft limit was once the time used rounded down plus the budget: at 1.97 s used, a 1 s budget left
    # the next block 0.03 s and it was stopped before its first line (the loop above then lost `x`).
    async with Sandbox("", llm=echo, limits=SandboxLimits(cpu_seconds_per_block=1)) as sandbox:
        burn = "import time\nt = time.process_time()\ngoal = int(t) + 0.97 if t % 1 < 0.97 else int(t) + 1.97\n"
        burn += "while time.process_time() < goal:\n    pass"
        assert (await sandbox.run(burn)).error is None
        work = "t0 = time.process_time()\nwhile time.process_time() - t0 < 0.5:\n    pass\n'done'"
        result = await sandbox.run(work)
        assert result.error is None and result.output == "'done'\n", result


async def test_a_block_that_reaches_the_total_cpu_limit_is_interrupted_and_the_repl_lives_on() -> None:
    # the block's budget reaches past the process's total: it is stopped at the total with SIGXCPU, as any
    # block is, not killed by the hard limit a second later (which lost every variable)
    async with Sandbox("", llm=echo, limits=SandboxLimits(cpu_seconds_per_block=5, cpu_seconds_total=2)) as sandbox:
        result = await sandbox.run("x = 1\nwhile True:\n    pass")
        assert result.error is not None and "CPU time" in result.error, result
        assert sandbox.alive
        assert await sandbox.get_var("x") == "1"  # what it computed is still there to read


async def test_loop_that_swallows_the_interrupt_is_killed_at_the_total_cpu_limit() -> None:
    limits = SandboxLimits(cpu_seconds_per_block=1, cpu_seconds_total=2)
    async with Sandbox("", llm=echo, limits=limits) as sandbox:
        code = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass"
        with pytest.raises(SandboxError) as caught:
            await sandbox.run(code)
        assert caught.value.reason == "crashed"
        assert "CPU time or memory" in str(caught.value)
        assert not sandbox.alive
        with pytest.raises(SandboxError):
            await sandbox.run("1")


async def test_a_block_that_hangs_is_killed_at_the_wall_clock_limit() -> None:
    async with Sandbox("", llm=echo, limits=SandboxLimits(block_timeout=0.5)) as sandbox:
        pid = sandbox.pid
        assert pid is not None
        with pytest.raises(SandboxError) as caught:
            await sandbox.run("import time\ntime.sleep(60)")
        assert caught.value.reason == "timeout"
        assert not sandbox.alive
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_output_is_capped(repl: Sandbox) -> None:
    result = await repl.run("print('x' * 1_000_000)")
    assert len(result.output) == repl.limits.output_chars
    assert result.output_chars == 1_000_001
    assert result.truncated


async def test_memory_is_capped() -> None:
    async with Sandbox("", llm=echo, limits=SandboxLimits(memory_bytes=512 << 20)) as sandbox:
        result = await sandbox.run("block = bytearray(2 * 1024**3)")
        assert result.error is not None and "MemoryError" in result.error
        assert (await sandbox.run("print('still here')")).output == "still here\n"


async def test_disk_use_is_capped_when_the_work_directory_is_a_tmpfs() -> None:
    async with Sandbox("", llm=echo, limits=SandboxLimits(disk_bytes=4 << 20)) as sandbox:
        if "tmpfs" not in _active(sandbox):
            pytest.skip("no private tmpfs here: only the per-file size limit applies")
        result = await sandbox.run("open('big', 'wb').write(b'x' * (8 << 20))")
        assert result.error is not None and "No space left" in result.error


async def test_sub_model_calls_go_through_the_parent() -> None:
    seen: list[list[str]] = []

    async def answer(prompts: list[str]) -> list[str]:
        seen.append(prompts)
        return [p[::-1] for p in prompts]

    async with Sandbox("", llm=answer) as sandbox:
        result = await sandbox.run("print(llm_query('abc'))\nprint(llm_query_batched(['one', 'two']))")
    assert result.output == "cba\n['eno', 'owt']\n"
    assert seen == [["abc"], ["one", "two"]]


async def test_a_refused_sub_call_raises_in_the_models_code() -> None:
    async def refuse(prompts: list[str]) -> list[str]:
        raise RuntimeError("sub-model call limit: 3 of 3 calls used")

    async with Sandbox("", llm=refuse) as sandbox:
        result = await sandbox.run("try:\n    llm_query('x')\nexcept RuntimeError as e:\n    print('caught', e)")
    assert result.output == "caught sub-model call limit: 3 of 3 calls used\n"


async def test_final_and_variables(repl: Sandbox) -> None:
    assert (await repl.run("FINAL('forty-two')")).final == "forty-two"
    await repl.run("answer = {'a': 1}")
    assert (await repl.run("FINAL_VAR('answer')")).final == "{'a': 1}"
    assert (await repl.run("FINAL_VAR(answer)")).final == "{'a': 1}"  # the value itself, as models write it
    assert await repl.get_var("answer") == "{'a': 1}"
    assert await repl.get_var("missing") is None
    assert await repl.get_var("llm_query") is None  # the REPL's own names are not answers
    assert "answer" in (await repl.run("SHOW_VARS()")).output


async def test_cancelling_a_block_kills_the_process() -> None:
    started = asyncio.Event()

    async def slow(prompts: list[str]) -> list[str]:
        started.set()
        await asyncio.sleep(60)
        return prompts

    async with Sandbox("", llm=slow) as sandbox:
        pid = sandbox.pid
        assert pid is not None
        task = asyncio.create_task(sandbox.run("llm_query('wait')"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not sandbox.alive
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_the_work_directory_is_removed_on_close() -> None:
    sandbox = Sandbox("text", llm=echo)
    await sandbox.start()
    workdir = sandbox.workdir
    assert workdir is not None and os.path.isdir(workdir)
    await sandbox.close()
    await sandbox.close()  # idempotent
    assert not os.path.exists(workdir)


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


async def test_a_child_that_breaks_the_protocol_is_a_clear_error(tmp_path: Path) -> None:
    sandbox = Sandbox("", llm=echo, python=_fake_python(tmp_path, "read line; echo 'this is not json'; sleep 30"))
    with pytest.raises(SandboxError) as caught:
        await sandbox.start()
    assert caught.value.reason == "protocol"
    assert not sandbox.alive


async def test_a_child_that_dies_at_start_is_a_clear_error(tmp_path: Path) -> None:
    sandbox = Sandbox("", llm=echo, python=_fake_python(tmp_path, "echo 'no python here' >&2; exit 3"))
    with pytest.raises(SandboxError) as caught:
        await sandbox.start()
    assert caught.value.reason == "crashed"
    assert "status 3" in str(caught.value) and "no python here" in str(caught.value)


async def test_a_missing_interpreter_is_a_start_error(tmp_path: Path) -> None:
    sandbox = Sandbox("", llm=echo, python=str(tmp_path / "no-such-python"))
    with pytest.raises(SandboxError) as caught:
        await sandbox.start()
    assert caught.value.reason == "start"
