import dataclasses
import math
from typing import Any

import pytest

from recalld.config import SearchSettings
from recalld.retrieval import fusion


def test_rrf_matches_hand_computed_values():
    fused = fusion.rrf({"vector": [1, 2, 3], "bm25": [3, 1]}, {"vector": 0.6, "bm25": 0.4}, k=60)
    assert fused[1] == pytest.approx(0.6 / 61 + 0.4 / 62)
    assert fused[2] == pytest.approx(0.6 / 62)
    assert fused[3] == pytest.approx(0.6 / 63 + 0.4 / 61)
    assert sorted(fused, key=lambda i: -fused[i]) == [1, 3, 2]


def test_rrf_missing_weight_defaults_to_one():
    assert fusion.rrf({"a": [7]}, {}, k=0) == {7: 1.0}


def test_bm25_idf_and_relative_idf():
    assert fusion.bm25_idf(1, 100) == pytest.approx(math.log(1 + 99.5 / 1.5))
    # A term found once has relative IDF 1; unmatched terms are ignored.
    assert fusion.relative_idf([1, 0], 100) == pytest.approx(1.0)
    common = fusion.relative_idf([90], 100)
    assert 0 < common < 0.1
    assert fusion.relative_idf([], 100) == 0.0
    assert fusion.relative_idf([0, 0], 100) == 0.0


def test_adaptive_weights_move_towards_keywords_for_rare_terms():
    rare_v, rare_k = fusion.adaptive_weights(0.9, midpoint=0.5, slope=10)
    common_v, _common_k = fusion.adaptive_weights(0.1, midpoint=0.5, slope=10)
    assert rare_k > 0.95 and common_v > 0.95
    assert rare_v + rare_k == pytest.approx(1.0)
    assert fusion.adaptive_weights(0.5, 0.5, 3) == pytest.approx((0.5, 0.5))


def test_sigmoid_is_stable_at_extremes():
    assert fusion.sigmoid(1000) == 1.0
    assert fusion.sigmoid(-1000) == 0.0
    assert fusion.sigmoid(0) == 0.5


def test_min_max_and_score_fusion():
    assert fusion.min_max({1: 2.0, 2: 4.0, 3: 3.0}) == {1: 0.0, 2: 1.0, 3: 0.5}
    assert fusion.min_max({1: 5.0}) == {1: 1.0}
    assert fusion.min_max({}) == {}
    fused = fusion.score_fusion({1: 0.9, 2: 0.5}, {2: 10.0, 3: 5.0}, 0.5, 0.5)
    assert fused == pytest.approx({1: 0.5, 2: 0.5, 3: 0.0})


def test_route_agreement_matches_hand_computed_values():
    # Vector ranks 1, 2, 3; keyword ranks 2 (score 9), then 3 (score 4); 1 holds no query word.
    similarity = {1: 0.9, 2: 0.8, 3: 0.7}
    keyword = {1: 0.0, 2: 9.0, 3: 4.0}
    # Keyword's best two (2, 3) sit at vector ranks 2 and 3: (2/3 + 2/4) / 2.
    of_keyword = (2 / 3 + 2 / 4) / 2
    # Vector's best two: 1 is not in the keyword ranking (scores 0), 2 is its first: (0 + 1) / 2.
    of_vector = (0 + 1) / 2
    share = fusion.route_agreement(similarity, keyword, depth=2)
    assert share == pytest.approx(of_keyword / (of_keyword + of_vector))
    # Routes that rank the same chunks alike endorse each other evenly; none at all is even.
    assert fusion.route_agreement({1: 0.9, 2: 0.1}, {1: 3.0, 2: 1.0}, 2) == pytest.approx(0.5)
    assert fusion.route_agreement({1: 0.9}, {}, 5) == 0.5


def test_hybrid_weights_agreement_and_keyword_floor():
    similarity = {1: 0.9, 2: 0.8, 3: 0.7}
    keyword = {1: 0.0, 2: 9.0, 3: 4.0}
    share = fusion.route_agreement(similarity, keyword, 2)

    def weights(**changed: Any) -> dict[str, float]:
        opts = dataclasses.replace(SearchSettings(), **changed)
        return fusion.hybrid(opts, similarity, keyword, None, 0.1, [1], 10)[1]

    assert weights(weighting="agreement", agreement_depth=2)["bm25"] == pytest.approx(share)
    assert weights(weighting="agreement", agreement_depth=2, keyword_weight_floor=0.9)[
        "bm25"
    ] == pytest.approx(0.9)
    # Coverage 0.1 gives the keyword route sigmoid(10 * (0.1 - 0.5)); the floor lifts it.
    low = weights()["bm25"]
    assert low == pytest.approx(fusion.sigmoid(-4.0))
    lifted = weights(keyword_weight_floor=0.4)
    assert lifted == pytest.approx({"vector": 0.6, "bm25": 0.4})
    mixed = weights(weighting="coverage-agreement", agreement_depth=2)["bm25"]
    assert mixed == pytest.approx((share + low) / 2)
    # A floor below the weight changes nothing.
    assert weights(keyword_weight_floor=0.01) == weights()
