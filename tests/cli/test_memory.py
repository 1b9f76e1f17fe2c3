"""`tether memory list | add | rm` as a user types them, over a real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tether.cli.main import cli


def tether(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", str(db), *args])
    return result.exit_code, result.output


def test_add_list_rm(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    proj = tmp_path / "proj"
    proj.mkdir()
    code, out = tether(db, "memory", "add", "tests need `make db`", "--dir", str(proj))
    assert code == 0 and out.startswith("remembered mem_")
    note_id = out.split()[-1]
    assert tether(db, "memory", "add", "I like short answers", "--user")[0] == 0
    code, out = tether(db, "memory", "list", "--dir", str(proj), "--json")
    listed = json.loads(out)
    assert [n["text"] for n in listed] == ["I like short answers", "tests need `make db`"]
    assert listed[1]["by"] == "user" and listed[1]["scope"] == "project"
    code, out = tether(db, "memory", "list", "--dir", str(proj))
    assert code == 0 and note_id in out and "tests need `make db`" in out
    assert tether(db, "memory", "rm", note_id, "--dir", str(proj)) == (0, f"forgot {note_id}\n")
    code, out = tether(db, "memory", "rm", note_id, "--dir", str(proj))
    assert code == 1 and "no memory note" in out
    code, out = tether(db, "memory", "add", "   ")
    assert code != 0 and "needs some text" in out
