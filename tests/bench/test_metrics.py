import math

import pytest

from bench import metrics


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


def test_randomization_p_tells_a_real_difference_from_noise():
    better = [1.0] * 30
    worse = [0.0] * 30
    # Every one of 30 pairs favours one side: only the observed assignment is as extreme.
    assert metrics.randomization_p(better, worse) < 0.001
    # Identical systems: no evidence at all.
    assert metrics.randomization_p(better, better) == 1.0
    # Half the pairs each way by the same amount: the mean difference is 0.
    mixed = [1.0, 0.0] * 15
    assert metrics.randomization_p(mixed, mixed[::-1]) == 1.0
    # One win in 30 is what chance gives: far from significant.
    one = [0.0] * 29 + [1.0]
    assert metrics.randomization_p(one, [0.0] * 30) > 0.5
    # Seeded: the same inputs give the same p.
    noisy_a = [0.1 * (i % 7) for i in range(40)]
    noisy_b = [0.1 * (i % 5) for i in range(40)]
    assert metrics.randomization_p(noisy_a, noisy_b) == metrics.randomization_p(noisy_a, noisy_b)
    with pytest.raises(ValueError, match="length"):
        metrics.randomization_p([1.0], [1.0, 0.0])


def test_significance_compares_every_mode_with_both_routes():
    paired = {
        "bm25": {"ndcg@10": [0.5] * 20},
        "vector": {"ndcg@10": [0.4] * 20},
        "full": {"ndcg@10": [0.6] * 20},
    }
    out = metrics.significance(paired)
    assert set(out) == {"bm25", "vector", "full"}
    assert set(out["full"]) == {"vs bm25", "vs vector"}
    assert out["full"]["vs bm25"]["ndcg@10"]["delta"] == pytest.approx(0.1)
    assert out["full"]["vs bm25"]["ndcg@10"]["p"] < 0.001
    assert set(out["bm25"]) == {"vs vector"}  # never against itself
