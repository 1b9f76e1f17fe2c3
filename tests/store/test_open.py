"""`open_store`: URL schemes to backends, each backend imported only when a URL names it, and a scheme that
this version does not have named with the extra that will bring it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tether.store import MemoryStore, SqliteStore, open_store


def loaded_after(code: str) -> set[str]:
    """The tether modules a fresh interpreter has loaded after running `code`."""
    probe = f"import sys\n{code}\nprint(' '.join(m for m in sys.modules if m.startswith('tether')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_a_url_imports_only_its_backend(tmp_path: Path) -> None:
    memory = loaded_after("from tether.store import open_store; open_store('memory://')")
    assert "tether.store.memory" in memory and "tether.store.sqlite" not in memory
    sqlite = loaded_after(f"from tether.store import open_store; open_store('sqlite:///{tmp_path / 'x.db'}')")
    assert "tether.store.sqlite" in sqlite and "tether.store.memory" not in sqlite
    assert "tether.store.sqlite" not in loaded_after("import tether.store")


async def test_schemes_map_to_backends(tmp_path: Path) -> None:
    store = open_store("memory://")
    assert isinstance(store, MemoryStore)
    await store.close()
    for url in (f"sqlite:///{tmp_path / 'a.db'}", str(tmp_path / "b.db")):
        store = open_store(url)
        assert isinstance(store, SqliteStore)
        await store.close()


def test_postgres_without_its_extra_names_the_extra() -> None:
    """psycopg missing (made unimportable in a fresh interpreter): opening a postgresql:// URL says which
    extra brings it, and nothing else of tether's breaks."""
    probe = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "from tether.errors import MissingExtra\n"
        "from tether.store import open_store\n"
        "try:\n    open_store('postgresql://user@db.example/tether')\n"
        "except MissingExtra as e:\n    print('missing', e.extra)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "missing postgres"


def test_postgres_urls_open_a_postgres_store(postgres_url: str) -> None:
    from tether.store.postgres import PostgresStore

    code = f"from tether.store import open_store; open_store({postgres_url!r})"
    loaded = loaded_after(code)
    assert "tether.store.postgres" in loaded and "tether.store.sqlite" not in loaded
    for url in (postgres_url, "postgres" + postgres_url.removeprefix("postgresql")):
        assert isinstance(open_store(url), PostgresStore)
