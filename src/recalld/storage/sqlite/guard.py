"""What the store checks around each write, so it never acknowledges one it cannot keep.

- A full disk (SQLITE_FULL, or ENOSPC from the OS) is a state, not a crash: the write is
  refused with `StoreFullError`, which says where and what to do, and callers keep their work
  pending until space returns.
- The store's files must stay the files SQLite opened. A `-wal` deleted under a running daemon
  keeps taking commits in an unlinked file that the next restart never sees, and a database
  file deleted or replaced takes everything with it. `StoreFiles` records each file's device
  and inode at open and compares them after every commit, so such a commit is reported as an
  error rather than acknowledged.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from recalld.errors import StoreFullError, StoreGoneError

# The SQLite result code for a full disk (https://sqlite.org/rescode.html#full).
SQLITE_FULL = 13
# Besides the database, the files SQLite keeps open beside it in WAL mode.
SIDE_FILES = ("-wal", "-shm")


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` says the disk (or a quota, or `max_page_count`) is full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF == SQLITE_FULL
    return "database or disk is full" in str(exc)


def disk_full_error(path: Path, exc: BaseException) -> StoreFullError:
    """The error for a write refused because the disk holding `path` is full."""
    return StoreFullError(
        f"the disk holding the store {path} is full ({exc}); writes are refused until space "
        "is freed there, and files waiting to be ingested stay pending and are retried",
        data={"store": os.fspath(path)},
    )


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


@dataclass
class StoreFiles:
    """The device and inode of the database and its side files, as SQLite opened them."""

    path: Path
    identities: dict[Path, tuple[int, int]]

    @classmethod
    def record(cls, path: Path) -> StoreFiles:
        """Record the files as they are now (blocking; call right after opening the store)."""
        files = [path, *(path.with_name(path.name + suffix) for suffix in SIDE_FILES)]
        found = {file: _identity(file) for file in files}
        return cls(path, {file: ident for file, ident in found.items() if ident is not None})

    def changed(self) -> list[Path]:
        """The recorded files that are gone or are no longer the same file (blocking)."""
        return [file for file, ident in self.identities.items() if _identity(file) != ident]

    def gone_error(self, changed: list[Path], salvaged: bool) -> StoreGoneError:
        """The error every write gets once a file changed."""
        names = ", ".join(os.fspath(p) for p in changed)
        kept = (
            "what was written before is saved in the database file"
            if salvaged
            else "what was written since may be only in the deleted file"
        )
        return StoreGoneError(
            f"{names} was deleted or replaced while recalld had the store open; writes are "
            f"refused so none is acknowledged and then lost ({kept}); restart recalld, and "
            "run `recalld check` afterwards",
            data={"store": os.fspath(self.path), "changed": [os.fspath(p) for p in changed]},
        )


def write_state(disk_full: bool, gone: StoreGoneError | None) -> dict[str, object]:
    """`status`'s `writes`: whether the store takes writes now and, if not, why."""
    if gone is not None:
        return {"ok": False, "reason": "store files changed", "message": gone.message}
    if disk_full:
        return {"ok": False, "reason": "disk full", "message": "the disk holding the store is full"}
    return {"ok": True, "reason": None, "message": None}


def os_disk_full_error(exc: BaseException) -> StoreFullError:
    """The error for a full disk met outside a store write (a registry file, a temp table)."""
    path = getattr(exc, "filename", None)
    return StoreFullError(
        f"the disk is full ({exc}); free space and retry",
        data={"path": os.fspath(path)} if path else None,
    )
