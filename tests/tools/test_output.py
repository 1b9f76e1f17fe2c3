from __future__ import annotations

import re

import pytest

from tether.errors import InvalidInput
from tether.store import MemoryStore, SqliteStore, Store
from tether.tools.output import (
    CHUNK_BYTES,
    OutputSpool,
    count_chars,
    count_lines,
    fit_output,
    open_artifact,
    read_artifact_bytes,
)

MARKER = re.compile(
    r"\[\.\.\. ([\d,]+) characters \(lines ([\d,]+)-([\d,]+) of ([\d,]+)\) cut; full output saved as artifact "
    r"(art_[0-9a-f]{64})\. Read the cut part with read\(path=\"artifact://\5\", offset=\2, limit=\.\.\.\)"
)


def _split_at_marker(content: str) -> tuple[list[str], str, list[str]]:
    """(lines before the marker, the marker, lines after it), blank separator lines left out."""
    lines = content.split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith("[... "))
    return [x for x in lines[:i] if x], lines[i], [x for x in lines[i + 1 :] if x]


def numbered(n: int, width: int = 0) -> str:
    return "".join(f"line {i}{'x' * width}\n" for i in range(1, n + 1))


def test_counting() -> None:
    assert count_chars("héllo €".encode()) == 7
    assert count_lines("") == 0
    assert count_lines("a") == 1
    assert count_lines("a\n") == 1
    assert count_lines("a\nb") == 2
    assert count_lines(b"a\n\n") == 2


async def test_small_output_is_untouched(store: Store) -> None:
    text = numbered(100)
    out = await fit_output(text, store=store, session_id="s")
    assert out.content == text
    assert out.metadata == {} and not out.truncated


@pytest.mark.parametrize(("n", "width"), [(100_000, 0), (1_500, 40), (3_000, 0)])
async def test_long_output_is_cut_and_saved_whole(store: Store, n: int, width: int) -> None:
    """Cut by characters, by lines, or both: the content keeps both limits, the marker's line numbers are
    right, and the artifact holds every byte."""
    text = numbered(n, width)
    out = await fit_output(text, store=store, session_id="ses_1", limit=30_000, max_lines=2_000)
    assert out.truncated
    assert len(out.content) <= 30_000
    assert count_lines(out.content) <= 2_000
    m = MARKER.search(out.content)
    assert m, out.content[:200]
    cut_chars, first_cut, last_cut, total = (int(g.replace(",", "")) for g in m.groups()[:4])
    artifact = m.group(5)
    assert total == n
    assert out.metadata["artifact"] == artifact
    assert out.metadata["original_chars"] == len(text)
    assert out.metadata["original_lines"] == n
    assert out.metadata["session_id"] == "ses_1"
    before, _marker, after = _split_at_marker(out.content)
    # the head ends with the line before the first cut one, the tail starts right after the last cut one
    assert before[-1] == f"line {first_cut - 1}{'x' * width}"
    assert after[0] == f"line {last_cut + 1}{'x' * width}"
    assert after[-1] == f"line {n}{'x' * width}"
    shown = "".join(line + "\n" for line in before + after)
    assert cut_chars == len(text) - len(shown)
    assert text.startswith("".join(line + "\n" for line in before))
    assert text.endswith("".join(line + "\n" for line in after))
    assert await read_artifact_bytes(store, artifact) == text.encode()


async def test_a_single_huge_line_is_cut_mid_line(store: Store) -> None:
    text = "x" * 100_000
    out = await fit_output(text, store=store, session_id="s", limit=10_000)
    assert len(out.content) <= 10_000
    assert out.metadata["original_lines"] == 1
    assert "(lines 1-1 of 1) cut" in out.content
    assert await read_artifact_bytes(store, out.metadata["artifact"]) == text.encode()


