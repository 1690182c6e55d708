"""Files only their owner can read: folders 0700, files 0600, whatever the umask.

The store holds everything the user ever wrote down, so its folder, the SQLite file and its
`-wal` / `-shm` companions, the lock, the sources list, the model cache and exports are kept
private. New ones are created with these modes; existing ones with group or other bits (a store
made by an older recalld, or under a loose umask) are tightened once, with a warning, but only
when this user owns them (`chmod` on someone else's file would fail anyway).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

logger = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def _tighten(path: Path, mode: int, *, warn: bool) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if stat.S_IMODE(info.st_mode) & 0o077 == 0 or info.st_uid != os.geteuid():
        return
    old = stat.S_IMODE(info.st_mode)
    try:
        path.chmod(mode)
    except OSError as exc:
        logger.warning("%s is readable by others (%o) and cannot be tightened: %s", path, old, exc)
        return
    if warn:
        logger.warning("%s was readable by others (%o); made it %o", path, old, mode)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create `path` (and missing parents) 0700, or tighten it to 0700 if it exists."""
    path = Path(path).expanduser()
    existed = path.is_dir()
    # mkdir(parents=True) gives missing parents the default mode: create each one here.
    missing = [p for p in [*reversed(path.parents), path] if not p.exists()]
    for folder in missing:
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
        _tighten(folder, DIR_MODE, warn=False)
    _tighten(path, DIR_MODE, warn=existed)
    return path


def private_file(path: Path, *, warn: bool = True) -> None:
    """Tighten an existing file to 0600 (with a warning); nothing when it does not exist.
    `warn=False` for a file just written by a library that ignores our mode."""
    _tighten(Path(path), FILE_MODE, warn=warn)


def create_private(path: Path) -> None:
    """Create `path` empty and 0600 unless it exists (then only tighten it)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        private_file(path)
        return
    os.close(fd)
    _tighten(path, FILE_MODE, warn=False)


def store_files(path: Path) -> list[Path]:
    """The SQLite file at `path` and its companions (which may not exist)."""
    return [path.with_name(path.name + suffix) for suffix in STORE_SUFFIXES]


def tighten_store(path: Path) -> None:
    """Make the store file and every companion that exists 0600."""
    for file in store_files(Path(path)):
        private_file(file)
