"""Rebuild a store SQLite finds damaged from the rows that can still be read (issue 18).

A file that is not a database, cut short, or with flipped bytes in a page ("database disk image
is malformed") cannot be repaired in place: a query that reaches the bad page fails, whatever
it asks. `check --offline --repair` then calls `salvage`, which

1. moves the damaged file (with its `-wal` and `-shm`) aside, to `<name>.damaged-<UTC time>`,
   so nothing is lost for good;
2. creates a new store at the same path (the current schema, the old store's model);
3. copies every row it can read, table by table (the tables `storage.portable` exports, so
   later migrations' tables come too), ids kept, and each chunk's vector when it can be read
   (from `vector_floats`: sqlite-vec's reader crashes on damaged pages, so it is not loaded);
   rows are read in rowid order, and a range that fails is probed row by row, then skipped;
   every loop moves strictly forward and stops at the table's last rowid (or after a bounded
   run of unreadable ranges), so a salvage always ends;
4. leaves the rest to the ordinary repair that follows: the full-text index is rebuilt by the
   triggers, the vector index from the vectors, chunks without a vector are re-embedded,
   memories that lost their document get it back, files are ingested again.

SQLite's own recovery (`.recover`, sqlite3_recover) lives in its command-line shell and is not
reachable from the Python modules (sqlean.py included); this is the part of it recalld needs.
Blocking; run it with the daemon stopped (the caller holds the store lock).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recalld.storage import portable, records
from recalld.storage.sqlite import schema
from recalld.storage.sqlite.connection import UNREADABLE, connect, connect_damaged

logger = logging.getLogger(__name__)

_BATCH = 256
_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite file
_PROBE = 256  # rowids probed one by one past a range that cannot be read
_MAX_BLIND_PROBES = 64  # unreadable ranges in a row, when the last rowid is unknown


def set_aside(path: Path) -> Path:
    """Move the store file and its companions to `<name>.damaged-<UTC time>`; returns the new
    path of the main file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, f"{aside}{suffix}")
    return aside


def salvage(path: Path) -> dict[str, Any]:
    """Rebuild the store at `path` from what its damaged file still holds. A store whose
    record of its model cannot be read gets the configured model when it is next opened, and
    its chunks are embedded again by the repair.

    Returns:
        `{"damaged_file", "rows": {table: copied}, "unreadable": {table: rows lost or
        ranges skipped}, "vectors": copied, "model": the model kept, or None}`.
    """
    aside = set_aside(path)
    logger.warning("store %s is damaged; moved to %s, rebuilding it", path, aside)
    report: dict[str, Any] = {
        "damaged_file": str(aside),
        "rows": {},
        "unreadable": {},
        "vectors": 0,
        "model": None,
    }
    old = _open_damaged(aside, report)
    new = connect(path)
    try:
        schema.migrate(new)
        meta = _meta(old) if old is not None else {}
        dimension = int(meta["dimension"]) if meta.get("dimension", "").isdigit() else None
        new.execute("PRAGMA foreign_keys=OFF")  # orphans are the repair's to resolve
        new.execute("BEGIN IMMEDIATE")
        if "model_id" in meta and dimension is not None:
            report["model"] = f"{meta['model_id']} ({dimension} dims)"
            for key in ("model_id", "dimension", records.SPEC_KEY):
                if key in meta:
                    new.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, meta[key])
                    )
            schema.create_vector_table(new, dimension)
        if old is not None:
            for table in portable.discover(new):
                copied, lost = _copy_table(old, new, table)
                report["rows"][table.name] = copied
                if lost:
                    report["unreadable"][table.name] = lost
            if dimension is not None:
                report["vectors"] = _copy_vectors(old, new, dimension)
            # Links and history whose chunk was lost point nowhere.
            new.execute(
                "DELETE FROM links WHERE src NOT IN (SELECT id FROM chunks) "
                "OR dst NOT IN (SELECT id FROM chunks)"
            )
            new.execute("DELETE FROM chunk_history WHERE chunk_id NOT IN (SELECT id FROM chunks)")
        new.execute("COMMIT")
        new.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        if new.in_transaction:
            new.execute("ROLLBACK")
        raise
    finally:
        new.close()
        if old is not None:
            old.close()
    logger.warning("salvaged %s from %s", report["rows"], aside)
    return report


