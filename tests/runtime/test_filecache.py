import os
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.runtime import filecache


@pytest.fixture(autouse=True)
def _fresh() -> None:
    filecache.forget()


def _counting() -> tuple[list[bytes], object]:
    seen: list[bytes] = []

    def parse(path: Path, raw: bytes) -> str:
        seen.append(raw)
        if raw.startswith(b"bad"):
            raise ConfigError(f"{path}: bad")
        return raw.decode()

    return seen, parse


def test_a_missing_file_is_none_and_nothing_is_parsed(tmp_path: Path) -> None:
    seen, parse = _counting()
    assert filecache.parsed(tmp_path / "absent.toml", parse) is None  # type: ignore[arg-type]
    assert filecache.parsed(tmp_path / "no-dir" / "x.toml", parse) is None  # type: ignore[arg-type]
    assert seen == []


def test_a_file_is_parsed_once_per_version(tmp_path: Path) -> None:
    seen, parse = _counting()
    path = tmp_path / "c.toml"
    path.write_text("one")
    assert filecache.parsed(path, parse) == "one"  # type: ignore[arg-type]
    assert filecache.parsed(path, parse) == "one"  # type: ignore[arg-type]
    assert seen == [b"one"]
    path.write_text("two, longer")
    assert filecache.parsed(path, parse) == "two, longer"  # type: ignore[arg-type]
    # same size, same clock tick: the modification time set apart still tells them apart
    path.write_text("three, long")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))
    assert filecache.parsed(path, parse) == "three, long"  # type: ignore[arg-type]
    assert seen == [b"one", b"two, longer", b"three, long"]
    path.unlink()
    assert filecache.parsed(path, parse) is None  # type: ignore[arg-type]


def test_what_a_parse_raises_is_raised_again_not_kept(tmp_path: Path) -> None:
    seen, parse = _counting()
    path = tmp_path / "c.toml"
    path.write_text("bad file")
    for _ in range(2):
        with pytest.raises(ConfigError):
            filecache.parsed(path, parse)  # type: ignore[arg-type]
    assert len(seen) == 2
    path.write_text("good now")
    assert filecache.parsed(path, parse) == "good now"  # type: ignore[arg-type]


def test_an_unreadable_file_raises_oserror(tmp_path: Path) -> None:
    _seen, parse = _counting()
    path = tmp_path / "dir.toml"
    path.mkdir()  # a directory where the file should be: reading it fails
    with pytest.raises(OSError):
        filecache.parsed(path, parse)  # type: ignore[arg-type]


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    _seen, parse = _counting()
    for i in range(filecache.MAX_FILES + 10):
        path = tmp_path / f"{i}.toml"
        path.write_text(str(i))
        assert filecache.parsed(path, parse) == str(i)  # type: ignore[arg-type]
    assert len(filecache._kept) == filecache.MAX_FILES
