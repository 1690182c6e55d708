"""OpenMem's status penalty: superseded and contradicted chunks rank down (issue 8, part 3).

Unless the query asks about the past ("where did she live before", "what was his first job"):
then the older value is what is wanted, and nothing is penalised.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from recalld.retrieval.pipeline import Candidates, Query, Stage

PENALTY = {"active": 1.0, "superseded": 0.5, "contradicted": 0.3}

_PAST = re.compile(
    r"\b(?:used to|before|previous(?:ly)?|originally|original|first|formerly|former|earlier|"
    r"initially|at first|back then|in the past|no longer|any ?more|prior|"
    r"(?:did|was|were|had)\b(?:\s+\w+){0,3}\s+(?:live|living|work|working|stay|staying|"
    r"reside|residing|use|using|prefer|like|own|date|dating|study|studying|move|moved))\b",
    re.IGNORECASE,
)


def asks_about_past(query: str) -> bool:
    """Whether the query asks about an earlier state ("used to", "before", "did ... live")."""
    return _PAST.search(query) is not None


def penalty(status: str) -> float:
    """The score factor for a status (1 for statuses the penalty does not know)."""
    return PENALTY.get(status, 1.0)


def apply(
    order: list[int], scores: dict[int, float], statuses: dict[int, str], query: str
) -> tuple[list[int], dict[int, float], dict[int, float]]:
    """Multiply each candidate's score by its status penalty, unless the query asks about the
    past. Scores are made positive first (fused scores may be negative), so a penalty always
    lowers a score.

    Returns:
        The new order, scores, and the factor of each penalised candidate (for `explain`).
    """
    factors = {c: penalty(statuses.get(c, "active")) for c in order}
    factors = {c: f for c, f in factors.items() if f != 1.0}
    if not factors or asks_about_past(query):
        return order, scores, {}
    low = min(scores[c] for c in order)
    shift = -low if low < 0 else 0.0
    new = dict(scores)
    for cid, factor in factors.items():
        new[cid] = (scores[cid] + shift) * factor - shift
    return sorted(order, key=lambda c: (-new[c], c)), new, factors


class StatusPenalty(Stage):
    """`search.status_penalty`: superseded and contradicted candidates rank down."""

    name = "status_penalty"
    when_off: ClassVar[Mapping[str, Any]] = {"asks_about_past": None}

    def enabled(self, query: Query) -> bool:
        return query.settings.status_penalty

    def reads_every_chunk(self, query: Query) -> bool:
        return False  # their statuses only

    async def run(self, query: Query, found: Candidates) -> None:
        if found.order:
            statuses = {c: found.status_of(c) for c in found.order}
            found.order, found.scores, penalised = apply(
                found.order, found.scores, statuses, query.text
            )
            found.notes(self.name).update(penalised)
        found.summary["asks_about_past"] = asks_about_past(query.text)
