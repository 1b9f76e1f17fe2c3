"""The public facade: `import tether` loads nothing it does not need, every exported name resolves, the
whole error tree and the tool protocol are there, and the CLI's help loads a handful of modules."""

from __future__ import annotations

import inspect
import subprocess
import sys

import tether
import tether.errors


def tether_modules_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint('MODULES', *sorted(m for m in sys.modules if m.startswith('tether')))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    line = next(line for line in result.stdout.splitlines() if line.startswith("MODULES"))
    return line.split()[1:]


def test_importing_tether_loads_only_the_facade() -> None:
    assert tether_modules_after("import tether") == ["tether"]
    loaded = tether_modules_after("import tether; tether.Message")
    assert "tether.messages" in loaded and "tether.runtime.loop" not in loaded and "tether.store.sqlite" not in loaded


def test_every_exported_name_resolves() -> None:
    for name in tether.__all__:
        assert getattr(tether, name) is not None, name
    assert sorted(tether.__all__) == tether.__all__


def test_the_whole_error_tree_and_the_tool_protocol_are_exported() -> None:
    errors = {name for name, obj in vars(tether.errors).items() if inspect.isclass(obj) and issubclass(obj, Exception)}
    assert errors and errors <= set(tether.__all__)
    assert {"Tool", "ToolContext", "ToolOutput", "ToolRegistry", "function_tool"} <= set(tether.__all__)
    assert tether.SessionBusy is tether.errors.SessionBusy


def test_tether_help_loads_a_handful_of_tether_modules() -> None:
    loaded = tether_modules_after(
        "import sys; sys.argv = ['tether', '--help']\n"
        "from tether.cli.main import cli\n"
        "try:\n    cli(prog_name='tether')\nexcept SystemExit:\n    pass"
    )
    assert len(loaded) <= 6, loaded
    assert not any(m.startswith(("tether.runtime", "tether.store", "tether.providers")) for m in loaded)


def test_listing_sessions_does_not_load_the_loop_or_the_providers(tmp_path: object) -> None:
    loaded = tether_modules_after(
        "import sys; sys.argv = ['tether', '--store', 'memory://', 'sessions', '--all']\n"
        "from tether.cli.main import cli\n"
        "try:\n    cli(prog_name='tether')\nexcept SystemExit:\n    pass"
    )
    assert "tether.cli.sessions" in loaded
    assert not any(m.startswith(("tether.runtime.loop", "tether.providers", "tether.context")) for m in loaded)
