"""A consistent copy of a SQLite database while others may be writing to it: SQLite's online backup API read
from one snapshot, into a new file beside the target that is checked and then moved into place, so that
neither the live database nor an existing file is ever half written."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import msgspec

from ..errors import InvalidInput, StoreCorrupt
from .faults import store_fault
from .health import FULL_CHECK_BELOW, REBUILD, RECOVER, check_database, open_read_only

STEP_PAGES = 4096
"""Pages copied between two progress reports: 16 MiB of 4 KiB pages."""

Progress = Callable[[int, int], None]
"""Called as pages are copied, with (bytes copied, bytes in all)."""


class BackupResult(msgspec.Struct, frozen=True):
    """Where a backup went, its size in bytes, and the sessions it holds."""

    path: str
    size: int
    sessions: int


def backup_file(
    source: str,
    target: str | os.PathLike[str],
    *,
    known_version: int,
    force: bool = False,
    full: bool | None = None,
    progress: Progress | None = None,
) -> BackupResult:
    """Copy the database at `source` to `target`, consistent as of one moment though writers go on (the copy
    reads one snapshot; in WAL mode writers do not wait for it). `target` must be a new name, or a regular
    file with `force` (never a directory, a link, a device, a FIFO), and never the database itself or one of
    its WAL files. The snapshot is checked first (`check_database`: `full` as `tether doctor` does, by
    default below `FULL_CHECK_BELOW`; `known_version` is the schema this tether writes): a damaged source,
    its search index included, is refused (`StoreCorrupt`, with what to do) before anything is written. The
    copy passes a `quick_check` before it is moved into place; a failure leaves nothing behind."""
    live = os.path.realpath(source)
    dest = Path(os.path.abspath(os.fspath(target)))
    if os.path.realpath(dest) in {live, live + "-wal", live + "-shm", live + "-journal"}:
        raise InvalidInput(f"{dest} is the live database (or one of its files): name another file for the backup")
    _check_destination(dest, force)
    if not dest.parent.is_dir():
        raise InvalidInput(f"cannot write the backup {dest}: {dest.parent} is not a directory")
    try:
        reader = open_read_only(live)
        if full is None:
            full = os.path.getsize(live) < FULL_CHECK_BELOW
    except (sqlite3.Error, OSError) as e:
        raise store_fault(e, source, "back up") from e
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        try:
            # One read transaction for the whole copy: the backup sees one snapshot and never starts over
            # when another connection commits between its steps.
            reader.execute("BEGIN")
            page_size = int(reader.execute("PRAGMA page_size").fetchone()[0])
        except sqlite3.Error as e:
            raise store_fault(e, source, "back up") from e
        _check_source(reader, source, full, known_version)
        try:
            partial.unlink(missing_ok=True)
            copy = sqlite3.connect(partial, isolation_level=None)
        except (sqlite3.Error, OSError) as e:
            raise store_fault(e, str(partial), "write the backup") from e
        try:
            report = None
            if progress is not None:

                def report(_status: int, remaining: int, total: int) -> None:
                    progress((total - remaining) * page_size, total * page_size)

            try:
                reader.backup(copy, pages=STEP_PAGES, progress=report)
            except sqlite3.Error as e:
                # A damaged page of the source fails the read; a full disk or a read-only directory, the write.
                fault = store_fault(e, source, "back up")
                raise (
                    fault if isinstance(fault, StoreCorrupt) else store_fault(e, str(dest), "write the backup")
                ) from e
            try:
                verdict = " ".join(str(copy.execute("PRAGMA quick_check(1)").fetchone()[0]).split())
                sessions = int(copy.execute("SELECT count(*) FROM sessions").fetchone()[0]) if verdict == "ok" else 0
            except sqlite3.Error as e:
                raise store_fault(e, source, "back up") from e
            if verdict != "ok":
                raise StoreCorrupt(
                    f"the database {source} is damaged ({verdict}), so no backup was made",
                    RECOVER.format(path=source),
                    path=source,
                )
        finally:
            copy.close()
        try:
            with open(partial, "rb") as f:
                os.fsync(f.fileno())
            _place(partial, dest, force)
            _fsync_directory(dest.parent)
        except FileExistsError:
            raise InvalidInput(f"{dest} already exists: choose another name, or --force to replace it") from None
        except OSError as e:
            raise store_fault(e, str(dest), "write the backup") from e
    finally:
        reader.close()
        partial.unlink(missing_ok=True)
    return BackupResult(path=str(dest), size=dest.stat().st_size, sessions=sessions)


_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def _check_destination(dest: Path, force: bool) -> None:
    """A backup goes to a new name, or over a regular file with `force`: never into a directory, and never
    over a link (which would be replaced, not followed), a device or a FIFO (as root, `--force` once made
    /dev/full a file)."""
    try:
        found = os.lstat(dest)
    except FileNotFoundError:
        return
    except OSError as e:
        raise store_fault(e, str(dest), "write the backup") from e
    if stat.S_ISDIR(found.st_mode):
        raise InvalidInput(f"{dest} is a directory: name the backup file, e.g. {dest / 'tether-backup.db'}")
    if not stat.S_ISREG(found.st_mode):
        kind = _KINDS.get(stat.S_IFMT(found.st_mode), "not a file")
        raise InvalidInput(
            f"{dest} is {kind}, not a regular file: a backup is written to a new name, or over a regular file "
            "with --force; name another path"
        )
    if not force:
        raise InvalidInput(f"{dest} already exists: choose another name, or --force to replace it")


def _check_source(reader: sqlite3.Connection, source: str, full: bool, known_version: int) -> None:
    """The snapshot about to be copied, checked as `tether doctor` checks a database: what fails (its pages,
    its entries, its search index) is refused, with the finding's fix, before anything is written."""
    for finding in check_database(reader, source, full=full, known_version=known_version):
        if finding.status == "fail" and finding.check != "schema":
            then = "; then back up again" if finding.fix == REBUILD else ""
            said = (  # a finding made of an error already names the database and what is wrong with it
                finding.detail
                if finding.detail.startswith(f"the database {source}")
                else f"the database {source} is damaged ({finding.check}: {finding.detail})"
            )
            raise StoreCorrupt(
                f"{said}, so no backup was made",
                f"{finding.fix or RECOVER.format(path=source)}{then}",
                path=source,
            )


def _place(partial: Path, dest: Path, force: bool) -> None:
    """Move the finished copy to `dest`: over what is there with `force`, else only if nothing is (a link
    fails on an existing name, where a rename would replace it)."""
    if force:
        os.replace(partial, dest)
        return
    try:
        os.link(partial, dest)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links
        if dest.exists():
            raise FileExistsError(dest) from None
        os.replace(partial, dest)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
