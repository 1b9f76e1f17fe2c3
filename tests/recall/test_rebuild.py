"""Rebuilding what search and recall derive from the journal (`tether recall --rebuild`, `rebuild_indexes`):
a damaged search index and damaged turn keys are made again, the journal only read."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType

from click.testing import CliRunner

from tether.cli.main import cli
from tether.messages import Message
from tether.recall import recall
from tether.recall.keys import KeyIndex
from tether.recall.rebuild import rebuild_indexes, rebuild_keys
from tether.store import MemoryStore, SqliteStore
from tether.store.sqlite import check_file


def _faults() -> ModuleType:
    path = Path(__file__).parents[1] / "store" / "faults.py"
    spec = importlib.util.spec_from_file_location("tether_store_test_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


faults = _faults()


def test_recall_rebuild_makes_a_garbled_index_and_garbage_keys_again(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    faults.build_database(db)
    runner = CliRunner()
    assert runner.invoke(cli, ["--store", str(db), "recall", "--all", "lighthouses"]).exit_code == 0
    journal = faults.journal_rows(db)
    keys = KeyIndex(f"{db}.keys")
    keyed = keys.count()
    keys.close()
    assert keyed == 12 * 39  # every message
    faults.damage_search_index(db, "garbled")
    faults.garbage(Path(f"{db}.keys"))
    result = runner.invoke(cli, ["--store", str(db), "recall", "--rebuild"])
    assert result.exit_code == 0, result.stderr
    assert "rebuilt from the journal: the search index (480 entries) and the turn keys (480 entries read)" in (
        result.stdout
    )
    assert [f for f in check_file(db) if f.status != "ok"] == []
    assert faults.journal_rows(db) == journal

    async def search() -> int:
        async with SqliteStore(db) as store:
            return len(await store.search("lighthouses", limit=1000))

    assert asyncio.run(search()) == 12 * 37
    keys = KeyIndex(f"{db}.keys")
    try:
        assert keys.count() == keyed
    finally:
        keys.close()


async def test_sound_keys_are_emptied_in_place_and_damaged_ones_made_anew(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "tether.db") as store:
        info = await store.create_session(directory="/repo")
        await store.append(info.id, [Message.user("where is the heron"), Message.assistant("on the pier")])
        assert (await recall(store, "heron", directory="/repo")).hits
        read, remade = await rebuild_keys(store)
        assert (read, remade) == (2, False)
        Path(f"{store.path}.keys").write_bytes(b"not a database at all" * 100)
        read, remade = await rebuild_keys(store)
        assert (read, remade) == (2, True)
        assert (await recall(store, "heron", directory="/repo")).hits[0].session_id == info.id


async def test_a_store_without_an_index_of_its_own_rebuilds_its_keys() -> None:
    store = MemoryStore()
    info = await store.create_session(directory="/repo")
    await store.append(info.id, [Message.user("the lighthouse keeper")])
    done = await rebuild_indexes(store)
    assert done.entries_indexed == 0 and done.keys_read == 1
    assert (await recall(store, "keeper", directory="/repo")).hits
