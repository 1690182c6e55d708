"""Spreading activation over links from the fused hits (OpenMem's stage 3; issue 8, part 2).

The best fused hits are the seeds; their activation is their fused score divided by the best
one (OpenMem normalises its BM25 seeds the same way). Activation then spreads over links in
both directions, `hops` times:

    activated_neighbour = source_activation x edge_weight x decay_per_hop

and where several paths reach a chunk, the highest value wins. Reached chunks join the
candidates with a score of activation x the best fused score; a candidate that was already
there keeps the higher of its own score and its activation. `explain` records, for every chunk
activation reached, the seed it came from, the relation it came over and the hop count.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.storage.contract import Store
from recalld.storage.records import Link
from recalld.types import Filters


@dataclass(frozen=True, slots=True)
class Reached:
    """How activation reached a chunk: from which seed, over which relation, in how many hops."""

    activation: float
    seed: int
    via: int
    relation: str
    hops: int

    def as_dict(self) -> dict[str, float | int | str]:
        """For `explain`."""
        return {
            "activation": round(self.activation, 4),
            "seed": self.seed,
            "via": self.via,
            "relation": self.relation,
            "hops": self.hops,
        }


async def spread(
    seeds: dict[int, float],
    edges: Callable[[Sequence[int]], Awaitable[Sequence[Link]]],
    hops: int = 2,
    decay: float = 0.5,
) -> dict[int, Reached]:
    """Spread activation from `seeds` (`{chunk id: activation in 0..1}`).

    Args:
        seeds: Starting activations.
        edges: Every link touching a set of chunks (`Reader.links_touching`).
        hops: How far activation travels.
        decay: Factor per hop.

    Returns:
        The chunks reached that are not seeds, with how they were reached (max wins).
    """
    best: dict[int, Reached] = {
        cid: Reached(act, cid, cid, "seed", 0) for cid, act in seeds.items()
    }
    frontier = dict(best)
    for hop in range(1, hops + 1):
        if not frontier:
            break
        found: dict[int, Reached] = {}
        for src, dst, relation, weight in await edges(sorted(frontier)):
            # Links are traversed both ways.
            for here, there in ((src, dst), (dst, src)):
                origin = frontier.get(here)
                if origin is None:
                    continue
                value = origin.activation * weight * decay
                current = found.get(there) or best.get(there)
                if value > 0 and (current is None or value > current.activation):
                    found[there] = Reached(value, origin.seed, here, relation, hop)
        frontier = {}
        for cid, reached in found.items():
            current = best.get(cid)
            if current is None or reached.activation > current.activation:
                best[cid] = reached
                frontier[cid] = reached
    return {cid: r for cid, r in best.items() if cid not in seeds}


def merge(
    order: list[int], fused: dict[int, float], reached: dict[int, Reached]
) -> tuple[list[int], dict[int, float]]:
    """Add the reached chunks to the candidates, scaled to the fused scores (max wins).

    Returns:
        The new order (best first) and scores.
    """
    top = max((fused[c] for c in order), default=0.0)
    scores = dict(fused)
    for cid, hit in reached.items():
        scores[cid] = max(scores.get(cid, float("-inf")), hit.activation * top)
    merged = list(dict.fromkeys([*order, *reached]))
    return sorted(merged, key=lambda c: (-scores[c], c)), scores


async def activate(
    store: Store,
    order: list[int],
    fused: dict[int, float],
    filters: Filters,
    seeds: int,
    hops: int,
    decay: float,
) -> tuple[list[int], dict[int, float], dict[int, Reached]]:
    """The search stage: spread from the best `seeds` candidates and merge what is reached.

    Reached chunks that the search's filters exclude are dropped.
    """
    top = order[:seeds]
    best = max(fused[c] for c in top)
    low = min(fused[c] for c in top)
    # Seeds in 0..1 by the best score (OpenMem); shifted first if fused scores go negative.
    shift = -low if low < 0 else 0.0
    scale = best + shift or 1.0
    seed_acts = {c: (fused[c] + shift) / scale for c in top}
    async with store.reading() as conn:

        async def edges(ids: Sequence[int]) -> Sequence[Link]:
            return await conn.links_touching(ids)

        reached = await spread(seed_acts, edges, hops, decay)
        # Candidates already passed the filters; chunks new to the search must pass them too.
        new = sorted(c for c in reached if c not in fused)
        kept = await conn.chunks_matching(new, filters) if new else set()
        reached = {c: r for c, r in reached.items() if c in fused or c in kept}
    new_order, scores = merge(order, fused, reached)
    return new_order, scores, reached


class Activation(Stage):
    """`search.activation`: reached chunks join the candidates; each says how it was reached."""

    name = "activation"
    when_off: ClassVar[Mapping[str, Any]] = {"activation": None}

    def enabled(self, query: Query) -> bool:
        return query.settings.activation

    async def run(self, query: Query, found: Candidates) -> None:
        reached: dict[int, Reached] = {}
        if found.order:
            opts = query.settings
            found.order, found.fused, reached = await activate(
                found.store,
                found.order,
                found.fused,
                query.filters,
                opts.activation_seeds,
                opts.activation_hops,
                opts.activation_decay,
            )
            found.scores = dict(found.fused)
            await found.load()
        notes = found.notes(self.name)
        for cid, how in reached.items():
            notes[cid] = how.as_dict()
        found.summary["activation"] = len(reached)
