"""The one place that opens SQLite connections.

The stdlib `sqlite3` of pyenv and many distributions is built without extension loading, and
sqlite-vec is an extension, so `connect()` prefers the stdlib module only where it can load
extensions and otherwise uses `sqlean.py` (a drop-in sqlite3 built with them). Every connection
loads sqlite-vec. Exception classes differ between the two modules; `sqlite_errors` names the
ones in use so callers catch the right classes in one place.
"""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlite_vec

from recalld import private
from recalld.errors import StoreError


def _pick_module() -> ModuleType:
    probe = sqlite3.connect(":memory:")
    try:
        if hasattr(probe, "enable_load_extension"):
            return sqlite3
    finally:
        probe.close()
    try:
        import sqlean
    except ImportError as exc:  # pragma: no cover - depends on the platform's wheels
        raise StoreError(
            "this Python's sqlite3 cannot load extensions and sqlean.py is not installed; "
            "install sqlean.py or use a Python built with extension loading"
        ) from exc
    module: ModuleType = sqlean
    return module


sqlite: ModuleType = _pick_module()
# Both modules define the DB-API exception classes; catch these, not sqlite3's.
DatabaseError: type[Exception] = sqlite.DatabaseError
OperationalError: type[Exception] = sqlite.OperationalError
SqliteIntegrityError: type[Exception] = sqlite.IntegrityError
Row: Any = sqlite.Row
# What reading a damaged file can raise: SQLite's errors, and a message or value SQLite hands
# over that is not UTF-8 (a flipped byte in a page).
UNREADABLE: tuple[type[Exception], ...] = (DatabaseError, UnicodeDecodeError)
_LENIENT_TEXT = functools.partial(str, encoding="utf-8", errors="replace")


def connect(path: Path | str, *, readonly: bool = False) -> Any:
    """Open a connection with sqlite-vec loaded and recalld's pragmas set.

    Args:
        path: The database file.
        readonly: Open with `query_only`, for the reader pool.

    Returns:
        A DB-API connection from the chosen module, in autocommit mode (transactions are
        explicit, `BEGIN IMMEDIATE` in the writer).

    The file and its `-wal` / `-shm` are kept 0600 (`recalld.private`): created so before
    SQLite sees them (SQLite gives its companions the main file's mode), tightened if looser.
    """
    on_disk = str(path) != ":memory:" and not str(path).startswith("file:")
    if on_disk and not readonly:
        if not Path(path).parent.is_dir():
            private.private_dir(Path(path).parent)
        private.create_private(Path(path))
    conn = sqlite.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30.0)
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across application crashes in WAL mode; only a power loss can
        # drop the last transactions (https://sqlite.org/pragma.html#pragma_synchronous).
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.execute("PRAGMA mmap_size=268435456")
        conn.execute("PRAGMA cache_size=-65536")
        if readonly:
            conn.execute("PRAGMA query_only=1")
        if on_disk:
            private.tighten_store(Path(path))
    except UNREADABLE as exc:
        conn.close()
        if is_damaged(exc):
            raise damaged_error(path, exc) from exc
        raise
    except Exception:
        conn.close()
        raise
    conn.row_factory = Row
    # A damaged page can hold text that is not UTF-8; the default factory would fail the whole
    # query (a search, an export) for that one value. `check` reports such rows by id.
    conn.text_factory = _LENIENT_TEXT
    return conn


def connect_damaged(path: Path | str) -> Any:
    """A read-only connection to a damaged store file, for `storage.sqlite.salvage`: text decoded
    leniently, none of `connect`'s pragmas (they fail on a file whose first page is gone),
    and no sqlite-vec: its reader crashes the process on damaged pages, so vectors are read
    from the plain `vector_floats` table instead."""
    conn = sqlite.connect(
        f"file:{Path(path).resolve()}?mode=ro", uri=True, isolation_level=None, timeout=30.0
    )
    try:
        # Lets SQLite load a schema with a damaged entry, so the other tables stay readable
        # (https://sqlite.org/pragma.html#pragma_writable_schema); the file is opened read-only.
        conn.execute("PRAGMA writable_schema=ON")
    except Exception:
        conn.close()
        raise
    conn.text_factory = _LENIENT_TEXT
    return conn


def is_damaged(exc: BaseException) -> bool:
    """Whether a SQLite error means the file is not a database or is corrupt (not a lock, a
    full disk or a bad query)."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc)
    return name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or any(
        sign in text
        # sqlite-vec reports its own damaged pages as failed blob reads.
        for sign in ("not a database", "malformed", "opening blob failed", "Could not fetch")
    )


def damaged_error(path: Path | str, exc: BaseException) -> StoreError:
    """The one-line error for a store file SQLite cannot read: what, where, what to do."""
    return StoreError(
        f"the store {path} is damaged ({exc}); stop recalld and run `recalld check --offline "
        "--repair` to rebuild it from what can still be read (the damaged file is kept beside "
        "it), or move the file away to start an empty store",
        data={"path": str(path), "reason": "damaged"},
    )
