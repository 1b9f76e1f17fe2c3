"""`tether doctor` through a real process: each finding on a line with ok/warn/fail and, when not ok, how to
fix it; `--json`; exit 0 when nothing failed and 1 otherwise; and it never writes to the database."""

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


def doctor(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, env=env)


def test_a_sound_home_is_all_ok_exit_0(tmp_path: Path) -> None:
    home = tmp_path / "home"
    faults.build_database(home / "tether.db")
    before = faults.fingerprint(home / "tether.db")
    proc = doctor(home, "doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(line.startswith("ok ") for line in lines), lines
    assert any(line.split()[1:3] == ["search", "index"] for line in lines)
    assert faults.fingerprint(home / "tether.db") == before


def test_a_damaged_database_fails_with_the_fix_exit_1(tmp_path: Path) -> None:
    home = tmp_path / "home"
    faults.build_database(home / "tether.db")
    faults.truncate(home / "tether.db")
    before = faults.fingerprint(home / "tether.db")
    proc = doctor(home, "doctor")
    assert proc.returncode == 1 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("fail database"))
    assert str(home / "tether.db") in lines[at] and "is damaged" in lines[at]
    assert lines[at + 1].strip().startswith("fix: restore it from a backup") and ".recover" in lines[at + 1]
    assert faults.fingerprint(home / "tether.db") == before


def test_json_says_ok_and_lists_the_findings(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("a file")
    proc = doctor(home, "doctor", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["ok"] is False
    home_finding = data["findings"][0]
    assert home_finding["check"] == "home" and home_finding["status"] == "fail" and home_finding["fix"]
    assert {f["status"] for f in data["findings"]} <= {"ok", "warn", "fail"}
    assert json.loads(doctor(home, "--json", "doctor").stdout) == data  # the global --json too


def test_bracketed_words_in_a_finding_are_printed_as_they_are(tmp_path: Path) -> None:
    """An install hint names its extra in brackets (`pip install 'tether[embeddings]'`): the text view must
    not read them as style tags and drop them (the JSON view always had them)."""
    driver = (
        "import sys\n"
        "import tether.cli.doctor as d\n"
        "from tether.runtime.doctor import Finding\n"
        "d.diagnose = lambda url, full=None: [Finding(check='extra embeddings', status='warn', "
        "detail='not installed', fix=\"pip install 'tether[embeddings]' for semantic recall\")]\n"
        "from tether.cli.main import cli\n"
        "cli(['doctor'], prog_name='tether')\n"
    )
    env = {**os.environ, "TETHER_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=env)
    assert "fix: pip install 'tether[embeddings]' for semantic recall" in result.stdout, result.stdout + result.stderr


def store_findings(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    checks = {"database", "integrity", "schema", "entries", "search index", "recall keys"}
    return {f["check"]: f for f in json.loads(proc.stdout)["findings"] if f["check"] in checks}


def test_repair_rebuilds_a_damaged_search_index_and_turn_keys_from_the_journal(tmp_path: Path) -> None:
    """The index's pages damaged under an intact journal, and recall's turn keys garbage: `doctor` says to
    repair (not to restore a backup), `doctor --repair` rebuilds both, and after it every check passes and
    the journal reads as it did."""
    home = tmp_path / "home"
    db = home / "tether.db"
    faults.build_database(db)
    assert doctor(home, "recall", "--all", "lighthouses").returncode == 0  # the turn keys are made
    journal = faults.journal_rows(db)
    faults.damage_search_index(db, "pages")
    faults.garbage(Path(f"{db}.keys"))
    proc = doctor(home, "doctor", "--json")
    assert proc.returncode == 1
    found = store_findings(proc)
    assert found["integrity"]["status"] == "fail" and "search index only" in found["integrity"]["detail"]
    assert "tether doctor --repair" in found["integrity"]["fix"]
    assert found["recall keys"]["status"] == "fail" and "tether doctor --repair" in found["recall keys"]["fix"]
    proc = doctor(home, "doctor", "--repair")
    assert "repaired: the search index was rebuilt from the journal (480 entries indexed)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    proc = doctor(home, "doctor", "--json")
    assert {check: f["status"] for check, f in store_findings(proc).items()} == dict.fromkeys(
        ("database", "integrity", "schema", "entries", "search index", "recall keys"), "ok"
    ), proc.stdout
    assert faults.journal_rows(db) == journal
    found_again = doctor(home, "recall", "--all", "--json", "question 3.7 lighthouses")
    assert found_again.returncode == 0 and json.loads(found_again.stdout)["hits"], found_again.stderr


def test_repair_leaves_a_damaged_journal_alone(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / "tether.db"
    faults.build_database(db)
    faults.damage_pages(db, table="entries", count=2)
    before = faults.fingerprint(db)
    proc = doctor(home, "doctor", "--repair")
    assert proc.returncode == 1 and "nothing repaired: what failed is not derived from the journal" in proc.stderr
    assert "fix: restore it from a backup" in proc.stdout
    assert faults.fingerprint(db)[0] == before[0]
