"""Secrets are redacted before chunking, embedding and FTS (issue 16): documents, code,
conversation logs (also on their way to an LLM fact extractor) and memories, in a real store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.embeddings.base import HashEmbedder
from recalld.embeddings.openai_compat import RetryPolicy
from recalld.errors import IngestError
from recalld.ingest.facts_llm import CACHE_FILE, LLMFactExtractor
from recalld.ingest.pipeline import Ingestor
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.postgres import VECTOR_INDEX
from tests.pipeline.conftest import Running, daemon_env, start, stop

AWS_ID = "AKIAQ3EGRTX7NLZW4P6K"
GITHUB = "ghp_R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj5Gf0Ds2Ay7Pe"
OPENAI = "sk-proj-R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj5Gf0Ds"
VALUES = (AWS_ID, GITHUB, OPENAI, "hunter2x")


async def open_memory(home: Path, **overrides: str) -> AsyncMemory:
    settings = load_settings(None, {"RECALLD_HOME": str(home)}, overrides).settings
    return await AsyncMemory.open(settings, embedder=HashEmbedder(64))


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    async with await open_memory(tmp_path / "home") as opened:
        yield opened


async def all_text(memory: AsyncMemory) -> str:
    """Every stored chunk's text and meta, and the FTS index's own copy of the text."""

    async def read(conn: Any) -> str:
        rows = await conn.fetchall("SELECT text, meta FROM chunks")
        fts = await conn.fetchall("SELECT text FROM chunks_fts")
        return "\n".join([r[0] + r[1] for r in rows] + [r[0] for r in fts])

    return await memory.store.read(read)


def files(folder: Path) -> dict[str, bytes]:
    chat = [
        {"role": "user", "content": f"Here is my OpenAI key {OPENAI}, keep it safe."},
        {"role": "assistant", "content": "Noted; I will not repeat it."},
    ]
    return {
        "notes.md": f"# Cutover\n\nThe deploy key is {AWS_ID}; db password: hunter2x.\n".encode(),
        "deploy.py": f'GITHUB_TOKEN = "{GITHUB}"\n\n\ndef deploy():\n    return 1\n'.encode(),
        "chat.jsonl": "\n".join(json.dumps(m) for m in chat).encode(),
        "page.html": f"<html><body><p>token: {GITHUB}</p></body></html>".encode(),
    }


async def test_no_value_reaches_the_store_and_each_is_recorded(memory: AsyncMemory) -> None:
    items = [(f"/p/{name}", name, data, None, None) for name, data in files(Path()).items()]
    reports = await memory.ingestor.ingest_many(items)
    assert all(r.status == "ingested" for r in reports)
    report = await memory.remember(f"The staging deploy uses {GITHUB}")
    stored = await all_text(memory)
    for value in VALUES:
        assert value not in stored, value
    for value in VALUES:
        result = await memory.search(value, mode="bm25")
        assert all(value not in h.chunk.text for h in result.hits)
    # The type and place are kept; so is everything around the value.
    result = await memory.search("deploy key cutover", mode="bm25")
    top = result.hits[0].chunk
    assert "[REDACTED:aws_access_key]" in top.text and "[REDACTED:password]" in top.text
    assert [r["type"] for r in top.meta["redacted"]] == ["aws_access_key", "password"]
    assert top.text[top.meta["redacted"][0]["at"] :].startswith("[REDACTED:aws_access_key]")
    assert report.notes == [] and report.document_id is not None
    assert await memory.store.read(lambda r: r.redacted_chunks()) >= 5
    assert await memory.store.read(lambda r: r.skipped_files()) == {}


async def test_redaction_can_be_switched_off(memory: AsyncMemory, tmp_path: Path) -> None:
    [report] = await memory.ingestor.ingest_many(
        [("/p/a.md", "a.md", f"key {AWS_ID}\n".encode(), None, None)], redact=False
    )
    assert report.status == "ingested" and AWS_ID in await all_text(memory)
    async with await open_memory(tmp_path / "off", **{"privacy.redact": "false"}) as off:
        await off.remember(f"token {GITHUB}")
        assert GITHUB in await all_text(off)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


async def test_llm_fact_extractor_never_sees_a_value(
    memory: AsyncMemory, server: FakeOpenAI, tmp_path: Path
) -> None:
    extractor = LLMFactExtractor(
        "test-chat",
        base_url=server.base_url,
        retry=RetryPolicy(max_retries=1, base_delay_s=0.01, max_delay_s=0.02),
        cache_path=tmp_path / "cache" / CACHE_FILE,
    )
    try:
        ingestor = Ingestor(memory.store, memory.embedder, memory.settings.chunk, facts=extractor)
        chat = files(tmp_path)["chat.jsonl"]
        report = await ingestor.ingest_bytes("/p/chat.jsonl", "chat.jsonl", chat)
    finally:
        await extractor.aclose()
    assert report.status == "ingested"
    sent = [json.dumps(r.body) for r in server.requests_to("chat/completions")]
    assert sent and all(OPENAI not in body for body in sent)
    assert any("[REDACTED:openai_key]" in body for body in sent)
    assert OPENAI not in await all_text(memory)


async def test_add_file_refuses_a_secret_file_unless_allowed(
    memory: AsyncMemory, tmp_path: Path
) -> None:
    env = tmp_path / ".env"
    env.write_text(f"GITHUB_TOKEN={GITHUB}\n")
    with pytest.raises(IngestError, match="deny-list"):
        await memory.add_file(env)
    report = await memory.add_file(env, allow_secrets=True)
    assert report.status == "ingested" and GITHUB in await all_text(memory)


@pytest.fixture(params=["sqlite", "postgresql"])
async def any_daemon(
    request: pytest.FixtureRequest, isolated_home: Path, short_dir: Path
) -> AsyncIterator[Running]:
    """A running daemon on each backend (PostgreSQL: a fresh database, dropped afterwards)."""
    extra: dict[str, str] = {}
    database = None
    if request.param == "postgresql":
        pg = request.getfixturevalue("pg_server")
        database = pg.new_database()
        extra = {
            "RECALLD_STORE__PATH": pg.url(database),
            "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX,
        }
    env = daemon_env(isolated_home, short_dir / "s.sock", **extra)
    server, task = await start(env)
    try:
        yield Running(server, task, short_dir / "s.sock", isolated_home, env)
    finally:
        assert await stop(server, task) == 0
        if database is not None:
            pg.admin(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


async def test_an_edit_records_what_its_new_text_redacts(any_daemon: Running) -> None:
    """`meta.redacted` describes the memory's current text after each edit, over the socket."""
    async with any_daemon.client() as aio:
        chunk_id = (await aio.remember(f"The staging deploy uses {GITHUB}"))["id"]
        before = await aio.get(chunk_id)
        assert [r["type"] for r in before["meta"]["redacted"]] == ["github_token"]

        text = f"Deploys now sign in with {AWS_ID}; the db password: hunter2x."
        await aio.update(chunk_id, text=text)
        after = await aio.get(chunk_id)
        assert AWS_ID not in after["text"] and "hunter2x" not in after["text"]
        marks = after["meta"]["redacted"]
        assert [r["type"] for r in marks] == ["aws_access_key", "password"]
        for mark in marks:
            assert after["text"][mark["at"] :].startswith(f"[REDACTED:{mark['type']}]")

        # Other edits keep the markers; a text without secrets has none left.
        await aio.update(chunk_id, tags=["deploy"])
        assert (await aio.get(chunk_id))["meta"]["redacted"] == marks
        await aio.update(chunk_id, text="Deploys now sign in through the SSO portal.")
        assert "redacted" not in (await aio.get(chunk_id))["meta"]
        history = json.dumps(await aio.history(chunk_id))
        assert "[REDACTED:aws_access_key]" in history
        assert AWS_ID not in history and GITHUB not in history and "hunter2x" not in history


async def test_privacy_redact_applies_at_a_reload(daemon: Running) -> None:
    """`privacy.redact` changed in the config file applies at SIGHUP, without a restart."""
    config = daemon.home / "config.toml"
    async with daemon.client() as aio:
        first = await aio.remember(f"The first deploy uses {GITHUB}")
        assert GITHUB not in (await aio.get(first["id"]))["text"]
        config.write_text("[privacy]\nredact = false\n")
        await daemon.server.reload()  # what SIGHUP does
        kept = await aio.get((await aio.remember(f"The second deploy uses {GITHUB}"))["id"])
        assert GITHUB in kept["text"] and "redacted" not in kept["meta"]
        config.write_text("[privacy]\nredact = true\nredact_entropy = false\n")
        await daemon.server.reload()
        third = await aio.get((await aio.remember(f"The third deploy uses {AWS_ID}"))["id"])
        assert AWS_ID not in third["text"]
        assert [r["type"] for r in third["meta"]["redacted"]] == ["aws_access_key"]
        assert daemon.server.memory is not None
        assert daemon.server.memory.ingestor.options.redact_entropy is False
