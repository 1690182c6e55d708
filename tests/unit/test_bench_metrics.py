import math

import pytest

from recalld.bench import metrics


def test_ndcg_hand_computed():
    rel = {"a": 1, "b": 2}
    # ranked: x, b, a -> dcg = 2/log2(3) + 1/log2(4); ideal: 2/1 + 1/log2(3)
    expected = (2 / math.log2(3) + 1 / 2) / (2 + 1 / math.log2(3))
    assert metrics.ndcg_at(["x", "b", "a"], rel, 10) == pytest.approx(expected)
    assert metrics.ndcg_at(["b", "a"], rel, 10) == pytest.approx(1.0)
    assert metrics.ndcg_at(["x"], rel, 10) == 0.0
    assert metrics.ndcg_at(["a"], {}, 10) == 0.0
    # Cut-off applies to the ranking and the ideal.
    assert metrics.ndcg_at(["x", "a"], {"a": 1}, 1) == 0.0


def test_recall_hit_mrr():
    ranked = ["x", "a", "y", "b"]
    assert metrics.recall_at(ranked, {"a", "b"}, 2) == 0.5
    assert metrics.recall_at(ranked, {"a", "b"}, 10) == 1.0
    assert metrics.recall_at(ranked, set(), 10) == 0.0
    assert metrics.hit_at(ranked, {"b"}, 3) == 0.0
    assert metrics.hit_at(ranked, {"b"}, 4) == 1.0
    assert metrics.mrr_at(ranked, {"a", "b"}, 10) == 0.5
    assert metrics.mrr_at(ranked, {"b"}, 3) == 0.0


def test_percentile_and_mean():
    assert metrics.percentile([3, 1, 2], 50) == 2
    assert metrics.percentile([1, 2, 3, 4], 50) == 2.5
    assert metrics.percentile([1, 2, 3, 4, 5], 95) == pytest.approx(4.8)
    assert metrics.percentile([], 50) == 0.0
    assert metrics.mean([1, 2]) == 1.5 and metrics.mean([]) == 0.0
