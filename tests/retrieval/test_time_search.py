"""Time-aware search through the search path: a real store (SQLite, and PostgreSQL), a
LoCoMo-shaped log, fixed dates."""

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.errors import QueryError
from recalld.types import Filters
from tests.helpers.postgres import VECTOR_INDEX

# Four sessions months apart, with a hike in March and another in June told alike: which one
# comes first must depend on the time words of the question alone.
LOG = {
    "sample_id": "t1",
    "conversation": {
        "speaker_a": "Anna",
        "speaker_b": "Ben",
        "session_1_date_time": "10:00 am on 4 March, 2023",
        "session_1": [
            {
                "speaker": "Anna",
                "dia_id": "D1:1",
                "text": "I went hiking in the hills.",
            },
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Hiking sounds lovely, which trail?"},
        ],
        "session_2_date_time": "6:30 pm on 20 April, 2023",
        "session_2": [
            {
                "speaker": "Anna",
                "dia_id": "D2:1",
                "text": "The picnic by the river was fun, then a concert.",
            },
            {"speaker": "Ben", "dia_id": "D2:2", "text": "Which band played at the concert?"},
        ],
        "session_3_date_time": "9:15 am on 11 June, 2023",
        "session_3": [
            {"speaker": "Anna", "dia_id": "D3:1", "text": "I went hiking by the lake."},
            {"speaker": "Ben", "dia_id": "D3:2", "text": "Nice, was the lake cold?"},
        ],
        "session_4_date_time": "8:00 pm on 2 August, 2023",
        "session_4": [
            {
                "speaker": "Anna",
                "dia_id": "D4:1",
                "text": "Another concert tonight with my sister.",
            },
            {"speaker": "Ben", "dia_id": "D4:2", "text": "Enjoy the concert, which band?"},
        ],
    },
    "qa": [],
}


