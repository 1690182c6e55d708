import numpy as np
import pytest

from recalld.retrieval import gate, rerank


def test_recency_halves_every_half_life():
    assert rerank.recency(0, 30) == 1.0
    assert rerank.recency(30, 30) == pytest.approx(0.5)
    assert rerank.recency(90, 30) == pytest.approx(0.125)


def test_frequency_is_memx_equation_3():
    # min(1, ln(c + 1) / 10): saturates only at e^10 - 1 (about 22,000) retrievals.
    assert rerank.frequency(0) == 0.0
    assert rerank.frequency(100) == pytest.approx(np.log(101) / 10)
    assert rerank.frequency(22_026) == pytest.approx(1.0, abs=1e-4)
    assert rerank.frequency(10**6) == 1.0


def test_zscore_sigmoid():
    out = rerank.zscore_sigmoid([1.0, 2.0, 3.0])
    assert out[1] == pytest.approx(0.5)
    assert out[0] == pytest.approx(1 / (1 + np.exp(np.sqrt(1.5))))
    assert rerank.zscore_sigmoid([2.0, 2.0]) == [2.0, 2.0]


def test_rerank_scores_reports_each_enabled_factor():
    cands = [rerank.Factors(1.0, 0, 0, 0.5), rerank.Factors(0.0, 30, 100, 1.0)]
    weights = rerank.Weights(recency=0.25, half_life_days=30, frequency=0.05, importance=0.1)
    scored = rerank.rerank_scores(cands, weights)
    (s0, p0), (s1, p1) = scored
    assert set(p0) == {"semantic", "recency", "frequency", "importance"}
    assert p1["recency"] == pytest.approx(0.125)
    assert p1["frequency"] == pytest.approx(0.05 * np.log(101) / 10)
    # MemX eq. 4: the composite is z-scored and squashed, so the order follows the composite.
    composite = [sum(p0.values()), sum(p1.values())]
    assert (s0 > s1) == (composite[0] > composite[1])
    assert 0 < s1 < 0.5 < s0 < 1
    only_semantic = rerank.rerank_scores(cands, rerank.Weights())
    assert set(only_semantic[0][1]) == {"semantic"}
    assert not rerank.Weights().any_factor()
    assert not rerank.Weights(recency=0.25, half_life_days=0).any_factor()


def test_frequency_factor_can_reorder_close_candidates():
    # Two near-equal semantic scores: the often-retrieved one wins once frequency is on.
    cands = [
        rerank.Factors(0.50, 0, 0, 0.5),
        rerank.Factors(0.49, 0, 500, 0.5),
        rerank.Factors(0.1, 0, 0, 0.5),
    ]
    base = [s for s, _ in rerank.rerank_scores(cands, rerank.Weights())]
    used = [s for s, _ in rerank.rerank_scores(cands, rerank.Weights(frequency=0.5))]
    assert base[0] > base[1]
    assert used[1] > used[0]


def test_rule_r1_rejects_only_when_both_signals_are_weak():
    assert gate.should_reject(False, 0.2, 0.3)
    assert gate.should_reject(False, None, 0.3)
    assert not gate.should_reject(True, 0.2, 0.3)
    assert not gate.should_reject(False, 0.35, 0.3)


def test_tiers():
    cal = gate.Calibration(tau=0.3, high=0.65)
    assert gate.tier(False, 0.7, cal) == "high"
    assert gate.tier(True, 0.4, cal) == "high"
    assert gate.tier(False, 0.4, cal) == "medium"
    assert gate.tier(True, 0.1, cal) == "medium"
    assert gate.tier(False, 0.1, cal) == "low"


def test_calibrate_from_unrelated_vectors():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(24, 64)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    cal = gate.calibrate(vecs)
    # Random 64-d unit vectors: mean ~0, sd ~1/8 -> tau ~0.25.
    assert 0.15 < cal.tau < 0.4
    assert cal.tau < cal.high < 1.0
