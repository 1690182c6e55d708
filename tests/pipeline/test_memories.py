"""Memory edits with history, links, knowledge updates, activation and forgetting by query,
through an in-process daemon over its real socket, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.errors import IngestError, NotFoundError, ProtocolError
from tests.helpers.postgres import VECTOR_INDEX
from tests.pipeline.conftest import Running, daemon_env, start, stop


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The store of the module's daemons: the default SQLite file, or a fresh PostgreSQL
    database (every test here runs on both)."""
    if request.param == "sqlite":
        return {}
    url: str = request.getfixturevalue("pg_url")
    return {"RECALLD_STORE__PATH": url, "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX}


@pytest.fixture
async def daemon(
    isolated_home: Path, short_dir: Path, backend_env: dict[str, str]
) -> AsyncIterator[Running]:
    """A running daemon on an isolated home, on each backend."""
    env = daemon_env(isolated_home, short_dir / "s.sock", **backend_env)
    server, task = await start(env)
    try:
        yield Running(server, task, short_dir / "s.sock", isolated_home, env)
    finally:
        assert await stop(server, task) == 0


@pytest.fixture
async def tuned(
    isolated_home: Path, short_dir: Path, backend_env: dict[str, str]
) -> AsyncIterator[Running]:
    """A daemon whose knowledge-update candidates are any neighbour (the hash embedder's
    similarities are low) and with spreading activation on."""
    env = daemon_env(
        isolated_home,
        short_dir / "s.sock",
        RECALLD_LINKS__SUPERSEDE_SIMILARITY="0",
        RECALLD_SEARCH__ACTIVATION="true",
        **backend_env,
    )
    server, task = await start(env)
    try:
        yield Running(server, task, short_dir / "s.sock", isolated_home, env)
    finally:
        assert await stop(server, task) == 0


async def test_memory_types_are_validated(daemon: Running) -> None:
    async with daemon.client() as client:
        saved = await client.remember("Deploys go out on Tuesdays", memory_type="procedural")
        assert (await client.get(saved["id"]))["memory_type"] == "procedural"
        with pytest.raises(ProtocolError, match="episodic, semantic, procedural, preference"):
            await client.remember("x", memory_type="gossip")
        with pytest.raises(ProtocolError, match="param 'type'"):
            await client.update(saved["id"], memory_type="gossip")


async def test_edit_keeps_history(daemon: Running) -> None:
    async with daemon.client() as client:
        saved = await client.remember("The VPN password rotates monthly", tags=["ops"])
        first = await client.get(saved["id"])
        updated = await client.update(saved["id"], text="The VPN password rotates weekly")
        assert updated["id"] == saved["id"] and updated["version"] == 2
        assert updated["source"] != saved["source"]
        await client.update(saved["id"], importance=0.9, tags=["ops", "security"])
        history = await client.history(saved["id"])
        assert history["version"] == 3 and history["text"] == "The VPN password rotates weekly"
        assert [v["text"] for v in history["history"]] == [
            "The VPN password rotates monthly",
            "The VPN password rotates weekly",
        ]
        assert history["history"][0]["tags"] == ["ops"]
        assert history["history"][0]["valid_from"] == first["created_at"]
        now = await client.get(saved["id"])
        assert now["importance"] == 0.9 and now["tags"] == ["ops", "security"]
        hits = (await client.search("VPN password weekly", mode="bm25"))["hits"]
        assert [h["id"] for h in hits] == [saved["id"]]
        assert (await client.search("monthly", mode="bm25"))["hits"] == []
        # Remembering the new text again finds the edited memory.
        # (The same document; its chunk is re-written, as the tags and importance differ, so
        # the chunk id is only the same where SQLite happens to reuse the freed rowid.)
        again = await client.remember("The VPN password rotates weekly", tags=["ops"])
        assert again["document_id"] == saved["document_id"]
        assert again["source"] == updated["source"]
        other = await client.remember("Backups run nightly")
        with pytest.raises(IngestError, match="already holds"):
            await client.update(other["id"], text="The VPN password rotates weekly")
        with pytest.raises(ProtocolError, match="at least one"):
            await client.update(saved["id"])
        with pytest.raises(NotFoundError, match="no memory"):
            await client.update(999_999, text="x")


async def test_links_add_list_remove(daemon: Running) -> None:
    async with daemon.client() as client:
        a = (await client.remember("The outage began with a full disk"))["id"]
        b = (await client.remember("Log rotation was switched off"))["id"]
        link = await client.link(a, b, "caused_by", weight=0.7)
        assert link == {"src": a, "dst": b, "relation": "caused_by", "weight": 0.7}
        [found] = await client.links(a)
        assert (found["src"], found["dst"], found["relation"], found["origin"]) == (
            a,
            b,
            "caused_by",
            "user",
        )
        assert await client.links(b, direction="out") == []
        assert len(await client.links(b, direction="in", relation="caused_by")) == 1
        # An explicit supersedes link marks its target, and removing it restores it.
        await client.link(b, a, "supersedes")
        assert (await client.get(a))["status"] == "superseded"
        assert await client.unlink(b, a, relation="supersedes") == {"removed": 1}
        assert (await client.get(a))["status"] == "active"
        with pytest.raises(ProtocolError, match="relation"):
            await client.link(a, b, "friends_with")
        with pytest.raises(ProtocolError, match="itself"):
            await client.link(a, a, "related")
        with pytest.raises(NotFoundError):
            await client.link(a, 999_999, "related")
        with pytest.raises(NotFoundError, match="no link"):
            await client.unlink(a, b, relation="similar")
        assert (await client.status())["counts"]["links"] == 1


async def test_forget_by_query_needs_confirmation(daemon: Running, tmp_path: Path) -> None:
    note = tmp_path / "parrot.md"
    note.write_text("# Parrot\n\nThe parrot is called Kiwi.\n")
    async with daemon.client() as client:
        await client.ingest(note)
        kiwi = await client.remember("My parrot Kiwi eats sunflower seeds")
        tea = await client.remember("I drink green tea in the morning")
        plan = await client.forget_query("parrot Kiwi")
        # Only memories by default: the file's chunk is not offered.
        assert [m["id"] for m in plan["matches"]] == [kiwi["id"]]
        assert plan["sources"] == [kiwi["source"]] and plan["token"]
        await client.get(kiwi["id"])  # nothing was deleted by the query alone
        done = await client.forget_confirm(plan["token"])
        assert done == {"forgotten": [kiwi["source"]], "skipped": []}
        with pytest.raises(NotFoundError):
            await client.get(kiwi["id"])
        with pytest.raises(NotFoundError, match="token"):
            await client.forget_confirm(plan["token"])  # single use
        await client.get(tea["id"])
        # Widened to files by a filter.
        wide = await client.forget_query("parrot Kiwi", filters={"kinds": ["text"]})
        assert [m["source"] for m in wide["matches"]] == [str(note)]
        assert (await client.forget_query("zebra quantum"))["token"] is None
        with pytest.raises(ProtocolError, match="exactly one"):
            await client.call("forget", {"query": "x", "source": "y"})


async def test_knowledge_update_ranks_the_old_value_down(tuned: Running) -> None:
    async with tuned.client() as client:
        old = await client.remember("Alice lives in Porto with her two cats", event_time=1e9)
        new = await client.remember("Alice moved to Lisbon with her two cats", event_time=2e9)
        [link] = await client.links(new["id"], direction="out", relation="supersedes")
        assert link["dst"] == old["id"] and link["origin"] == "auto"
        assert (await client.get(old["id"]))["status"] == "superseded"

        query = "Alice lives Porto Lisbon two cats"
        now = await client.search(query, explain=True, mode="bm25")
        by_id = {h["id"]: h for h in now["hits"]}
        assert by_id[old["id"]]["explain"]["status_penalty"] == 0.5
        assert now["hits"][0]["id"] == new["id"]
        past = await client.search(
            "Where did Alice live before, Porto or Lisbon, two cats", explain=True, mode="bm25"
        )
        assert past["explain"]["asks_about_past"] is True
        assert all("status_penalty" not in h["explain"] for h in past["hits"])
        # Forgetting the newer memory makes the older one current again.
        await client.forget(new["source"])
        assert (await client.get(old["id"]))["status"] == "active"


async def test_conversation_logs_get_structure_links_and_activation(
    tuned: Running, tmp_path: Path
) -> None:
    log = tmp_path / "chat.jsonl"
    turns = [
        ("user", "I adopted a greyhound called Biscuit."),
        ("assistant", "Lovely, greyhounds are gentle."),
        ("user", "The vet said he needs a special diet."),
        ("assistant", "Noted."),
    ]
    log.write_text(
        "\n".join(json.dumps({"role": r, "content": t}) for r, t in turns) + "\n", "utf-8"
    )
    async with tuned.client() as client:
        await client.ingest(log)
        # Covered turns off: the seed round ranks below its own fact and would leave.
        result = await client.search(
            "greyhound Biscuit",
            explain=True,
            mode="bm25",
            limit=20,
            settings={"drop_covered": False},
        )
        hits = result["hits"]
        rounds = [h for h in hits if h["granularity"] == "round"]
        assert rounds
        relations = {x["relation"] for x in await client.links(rounds[0]["id"])}
        assert {"parent", "temporal"} <= relations
        # The second round shares no word with the query; activation brings it in over
        # the temporal link, and explain says from which seed and how.
        reached = [h for h in hits if "activation" in h["explain"]]
        assert reached, hits
        detail = reached[0]["explain"]["activation"]
        assert detail["relation"] in ("parent", "temporal") and detail["hops"] >= 1
        assert detail["seed"] in {h["id"] for h in hits}
        assert result["explain"]["activation"] == len(reached) or result["explain"][
            "activation"
        ] >= len(reached)
        await asyncio.sleep(0)


async def test_status_names_the_backend_and_its_schema(
    daemon: Running, backend_env: dict[str, str]
) -> None:
    from recalld.storage.pg import schema as pg_schema
    from recalld.storage.sqlite import schema

    async with daemon.client() as client:
        info = await client.status()
        models = await client.models()
    # The store records the spec of its model on both backends (`models` reads it back).
    assert models["store"] == {"model": "hash-64", "dimension": 64, "spec": "hash:64"}
    if backend_env:
        assert info["backend"] == "postgresql" and info["store"].startswith("postgresql://")
        assert info["schema_version"] == pg_schema.SCHEMA_VERSION
    else:
        assert info["backend"] == "sqlite" and info["schema_version"] == schema.SCHEMA_VERSION
