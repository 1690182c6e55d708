"""The eval gate: held-back pseudo-queries (never trained on) decide whether a tuned model
goes into production. Both models are measured as they would run, int8 ONNX, on the same pool:
the held-back positives among distractor chunks from the store."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from recalld.embeddings.base import Embedder
from recalld.tune.mining import Pair

CUTOFF = 10


@dataclass(frozen=True)
class Figures:
    """Vector-route Recall@10 and MRR@10 on the held-back pseudo-queries."""

    recall: float
    mrr: float
    queries: int
    pool: int


@dataclass(frozen=True)
class Verdict:
    """The gate's decision with the figures behind it."""

    accepted: bool
    before: Figures
    after: Figures
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "reason": self.reason,
            "before": asdict(self.before),
            "after": asdict(self.after),
            "recall_before": self.before.recall,
            "recall_after": self.after.recall,
            "mrr_before": self.before.mrr,
            "mrr_after": self.after.mrr,
        }


def measure(embedder: Embedder, pairs: Sequence[Pair], distractors: Sequence[str]) -> Figures:
    """Rank each held-back query's positive among the other documents' positives and the
    distractors (blocking: model inference). The positive of another pseudo-query from the same
    document is no competitor: it is the same document, and where chunks overlap it holds the
    query's words verbatim, so it would count a right answer as a miss for either model."""
    if not pairs:
        return Figures(0.0, 0.0, 0, len(distractors))
    documents = embedder.embed([p.positive for p in pairs] + list(distractors))
    queries = embedder.embed([p.query for p in pairs])
    scores = queries @ documents.T
    own = scores[np.arange(len(pairs)), np.arange(len(pairs))]
    ids = np.array([p.document_id for p in pairs])
    sibling = np.zeros(scores.shape, dtype=bool)
    sibling[:, : len(pairs)] = ids[:, None] == ids[None, :]  # the own positive too: not above
    ranks = ((scores > own[:, None]) & ~sibling).sum(axis=1)  # 0 = first
    hit = ranks < CUTOFF
    recall = float(hit.mean())
    mrr = float(np.where(hit, 1.0 / (ranks + 1), 0.0).mean())
    return Figures(round(recall, 4), round(mrr, 4), len(pairs), len(documents))


def decide(before: Figures, after: Figures) -> Verdict:
    """Accept only a model that raises MRR@10 without lowering Recall@10."""
    if before.queries == 0:
        return Verdict(False, before, after, "no held-back pseudo-queries to judge by")
    if after.mrr > before.mrr and after.recall >= before.recall:
        return Verdict(True, before, after, "beats the current model")
    return Verdict(
        False,
        before,
        after,
        f"does not beat the current model (MRR@10 {before.mrr} -> {after.mrr}, "
        f"Recall@10 {before.recall} -> {after.recall})",
    )