async def test_non_ascii_output_is_cut_on_character_boundaries(store: Store) -> None:
    text = "".join(f"ligne {i} — été ✓\n" for i in range(5_000))
    out = await fit_output(text, store=store, session_id="s")
    assert "\ufffd" not in out.content
    assert out.metadata["original_chars"] == len(text)
    assert (await read_artifact_bytes(store, out.metadata["artifact"])).decode() == text


async def test_outputs_larger_than_a_chunk_are_stored_in_chunks(sqlite_store: SqliteStore) -> None:
    text = numbered(2 * CHUNK_BYTES // 10, width=3)  # about 2.2 chunks
    out = await fit_output(text, store=sqlite_store, session_id="s")
    artifact = out.metadata["artifact"]
    manifest = await sqlite_store.get_artifact(artifact)
    assert manifest.startswith(b'{"tether":"chunked-artifact"') and len(manifest) < 2_000
    view = await open_artifact(sqlite_store, artifact)
    assert view.size == len(text.encode()) and view.lines == count_lines(text)
    assert await read_artifact_bytes(sqlite_store, artifact) == text.encode()


async def test_an_output_that_only_looks_like_a_manifest_reads_as_itself() -> None:
    store = MemoryStore()
    data = b'{"tether":"chunked-artifact", but not really'
    aid = await store.put_artifact(data)
    assert await read_artifact_bytes(store, aid) == data


async def test_spool_keeps_small_output_in_memory_and_whole() -> None:
    spool = OutputSpool()
    for part in [b"hello ", "wörld".encode(), b"\n"]:
        spool.write(part)
    assert spool.fits and spool.size == 13 and spool.chars == 12 and spool.lines == 1
    out = await spool.finish(MemoryStore(), "s")
    assert out.content == "hello wörld\n" and not out.truncated


async def test_spool_spills_to_disk_and_matches_fit_output(sqlite_store: SqliteStore) -> None:
    text = numbered(300_000)
    data = text.encode()
    spool = OutputSpool(spill_bytes=64 * 1024)
    for i in range(0, len(data), 4096):
        spool.write(data[i : i + 4096])
    assert not spool.fits
    with pytest.raises(InvalidInput, match="over the limit; use finish"):
        spool.text()
    from_spool = await spool.finish(sqlite_store, "s")
    from_text = await fit_output(text, store=sqlite_store, session_id="s")
    assert from_spool.content == from_text.content
    assert from_spool.metadata == from_text.metadata
    assert await read_artifact_bytes(sqlite_store, from_spool.metadata["artifact"]) == data


async def test_a_failing_store_still_gives_a_cut_result() -> None:
    store = MemoryStore()
    await store.close()
    out = await fit_output(numbered(10_000), store=store, session_id="s")
    assert out.truncated and "artifact" not in out.metadata
    assert out.metadata["artifact_error"].startswith("StoreClosed")
    assert "the full output could not be saved (StoreClosed" in out.content
    assert len(out.content) <= 30_000


async def test_limits_that_leave_no_room_are_refused() -> None:
    with pytest.raises(InvalidInput, match="at least"):
        await fit_output("x", store=MemoryStore(), session_id="s", limit=100)
    with pytest.raises(InvalidInput, match="line limit"):
        OutputSpool(max_lines=2)


async def test_spilled_output_that_fits_is_returned_whole() -> None:
    spool = OutputSpool(spill_bytes=1024)
    text = "✓" * 5_000  # 15,000 bytes on disk, 5,000 characters: within the limit
    spool.write(text.encode())
    assert spool.fits and spool.text() == text
    assert (await spool.finish(MemoryStore(), "s")).content == text


async def test_spool_with_a_failing_store_still_gives_head_and_tail() -> None:
    store = MemoryStore()
    await store.close()
    spool = OutputSpool(spill_bytes=1024)
    spool.write(b"first\n" + b"middle\n" * 10_000 + b"last\n")
    out = await spool.finish(store, "s")
    assert out.truncated and "artifact" not in out.metadata
    assert out.content.startswith("first\n") and out.content.endswith("last\n")
    assert "the full output could not be saved (StoreClosed" in out.content
