"""`check`: verify the store's invariants without changing anything.

- every chunk has exactly one vector and one FTS row, and every vector and FTS row a chunk;
- no chunk without its document; each document's `chunk_count` matches its chunks;
- no document is left `partial`;
- the vector cascade's tables (`vector_codes`, `vector_floats`) mirror `chunks_vec`;
- the embedding model and dimension in `meta` match the vector table;
- a reindex in progress (storage/sqlite/reindex.py) is reported, not flagged: its staging table is
  half-full by design; its rows must belong to live chunks, have the target's dimension, and
  exist only while a reindex is recorded;
- FTS5's own `integrity-check`, comparing the index with the chunks it was built from
  (https://sqlite.org/fts5.html#the_integrity_check_command);
- `PRAGMA integrity_check` (https://sqlite.org/pragma.html#pragma_integrity_check);
- every stored value can be read back and sent as JSON (`storage.sqlite.values`): the ids of rows
  holding an `inf` time, text that is not UTF-8 and the like are reported.

It opens its own connections without the reader pool's time limit: an integrity check of a
large file can take longer than any search should. FTS5 runs its integrity check as an
`INSERT`, which a read-only connection refuses, so that one runs on a writable connection
inside a transaction that is rolled back. Blocking; run it in a thread. `storage.sqlite.repair`
restores what this finds broken.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from recalld.errors import StoreError
from recalld.storage import checks as check_report
from recalld.storage import records, values
from recalld.storage.sqlite import values as stored_values
from recalld.storage.sqlite.connection import UNREADABLE, DatabaseError, connect, damaged_error

# The vector cascade's copies of chunks_vec (storage/sqlite/vectors.py), checked when present. Table
# names cannot be bound as parameters; these are our own constants.
MIRROR_TABLES = ("vector_codes", "vector_floats")
_MIRROR_GAP = (
    "SELECT (SELECT count(*) FROM chunks_vec v WHERE NOT EXISTS "
    "(SELECT 1 FROM {table} m WHERE m.chunk_id = v.chunk_id)) + (SELECT count(*) FROM {table} m "
    "WHERE NOT EXISTS (SELECT 1 FROM chunks_vec v WHERE v.chunk_id = m.chunk_id))"
)
_FLOAT_DIMENSION = re.compile(r"float\[(\d+)\]")

# A damaged file fails a check with one of these (StoreError: a connection that cannot open).
_CHECK_ERRORS: tuple[type[Exception], ...] = (*UNREADABLE, StoreError)

FTS_INTEGRITY_SQL = "INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)"


def _scalar(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


def table_exists(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the store has a table (or virtual table) called `name`."""
    return _scalar(conn, "SELECT count(*) FROM sqlite_master WHERE name = ?", (name,)) > 0


