"""`import` redacts secrets as ingest does (issue 16): an export made before redaction existed
(here: from a store with `privacy.redact = false`) puts no key back into a store, through a real
daemon; `--allow-secrets` keeps the texts as they are, here through the offline CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from recalld import __version__
from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.embeddings.base import HashEmbedder
from recalld.storage import registry
from recalld.storage.records import MemoryEdit, memory_source
from tests.pipeline.conftest import Running, daemon_env, start, stop
from tests.transfer.test_socket_and_cli import run_cli

AWS_ID = "AKIAQ3EGRTX7NLZW4P6K"
GITHUB = "ghp_R7u2Kq9Xw4Zt1Lm8Nb3Vc6Hj5Gf0Ds2Ay7Pe"
FIRST = f"The deploy key for the staging bucket is {AWS_ID}"
EDITED = f"The deploy token for the staging bucket is {GITHUB}"
NOTES = "# Cutover\n\nThe postgres cutover is on Friday; db password: hunter2x.\n"


async def open_memory(home: Path, **overrides: str) -> AsyncMemory:
    settings = load_settings(
        None, {"RECALLD_HOME": str(home)}, {"embed.model": "hash:64", **overrides}
    ).settings
    return await AsyncMemory.open(settings, embedder=HashEmbedder(64))


async def unredacted_export(tmp_path: Path) -> Path:
    """An export, with vectors, of a store that kept its secrets: a file with a password, and
    a memory holding a token whose earlier version held a key."""
    notes = tmp_path / "notes.md"
    notes.write_text(NOTES)
    async with await open_memory(tmp_path / "old", **{"privacy.redact": "false"}) as memory:
        await memory.add_file(notes)
        await memory.remember(FIRST, tags=["deploy"])
        [[chunk_id]] = await memory.store.read(
            lambda c: c.fetchall("SELECT id FROM chunks WHERE kind = 'memory'")
        )
        await memory.update(chunk_id, MemoryEdit(text=EDITED))
        store_path = memory.store.path
    dump = tmp_path / "dump.jsonl"
    lines = await asyncio.to_thread(
        lambda: list(registry.export_lines(store_path, vectors=True, recalld_version=__version__))
    )
    dump.write_text("\n".join(lines) + "\n")
    text = dump.read_text()
    assert AWS_ID in text and GITHUB in text and "hunter2x" in text and '"vector":' in text
    return dump


async def stored(home: Path, **overrides: str) -> dict[str, Any]:
    """What the store holds: chunk texts and metas, the FTS copy, the history, the memory."""

    async def read(conn: Any) -> dict[str, Any]:
        chunks = await conn.fetchall("SELECT text, meta, kind FROM chunks")
        fts = await conn.fetchall("SELECT text FROM chunks_fts")
        old = await conn.fetchall("SELECT text FROM chunk_history")
        docs = await conn.fetchall(
            "SELECT source, content_hash FROM documents WHERE kind = 'memory'"
        )
        return {
            name: [tuple(row) for row in rows]
            for name, rows in (
                ("chunks", chunks),
                ("fts", fts),
                ("history", old),
                ("memory_docs", docs),
            )
        }

    async with await open_memory(home, **overrides) as memory:
        return await memory.store.read(read)


def everything(found: dict[str, Any]) -> str:
    return json.dumps(found)


async def test_import_redacts_an_export_made_before_redaction(
    tmp_path: Path, short_dir: Path
) -> None:
    dump = await unredacted_export(tmp_path)
    home = tmp_path / "new"
    home.mkdir()
    env = daemon_env(home, short_dir / "s.sock")
    server, task = await start(env)
    try:
        daemon = Running(server, task, short_dir / "s.sock", home, env)
        async with daemon.client() as aio:
            report = await aio.import_file(dump)
            assert report["documents"]["imported"] == 2
            assert report["redacted"] == {"chunks": 2, "chunk_history": 1}
            # The redacted chunks were embedded again, never given the secret's vector.
            assert report["embedded"] == 2 and report["vectors_reused"] == 0
            for query in (AWS_ID, GITHUB, "hunter2x", "deploy token", "postgres cutover"):
                hits = (await aio.search(query, limit=5))["hits"]
                shown = json.dumps(hits)
                assert AWS_ID not in shown and GITHUB not in shown and "hunter2x" not in shown
            hits = (await aio.search("deploy token staging bucket", limit=5))["hits"]
            assert any("[REDACTED:github_token]" in h["text"] for h in hits)
            # Remembering the same text again finds the imported memory: it is named after
            # its redacted text, as `remember` names it.
            await aio.remember(EDITED)
            assert (await aio.status())["counts"]["documents"] == 2
            # Importing twice changes nothing.
            twice = await aio.import_file(dump)
            assert twice["documents"]["unchanged"] == 2 and twice["chunks"] == 0
    finally:
        assert await stop(server, task) == 0

    found = await stored(home)
    text = everything(found)
    assert AWS_ID not in text and GITHUB not in text and "hunter2x" not in text
    assert [h[0] for h in found["history"]] == [FIRST.replace(AWS_ID, "[REDACTED:aws_access_key]")]
    for chunk_text, meta, _ in found["chunks"]:
        # Each chunk's meta records every marker in its text, type and offset.
        at = chunk_text.index("[REDACTED:")
        kind = chunk_text[at + 10 : chunk_text.index("]", at)]
        assert json.loads(meta)["redacted"] == [{"type": kind, "at": at}]
    [(source, digest)] = found["memory_docs"]
    memory_text = next(t for t, _, k in found["chunks"] if k == "memory")
    assert source == memory_source(memory_text)
    assert digest == hashlib.sha256(memory_text.encode()).hexdigest()


def test_import_allow_secrets_keeps_the_texts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = asyncio.run(unredacted_export(tmp_path))
    home = tmp_path / "kept"
    model = ["--set", "embed.model=hash:64"]
    sets = ["--set", f"store.path={home / 'r.db'}", *model]
    code, out, err = run_cli(
        ["import", str(dump), "--offline", "--allow-secrets", "--json", *sets], capsys
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["redacted"] == {} and report["vectors_reused"] == 2
    found = asyncio.run(stored(tmp_path / "old", **{"store.path": str(home / "r.db")}))
    text = everything(found)
    assert AWS_ID in text and GITHUB in text and "hunter2x" in text
    # Without the flag the offline import redacts too.
    code, out, err = run_cli(
        [
            "import",
            str(dump),
            "--offline",
            "--json",
            "--set",
            f"store.path={home / 'x.db'}",
            *model,
        ],
        capsys,
    )
    assert code == 0, err
    assert json.loads(out)["redacted"] == {"chunks": 2, "chunk_history": 1}
    # The plain summary says so.
    code, out, err = run_cli(
        ["import", str(dump), "--offline", "--set", f"store.path={home / 'y.db'}", *model], capsys
    )
    assert code == 0, err
    assert "secrets redacted in 1 chunk_history, 2 chunks (--allow-secrets keeps them)" in out
    text = everything(asyncio.run(stored(tmp_path / "old", **{"store.path": str(home / "x.db")})))
    assert AWS_ID not in text and GITHUB not in text and "hunter2x" not in text
