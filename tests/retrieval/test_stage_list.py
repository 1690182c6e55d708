"""The ranking stage list: written once (`retrieval.stages.STAGES`), and the docs agree with it."""

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.retrieval import search
from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.retrieval.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]
# What a hit's `explain` holds besides the stages' entries: recall and fusion's, expansion's
# and packing's.
NOT_STAGES = {"routes", "fused", "position", "expanded", "tokens"}


def test_the_readme_lists_the_stages_in_their_order():
    readme = (ROOT / "README.md").read_text("utf-8")
    line = re.search(r"<!-- stages -->(.*)<!-- /stages -->", readme)
    assert line is not None, "README.md lost its <!-- stages --> line"
    assert re.findall(r"`([^`]+)`", line.group(1)) == [stage.name for stage in STAGES]


def test_the_search_module_names_the_list_instead_of_restating_it():
    assert search.__doc__ is not None and "STAGES" in search.__doc__


def test_stage_names_and_timings_are_their_own():
    names = [stage.name for stage in STAGES]
    assert len(set(names)) == len(names)
    assert not set(names) & NOT_STAGES
    for stage in STAGES:
        assert stage.timing.endswith("_ms")


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    async with await AsyncMemory.open(load_settings(None, env).settings) as opened:
        yield opened


async def test_each_hit_explains_itself_by_stage_name(memory: AsyncMemory):
    await memory.remember("the deploy checklist for the api service", importance=0.9)
    await memory.remember("the deploy checklist for the api gateway", importance=0.1)
    await memory.remember("the rollback checklist for the api gateway")
    result = await memory.search(
        "deploy checklist api",
        gate=False,
        activation=True,
        importance_weight=1.0,
        mmr=True,
        limit=2,
        expand=1,
    )
    names = {stage.name for stage in STAGES}
    assert result.hits
    for hit in result.hits:
        assert set(hit.explain) - NOT_STAGES <= names
        assert "factors" in hit.explain
    assert set(result.explain["timings_ms"]) >= {"rank_ms", "total_ms"}


class _Reverse(Stage):
    """A stage written for the test: one class, run beside the shipped ones."""

    name = "reverse"

    def enabled(self, query: Query) -> bool:
        return query.limit > 1

    async def run(self, query: Query, found: Candidates) -> None:
        found.order.reverse()
        for position, cid in enumerate(found.order):
            found.notes(self.name)[cid] = position


async def test_a_new_stage_is_one_class_and_one_line(memory: AsyncMemory, monkeypatch):
    for word in ("alpha", "beta", "gamma"):
        await memory.remember(f"the {word} release notes")
    plain = await memory.search("release notes", gate=False, limit=3)
    monkeypatch.setattr(search, "STAGES", (*STAGES, _Reverse()))
    reversed_ = await memory.search("release notes", gate=False, limit=3)
    assert [h.chunk.id for h in reversed_.hits] == [h.chunk.id for h in plain.hits][::-1]
    assert [h.explain["reverse"] for h in reversed_.hits] == [0, 1, 2]