def vector_table_dimension(conn: sqlite3.Connection) -> int | None:
    """The dimension `chunks_vec` was created with (None before the first model stamped it)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()
    found = _FLOAT_DIMENSION.search(str(row[0])) if row else None
    return int(found.group(1)) if found else None


def _model_check(conn: sqlite3.Connection) -> dict[str, Any]:
    meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}
    table = vector_table_dimension(conn)
    model, dimension = meta.get("model_id"), meta.get("dimension")
    if model is None and dimension is None and table is None:
        return check_report.result("model", 0, "no model stamped yet (a new store)")
    if model is None or dimension is None or not dimension.isdigit():
        return check_report.result(
            "model", 1, f"meta names no model or dimension; the vector table has {table}"
        )
    if table != int(dimension):
        return check_report.result(
            "model",
            1,
            f"meta says {model} ({dimension} dims) but the vector table holds {table}-dim "
            "vectors; re-embed the store",
        )
    return check_report.result("model", 0, f"{model} ({dimension} dims)")


def _reindex_check(conn: sqlite3.Connection, chunks: int) -> dict[str, Any]:
    meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}
    state = records.state_from_meta(meta)
    staged = _scalar(conn, "SELECT count(*) FROM reindex_vectors")
    orphans = _scalar(
        conn,
        "SELECT count(*) FROM reindex_vectors r WHERE NOT EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.id = r.chunk_id)",
    )
    bad = 0
    if state is not None:
        bad = _scalar(
            conn,
            "SELECT count(*) FROM reindex_vectors WHERE length(embedding) != ?",
            (4 * state.dimension,),
        )
    return check_report.reindex_result(state, staged, chunks, orphans, bad)


def _values_check(conn: sqlite3.Connection) -> dict[str, Any]:
    """Values that cannot be read back or sent as JSON (`storage.sqlite.values`), by table and
    id."""
    found = stored_values.scan(conn)
    count = sum(len(rows) for rows in found.values())
    if not found:
        return check_report.result("unreadable_values", 0, "every stored value can be read back")
    result = check_report.result(
        "unreadable_values",
        count,
        f"values that cannot be read back: {values.describe(found)}; "
        "`recalld check --repair` resets them",
    )
    result["ids"] = {table: sorted(rows)[:1000] for table, rows in found.items()}
    return result


def _fts_integrity(path: Path) -> dict[str, Any]:
    conn = connect(path)
    try:
        # IMMEDIATE: take the write lock first, waiting for the daemon's writer (busy_timeout).
        # A deferred transaction upgraded mid-statement fails at once when a write slipped in.
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(FTS_INTEGRITY_SQL)
            return check_report.result("fts_integrity", 0, "")
        except DatabaseError as exc:
            if "locked" in str(exc):
                raise
            return check_report.result(
                "fts_integrity", 1, f"{exc}; `recalld check --repair` rebuilds it"
            )
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def check_store(path: Path | str) -> dict[str, Any]:
    """Run every check on the store file at `path` (or the PostgreSQL store its URL names).

    Returns:
        `{"ok": bool, "path", "counts": {...}, "checks": [{"name", "ok", "value", "detail"}],
        "elapsed_ms"}`.

    A file SQLite finds damaged (not a database, a malformed page) is reported by a failing
    `store` check, with what the checks found before it.

    Raises:
        StoreError: The file does not exist or cannot be read for another reason.
    """
    path = Path(path)
    if not path.exists():
        raise StoreError(
            f"no store at {path}; start `recalld serve` once to create it", data={"path": str(path)}
        )
    started = time.perf_counter()
    counts = dict.fromkeys(("documents", "chunks", "vectors", "fts_rows"), 0)
    checks: list[dict[str, Any]] = []
    try:
        conn = connect(path, readonly=True)
    except StoreError as exc:
        if exc.data.get("reason") != "damaged":
            raise
        # Reported, not raised: a damaged store is what `check` is for.
        return check_report.report(
            path, counts, [check_report.result("store", 1, exc.message)], started
        )
    except DatabaseError as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    try:
        if not table_exists(conn, "documents"):
            # Created and never migrated (a first start that was killed): nothing to violate.
            counts = dict.fromkeys(("documents", "chunks", "vectors", "fts_rows"), 0)
            checks = [
                check_report.result(
                    "schema", 0, "an empty store; `recalld serve` creates its tables"
                )
            ]
            return check_report.report(path, counts, checks, started)
        # A first start killed before the model was stamped leaves no vector table yet.
        has_vectors = table_exists(conn, "chunks_vec")
        counts = {
            "documents": _scalar(conn, "SELECT count(*) FROM documents"),
            "chunks": _scalar(conn, "SELECT count(*) FROM chunks"),
            "vectors": _scalar(conn, "SELECT count(*) FROM chunks_vec") if has_vectors else 0,
            "fts_rows": _scalar(conn, "SELECT count(*) FROM chunks_fts_docsize"),
        }
        checks.clear()
        for name, sql, detail in check_report.ZERO_CHECKS:
            if has_vectors or "chunks_vec" not in sql:
                checks.append(check_report.result(name, _scalar(conn, sql), detail))
            elif name == "chunks_without_vector":
                checks.append(check_report.result(name, counts["chunks"], detail))
        checks.append(
            check_report.result(
                "fts_parity",
                abs(counts["fts_rows"] - counts["chunks"]),
                "difference between FTS rows and chunks",
            )
        )
        checks.append(
            check_report.result(
                "vector_parity",
                abs(counts["vectors"] - counts["chunks"]),
                "difference between vectors and chunks",
            )
        )
        mirrors = [t for t in MIRROR_TABLES if table_exists(conn, t)] if has_vectors else []
        if mirrors:
            gap = sum(_scalar(conn, _MIRROR_GAP.format(table=t)) for t in mirrors)
            checks.append(
                check_report.result(
                    "vector_index", gap, "vectors missing from or extra in the vector index"
                )
            )
        checks.append(_model_check(conn))
        checks.append(_values_check(conn))
        if table_exists(conn, "reindex_vectors"):
            checks.append(_reindex_check(conn, counts["chunks"]))
        checks.append(_fts_integrity(path))
        problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        sane = problems == ["ok"]
        checks.append(
            check_report.result(
                "integrity_check", 0 if sane else len(problems), "; ".join(problems[:10])
            )
        )
    except _CHECK_ERRORS as exc:
        # In a read-only check, an error other than a lock means a page that cannot be read.
        damaged = "locked" not in str(exc) and (
            not isinstance(exc, StoreError) or exc.data.get("reason") == "damaged"
        )
        if not damaged and isinstance(exc, StoreError):
            raise
        if not damaged:
            raise StoreError(f"cannot check store {path}: {exc}") from exc
        message = exc.message if isinstance(exc, StoreError) else damaged_error(path, exc).message
        checks.append(check_report.result("store", 1, message))
    finally:
        conn.close()
    return check_report.report(path, counts, checks, started)
