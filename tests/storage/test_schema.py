from pathlib import Path

import pytest

from recalld.errors import ModelMismatchError, SchemaTooNewError, StoreError
from recalld.storage.registry import open_store
from recalld.storage.sqlite import schema
from recalld.storage.sqlite.connection import connect


async def test_new_store_has_schema_version_tables_and_wal(tmp_path: Path):
    store = await open_store(tmp_path / "s.db", model_id="hash-64", dimension=64)
    await store.close()
    conn = connect(tmp_path / "s.db")
    assert schema.schema_version(conn) == schema.SCHEMA_VERSION
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"documents", "chunks", "links", "errors", "chunks_fts", "chunks_vec", "meta"} <= names
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    assert meta == {"model_id": "hash-64", "dimension": "64"}
    tokenizer = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()[
        0
    ]
    assert "porter unicode61 remove_diacritics 2" in tokenizer
    conn.close()


async def test_newer_schema_is_refused(tmp_path: Path):
    path = tmp_path / "s.db"
    conn = connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(SchemaTooNewError, match="newer than this recalld"):
        await open_store(path, model_id="hash-64", dimension=64)


async def test_other_model_is_refused_with_a_hint(tmp_path: Path):
    path = tmp_path / "s.db"
    await (await open_store(path, model_id="hash-64", dimension=64)).close()
    with pytest.raises(ModelMismatchError, match=r"recalld reindex --model SPEC") as info:
        await open_store(path, model_id="other", dimension=64)
    assert info.value.data["stored_model"] == "hash-64"
    assert "set embed.model back to the store's model" in info.value.message
    with pytest.raises(ModelMismatchError):
        await open_store(path, model_id="hash-64", dimension=32)


def test_migrations_run_in_order_and_a_failure_leaves_the_file_as_it_was(tmp_path: Path):
    conn = connect(tmp_path / "m.db")
    newest = schema.SCHEMA_VERSION
    assert schema.migrate(conn) == newest

    def m_next(c):
        c.execute("ALTER TABLE chunks ADD COLUMN extra TEXT")

    def m_broken(c):
        c.execute("CREATE TABLE half (x)")
        c.execute("THIS IS NOT SQL")

    migrations = (*schema.MIGRATIONS, (newest + 1, "m_next", m_next))
    assert schema.migrate(conn, migrations) == newest + 1
    assert "extra" in {r[1] for r in conn.execute("PRAGMA table_info(chunks)")}
    with pytest.raises(StoreError, match="migration m_broken failed"):
        schema.migrate(conn, (*migrations, (newest + 2, "m_broken", m_broken)))
    assert schema.schema_version(conn) == newest + 1
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half'").fetchone()[0] == 0
    conn.close()


def test_split_sql_keeps_trigger_bodies_whole():
    statements = schema._split_sql(schema.M001_CORE)
    triggers = [s for s in statements if s.startswith("CREATE TRIGGER")]
    assert len(triggers) == 3
    assert all(s.rstrip().endswith("END;") for s in triggers)


async def test_mismatch_names_the_recorded_spec(tmp_path: Path):
    path = tmp_path / "s.db"
    await (await open_store(path, model_id="hash-32", dimension=32, model_spec="hash:32")).close()
    with pytest.raises(ModelMismatchError, match=r"set embed\.model = 'hash:32'") as info:
        await open_store(path, model_id="hash-64", dimension=64, model_spec="hash:64")
    assert info.value.data["stored_spec"] == "hash:32"
