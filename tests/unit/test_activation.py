"""Spreading activation (OpenMem: hops, decay per hop, both directions, max wins) and the
status penalty with its past-tense exception."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from recalld.retrieval import activation, status
from recalld.storage.records import Link


def graph(links: list[Link]):
    async def edges(ids: Sequence[int]) -> list[Link]:
        wanted = set(ids)
        return [e for e in links if e[0] in wanted or e[1] in wanted]

    return edges


async def test_activation_decays_per_hop_and_stops_at_max_hops() -> None:
    chain = [(1, 2, "temporal", 1.0), (2, 3, "temporal", 1.0), (3, 4, "temporal", 1.0)]
    reached = await activation.spread({1: 1.0}, graph(chain), hops=2, decay=0.5)
    assert {c: r.activation for c, r in reached.items()} == {2: 0.5, 3: 0.25}
    assert reached[3].seed == 1 and reached[3].via == 2 and reached[3].hops == 2


async def test_links_are_traversed_both_ways_with_their_weight() -> None:
    # 5 is the child (src) of the seed 9: activation flows from dst to src too.
    reached = await activation.spread({9: 0.8}, graph([(5, 9, "parent", 0.5)]), hops=1, decay=0.5)
    assert reached[5].activation == pytest.approx(0.8 * 0.5 * 0.5)
    assert reached[5].relation == "parent"


async def test_max_wins_over_several_paths() -> None:
    links = [(1, 3, "similar", 0.2), (2, 3, "related", 1.0)]
    reached = await activation.spread({1: 1.0, 2: 0.6}, graph(links), hops=1, decay=0.5)
    assert reached[3].activation == pytest.approx(0.3)
    assert reached[3].seed == 2 and reached[3].relation == "related"


async def test_seeds_are_not_reported_and_cycles_end() -> None:
    cycle = [(1, 2, "temporal", 1.0), (2, 1, "temporal", 1.0)]
    reached = await activation.spread({1: 1.0}, graph(cycle), hops=5, decay=0.5)
    assert list(reached) == [2]


def test_merge_scales_to_fused_scores_and_keeps_the_higher() -> None:
    order = [1, 2]
    fused = {1: 0.8, 2: 0.3}
    reached = {
        2: activation.Reached(0.5, 1, 1, "similar", 1),
        7: activation.Reached(0.5, 1, 1, "parent", 1),
    }
    new_order, scores = activation.merge(order, fused, reached)
    assert scores[7] == pytest.approx(0.4) and scores[2] == pytest.approx(0.4)
    assert new_order == [1, 2, 7]


@pytest.mark.parametrize(
    ("query", "past"),
    [
        ("Where does Caroline live?", False),
        ("Where did Caroline live before she moved?", True),
        ("What did Melanie use to paint with?", True),
        ("Where did Jon work previously?", True),
        ("What was Gina's first job?", True),
        ("Where did Caroline live in 2022?", True),
        ("How old is Caroline?", False),
        ("When did Melanie paint a sunrise?", False),
    ],
)
def test_asks_about_past(query: str, past: bool) -> None:
    assert status.asks_about_past(query) is past


def test_penalty_ranks_superseded_down_unless_the_past_is_asked() -> None:
    order = [1, 2, 3]
    scores = {1: 0.9, 2: 0.7, 3: 0.2}
    statuses = {1: "superseded", 2: "active", 3: "contradicted"}
    new_order, new, factors = status.apply(order, scores, statuses, "where does she live")
    assert new_order == [2, 1, 3]
    assert new[1] == pytest.approx(0.45) and new[3] == pytest.approx(0.06)
    assert factors == {1: 0.5, 3: 0.3}
    same = status.apply(order, scores, statuses, "where did she live before")
    assert same == (order, scores, {})


def test_penalty_lowers_negative_scores_too() -> None:
    order, new, _ = status.apply([1, 2], {1: -0.1, 2: -0.2}, {1: "superseded"}, "q")
    assert order == [1, 2] and -0.2 < new[1] < -0.1
