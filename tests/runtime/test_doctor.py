"""`diagnose`, what `tether doctor` prints: each fault of the home, the database, the configuration, the
providers and the extras is a failed (or warned) finding with what to do, a sound setup is all ok, and
nothing is created, written or migrated by looking."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tether.messages import encode_json
from tether.runtime import doctor
from tether.runtime.doctor import Finding, diagnose, failed


def _load_faults() -> ModuleType:
    path = Path(__file__).parents[1] / "store" / "faults.py"
    spec = importlib.util.spec_from_file_location("tether_store_test_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _load_faults()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    monkeypatch.setenv("TETHER_HOME", str(path))
    return path


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def test_a_home_that_does_not_exist_yet_is_fine_and_is_not_made(home: Path) -> None:
    findings = by_check(diagnose())
    assert not failed(list(findings.values())), findings
    assert "does not exist yet" in findings["home"].detail
    assert "does not exist yet" in findings["database"].detail
    assert findings["config"].detail.startswith("no ")
    assert findings["default model"].status == "ok" and findings["default model"].detail == "local/smollm2-135m"
    assert {"extra local", "extra embeddings", "extra openai", "extra anthropic"} <= set(findings)
    assert {"extra agents", "extra pydantic-ai"} <= set(findings)
    assert not home.exists()


def test_a_sound_home_is_all_ok_and_untouched(home: Path) -> None:
    faults.build_database(home / "tether.db")
    before = faults.fingerprint(home / "tether.db")
    findings = by_check(diagnose())
    assert [f.check for f in findings.values() if f.status != "ok"] == []
    assert findings["home"].detail == f"{home} (writable)"
    assert findings["integrity"].detail == "integrity_check: ok"
    assert findings["search index"].detail == "consistent with the journal"
    assert faults.fingerprint(home / "tether.db") == before
    assert sorted(p.name for p in home.iterdir() if p.name.startswith(".tether-probe")) == []


@pytest.mark.parametrize(
    ("fault", "check"), [("truncate", "database"), ("garbage", "database"), ("damage_pages", "integrity")]
)
def test_a_damaged_database_fails_with_how_to_restore(home: Path, fault: str, check: str) -> None:
    faults.build_database(home / "tether.db")
    getattr(faults, fault)(home / "tether.db")
    before = faults.fingerprint(home / "tether.db")
    findings = diagnose()
    assert failed(findings)
    finding = by_check(findings)[check]
    assert finding.status == "fail" and str(home / "tether.db") in finding.detail
    assert finding.fix is not None and "restore it from a backup" in finding.fix and ".recover" in finding.fix
    assert faults.fingerprint(home / "tether.db") == before


def test_a_home_that_is_a_file(home: Path) -> None:
    home.write_text("oops")
    findings = by_check(diagnose())
    assert findings["home"].status == "fail" and findings["home"].detail == f"{home} is a file, not a directory"
    assert "TETHER_HOME" in (findings["home"].fix or "")
    assert "database" not in findings  # nothing to check, and it cannot be made
    assert home.read_text() == "oops"


def test_a_read_only_home(home: Path) -> None:
    faults.build_database(home / "tether.db")
    with faults.read_only(home):
        findings = by_check(diagnose())
    assert findings["home"].status == "fail" and "cannot be written" in findings["home"].detail
    assert f"check the permissions of {home}" in (findings["home"].fix or "")
    # the database is still read and checked, without writing to it
    assert findings["integrity"].status == "ok"


def test_a_store_elsewhere_has_its_directory_checked(home: Path, tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    with faults.read_only(shelf):
        findings = by_check(diagnose(f"sqlite:///{shelf / 'elsewhere.db'}"))
    assert findings["store directory"].status == "fail" and str(shelf) in findings["store directory"].detail
    assert "database" not in findings


def test_a_memory_store_has_nothing_on_disk(home: Path) -> None:
    findings = by_check(diagnose("memory://"))
    assert findings["store"].status == "ok" and "keeps nothing" in findings["store"].detail


def test_a_bad_store_url(home: Path) -> None:
    findings = by_check(diagnose("sqlite://nohost/x.db"))
    assert findings["store"].status == "fail"


def test_a_broken_config_fails_and_names_the_file(home: Path) -> None:
    home.mkdir()
    (home / "config.toml").write_text("default_model = [unclosed\n")
    findings = by_check(diagnose())
    assert findings["config"].status == "fail" and str(home / "config.toml") in findings["config"].detail
    assert "providers" not in findings and "default model" not in findings


def test_keys_are_named_never_shown(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-value")
    findings = diagnose()
    checks = by_check(findings)
    assert checks["providers"].detail.startswith("usable: local, openai; no key: anthropic")
    assert checks["default model"].detail == "openai/gpt-5.5"
    assert b"sk-very-secret-value" not in encode_json(findings)


def test_a_missing_extra_fails_the_default_model_that_needs_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = doctor._find_spec
    monkeypatch.setattr(doctor, "_find_spec", lambda m: None if m == "llama_cpp" else real(m))
    checks = by_check(diagnose())
    assert checks["default model"].status == "fail" and "llama_cpp" in checks["default model"].detail
    assert checks["default model"].fix == "pip install 'tether[local]'"
    assert checks["extra local"].status == "ok" and "pip install 'tether[local]'" in checks["extra local"].detail


def test_a_key_without_its_sdk_is_a_warning(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    real = doctor._find_spec
    monkeypatch.setattr(doctor, "_find_spec", lambda m: None if m == "anthropic" else real(m))
    checks = by_check(diagnose())
    assert checks["provider anthropic"].status == "warn"
    assert checks["provider anthropic"].fix == "pip install 'tether[anthropic]'"
    assert checks["default model"].status == "fail"  # anthropic is the default with its key set


def test_large_files_get_the_quick_check_unless_asked(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    faults.build_database(home / "tether.db", sessions=2, messages=5)
    monkeypatch.setattr(doctor, "FULL_CHECK_BELOW", 1)
    assert by_check(diagnose())["integrity"].detail == "quick_check: ok"
    assert by_check(diagnose(full=True))["integrity"].detail == "integrity_check: ok"


def test_a_nearly_full_disk_is_a_warning(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home.mkdir()
    monkeypatch.setattr(doctor, "LOW_DISK", 1 << 62)
    disk = by_check(diagnose())["disk"]
    assert disk.status == "warn" and "free disk space" in (disk.fix or "")


def test_doctor_says_which_sandbox_commands_run_in(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.tools import sandbox

    found = by_check(diagnose())["sandbox"]
    assert found.status == "ok" and "workspace-write with bubblewrap" in found.detail and "network off" in found.detail

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    off = by_check(diagnose())["sandbox"]
    assert off.status == "warn" and "full permissions" in off.detail

    (home / "config.toml").write_text('[sandbox]\nnetwork = ["pypi.org"]\n')
    none = sandbox.Support(None, "bubblewrap (bwrap) is not installed")
    monkeypatch.setattr(sandbox, "bwrap_support", lambda: none)
    landlock_only = by_check(diagnose())["sandbox"]
    assert (
        landlock_only.status == "ok" and "Landlock" in landlock_only.detail and "only pypi.org" in landlock_only.detail
    )
    monkeypatch.setattr(sandbox, "landlock_support", lambda: sandbox.Support(None, "no Landlock here"))
    missing = by_check(diagnose())["sandbox"]
    assert missing.status == "warn" and "every command asks" in missing.detail
    assert missing.fix is not None and "bubblewrap" in missing.fix
