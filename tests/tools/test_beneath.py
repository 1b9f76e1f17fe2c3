"""`open_beneath` on what it must never do: a name with a NUL byte, which the system call would read only up to
the NUL (another file than the one asked for), is refused as Python refuses it for `open`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.tools.beneath import open_beneath


def test_a_path_with_a_nul_byte_opens_nothing(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    root = tmp_path.resolve()
    with pytest.raises(ValueError, match="embedded null byte"):
        open_beneath(root, root / "notes.txt\x00.png", os.O_RDONLY)
    with pytest.raises(ValueError, match="embedded null byte"):
        open_beneath(root, root / "new\x00.txt", os.O_WRONLY | os.O_CREAT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    fd = open_beneath(root, root / "notes.txt", os.O_RDONLY)  # a plain name still opens
    os.close(fd)
