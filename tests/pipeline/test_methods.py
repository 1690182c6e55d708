"""Every JSON-RPC method against an in-process daemon, through `AsyncClient`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from recalld import protocol
from recalld.errors import ConfigError, NotFoundError, ProtocolError, QueryError
from recalld.storage.sqlite.schema import SCHEMA_VERSION
from tests.pipeline.conftest import Running, wait_until


async def test_status(daemon: Running) -> None:
    async with daemon.client() as client:
        info = await client.status()
    assert info["state"] == "ready"
    assert info["protocol_version"] == protocol.PROTOCOL_VERSION
    assert info["schema_version"] == SCHEMA_VERSION and info["backend"] == "sqlite"
    assert info["model"] == "hash-64" and info["dimension"] == 64
    assert info["socket"] == str(daemon.socket)
    assert info["drop_folder"] == str(daemon.home / "data" / "drop")
    assert (daemon.home / "data" / "drop").is_dir()
    assert set(info["queues"]) == {"events", "jobs", "scans", "in_flight", "retrying", "no_space"}
    assert info["writes"] == {"ok": True, "reason": None, "message": None}
    assert info["counts"]["documents"] == 0 and info["errors"] == 0


async def test_remember_search_get_forget(daemon: Running) -> None:
    async with daemon.client() as client:
        saved = await client.remember(
            "The staging database password rotates every Monday", tags=["ops"], importance=0.9
        )
        assert saved["status"] == "ingested" and saved["source"].startswith("memory:")
        again = await client.remember(
            "The staging database password rotates every Monday", tags=["ops"], importance=0.9
        )
        assert again["id"] == saved["id"]  # the same memory twice is one memory

        result = await client.search("when does the staging password rotate", explain=True)
        assert result["tier"] in ("high", "medium", "low")
        [hit] = result["hits"]
        assert hit["id"] == saved["id"] and hit["kind"] == "memory"
        assert hit["tags"] == ["ops"] and "routes" in hit["explain"]
        assert "timings_ms" in result["explain"]

        filtered = await client.search("staging password", filters={"tags": ["nope"]})
        assert filtered["hits"] == []
        by_kind = await client.search(
            "staging password", filters={"kinds": ["memory"]}, mode="bm25"
        )
        assert [h["id"] for h in by_kind["hits"]] == [saved["id"]]

        chunk = await client.get(saved["id"])
        assert chunk["text"].startswith("The staging database") and chunk["importance"] == 0.9

        forgotten = await client.forget(chunk_id=saved["id"])
        assert forgotten == {"forgotten": True, "source": saved["source"]}
        with pytest.raises(NotFoundError):
            await client.get(saved["id"])
        with pytest.raises(NotFoundError, match="nothing is stored"):
            await client.forget(saved["source"])


async def test_bad_params_raise_typed_errors(daemon: Running) -> None:
    async with daemon.client() as client:
        with pytest.raises(ProtocolError) as info:
            await client.call("search", {"query": "x", "filters": {"kinds": ["bogus"]}})
        assert info.value.data == {"param": "filters.kinds", "rpc_code": protocol.INVALID_PARAMS}
        with pytest.raises(QueryError):
            await client.search("   ")  # the searcher's own error, with its code
        with pytest.raises(ProtocolError, match="absolute"):
            await client.call("ingest", {"path": "relative/path"})
        with pytest.raises(ProtocolError, match="unknown method"):
            await client.call("nope")


async def test_ingest_reports_progress_and_skips_unchanged(daemon: Running, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / ".git").mkdir()
    for i in range(20):
        (folder / ("sub" if i % 2 else ".") / f"n{i}.md").write_text(
            f"# Note {i}\n\nThe reactor coolant pump number {i} was serviced.\n"
        )
    (folder / ".git" / "config").write_text("[core]\n")
    (folder / "scratch.swp").write_text("junk")
    events: list[dict[str, Any]] = []
    async with daemon.client() as client:
        report = await client.ingest(folder, on_progress=events.append)
        assert report["files"] == 20 and report["ingested"] == 20 and report["failed"] == 0
        assert report["chunks"] >= 20 and report["embedded"] == report["chunks"]
        assert events and events[-1]["done"] == 20 and events[-1]["total"] == 20
        assert all(e["kind"] == "ingest" for e in events)  # the job's figures

        again = await client.ingest(folder)
        assert again["unchanged"] == 20 and again["embedded"] == 0

        single = await client.ingest(folder / "n0.md")
        assert single["files"] == 1 and single["unchanged"] == 1
        hits = (await client.search("reactor coolant pump 7"))["hits"]
        assert any(h["source"] == str(folder / "sub" / "n7.md") for h in hits)
        with pytest.raises(NotFoundError):
            await client.ingest(tmp_path / "missing")


async def test_ingest_failures_are_recorded_not_fatal(
    daemon: Running, tmp_path: Path, isolated_home: Path
) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "good.md").write_text("A perfectly fine note about tulips.\n")
    (folder / "bad.md").write_bytes(bytes(range(256)) * 4)  # binary under a text name
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 4)  # a type recalld does not read
    async with daemon.client() as client:
        report = await client.ingest(folder)
        assert report["files"] == 3 and report["ingested"] == 1 and report["failed"] == 1
        assert report["skipped"] == 1 and report["skipped_types"] == {".bin": 1}
        assert report["errors"][0]["path"] == str(folder / "bad.md")
        errors = await client.errors()
        assert [e["source"] for e in errors] == [str(folder / "bad.md")]
        assert (await client.status())["errors"] == 1


async def test_sources_add_list_remove_and_watch(daemon: Running, tmp_path: Path) -> None:
    folder = tmp_path / "watched"
    folder.mkdir()
    (folder / "before.md").write_text("Written before the folder was added: aardvark.\n")
    async with daemon.client() as client:
        added = await client.sources_add(folder)
        assert added == {"path": str(folder), "kind": "auto", "origin": "runtime", "exists": True}
        listed = await client.sources_list()
        assert [s["origin"] for s in listed] == ["drop", "runtime"]

        async def found(word: str) -> bool:
            hits = (await client.search(word, mode="bm25"))["hits"]
            return any(word in h["text"] for h in hits)

        await wait_until(lambda: found("aardvark"))  # the scan on add
        (folder / "after.md").write_text("Written while watched: platypus.\n")
        await wait_until(lambda: found("platypus"))  # the watcher

        removed = await client.sources_remove(folder, forget=True)
        assert removed["forgotten"] == 2
        assert not await found("aardvark")
        with pytest.raises(NotFoundError):
            await client.sources_remove(folder)
        with pytest.raises(ConfigError, match="drop folder"):
            await client.sources_remove(daemon.home / "data" / "drop")
        with pytest.raises(NotFoundError, match="not a folder"):
            await client.sources_add(tmp_path / "nope")
    persisted = (daemon.home / "data" / "sources.json").read_text()
    assert str(folder) not in persisted


async def test_drop_folder_is_ingested(daemon: Running) -> None:
    drop = daemon.home / "data" / "drop"
    (drop / "dropped.md").write_text("Dropped here: the quokka smiles.\n")
    async with daemon.client() as client:

        async def found() -> bool:
            return bool((await client.search("quokka", mode="bm25"))["hits"])

        await wait_until(found)
    assert (drop / "dropped.md").exists()  # kept


async def test_check_and_config_show(daemon: Running) -> None:
    async with daemon.client() as client:
        await client.remember("something to check")
        report = await client.check()
        assert report["ok"], report
        assert {c["name"] for c in report["checks"]} >= {
            "vector_parity",
            "fts_parity",
            "integrity_check",
            "partial_documents",
        }
        assert report["counts"]["chunks"] == report["counts"]["vectors"] == 1
        shown = (await client.config_show())["settings"]
        assert shown["embed.model"] == {"value": "hash:64", "source": "env", "applies": "daemon"}
        assert shown["search.limit"]["source"] == "default"


async def test_sources_from_config_cannot_be_removed_at_run_time(
    isolated_home: Path, short_dir: Path, tmp_path: Path
) -> None:
    from tests.pipeline.conftest import daemon_env, start, stop

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("Configured folder content: wombat.\n")
    env = daemon_env(
        isolated_home, short_dir / "s.sock", RECALLD_DAEMON__WATCH=f"{notes}:documents"
    )
    server, task = await start(env)
    try:
        async with Running(server, task, short_dir / "s.sock", isolated_home, env).client() as c:
            [_, configured] = await c.sources_list()
            assert configured["origin"] == "config" and configured["kind"] == "documents"
            with pytest.raises(ConfigError, match=r"daemon\.watch"):
                await c.sources_remove(notes)
            await server.scheduler.wait_idle()  # type: ignore[union-attr]
            assert (await c.status())["counts"]["documents"] == 1
    finally:
        assert await stop(server, task) == 0
    assert (isolated_home / "data" / "recalld.db").exists()


async def test_reload_applies_watched_folders_and_search_settings(
    daemon: Running, tmp_path: Path
) -> None:
    folder = tmp_path / "later"
    folder.mkdir()
    (folder / "n.md").write_text("Configured after start: narwhal.\n")
    (daemon.home / "config.toml").write_text(
        f'[daemon]\nwatch = ["{folder}:documents"]\n[search]\nlimit = 3\n'
    )
    await daemon.server.reload()  # what SIGHUP does
    async with daemon.client() as client:
        paths = {s["path"]: s["origin"] for s in await client.sources_list()}
        assert paths[str(folder)] == "config"

        async def found() -> bool:
            return bool((await client.search("narwhal", mode="bm25"))["hits"])

        await wait_until(found)
        shown = (await client.config_show())["settings"]
        assert shown["search.limit"] == {
            "value": 3,
            "source": str(daemon.home / "config.toml"),
            "applies": "request",
        }
    # A broken file keeps the old settings.
    (daemon.home / "config.toml").write_text("[search]\nlimit = 'many'\n")
    await daemon.server.reload()
    assert daemon.server.memory is not None
    assert daemon.server.memory.searcher.settings.limit == 3


async def test_search_time_ranges_budget_and_time_words(daemon: Running) -> None:
    async with daemon.client() as client:
        old = await client.remember(
            "Booked the dentist for a checkup", event_time="2023-03-02T10:00:00"
        )
        new = await client.remember(
            "Booked the dentist for a filling", event_time="2023-06-20T10:00:00"
        )
        ranged = await client.search(
            "dentist booked",
            filters={"since": "2023-06-01", "until": "2023-07-01"},
            mode="bm25",
        )
        assert [h["id"] for h in ranged["hits"]] == [new["id"]]
        # "in March 2023" is read from the query and shown in explain.
        worded = await client.search("when was the dentist booked in March 2023", explain=True)
        assert worded["hits"][0]["id"] == old["id"]
        note = worded["explain"]["time"]
        assert note["start"] == "2023-03-01T00:00:00Z" and note["mode"] == "boost"
        assert worded["hits"][0]["explain"]["time"]["in_range"] == 1.0
        ignored = await client.search(
            "when was the dentist booked in March 2023", explain=True, time_aware=False
        )
        assert "time" not in ignored["explain"]
        packed = await client.search("dentist booked", budget_tokens=6)
        assert packed["packing"]["budget_tokens"] == 6
        assert 0 < packed["packing"]["used_tokens"] <= 6
        assert len(packed["hits"]) == 1 and len(packed["packing"]["dropped"]) == 1
        assert "packing" not in await client.search("dentist booked")
        with pytest.raises(ProtocolError, match="budget_tokens"):
            await client.call("search", {"query": "dentist", "budget_tokens": 0})
        with pytest.raises(ProtocolError, match="time_aware"):
            await client.call("search", {"query": "dentist", "time_aware": "yes"})


async def test_ingest_is_a_job_any_client_can_follow(daemon: Running, tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    for i in range(40):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nThe narwhal tusk, sample {i}.\n")
    async with daemon.client() as starter, daemon.client() as other:
        job = await starter.start_ingest(folder)
        assert job["state"] in ("queued", "running") and job["kind"] == "ingest"
        assert job["path"] == str(folder) and job["result"] is None
        # Another client follows the same job to its end, with its figures on the way.
        seen: list[dict[str, Any]] = []
        done = await other.wait_job(job["id"], on_progress=seen.append)
        assert done["state"] == "done" and done["done"] == done["total"] == 40
        assert done["result"]["ingested"] == 40 and done["chunks"] == done["result"]["chunks"]
        assert seen and seen[-1]["id"] == job["id"] and done["eta_s"] is None
        assert [j["id"] for j in await starter.jobs()] == [job["id"]]
        assert (await starter.status())["jobs"][0]["state"] == "done"
        # Cancelling a finished job changes nothing.
        assert (await other.cancel_job(job["id"]))["state"] == "done"
        with pytest.raises(NotFoundError, match="no job"):
            await other.job("nope")
        with pytest.raises(ProtocolError, match="timeout_s"):
            await other.call("jobs/wait", {"id": job["id"], "timeout_s": 1000})
        # A short wait answers with the job as it is, finished or not.
        again = await starter.start_ingest(folder)
        brief = await starter.call("jobs/wait", {"id": again["id"], "timeout_s": 0})
        assert brief["id"] == again["id"]
        assert (await starter.wait_job(again["id"]))["result"]["unchanged"] == 40


async def test_search_settings_sent_with_a_request(daemon: Running) -> None:
    async with daemon.client() as client:
        for i in range(4):
            await client.remember(f"Lighthouse log {i}: the lamp was trimmed.")
        assert len((await client.search("lighthouse lamp"))["hits"]) == 4
        assert len((await client.search("lighthouse lamp", settings={"limit": 2}))["hits"]) == 2
        both = await client.search("lighthouse lamp", limit=3, settings={"limit": 2})
        assert len(both["hits"]) == 3  # the param is more specific than the setting
        for bad, name in (({"colour": 1}, "settings.colour"), ({"limit": "x"}, "settings.limit")):
            with pytest.raises(ProtocolError) as info:
                await client.search("lamp", settings=bad)
            assert info.value.data["param"] == name
        with pytest.raises(ProtocolError, match="finite"):
            await client.search("lamp", settings={"tau": "inf"})
