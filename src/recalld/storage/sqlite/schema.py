"""The schema, its version stamp and the migrations that bring older files up to date.

Each migration runs in the same transaction as the version stamp it records (sqlite-utils'
habit), so a failed migration leaves the file exactly as it was. The vector table is created
separately, once the embedding model and its dimension are known (`create_vector_table`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from recalld.errors import SchemaTooNewError, StoreError

logger = logging.getLogger(__name__)

# unicode61 splits on `_`, so ERR_CONN_RESET indexes as err / conn / reset and a quoted query
# "ERR_CONN_RESET" matches it as a phrase; each part is findable on its own too.
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"

M001_CORE = f"""
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE documents (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    format TEXT NOT NULL DEFAULT '',
    content_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('partial', 'complete')),
    chunk_count INTEGER NOT NULL DEFAULT 0,
    mtime REAL,
    size INTEGER,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    granularity TEXT NOT NULL,
    key TEXT NOT NULL,
    parent_id INTEGER REFERENCES chunks(id) ON DELETE SET NULL,
    text TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    memory_type TEXT,
    importance REAL NOT NULL DEFAULT 0.5,
    event_time REAL,
    created_at REAL NOT NULL,
    -- Explicit reads and search retrievals are counted apart (MemX section 3.4).
    access_count INTEGER NOT NULL DEFAULT 0,
    last_accessed_at REAL,
    retrieval_count INTEGER NOT NULL DEFAULT 0,
    last_retrieved_at REAL,
    status TEXT NOT NULL DEFAULT 'active',
    meta TEXT NOT NULL DEFAULT '{{}}',
    UNIQUE (document_id, key)
);
CREATE INDEX chunks_document_position ON chunks(document_id, position);
CREATE INDEX chunks_parent ON chunks(parent_id);
CREATE INDEX chunks_content_hash ON chunks(content_hash);
CREATE INDEX chunks_event_time ON chunks(event_time);
CREATE TABLE links (
    src INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    dst INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    relation TEXT NOT NULL CHECK (relation IN
        ('similar', 'related', 'contradicts', 'extends', 'supersedes', 'caused_by', 'temporal',
         'parent')),
    weight REAL NOT NULL DEFAULT 1.0,
    created_at REAL NOT NULL,
    PRIMARY KEY (src, dst, relation)
);
CREATE INDEX links_dst ON links(dst);
CREATE TABLE errors (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,
    error_type TEXT NOT NULL,
    message TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX errors_source ON errors(source);
-- External-content FTS5 kept in step with chunks by triggers, inside the same transaction.
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text, content='chunks', content_rowid='id', tokenize='{FTS_TOKENIZE}'
);
CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER chunks_fts_update AFTER UPDATE OF text ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO chunks_fts(rowid, text) VALUES (new.id, new.text);
END;
"""

Migration = Callable[[Any], None]


def _script(sql: str) -> Migration:
    def run(conn: sqlite3.Connection) -> None:
        # executescript would COMMIT the open transaction; run statement by statement instead.
        for statement in _split_sql(sql):
            conn.execute(statement)

    return run


def _split_sql(sql: str) -> list[str]:
    """Split a script into statements, keeping trigger bodies whole."""
    statements: list[str] = []
    buffer = ""
    for line in sql.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buffer += line
        if sqlite_complete(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


def sqlite_complete(sql: str) -> bool:
    """True when `sql` ends with a complete statement (as `sqlite3.complete_statement`)."""
    from recalld.storage.sqlite.connection import sqlite

    return bool(sqlite.complete_statement(sql))


def _m002_vector_index(conn: sqlite3.Connection) -> None:
    # Codes and float copies for the vector cascade (storage/sqlite/vectors.py, issue 7), backfilled
    # from chunks_vec when the store already has vectors.
    from recalld.storage.sqlite import vectors

    _script(vectors.M002_SQL)(conn)
    count = vectors.backfill(conn)
    if count:
        logger.info("indexed %d existing vectors", count)


def _m003_reindex(conn: sqlite3.Connection) -> None:
    # The staging table of online re-embedding (storage/sqlite/reindex.py, issue 7).
    from recalld.storage.sqlite import reindex

    _script(reindex.M003_SQL)(conn)


def _m004_memory_history(conn: sqlite3.Connection) -> None:
    # Earlier versions of edited memories, and where each link came from (issue 8).
    from recalld.storage.sqlite import history

    _script(history.M004_SQL)(conn)


def _m005_projects(conn: sqlite3.Connection) -> None:
    # The project (git root or folder) each document came from (issue 21).
    from recalld.storage.sqlite import projects

    _script(projects.M005_SQL)(conn)


MIGRATIONS: tuple[tuple[int, str, Migration], ...] = (
    (1, "m001_core", _script(M001_CORE)),
    (2, "m002_vector_index", _m002_vector_index),
    (3, "m003_reindex", _m003_reindex),
    (4, "m004_memory_history", _m004_memory_history),
    (5, "m005_projects", _m005_projects),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def schema_version(conn: sqlite3.Connection) -> int:
    """The version stamped in the file (`PRAGMA user_version`), 0 for a new file."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(
    conn: sqlite3.Connection, migrations: Sequence[tuple[int, str, Migration]] = MIGRATIONS
) -> int:
    """Bring the file to the newest schema, one transaction per migration.

    Returns:
        The version the file is at afterwards.

    Raises:
        SchemaTooNewError: The file was written by a newer recalld.
    """
    newest = migrations[-1][0]
    current = schema_version(conn)
    if current > newest:
        raise SchemaTooNewError(
            f"this store has schema version {current}, newer than this recalld understands "
            f"({newest}); upgrade recalld to open it",
            data={"found": current, "supported": newest},
        )
    for version, name, run in migrations:
        if version <= current:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            run(conn)
            # PRAGMA values cannot be bound; `version` is our own integer constant.
            conn.execute(f"PRAGMA user_version = {int(version)}")
            conn.execute("COMMIT")
        except Exception as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"migration {name} failed: {exc}") from exc
        logger.info("applied migration %s", name)
        current = version
    return current


def create_vector_table(conn: sqlite3.Connection, dimension: int) -> None:
    """Create the sqlite-vec table for `dimension`-float vectors, with cosine distance.

    `kind` and `granularity` are vec0 metadata columns, so those filters apply inside the KNN.
    """
    conn.execute(vector_table_sql(dimension))


def vector_table_sql(dimension: int) -> str:
    """The `CREATE VIRTUAL TABLE` statement of `chunks_vec` (also used by the reindex swap)."""
    return (
        "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0("
        f"chunk_id INTEGER PRIMARY KEY, embedding float[{int(dimension)}] distance_metric=cosine, "
        "kind TEXT, granularity TEXT)"
    )