@pytest.fixture(params=["sqlite", "postgresql"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Settings for a store on each backend (time-aware search must behave the same)."""
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    if request.param == "postgresql":
        env["RECALLD_STORE__PATH"] = request.getfixturevalue("pg_url")
        env["RECALLD_STORE__VECTOR_INDEX"] = VECTOR_INDEX
    return env


@pytest.fixture
async def memory(env: dict[str, str]) -> AsyncIterator[AsyncMemory]:
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        await opened.add_text(json.dumps(LOG), source="locomo:t1", name="locomo.json")
        yield opened


def first_session(result) -> str:
    """The session ("D3") of the top hit."""
    return result.hits[0].chunk.meta["dia_ids"][0].split(":")[0]


def sessions(result) -> list[str]:
    """Sessions in the order their first hit appears."""
    return list(dict.fromkeys(h.chunk.meta["dia_ids"][0].split(":")[0] for h in result.hits))


async def test_a_time_scoped_question_finds_the_right_session(memory: AsyncMemory):
    scoped = await memory.search("where did Anna go hiking this summer")
    assert first_session(scoped) == "D3"
    note = scoped.explain["time"]
    # "this summer" is read against the log's own latest date (August 2023), not the clock.
    assert note["anchor"] == "2023-08-02T20:00:00Z"
    assert (note["start"], note["end"]) == ("2023-06-01T00:00:00Z", "2023-09-01T00:00:00Z")
    assert note["phrases"] == ["this summer"]
    assert note["mode"] == "boost"
    assert scoped.hits[0].explain["time"]["in_range"] == 1.0
    assert scoped.hits[0].explain["time"]["multiplier"] > 1.0
    spring = await memory.search("where did Anna go hiking this spring")
    assert first_session(spring) == "D1"
    plain = await memory.search("where did Anna go hiking this summer", time_aware=False)
    assert "time" not in plain.explain
    assert "time" not in plain.hits[0].explain


async def test_orderings_pick_the_first_and_the_latest_time(memory: AsyncMemory):
    # The ordering boost is off by default (it did not help on LoCoMo); switched on here.
    first = await memory.search("the first time Anna went hiking", time_order_weight=0.5)
    assert first.explain["time"]["order"] == "asc"
    assert first_session(first) == "D1"
    latest = await memory.search("the last time Anna went hiking", time_order_weight=0.5)
    assert latest.explain["time"]["order"] == "desc"
    assert first_session(latest) == "D3"


async def test_filter_mode_keeps_only_the_range(memory: AsyncMemory):
    result = await memory.search("hiking in March 2023", time_mode="filter", gate=False)
    assert result.hits
    assert {first_session(result)} == {h.chunk.meta["dia_ids"][0][:2] for h in result.hits}
    assert first_session(result) == "D1"


async def test_an_event_bounds_the_range(memory: AsyncMemory):
    result = await memory.search("where did Anna go hiking after the picnic")
    note = result.explain["time"]
    assert note["event"]["phrase"] == "the picnic"
    assert note["event"]["at"].startswith("2023-04-20")
    assert note["start"] == "2023-04-20T00:00:00Z"
    # The picnic's own session may lead (the question names it); the June hike beats March's.
    order = sessions(result)
    assert order.index("D3") < order.index("D1")
    before = await memory.search("where did Anna go hiking before the picnic")
    assert before.explain["time"]["end"] == "2023-04-21T00:00:00Z"
    order = sessions(before)
    assert order.index("D1") < order.index("D3")


async def test_explicit_time_filters_still_apply(memory: AsyncMemory):
    since = 1_680_000_000.0  # 28 March 2023
    result = await memory.search("hiking", filters=Filters(since=since), gate=False)
    assert result.hits
    assert all(h.chunk.event_time is not None and h.chunk.event_time >= since for h in result.hits)


async def test_unknown_time_mode_is_a_query_error(memory: AsyncMemory):
    with pytest.raises(QueryError):
        await memory.search("hiking", time_mode="sometimes")


async def test_packing_keeps_within_the_budget_and_attaches_rounds_to_facts(memory: AsyncMemory):
    facts = Filters(granularities=("fact",))
    result = await memory.search("Anna hiking lake", filters=facts, budget_tokens=60, limit=5)
    packing = result.packing
    assert packing is not None and 0 < packing["used_tokens"] <= 60
    with_context = [h for h in result.hits if h.context]
    assert with_context, "a fact's round fits in 60 tokens"
    count = memory.embedder.count_tokens
    total = sum(count(h.chunk.text) + (count(h.context) if h.context else 0) for h in result.hits)
    assert total == packing["used_tokens"]
    tiny = await memory.search("Anna hiking lake", filters=facts, budget_tokens=3, limit=5)
    assert tiny.packing is not None and tiny.packing["used_tokens"] <= 3
    assert tiny.packing["dropped"]
    with pytest.raises(QueryError):
        await memory.search("hiking", budget_tokens=-1)


async def test_every_chunk_gets_an_event_time(memory: AsyncMemory, tmp_path: Path):
    undated = tmp_path / "notes.md"
    undated.write_text("# Notes\n\nThe boiler was serviced.")
    os.utime(undated, (1_600_000_000, 1_600_000_000))
    dated = tmp_path / "retro.md"
    dated.write_text("# Retro, 2 May 2023\n\nWe shipped the boiler app.")
    await memory.add_file(undated)
    await memory.add_file(dated)
    before = time.time()
    await memory.add_text("A note without a file.", source="inline", name="inline.md")
    after = time.time()

    async def times(source: str) -> set[float]:
        rows = await memory.store.read(
            lambda c: c.fetchall(
                "SELECT c.event_time FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.source = ?",
                (source,),
            )
        )
        return {r[0] for r in rows}

    assert await times(str(undated)) == {1_600_000_000.0}  # the file's mtime
    assert await times(str(dated)) == {1_682_985_600.0}  # 2 May 2023, from its title
    [inline] = await times("inline")
    assert before - 1 <= inline <= after + 1  # no file: the ingest time
    rows = await memory.store.read(
        lambda c: c.fetchall("SELECT count(*) FROM chunks WHERE event_time IS NULL")
    )
    assert rows[0][0] == 0
