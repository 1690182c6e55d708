"""LoCoMo dev through the public API: session, round and fact chunks, with their dia_ids."""

import json
from pathlib import Path

import pytest

from bench.locomo import evidence_ids
from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.types import Filters

LOCOMO_DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo_dev.json"


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO_DEV.exists(), reason="LoCoMo dev split not available")
async def test_locomo_dev_keeps_granularities_and_dia_ids(tmp_path: Path):
    settings = load_settings(
        None, {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    ).settings
    sample = json.loads(LOCOMO_DEV.read_text())[0]
    async with await AsyncMemory.open(settings) as memory:
        report = await memory.add_file(LOCOMO_DEV)
        assert report.status == "ingested" and report.chunks > 1000
        rows = await memory.store.read(
            lambda c: c.fetchall("SELECT granularity, meta, parent_id FROM chunks")
        )
        by_granularity: dict[str, int] = {}
        covered: set[str] = set()
        for granularity, meta, parent in rows:
            by_granularity[granularity] = by_granularity.get(granularity, 0) + 1
            dia_ids = json.loads(meta).get("dia_ids")
            assert dia_ids, "every LoCoMo chunk names the turns it covers"
            if granularity == "round":
                covered.update(dia_ids)
            if granularity in ("round", "fact"):
                assert parent is not None
        assert set(by_granularity) == {"session", "round", "fact"}
        evidence = set().union(*(evidence_ids(qa) for qa in sample["qa"]))
        turns = {
            t["dia_id"]
            for k, v in sample["conversation"].items()
            if k.startswith("session_") and isinstance(v, list)
            for t in v
        }
        assert evidence & turns <= covered
        # Re-ingesting the same file is a no-op.
        assert (await memory.add_file(LOCOMO_DEV)).status == "unchanged"


async def test_turn_windows_are_searchable_units_with_their_round_as_parent(tmp_path: Path):
    settings = load_settings(
        None,
        {
            "RECALLD_HOME": str(tmp_path),
            "RECALLD_EMBED__MODEL": "hash:64",
            "RECALLD_CHUNK__TURN_WINDOWS": "true",
        },
    ).settings
    sample = {
        "sample_id": "conv-w",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I finally adopted a dog."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "What did you name the dog?"},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "Biscuit, after my snack."},
                {"speaker": "Ben", "dia_id": "D1:4", "text": "Cute. I bought a cello."},
            ],
        },
    }
    async with await AsyncMemory.open(settings) as memory:
        await memory.ingestor.ingest_bytes("locomo:w", "locomo.json", json.dumps(sample).encode())
        result = await memory.searcher.search(
            "name of the dog: Biscuit", filters=Filters(granularities=("window",)), limit=1
        )
        best = result.hits[0].chunk
        # The question (D1:2) and its answer (D1:3) come back as one unit.
        assert best.granularity == "window" and best.meta["dia_ids"] == ["D1:2", "D1:3"]
        parent = await memory.store.read(lambda c: c.chunks_by_id([best.parent_id]))
        assert parent[best.parent_id].granularity == "round"
        assert parent[best.parent_id].meta["dia_ids"] == ["D1:3", "D1:4"]
