"""What only the PostgreSQL backend has: its schema, several daemons on one database, and
per-user isolation. The behaviour both backends share is tested on both in test_store.py."""

import asyncio
import getpass
import json
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import psycopg
import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.errors import ModelMismatchError, NotFoundError, ReindexError, SchemaTooNewError
from recalld.storage.pg import schema
from recalld.storage.records import MemoryEdit
from recalld.storage.registry import open_store
from recalld.storage.sqlite.connection import connect
from tests.helpers.postgres import VECTOR_INDEX, PgServer


def settings_for(home: Path, url: str, **extra: str):
    env = {
        "RECALLD_HOME": str(home),
        "RECALLD_EMBED__MODEL": "hash:64",
        "RECALLD_STORE__PATH": url,
        "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX,
        **extra,
    }
    return load_settings(None, env).settings


def as_role(url: str, role: str) -> str:
    return url.replace("postgresql://postgres:", f"postgresql://{role}:", 1)


def rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql.encode()).fetchall()


async def test_schema_version_indexes_and_model_stamp(pg_url: str):
    # An empty HNSW index is safe even where pgvector's HNSW cannot insert (VECTOR_INDEX).
    store = await open_store(pg_url, model_id="hash-64", dimension=64, vector_index="hnsw")
    await store.close()
    meta = dict(rows(pg_url, "SELECT key, value FROM meta"))
    assert meta == {
        "schema_version": str(schema.SCHEMA_VERSION),
        "model_id": "hash-64",
        "dimension": "64",
        "isolate_users": "0",
        "vector_index": "hnsw",
    }
    indexes = {r[0]: r[1] for r in rows(pg_url, "SELECT indexname, indexdef FROM pg_indexes")}
    assert "USING gin (tsv)" in indexes["chunks_tsv"]
    assert "USING hnsw (embedding halfvec_cosine_ops)" in indexes["chunks_vec_hnsw"]
    [(kind,)] = rows(
        pg_url,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'chunks_vec'::regclass AND attname = 'embedding'",
    )
    assert kind == "halfvec(64)"


