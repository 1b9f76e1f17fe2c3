"""The OS sandbox, for real: commands run through the `bash` tool under bubblewrap and under Landlock, and
what each keeps them from: writing outside the workspace, writing `.git/hooks` or `.tether/` (bubblewrap),
opening a socket with the network off, reaching hosts not on the allow-list (through the proxy), reading
tether's own environment from `/proc/$PPID/environ`; and what they may still do (write the workspace, reach
the network when it is on, an allowed host through the proxy). A sandbox that cannot be had makes every
command ask, and says so once per run."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.messages import Message, ToolCallPart
from tether.providers.scripted import ScriptedProvider
from tether.runtime.rules import Rules, layered
from tether.session import Session
from tether.store import SqliteStore
from tether.tools import ToolContext
from tether.tools.base import ToolOutput
from tether.tools.builtin.shell import BashTool
from tether.tools.netproxy import host_allowed
from tether.tools.sandbox import Sandbox, SandboxPolicy, Support, refusals, support

MECHANISMS = ["bwrap", "landlock"]


def sandbox(mechanism: str, **policy: object) -> Sandbox:
    found = support(mechanism)  # type: ignore[arg-type]
    if found.mechanism is None:
        pytest.fail(f"{mechanism} cannot be used here ({found.detail}): the sandbox tests need it")
    return Sandbox(SandboxPolicy(mechanism=mechanism, **policy))  # type: ignore[arg-type]


async def run(ctx: ToolContext, command: str) -> ToolOutput:
    return await BashTool().run({"command": command}, ctx)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    work = tmp_path / "ws"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".tether").mkdir()
    (work / "src").mkdir()
    return work


@pytest.fixture
def ctx_for(ws: Path, sqlite_store: SqliteStore) -> Iterator[object]:
    def make(box: Sandbox) -> ToolContext:
        return ToolContext(workspace=ws, session_id="ses_sandbox", store=sqlite_store, sandbox=box)

    yield make


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_a_command_writes_the_workspace_and_nothing_outside_it(
    ws: Path, tmp_path: Path, ctx_for: object, mechanism: str
) -> None:
    ctx = ctx_for(sandbox(mechanism))  # type: ignore[operator]
    outside = tmp_path / "outside.txt"
    home_file = Path.home() / f".tether-sandbox-test-{os.getpid()}"
    result = await run(
        ctx, f"echo in > src/in.txt && echo out > {outside}; echo home > {home_file}; echo tmp > /tmp/t; cat /tmp/t"
    )
    assert (ws / "src" / "in.txt").read_text() == "in\n"
    assert not outside.exists() and not home_file.exists()
    assert "tmp" in result.content  # a private /tmp works
    assert result.metadata["sandbox"]["mode"] == "workspace-write"
    assert result.metadata["sandbox"]["mechanism"] == mechanism
    # (under bubblewrap the real /tmp is not even there: the write to `outside` finds no such directory)
    assert any(str(home_file) in line for line in result.metadata["sandbox"]["refused"])
    assert "[sandbox workspace-write" in result.content  # the model reads what was refused and why


async def test_bubblewrap_keeps_git_hooks_and_tethers_config_read_only(ws: Path, ctx_for: object) -> None:
    (ws / ".mcp.json").write_text("{}")
    (ws / "AGENTS.md").write_text("be nice\n")
    ctx = ctx_for(sandbox("bwrap"))  # type: ignore[operator]
    result = await run(
        ctx,
        "echo evil > .git/hooks/pre-commit; echo 'allow = [\"bash\"]' > .tether/config.toml; "
        "echo '{\"x\":1}' > .mcp.json; echo obey > AGENTS.md; rm -rf .git; mv .tether t2; echo ok > src/fine",
    )
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert not (ws / ".tether" / "config.toml").exists()
    assert (ws / ".mcp.json").read_text() == "{}" and (ws / "AGENTS.md").read_text() == "be nice\n"
    assert (ws / ".git").is_dir() and (ws / ".tether").is_dir() and not (ws / "t2").exists()
    assert (ws / "src" / "fine").read_text() == "ok\n"
    assert len(result.metadata["sandbox"]["refused"]) >= 4


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_read_only_writes_nothing_but_its_private_tmp(ws: Path, ctx_for: object, mechanism: str) -> None:
    ctx = ctx_for(sandbox(mechanism, mode="read-only"))  # type: ignore[operator]
    result = await run(ctx, 'ls src; echo x > src/new.txt; echo t > "$TMPDIR/x" && cat "$TMPDIR/x"')
    assert not (ws / "src" / "new.txt").exists()
    assert "\nt\n" in result.content, result.content
    assert result.metadata["sandbox"]["refused"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_the_network_is_off_unless_it_is_on(ws: Path, ctx_for: object, mechanism: str) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    probe = f"python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\""
    try:
        off = await run(ctx_for(sandbox(mechanism)), probe)  # type: ignore[operator]
        # bubblewrap: a network of its own, where nothing listens (refused); Landlock: the connect is denied
        assert "connected" not in off.content and off.metadata["exit_code"] != 0
        on = await run(ctx_for(sandbox(mechanism, network="on")), probe)  # type: ignore[operator]
        assert "connected" in on.content and on.metadata["exit_code"] == 0
    finally:
        server.shutdown()


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_an_allow_list_reaches_its_hosts_through_the_proxy_and_no_other(
    ws: Path, ctx_for: object, mechanism: str
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    fetch = "python3 -c \"import urllib.request as u; print(u.urlopen('http://%s:%d/', timeout=10).status)\""
    direct = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', %d), timeout=5); print('direct')\""
    try:
        ctx = ctx_for(sandbox(mechanism, network=(f"127.0.0.1:{port}",)))  # type: ignore[operator]
        allowed = await run(ctx, fetch % ("127.0.0.1", port))
        assert allowed.content.splitlines()[0] == "200", allowed.content
        refused = await run(ctx, fetch % ("localhost", port))  # the same server by a name not on the list
        assert "403" in refused.content and refused.metadata["exit_code"] != 0
        around = await run(ctx, direct % port)  # straight past the proxy
        assert "direct" not in around.content and around.metadata["exit_code"] != 0
    finally:
        server.shutdown()


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_a_command_cannot_read_tethers_own_environment(
    ws: Path, ctx_for: object, mechanism: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sandbox-test-0123456789")
    result = await run(
        ctx_for(sandbox(mechanism)),  # type: ignore[operator]
        "cat /proc/$PPID/environ; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c sk-sandbox; true",
    )
    assert "sk-sandbox-test" not in result.content


async def test_what_a_sandbox_refused_is_read_from_the_output() -> None:
    lines = refusals(
        "ok\ntouch: cannot touch '/etc/x': Read-only file system\nOSError: [Errno 101] Network is unreachable\n"
    )
    assert lines == [
        "touch: cannot touch '/etc/x': Read-only file system",
        "OSError: [Errno 101] Network is unreachable",
    ]


def test_hosts_of_the_allow_list() -> None:
    allowed = ["pypi.org", "*.pythonhosted.org", "api.example.com:8443"]
    assert host_allowed(allowed, "pypi.org", 443) and host_allowed(allowed, "PyPI.org.", 80)
    assert host_allowed(allowed, "files.pythonhosted.org", 443) and host_allowed(allowed, "pythonhosted.org", 443)
    assert host_allowed(allowed, "api.example.com", 8443) and not host_allowed(allowed, "api.example.com", 443)
    assert not host_allowed(allowed, "evil.com", 443) and not host_allowed(allowed, "pypi.org.evil.com", 443)


def test_a_policy_checks_its_values() -> None:
    from tether.errors import InvalidInput

    with pytest.raises(InvalidInput, match="unknown sandbox mode 'loose'"):
        SandboxPolicy(mode="loose")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="network must be"):
        SandboxPolicy(network="maybe")


def test_without_a_sandbox_every_command_asks_in_every_mode(ws: Path) -> None:
    none = Sandbox(SandboxPolicy(), found=Support(None, "bubblewrap (bwrap) is not installed"))
    assert none.unavailable == "bubblewrap (bwrap) is not installed" and none.mechanism is None
    for mode in ("default", "bypass"):
        rules = layered([("test", {"allow": ["bash"]})], mode)
        rules = Rules(rules.rules, rules.mode, unconfined=none.unavailable)
        decision = rules.decide("bash", {"command": "ls"}, read_only=False, workspace=ws)
        assert decision.ask and "no sandbox can confine commands here" in decision.reason
    off = Sandbox(SandboxPolicy(mode="off"))
    assert off.unavailable is None and off.mechanism is None


async def test_a_run_says_once_that_there_is_no_sandbox(ws: Path, sqlite_store: SqliteStore) -> None:
    none = Sandbox(SandboxPolicy(), found=Support(None, "bubblewrap (bwrap) is not installed"))
    session = await Session.create(sqlite_store, directory=str(ws))
    call = ToolCallPart(id="c1", name="bash", arguments={"command": "touch ran"})
    provider = ScriptedProvider([Message.assistant(tool_calls=[call]), "done"])
    rules = Rules(unconfined=none.unavailable)
    events = [e async for e in session.stream("go", provider=provider, model="m", sandbox=none, rules=rules)]
    notes = [e for e in events if type(e).__name__ == "Progress" and e.what == "sandbox"]  # type: ignore[attr-defined]
    assert len(notes) == 1 and "every command will be asked about" in notes[0].detail  # type: ignore[attr-defined]
    assert not (ws / "ran").exists()  # nobody to ask: denied, never run unconfined
