"""`tether backup PATH` through a real process: a copy that tether opens with `--store`, how to restore it,
no overwrite without `--force`, and one line for what cannot be backed up."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType


def _load_faults() -> ModuleType:
    path = Path(__file__).parents[1] / "store" / "faults.py"
    spec = importlib.util.spec_from_file_location("tether_store_test_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _load_faults()


def tether(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env)


def test_a_backup_opens_as_the_same_store_and_says_how_to_restore(tmp_path: Path) -> None:
    home = tmp_path / "home"
    faults.build_database(home / "tether.db")
    target = tmp_path / "copy.db"
    proc = tether(home, "backup", str(target))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"backed up {home / 'tether.db'} to {target}: 12 session(s)")
    assert f"--store sqlite:///{str(target).lstrip('/')}" in proc.stderr
    assert f"copy it over {home / 'tether.db'}" in proc.stderr and "-wal" in proc.stderr
    live = json.loads(tether(home, "sessions", "--all", "--json").stdout)
    copied = json.loads(tether(home, "--store", f"sqlite:///{target}", "sessions", "--all", "--json").stdout)
    assert copied == live and len(live) == 12


def test_an_existing_file_needs_force(tmp_path: Path) -> None:
    home = tmp_path / "home"
    faults.build_database(home / "tether.db", sessions=2, messages=4)
    target = tmp_path / "copy.db"
    target.write_text("keep me")
    proc = tether(home, "backup", str(target))
    assert (
        proc.returncode == 1
        and proc.stderr.strip() == f"error: {target} already exists: choose another name, or --force to replace it"
    )
    assert target.read_text() == "keep me"
    proc = tether(home, "backup", "--force", "--json", str(target))
    assert proc.returncode == 0 and json.loads(proc.stdout)["sessions"] == 2


def test_what_cannot_be_backed_up_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    faults.build_database(home / "tether.db", sessions=2, messages=4)
    memory = tether(home, "--store", "memory://", "backup", str(tmp_path / "m.db"))
    assert memory.returncode == 1 and memory.stderr.strip() == (
        "error: memory:// is not a SQLite store: only a database file is backed up"
    )
    live = tether(home, "backup", str(home / "tether.db"))
    assert live.returncode == 1 and "is the live database" in live.stderr
    faults.garbage(home / "tether.db")
    damaged = tether(home, "backup", str(tmp_path / "d.db"))
    assert damaged.returncode == 1 and "Traceback" not in damaged.stderr
    assert damaged.stderr.startswith("error: the database") and "is not a database" in damaged.stderr
    assert not (tmp_path / "d.db").exists() and not (tmp_path / "m.db").exists()


def test_a_damaged_source_or_a_destination_that_is_no_file_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    faults.build_database(home / "tether.db", sessions=2, messages=4)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = tether(home, "backup", "--force", str(fifo))
    assert proc.returncode == 1 and proc.stderr.strip() == (
        f"error: {fifo} is a FIFO, not a regular file: a backup is written to a new name, or over a regular file "
        "with --force; name another path"
    )
    faults.damage_search_index(home / "tether.db", "garbled")
    proc = tether(home, "backup", str(tmp_path / "copy.db"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: the database {home / 'tether.db'} is damaged (search index: ")
    assert lines[0].endswith("`tether doctor --repair` rebuilds the search index from it; then back up again")
    assert not (tmp_path / "copy.db").exists()
    assert "repaired: the search index was rebuilt" in tether(home, "doctor", "--repair").stderr
    proc = tether(home, "backup", str(tmp_path / "copy.db"))
    assert proc.returncode == 0 and "2 session(s)" in proc.stdout, proc.stderr