async def test_an_isolated_version_1_store_gains_scoped_history(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
):
    # A store made before pg_m002 (issue 8's tables), isolating users.
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
        patch.setattr(schema, "LATER_SCOPED_TABLES", ())  # not there yet
        old = await open_store(pg_url, model_id="hash-64", dimension=64, isolate_users=True)
        await old.close()
    assert dict(rows(pg_url, "SELECT key, value FROM meta"))["schema_version"] == "1"
    assert rows(pg_url, "SELECT to_regclass('chunk_history')") == [(None,)]
    await (await open_store(pg_url, model_id="hash-64", dimension=64)).close()
    meta = dict(rows(pg_url, "SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(schema.SCHEMA_VERSION) == "3"
    policies = {r[0] for r in rows(pg_url, "SELECT tablename FROM pg_policies")}
    assert {"chunk_history", "reindex_vectors", "document_projects", "chunks", "links"} <= policies
    [(origin,)] = rows(
        pg_url,
        "SELECT column_default FROM information_schema.columns "
        "WHERE table_name = 'links' AND column_name = 'origin'",
    )
    assert origin == "'user'::text"


async def test_newer_schema_and_other_model_are_refused(pg_url: str):
    await (await open_store(pg_url, model_id="hash-64", dimension=64)).close()
    with pytest.raises(ModelMismatchError, match=r"set embed\.model back") as info:
        await open_store(pg_url, model_id="hash-64", dimension=32)
    assert info.value.data["stored_dimension"] == 64
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(SchemaTooNewError, match="newer than this recalld"):
        await open_store(pg_url, model_id="hash-64", dimension=64)


@pytest.fixture
def corpus(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "shared"
    folder.mkdir()
    paths = []
    for i in range(24):
        path = folder / f"note{i:02d}.md"
        body = "\n\n".join(
            f"# Part {j}\n\nNote {i} part {j} mentions topic{i} and item{j}." for j in range(4)
        )
        path.write_text(body)
        paths.append(path)
    return paths


@pytest.fixture
async def two_daemons(tmp_path: Path, pg_url: str) -> AsyncIterator[tuple[AsyncMemory, ...]]:
    # Two stores with their own data dirs, pools and writer locks, as two daemons on two
    # machines would have; only the database is shared.
    first = await AsyncMemory.open(settings_for(tmp_path / "a", pg_url))
    second = await AsyncMemory.open(settings_for(tmp_path / "b", pg_url))
    yield first, second
    await first.close()
    await second.close()


async def test_two_daemons_ingesting_the_same_sources_store_each_once(
    two_daemons: tuple[AsyncMemory, AsyncMemory], corpus: list[Path], pg_url: str
):
    first, second = two_daemons
    # Both take every file, in opposite orders, at the same time.
    await asyncio.gather(
        *(first.add_file(p) for p in corpus), *(second.add_file(p) for p in reversed(corpus))
    )
    await asyncio.gather(
        first.remember("the standup moved to 9:30"), second.remember("the standup moved to 9:30")
    )
    counts = await first.counts()
    assert counts["documents"] == len(corpus) + 1
    assert counts["partial_documents"] == 0 and counts["errors"] == 0
    assert rows(pg_url, "SELECT source FROM documents GROUP BY source HAVING count(*) > 1") == []
    assert (
        rows(pg_url, "SELECT document_id, text FROM chunks GROUP BY 1, 2 HAVING count(*) > 1") == []
    )
    # Vectors and keyword index stay in step with the chunks.
    [(chunks, vectors)] = rows(
        pg_url, "SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks_vec)"
    )
    assert chunks == vectors == counts["chunks"]
    hit = (await second.search("topic7 item2")).hits[0]
    assert hit.chunk.source == str(corpus[7]) and "Note 7 part 2" in hit.chunk.text
    # Who wrote each document is recorded.
    writers = set(rows(pg_url, "SELECT DISTINCT written_by, os_user, host FROM documents"))
    assert writers == {("postgres", getpass.getuser(), socket.gethostname())}


async def test_isolated_users_read_and_write_only_their_own_rows(
    tmp_path: Path, pg_server: PgServer, pg_url: str
):
    suffix = uuid.uuid4().hex[:8]
    alice_role, bob_role = f"alice_{suffix}", f"bob_{suffix}"
    # The administrator creates the store (and so its policies) and the roles.
    admin = settings_for(tmp_path / "admin", pg_url, RECALLD_STORE__ISOLATE_USERS="true")
    await (await AsyncMemory.open(admin)).close()
    pg_server.admin(f"CREATE ROLE {alice_role} LOGIN; CREATE ROLE {bob_role} LOGIN")
    alice = await AsyncMemory.open(settings_for(tmp_path / "a", as_role(pg_url, alice_role)))
    bob = await AsyncMemory.open(settings_for(tmp_path / "b", as_role(pg_url, bob_role)))
    try:
        await alice.remember("alice's locker code is 4711")
        await bob.remember("bob's locker code is 1234")
        # The same source for both users is two documents, one each.
        await alice.add_text("alpha plan for the launch", source="notes/plan.md", name="p.md")
        await bob.add_text("beta plan for the launch", source="notes/plan.md", name="p.md")
        await bob.remember("the office closes at six")
        await alice.remember("the office closes at six")

        bobs = {"bob's locker code is 1234", "beta plan for the launch", "the office closes at six"}
        found = await bob.search("locker code", gate=False)
        assert found.hits[0].chunk.text == "bob's locker code is 1234"
        assert {h.chunk.text for h in found.hits} <= bobs
        plans = await alice.search("plan launch", gate=False)
        assert plans.hits[0].chunk.text == "alpha plan for the launch"
        assert "beta plan for the launch" not in {h.chunk.text for h in plans.hits}
        assert (await bob.counts())["documents"] == 3
        assert (await alice.counts())["documents"] == 3
        # Edits keep their history and links stay within the user's rows too.
        code = (await alice.search("locker code", gate=False)).hits[0].chunk.id
        office = (await alice.search("office closes", gate=False)).hits[0].chunk.id
        assert await alice.update(code, MemoryEdit(text="alice's locker code is 4712")) == 2
        await alice.link(code, office, "related", 0.5)
        assert [v["text"] for v in await alice.history(code)] == ["alice's locker code is 4711"]
        with pytest.raises(NotFoundError):
            await bob.link(code, office, "related")
        assert await bob.store.read(lambda c: c.fetchall("SELECT * FROM chunk_history")) == []
        # No role sees every chunk, so none may re-embed the store.
        with pytest.raises(ReindexError, match="isolates users"):
            await bob.reindexer.start("hash:32")

        # Raw SQL through Bob's store cannot reach Alice's rows either.
        async def tamper(conn):
            changed = await conn.execute("UPDATE chunks SET text = 'owned'")
            return changed

        assert await bob.ingestor.store.write(tamper) == 3
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            await bob.ingestor.store.write(
                lambda c: c.execute(
                    "INSERT INTO errors (scope, source, error_type, message, at) "
                    f"VALUES ('{alice_role}', 'x', 'E', 'm', 0)"
                )
            )
        texts = {r[0] for r in rows(pg_url, "SELECT text FROM chunks")}  # the administrator
        assert "alice's locker code is 4712" in texts and "owned" in texts
        scopes = dict(rows(pg_url, "SELECT scope, count(*) FROM documents GROUP BY scope"))
        assert scopes == {alice_role: 3, bob_role: 3}
    finally:
        await alice.close()
        await bob.close()


def test_migrate_moves_a_sqlite_store_with_its_vectors(tmp_path: Path, pg_url: str):
    from click.testing import CliRunner

    from recalld.cli import cli

    lite = load_settings(
        None, {"RECALLD_HOME": str(tmp_path / "lite"), "RECALLD_EMBED__MODEL": "hash:64"}
    ).settings
    queries = ["standup time", "database migration plan", "ERR_CONN_RESET upstream"]

    async def fill_and_search() -> list[tuple]:
        async with await AsyncMemory.open(lite) as memory:
            saved = await memory.remember("the standup moved to 9:30", tags=("team",))
            doc_id = saved.document_id
            [chunk] = await memory.store.read(lambda c: c.neighbours(doc_id, 0, 0))
            # An edit leaves a version in chunk_history, which moves across too.
            await memory.update(chunk.id, MemoryEdit(importance=0.8))
            await memory.add_text(
                "# Plan\n\nThe database migration plan has three steps.\n\n# Risks\n\n"
                "We saw ERR_CONN_RESET from upstream during the dry run.",
                source="notes/plan.md",
                name="plan.md",
            )
            await memory.add_text(
                '[{"role": "user", "content": "when is the standup?"}, '
                '{"role": "assistant", "content": "at 9:30 every day"}]',
                source="chats/standup.json",
                name="standup.json",
            )
            return [await top(memory, q) for q in queries]

    before = asyncio.run(fill_and_search())
    origins_sql = "SELECT origin, count(*) FROM links GROUP BY origin ORDER BY origin"
    with closing(connect(lite.store_path, readonly=True)) as conn:
        origins = [tuple(r) for r in conn.execute(origins_sql)]
    result = CliRunner().invoke(
        cli,
        [
            "migrate",
            "--from",
            str(lite.store_path),
            "--to",
            pg_url,
            "--vector-index",
            VECTOR_INDEX,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["chunks"] == report["counts"]["chunks_vec"] > 3
    assert report["counts"]["documents"] == 3 and report["counts"]["chunk_history"] == 1
    assert "postgres:" not in report["to"] or "********" in report["to"]
    # Copied as one bulk load: an HNSW store's index was built at its end.
    index = rows(pg_url, "SELECT to_regclass('chunks_vec_hnsw') IS NOT NULL")
    assert index == [(VECTOR_INDEX == "hnsw",)]

    async def search_migrated() -> tuple[list[tuple], list]:
        async with await AsyncMemory.open(settings_for(tmp_path / "pg", pg_url)) as memory:
            parents = await memory.store.read(
                lambda c: c.fetchall("SELECT count(*) FROM chunks WHERE parent_id IS NOT NULL")
            )
            moved = await memory.store.read(lambda c: c.fetchall(origins_sql))
            await memory.remember("a memory written after the move")  # ids keep counting
            return [await top(memory, q) for q in queries], parents, moved

    after, parents, moved = asyncio.run(search_migrated())
    # Links keep where they came from (auto structure links vs user links).
    assert [tuple(r) for r in moved] == origins and ("auto",) == tuple(r[0] for r in origins)
    assert after == before
    assert parents[0][0] > 0  # conversation rounds keep their session parents

    again = CliRunner().invoke(cli, ["migrate", "--from", str(lite.store_path), "--to", pg_url])
    assert again.exit_code != 0 and "already holds documents" in str(again.exception)


async def top(memory: AsyncMemory, query: str) -> tuple:
    hits = (await memory.search(query, gate=False, limit=3)).hits
    return tuple((h.chunk.id, h.chunk.source, h.chunk.text) for h in hits)


async def test_check_reports_a_broken_invariant(pg_url: str):
    from recalld.storage.registry import check_store

    store = await open_store(pg_url, model_id="hash-64", dimension=64, vector_index=VECTOR_INDEX)
    try:
        from .conftest import put

        await put(store, "a.md", ["alpha one", "alpha two"])
        report = await asyncio.to_thread(check_store, store.path)
        assert report["ok"] and report["counts"]["vectors"] == 2
        assert "********" not in report["path"] and ":@" not in report["path"]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("UPDATE documents SET chunk_count = 5")
        report = await asyncio.to_thread(check_store, store.path)
        assert not report["ok"]
        assert [c["name"] for c in report["checks"] if not c["ok"]] == ["chunk_count_mismatch"]
        from recalld.storage.repair import check_and_repair

        async def never(_: object) -> None:
            raise AssertionError("nothing is re-ingested or forgotten")

        repaired = await check_and_repair(store, None, never, never)
        assert repaired["repair"]["before"]["failed"] == ["chunk_count_mismatch"]
        assert [u["name"] for u in repaired["repair"]["unrepaired"]] == ["chunk_count_mismatch"]
    finally:
        await store.close()


async def test_reads_run_read_only_under_the_query_time_limit(pg_url: str):
    store = await open_store(pg_url, model_id="hash-64", dimension=64, vector_index=VECTOR_INDEX)
    try:
        settings = await store.read(
            lambda r: r.fetchall(
                "SELECT current_setting('transaction_read_only'), "
                "current_setting('statement_timeout')"
            )
        )
        assert settings == [("on", "5s")]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            await store.read(lambda r: r.fetchall("DELETE FROM chunks"))
        # Each query of a read is its own transaction and carries the settings itself.
        async with store.reading() as reader:
            for _ in range(2):
                rows = await reader.fetchall(
                    "SELECT current_setting('transaction_read_only'), "
                    "current_setting('statement_timeout'), current_setting('hnsw.ef_search'), "
                    "current_setting('jit')"
                )
                assert rows == [("on", "5s", "100", "off")]
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                await reader.fetchall("DELETE FROM chunks")
            assert await reader.fetchall("SELECT count(*) FROM chunks") == [(0,)]
    finally:
        await store.close()


async def test_keyword_statistics_follow_the_stores_own_commits(pg_url: str):
    from recalld.embeddings.base import HashEmbedder
    from recalld.storage import records
    from recalld.types import NO_FILTERS, ChunkDraft

    embedder = HashEmbedder(64)
    store = await open_store(pg_url, model_id="hash-64", dimension=64, vector_index=VECTOR_INDEX)

    async def put(source: str, text: str) -> None:
        doc = records.NewDocument(source, "text", "markdown", "h-" + source)
        chunk = records.NewChunk(ChunkDraft(text=text, key="k"), 3, embedder.embed([text])[0])
        await store.write(lambda c: c.replace_document(doc, [chunk]))

    try:
        await put("a.md", "zebra crossing ahead")
        await put("b.md", "quiet street ahead")
        assert await store.read(lambda r: r.document_frequencies(['"zebra"', '"ahead"'])) == [1, 2]
        [(first, before)] = await store.read(lambda r: r.fts('"zebra"', 5, NO_FILTERS))
        await put("c.md", "zebra herd")
        # Counted again after this store's commit: the rarer term now, the lower its weight.
        assert await store.read(lambda r: r.document_frequencies(['"zebra"', '"ahead"'])) == [2, 2]
        after = dict(await store.read(lambda r: r.fts('"zebra"', 5, NO_FILTERS)))
        assert len(after) == 2 and after[first] < before
    finally:
        await store.close()