def _open_damaged(aside: Path, report: dict[str, Any]) -> Any:
    """A connection that can read the damaged file, or None. A file whose 16-byte header
    string was hit is read through a copy with the header string restored."""
    try:
        conn = connect_damaged(aside)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except UNREADABLE:
            conn.close()
            raise
    except UNREADABLE as exc:
        if "not a database" not in str(exc):
            logger.error("nothing can be read from %s: %s", aside, exc)
            report["unreadable"]["store"] = str(exc)
            return None
        first = str(exc)
    fixed = aside.with_name(aside.name + "-header")
    with aside.open("rb") as source, fixed.open("wb") as target:
        target.write(_HEADER)
        source.seek(len(_HEADER))
        while chunk := source.read(2**20):
            target.write(chunk)
    for suffix in ("-wal", "-shm"):
        if Path(f"{aside}{suffix}").exists():
            os.link(f"{aside}{suffix}", f"{fixed}{suffix}")
    try:
        conn = connect_damaged(fixed)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        report["header_restored"] = True
        return conn
    except UNREADABLE as exc:
        logger.error("nothing can be read from %s: %s (%s)", aside, first, exc)
        report["unreadable"]["store"] = first
        return None


def _meta(old: Any) -> dict[str, str]:
    try:
        return {str(k): str(v) for k, v in old.execute("SELECT key, value FROM meta")}
    except UNREADABLE as exc:
        logger.warning("the damaged store's model record cannot be read: %s", exc)
        return {}


def _columns(conn: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")'))


def _copy_table(old: Any, new: Any, table: portable.Table) -> tuple[int, int]:
    """Copy the readable rows of one table; returns (copied, lost)."""
    try:
        old_columns = set(_columns(old, table.name))
    except UNREADABLE:
        return 0, 1
    columns = tuple(c for c in table.columns if c in old_columns)
    if not columns:
        return 0, 0
    names = ", ".join(f'"{c}"' for c in columns)
    insert = (
        f'INSERT OR IGNORE INTO "{table.name}" ({names}) VALUES ({", ".join("?" for _ in columns)})'
    )
    copied = lost = 0
    rows = _readable_rows(old, table.name, names)
    for row in rows:
        if row is None:
            lost += 1
            continue
        try:
            cursor = new.execute(insert, tuple(row[1:]))
        except UNREADABLE:  # a value that breaks a constraint: the bytes were flipped
            lost += 1
            continue
        copied += max(cursor.rowcount, 0)
    return copied, lost


def _readable_rows(old: Any, table: str, names: str) -> Iterator[Any]:
    """`(rowid, *columns)` of every row that can be read, in rowid order; None for each range
    or row that cannot. Always moves forward, so it always ends."""
    batch_sql = f'SELECT rowid, {names} FROM "{table}" WHERE rowid > ? ORDER BY rowid LIMIT ?'
    one_sql = f'SELECT rowid, {names} FROM "{table}" WHERE rowid = ?'
    try:
        last_rowid = old.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
    except UNREADABLE:
        last_rowid = None
    last = 0
    blind = 0
    while last_rowid is None or last < last_rowid:
        try:
            batch = old.execute(batch_sql, (last, _BATCH)).fetchall()
        except UNREADABLE:
            # A page in the next range cannot be read: probe it one row at a time.
            found = False
            for rowid in range(last + 1, last + 1 + _PROBE):
                try:
                    row = old.execute(one_sql, (rowid,)).fetchone()
                except UNREADABLE:
                    yield None
                    continue
                if row is not None:
                    found = True
                    yield row
            last += _PROBE
            blind = 0 if found else blind + 1
            if last_rowid is None and blind >= _MAX_BLIND_PROBES:
                return
            continue
        if not batch:
            return
        yield from batch
        if int(batch[-1][0]) <= last:
            return  # a damaged b-tree that turns back: stop rather than loop
        last = int(batch[-1][0])
        blind = 0


def _copy_vectors(old: Any, new: Any, dimension: int) -> int:
    """Copy the vector of each copied chunk that can be read and has the right size, from the
    damaged store's `vector_floats` (a plain table; sqlite-vec's own cannot be read safely)."""
    size = 4 * dimension
    labels = {
        int(r[0]): (r[1], r[2]) for r in new.execute("SELECT id, kind, granularity FROM chunks")
    }
    copied = 0
    for row in _readable_rows(old, "vector_floats", '"chunk_id", "embedding"'):
        if row is None:
            continue
        _, chunk_id, embedding = row
        if chunk_id not in labels or not isinstance(embedding, bytes) or len(embedding) != size:
            continue
        kind, granularity = labels.pop(chunk_id)
        try:
            new.execute(
                "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) "
                "VALUES (?, ?, ?, ?)",
                (int(chunk_id), embedding, kind, granularity),
            )
        except UNREADABLE:
            continue
        copied += 1
    return copied


def is_damaged_report(report: dict[str, Any]) -> bool:
    """Whether a `check_store` report says the file itself is damaged (a failing `store` or
    `integrity_check`), which only a rebuild can mend."""
    failed = {c["name"] for c in report["checks"] if not c["ok"]}
    return bool(failed & {"store", "integrity_check"})
