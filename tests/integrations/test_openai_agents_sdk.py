"""The OpenAI Agents SDK's own session tests (``tests/memory/test_session.py`` and
``test_session_limit.py`` of the installed openai-agents' sdist) against `TetherSession`: every test of the
`Session` protocol passes, none is skipped.

The sdist is fetched once per version with pip (``pip download --no-deps --no-binary :all:
openai-agents==<installed>``) into ``$TETHER_TEST_CACHE`` (default ``~/.cache/tether-tests``), and its
``tests/`` and ``pyproject.toml`` (the SDK's pytest settings) are kept there; the tests then run in a
pytest of their own, with the plugin `agents_sdk_sessions` putting `TetherSession` where they construct
`SQLiteSession` (see there for which tests examine SQLiteSession's own implementation and are left out)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tether

pytest.importorskip("agents")

SDK_TESTS = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")


def _sdk_tests(version: str) -> Path:
    """The folder holding the sdist's ``tests/`` and ``pyproject.toml`` for `version`, fetched when missing."""
    cache = Path(os.environ.get("TETHER_TEST_CACHE") or Path.home() / ".cache" / "tether-tests")
    root = cache / f"openai-agents-{version}"
    if all((root / name).is_file() for name in SDK_TESTS):
        return root
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"openai-agents=={version}", "-d", tmp],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if fetched.returncode != 0:
            pytest.fail(f"could not fetch the openai-agents {version} sdist with pip:\n{fetched.stderr[-2000:]}")
        (sdist,) = Path(tmp).glob("*.tar.gz")
        unpacked = Path(tmp) / "unpacked"
        with tarfile.open(sdist) as tar:
            top = tar.getmembers()[0].name.split("/")[0]
            wanted = [m for m in tar.getmembers() if m.name.startswith((f"{top}/tests/", f"{top}/pyproject.toml"))]
            tar.extractall(unpacked, members=wanted, filter="data")
        shutil.rmtree(root, ignore_errors=True)
        (unpacked / top).rename(root)  # whole or not at all: another run may be fetching beside this one
    return root


def test_the_sdks_own_session_tests_pass_against_tether_session(tmp_path: Path) -> None:
    version = importlib.metadata.version("openai-agents")
    root = _sdk_tests(version)
    report, deselected = tmp_path / "junit.xml", tmp_path / "deselected.txt"
    src = Path(tether.__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).parent), str(src)]),
        "TETHER_SDK_DESELECTED": str(deselected),
        "TETHER_HOME": str(tmp_path / "home"),  # nothing of the user's is touched
        "OPENAI_API_KEY": "sk-not-used",  # the tests' models are scripted; the SDK wants a key to exist
    }
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "agents_sdk_sessions",
         f"--rootdir={root}", f"--junitxml={report}", "-o", "addopts=", *SDK_TESTS],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    tail = (run.stdout + run.stderr)[-6000:]
    assert report.exists(), tail
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    assert run.returncode == 0 and counts["failures"] == counts["errors"] == 0, tail
    assert counts["skipped"] == 0, tail
    left_out = deselected.read_text().split()
    # the tests of SQLiteSession's own storage, which another implementation has none of
    assert all("::test_sqlite_session_" in name for name in left_out), left_out
    assert counts["tests"] >= 40 and counts["tests"] > 2 * len(left_out), (counts, left_out)
