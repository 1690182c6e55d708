"""The low-confidence gate (MemX rule R1) and the relevance tier of every result set.

R1 rejects a result set only when *both* signals are weak: no keyword hit and a best vector
similarity below tau. Tau depends on the embedding model (MiniLM's unrelated texts sit near
0.05, Qwen3's near 0.4), so it is calibrated per model from the similarities of sentences that
share no topic (`calibrate`) rather than hard-coded.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from recalld.types import Tier

# Sentences about unrelated topics: the pairwise similarities of their embeddings show how
# similar a model finds texts that have nothing to do with each other.
PROBE_SENTENCES: tuple[str, ...] = (
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Quarterly revenue grew by eight percent despite supply shortages.",
    "The goalkeeper saved a penalty in the final minute of the match.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "Please restart the router if the connection keeps dropping.",
    "The novel follows a family across three generations in Sicily.",
    "Interest rates were left unchanged by the central bank.",
    "My grandmother knitted this scarf for me last winter.",
    "The compiler reports a type error on line forty-two.",
    "Whales communicate over long distances using low-frequency sounds.",
    "The museum opens at nine and closes at five on weekdays.",
    "He practised the violin for three hours before the concert.",
    "Volcanic ash grounded flights across northern Europe.",
    "Add the new dependency to the lock file and run the tests.",
    "The toddler refused to eat anything green at dinner.",
    "Ancient Romans built aqueducts to carry water into cities.",
    "The hiking trail climbs steeply through pine forest to the ridge.",
    "She negotiated a higher salary before accepting the offer.",
    "Vaccines train the immune system to recognise a pathogen.",
    "The parking garage is closed for repairs until Monday.",
    "Jazz musicians often improvise over a chord progression.",
    "The satellite entered orbit after a twelve-minute burn.",
    "Tomatoes need plenty of sun and regular watering.",
    "Our landlord finally fixed the leaking bathroom tap.",
)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per-model thresholds on cosine similarity.

    Attributes:
        tau: Below this, a vector match is no evidence of relevance (R1's threshold).
        high: At or above this, a match is strong evidence.
    """

    tau: float
    high: float


def calibrate(probe_vectors: npt.NDArray[np.float32]) -> Calibration:
    """Thresholds from the similarities of unrelated probe sentences (`PROBE_SENTENCES`).

    Tau sits two standard deviations above the mean unrelated similarity, and `high` halfway
    from tau to 1. On MiniLM this gives tau = 0.17: off-topic questions score 0.09-0.18 there
    while true paraphrases can score as low as 0.17, so a higher tau rejects answerable
    questions (measured in tests/retrieval/test_paraphrase.py).
    """
    sims = probe_vectors @ probe_vectors.T
    upper = sims[np.triu_indices(len(probe_vectors), k=1)]
    mean = statistics.fmean(float(s) for s in upper)
    spread = statistics.pstdev(float(s) for s in upper)
    tau = min(0.9, mean + 2.0 * spread)
    return Calibration(tau=round(tau, 3), high=round(tau + (1.0 - tau) / 2.0, 3))


def should_reject(keyword_hit: bool, best_similarity: float | None, tau: float) -> bool:
    """MemX R1: reject when there is no keyword hit and no vector match reaches tau."""
    return not keyword_hit and (best_similarity is None or best_similarity < tau)


def tier(keyword_hit: bool, best_similarity: float | None, calibration: Calibration) -> Tier:
    """How much to trust a result set: both signals strong, one of them, or neither."""
    sim = best_similarity if best_similarity is not None else -1.0
    if sim >= calibration.high or (keyword_hit and sim >= calibration.tau):
        return "high"
    if keyword_hit or sim >= calibration.tau:
        return "medium"
    return "low"


def best_of(values: Sequence[float]) -> float | None:
    """The largest value, or None for an empty sequence."""
    return max(values) if values else None
