"""Neighbour support: a conversation round is pulled up toward its best-scoring adjacent round.

A round is two turns, and it is cut wherever the conversation's first speaker speaks again:
when the second speaker asks a question, the answer opens the *next* round (about a third of
LoCoMo's evidence turns). The question's round then matches the query and the answer's round
does not. With `search.neighbour_support = w`, each candidate round adjacent in time to a
better-scoring candidate (a `temporal` link: ingest links each round to the next one) takes
a share of the difference:

    score' = score + w x max(0, best adjacent score - score)

so a round never passes the neighbour that lifted it (the support is bounded by its lead), a
round whose neighbours score lower keeps its score, and the result does not depend on the
scale or offset of the scores. Only candidates support each other: nothing is added, and
chunks without temporal links (documents, memories, facts, windows) keep their score. Each
lifted round's `explain` says which neighbour lifted it and by how much.

With `search.neighbour_through_parent`, a chunk without temporal links of its own whose
parent has them (a fact, or a window, and its round) takes its parent's place in time: the
candidates at one place (a round and its facts) support, and are supported by, the candidates
at the adjacent places by the best score among them. A fact drawn from the answer's round is
then lifted by its question's round or facts, as the answer's round is. Nothing changes where
no candidate has such a parent (rounds only; documents and memories have no temporal links).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.storage.records import Link

TEMPORAL = "temporal"
PARENT = "parent"  # child -> parent
ROUND = "round"


@dataclass(frozen=True, slots=True)
class Lift:
    """How a candidate was pulled up: by which neighbour, by how much."""

    neighbour: int
    support: float

    def as_dict(self) -> dict[str, Any]:
        """For `explain`."""
        return {"neighbour": self.neighbour, "support": round(self.support, 6)}


def adjacency(links: Iterable[Link], candidates: Iterable[int]) -> dict[int, set[int]]:
    """Each candidate's neighbours in time among the candidates (`temporal` links, both ways)."""
    inside = set(candidates)
    out: dict[int, set[int]] = {}
    for src, dst, relation, _ in links:
        if relation == TEMPORAL and src in inside and dst in inside and src != dst:
            out.setdefault(src, set()).add(dst)
            out.setdefault(dst, set()).add(src)
    return out


def places(links: Iterable[Link], candidates: Iterable[int]) -> dict[int, int]:
    """Each candidate's place in time: itself when it has a temporal link, else its parent
    when that has one (`links` must hold the links touching the candidates and their
    parents); candidates with neither have no place."""
    timed: set[int] = set()
    parent: dict[int, int] = {}
    for src, dst, relation, _ in links:
        if relation == TEMPORAL and src != dst:
            timed.update((src, dst))
        elif relation == PARENT:
            parent[src] = dst
    out: dict[int, int] = {}
    for cid in candidates:
        if cid in timed:
            out[cid] = cid
        elif parent.get(cid) in timed:
            out[cid] = parent[cid]
    return out


def pull_by_place(
    order: list[int],
    scores: Mapping[int, float],
    links: Iterable[Link],
    place: Mapping[int, int],
    weight: float,
) -> tuple[list[int], dict[int, float], dict[int, Lift]]:
    """`pull`, with each candidate at its place (`places`) and each place scored by its best
    candidate: a candidate is pulled toward the best candidate at a place adjacent to its own.

    Every lift is computed from the scores before any lift; ties go to the lower id.
    """
    best: dict[int, int] = {}  # place -> its best candidate
    for cid in order:
        at = place.get(cid)
        if at is not None and (
            at not in best or (-scores[cid], cid) < (-scores[best[at]], best[at])
        ):
            best[at] = cid
    adjacent = adjacency(links, best)
    around = {cid: {best[p] for p in adjacent.get(place[cid], ())} for cid in order if cid in place}
    return pull(order, scores, around, weight)


def pull(
    order: list[int],
    scores: Mapping[int, float],
    neighbours: Mapping[int, set[int]],
    weight: float,
) -> tuple[list[int], dict[int, float], dict[int, Lift]]:
    """Pull each candidate `weight` of the way up to its best adjacent candidate's score.

    Every lift is computed from the scores before any lift (the order of the candidates does
    not matter), ties on the best neighbour go to the lower id.

    Returns:
        The new order (best first), the scores, and each lifted candidate's `Lift`.
    """
    new = dict(scores)
    lifts: dict[int, Lift] = {}
    for cid in order:
        around = neighbours.get(cid)
        if not around:
            continue
        best = min(around, key=lambda n: (-scores[n], n))
        gap = scores[best] - scores[cid]
        if gap > 0:
            lifts[cid] = Lift(best, weight * gap)
            new[cid] = scores[cid] + weight * gap
    return sorted(order, key=lambda c: (-new[c], c)), new, lifts


class NeighbourSupport(Stage):
    """`search.neighbour_support`: rounds pulled up toward their best adjacent round (and,
    with `search.neighbour_through_parent`, facts and windows with their round)."""

    name = "neighbours"

    def enabled(self, query: Query) -> bool:
        return query.settings.neighbour_support > 0

    def reads_every_chunk(self, query: Query) -> bool:
        return False  # only the links between the candidates

    def reads_links(self, query: Query) -> bool:
        return True  # read with the candidates: one read fewer

    def reads_parents_links(self, query: Query) -> bool:
        return query.settings.neighbour_through_parent  # with them: no read of their own

    async def run(self, query: Query, found: Candidates) -> None:
        # The links are read only when a round (or, through parents, a chunk with a parent)
        # is among the chunks read so far (the first `limit`): a search of documents or
        # memories has no temporal links to follow.
        through = query.settings.neighbour_through_parent
        if len(found.order) < 2 or not any(
            c.granularity == ROUND or (through and c.parent_id is not None)
            for c in found.chunks.values()
        ):
            return
        order = found.order
        weight = query.settings.neighbour_support
        if through:
            links = await found.links_through_parents(order)
            place = places(links, order)
            found.order, found.scores, lifts = pull_by_place(
                order, found.scores, links, place, weight
            )
        else:
            neighbours = adjacency(await found.links_touching(order), order)
            if not neighbours:
                return
            found.order, found.scores, lifts = pull(order, found.scores, neighbours, weight)
        found.notes(self.name).update({c: lift.as_dict() for c, lift in lifts.items()})
