"""The ranking stages, in the order a search runs them: the one place that order is written.

After recall, fusion and the gate (`retrieval.recall`), each enabled stage of `STAGES` runs on
the candidates in turn; then the hits are expanded and packed. The README's stage list is
checked against `STAGES` by a test. To add a stage: write one `pipeline.Stage` subclass and
add one line here.
"""

from __future__ import annotations

from recalld.retrieval.activation import Activation
from recalld.retrieval.answerability import AnswerabilityCheck
from recalld.retrieval.covered import DropCovered
from recalld.retrieval.diversity import MMR, Dedup
from recalld.retrieval.neighbours import NeighbourSupport
from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.retrieval.rerank import Rerank
from recalld.retrieval.sessions import SessionFirst
from recalld.retrieval.status import StatusPenalty
from recalld.retrieval.temporal import TimeBoost


class Limit(Stage):
    """Keep the best `limit` candidates."""

    name = "limit"

    def enabled(self, query: Query) -> bool:
        return True

    def reads_every_chunk(self, query: Query) -> bool:
        return False

    async def run(self, query: Query, found: Candidates) -> None:
        await found.load(query.limit)  # the hits' chunks, and every later stage's
        found.order = found.order[: query.limit]


STAGES: tuple[Stage, ...] = (
    Activation(),  # search.activation: links from the best candidates add chunks
    SessionFirst(),  # search.session_first: sessions in place of their turns
    TimeBoost(),  # the query's time words boost the candidates in their range
    Rerank(),  # MemX's recency, frequency and importance factors
    StatusPenalty(),  # superseded and contradicted chunks rank down
    NeighbourSupport(),  # search.neighbour_support: rounds lifted by their adjacent rounds
    DropCovered(),  # search.drop_covered: no hit whose turns finer hits above point to
    Dedup(),  # identical texts once
    MMR(),  # search.mmr: diverse hits
    Limit(),  # the best `limit`
    AnswerabilityCheck(),  # do the top hits belong to the people the query names?
)
