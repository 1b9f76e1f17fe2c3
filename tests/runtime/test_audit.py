"""The runtime's audit records, from real runs (the real loop and stores, a scripted model): each tool call
with its decision and who made it (a rule, the mode, a person), its outcome and duration; approvals asked and
answered; an "always, in this project" as a configuration change and acceptance; `tether trust`'s
acceptance; an import; secrets redacted as the journal redacts them; retention by ``[audit] keep_days``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tether import Session
from tether.config import AuditConfig, Config, PermissionsConfig
from tether.importers.tether_json import export_json, import_json
from tether.providers.scripted import ScriptedProvider
from tether.runtime import audit
from tether.runtime.permission import Answer, ApprovalRequest
from tether.runtime.rules import Rules, parse_rules
from tether.runtime.trust import accept
from tether.store import Store
from tether.store.audit import draft

from .test_approvals import DEPLOYED, Person, deploying, run

SECRET = "sk-proj-audit-test-0123456789abcdefghij"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    DEPLOYED.clear()


async def test_each_call_is_recorded_with_its_decision_and_who_made_it(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    rules = Rules(
        tuple(parse_rules(["deploy(staging)"], "allow", "config") + parse_rules(["deploy(prod)"], "deny", "x"))
    )

    async def person(request: ApprovalRequest) -> Answer:
        return Answer(True, by="user")

    await run(session, ScriptedProvider(deploying("staging", "prod", "dev")), rules=rules, approver=person)
    assert DEPLOYED == ["staging", "dev"]
    calls = await store.list_audit(kind="tool.call", session_id=session.id)
    assert [(r.detail["arguments"]["target"], r.outcome, r.detail["decision"]) for r in calls] == [
        ("staging", "ok", "allow"),
        ("prod", "denied", "deny"),
        ("dev", "ok", "allow"),
    ]
    assert calls[0].detail["decided_by"] == "rule: deploy(staging)"
    assert calls[1].detail["decided_by"] == "rule: deploy(prod)"
    assert calls[2].detail["decided_by"] == "person: user"
    assert all(r.detail["duration_ms"] >= 0 and r.detail["tool"] == "deploy" for r in calls)
    asked = await store.list_audit(kind="approval", session_id=session.id)
    assert [(r.kind, r.outcome) for r in asked] == [("approval.requested", None), ("approval.answered", "approved")]
    assert asked[0].detail["arguments"] == {"target": "dev"}
    # in the trail's order: asked, answered, then the call's record
    seqs = [r.seq for r in asked] + [calls[2].seq]
    assert seqs == sorted(seqs)


async def test_a_call_with_nobody_to_ask_names_the_mode(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    await run(session, ScriptedProvider(deploying("prod")))
    (call,) = await store.list_audit(kind="tool.call")
    assert call.outcome == "denied" and call.detail["decided_by"] == "mode: default"
    assert "nobody is here to answer" in call.detail["reason"]


async def test_secrets_never_reach_a_record(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    session = await Session.create(store, directory=tmp_path)
    rules = Rules(tuple(parse_rules(["deploy"], "allow", "config.toml")))
    await run(session, ScriptedProvider(deploying(f"prod --key {SECRET}")), rules=rules)
    records = await store.list_audit()
    assert records and SECRET not in json.dumps([[r.detail, r.actor, r.outcome] for r in records])
    (call,) = [r for r in records if r.kind == "tool.call"]
    assert call.detail["arguments"]["target"] == "prod --key [redacted:OPENAI_API_KEY]"


async def test_always_in_this_project_records_the_change_and_its_acceptance(store: Store, tmp_path: Path) -> None:
    session = await Session.create(store, directory=tmp_path)
    await run(session, ScriptedProvider(deploying("prod")), approver=Person(Answer(True, scope="project")))
    changed = await store.list_audit(kind="config")
    assert [r.kind for r in changed] == ["config.changed", "config.accepted"]
    assert changed[0].detail["allow"] == ["deploy"] and changed[0].detail["path"].endswith(".tether/config.toml")
    assert changed[1].detail["workspace"] == str(tmp_path) and changed[1].detail["allow"] == ["deploy"]


async def test_trust_records_the_acceptance_with_the_next_record(store: Store, tmp_path: Path) -> None:
    accept(str(tmp_path), PermissionsConfig(allow=["bash(make *)"], mode="accept-edits"))
    assert await audit.flush(store) == 1
    (record,) = await store.list_audit(kind="config.accepted")
    assert record.detail == {
        "workspace": str(tmp_path),
        "allow": ["bash(make *)"],
        "ask": [],
        "deny": [],
        "mode": "accept-edits",
    }
    assert record.actor and record.actor.startswith("cli ")


async def test_an_import_of_an_export_is_recorded(store: Store, tmp_path: Path) -> None:
    import io

    session = await Session.create(store, directory=tmp_path)
    await run(session, ScriptedProvider(lambda r: "hello"))
    out = io.BytesIO()
    await export_json(store, session.id, out)
    imported = await import_json(store, out.getvalue(), new_id=True)
    (record,) = await store.list_audit(kind="session.imported")
    assert record.session_id == imported.id and record.detail["entries"] == imported.entry_count


async def test_retention_prunes_by_keep_days_and_the_rest_verifies(store: Store) -> None:
    old = time.time() - 10 * 86400
    for i in range(3):
        await store.append_audit(draft("tool.call", at=old + i, detail={}))
    await store.append_audit(draft("tool.call", at=time.time(), detail={}))
    assert await audit.retain(store, Config()) == 0  # unset: kept for good
    assert await audit.retain(store, Config(audit=AuditConfig(keep_days=5))) == 3
    assert await audit.retain(store, Config(audit=AuditConfig(keep_days=5))) == 0  # once an hour
    from tether.store.audit import verify

    report = await verify(audit.walk_trail(store), await store.audit_head())
    assert report.ok and report.first == 4 and report.records == 2
