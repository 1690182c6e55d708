import numpy as np

from recalld.retrieval import diversity


def unit(*xs):
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_mmr_prefers_a_diverse_second_pick():
    vectors = {1: unit(1, 0), 2: unit(1, 0.01), 3: unit(0, 1)}
    scores = {1: 1.0, 2: 0.95, 3: 0.9}
    # lam=0.5: after 1, item 2 scores 0.5*0.5 - 0.5*~1 < 0; item 3 scores 0.5*0 - 0 = 0.
    assert diversity.mmr([1, 2, 3], scores, vectors, lam=0.5, limit=2) == [1, 3]
    # lam=1 is pure relevance.
    assert diversity.mmr([1, 2, 3], scores, vectors, lam=1.0, limit=3) == [1, 2, 3]


def test_mmr_hand_computed_values():
    vectors = {1: unit(1, 0), 2: unit(0.6, 0.8), 3: unit(0, 1)}
    scores = {1: 3.0, 2: 2.0, 3: 1.0}
    # rel = {1: 1, 2: 0.5, 3: 0}; lam = 0.7.
    # After 1: item 2 = 0.35 - 0.3*0.6 = 0.17; item 3 = 0 - 0 = 0 -> pick 2.
    assert diversity.mmr([1, 2, 3], scores, vectors, lam=0.7, limit=2) == [1, 2]
    # lam = 0.4: item 2 = 0.2 - 0.6*0.6 = -0.16; item 3 = 0 -> pick 3.
    assert diversity.mmr([1, 2, 3], scores, vectors, lam=0.4, limit=2) == [1, 3]


def test_mmr_handles_missing_vectors_and_empty_input():
    assert diversity.mmr([], {}, {}, 0.5, 3) == []
    assert diversity.mmr([1, 2], {1: 1.0, 2: 0.5}, {}, 0.5, 5) == [1, 2]


def test_dedup_drops_identical_content_keeping_the_first():
    texts = {1: "Hello  world", 2: "hello world", 3: "other"}
    assert diversity.dedup([1, 2, 3], texts) == [1, 3]


def test_dedup_stops_once_it_keeps_enough():
    texts = {1: "a", 2: "A", 3: "b", 4: "c", 5: "d"}
    assert diversity.dedup([1, 2, 3, 4, 5], texts, keep=2) == [1, 3]
    assert diversity.dedup([1, 2, 3, 4, 5], texts, keep=9) == [1, 3, 4, 5]
    # Only the texts looked at are read.
    assert diversity.dedup([1, 3, 99], texts, keep=2) == [1, 3]


def test_only_mmr_runs_between_dedup_and_limit():
    # Dedup stops at `limit` kept candidates unless MMR, which chooses among all of them,
    # runs before `limit` cuts the list.
    from recalld.retrieval.stages import STAGES

    names = [stage.name for stage in STAGES]
    assert names[names.index("dedup") + 1 : names.index("limit")] == ["mmr"]
