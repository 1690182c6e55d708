"""Ranking metrics, as BEIR and the LoCoMo evidence-recall protocol define them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import numpy as np


def ndcg_at(ranked: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """NDCG@k with graded relevance and the log2(rank + 1) discount (BEIR's trec_eval)."""
    dcg = sum(
        relevance.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked[:k], start=1)
    )
    ideal = sorted((r for r in relevance.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(rank + 1) for rank, r in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """The share of relevant items found in the top k."""
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def hit_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """1 if any relevant item is in the top k."""
    return 1.0 if relevant.intersection(ranked[:k]) else 0.0


def mrr_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Reciprocal rank of the first relevant item in the top k, else 0."""
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean; 0 for no values."""
    return statistics.fmean(values) if values else 0.0


def randomization_p(
    a: Sequence[float], b: Sequence[float], rounds: int = 10_000, seed: int = 0
) -> float:
    """Two-sided p-value of a paired randomization (sign-flip) test on mean(a) - mean(b).

    Under the null hypothesis the two systems are exchangeable on every query, so each paired
    difference is as likely to have the opposite sign. The p-value is the share of `rounds`
    random sign assignments whose mean difference is at least as far from 0 as the observed
    one (with the observed assignment counted, so it is never 0). The seed makes it repeatable.
    """
    if len(a) != len(b):
        raise ValueError(f"paired scores differ in length: {len(a)} and {len(b)}")
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if not len(diffs) or not np.any(diffs):
        return 1.0
    observed = abs(float(diffs.mean())) - 1e-12  # ties count as "as extreme"
    rng = np.random.default_rng(seed)
    extreme = 0
    done = 0
    while done < rounds:
        batch = min(1000, rounds - done)
        signs = rng.integers(0, 2, size=(batch, len(diffs)), dtype=np.int8) * 2 - 1
        extreme += int(np.count_nonzero(np.abs(signs @ diffs) / len(diffs) >= observed))
        done += batch
    return (extreme + 1) / (rounds + 1)


def significance(
    paired: Mapping[str, Mapping[str, Sequence[float]]],
    baselines: Sequence[str] = ("bm25", "vector"),
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Every mode against every baseline on every metric: the mean difference and its p-value.

    Args:
        paired: Mode to metric to per-query scores, in the same query order for every mode.
        baselines: The modes each other mode is compared with (those that ran).

    Returns:
        `{mode: {"vs bm25": {metric: {"delta": …, "p": …}}}}`.
    """
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for mode, scores in paired.items():
        for base in baselines:
            if base == mode or base not in paired:
                continue
            against = out.setdefault(mode, {}).setdefault(f"vs {base}", {})
            for metric, values in scores.items():
                other = paired[base][metric]
                against[metric] = {
                    "delta": round(mean(values) - mean(other), 4),
                    "p": round(randomization_p(values, other), 4),
                }
    return out
