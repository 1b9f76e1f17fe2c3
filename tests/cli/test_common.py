"""The small shared pieces of the CLI: relative times and counts."""

from __future__ import annotations

import time

from tether.cli.common import ago, human_count


def test_ago() -> None:
    now = 1_700_000_000.0
    assert ago(now - 1, now) == "just now"
    assert ago(now + 30, now) == "just now"  # a clock a little ahead of ours
    assert ago(now - 45, now) == "45s ago"
    assert ago(now - 3 * 60 - 5, now) == "3m ago"
    assert ago(now - 2 * 3600, now) == "2h ago"
    assert ago(now - 5 * 86400, now) == "5d ago"
    assert ago(now - 90 * 86400, now) == time.strftime("%Y-%m-%d", time.localtime(now - 90 * 86400))


def test_human_count() -> None:
    assert [human_count(n) for n in (0, 999, 1000, 1234, 999_999, 1_000_000, 1_250_000)] == [
        "0",
        "999",
        "1k",
        "1.2k",
        "1M",
        "1M",
        "1.2M",
    ]
