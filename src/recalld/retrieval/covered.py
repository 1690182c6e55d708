"""Covered turns: a conversation hit leaves when finer hits above it already point to its turns.

A conversation is stored at several granularities at once: its sessions (or their parts), each
round, each fact drawn from a round (and, with turn windows, a window per turn). Every such
chunk's `turn_ids` say which turns of its log it stands for; a fact stands for its round's. A
search over all of them returns the same turns again and again: a round below one of its own
facts (both hold the query's words), a session below its rounds. With `search.drop_covered`, a
candidate leaves when every one of its turns is already pointed to by candidates ranked above
it that are *finer* than it (fact < round, window < session):

    fact "Ana adopted a beagle"  (D1:1, D1:2)       kept
    round D1:1-D1:2                                  leaves: its turns are both above
    session 1 (D1:1 ... D1:8)                        kept: D1:3 ... D1:8 are new

Only finer hits count. A finer hit is shorter, so a reader who takes hits best first within a
budget of words has it whenever the coarser hit would have fit; a coarser hit above may be
skipped for its length, and its parts are then what is left of those turns. Hits of the same
granularity never drop each other: two facts of one round are two statements, and the pieces
of a chunk split for length share its turn ids. Chunks without turn ids (documents, memories)
neither leave nor cover. The fact that stays can still bring its round back as context
(`expand`, or packing's parent pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.types import Chunk

# How fine each granularity that stands for turns is: a hit is covered only by finer ones.
FINENESS = {"fact": 0, "round": 1, "window": 1, "session": 2}

Turn = tuple[int, str]  # (document id, turn id): turn ids are unique only within their log


def _turns(chunk: Chunk) -> frozenset[Turn]:
    return frozenset((chunk.document_id, str(t)) for t in chunk.meta.get("turn_ids") or ())


def drop_covered(ids: Sequence[int], chunks: Mapping[int, Chunk]) -> tuple[list[int], set[int]]:
    """Drop each id whose turns are all among those of kept ids above it of a finer
    granularity (`FINENESS`).

    Returns:
        The kept ids in their order, and the dropped ones.
    """
    above: dict[int, set[Turn]] = {level: set() for level in FINENESS.values()}
    kept: list[int] = []
    dropped: set[int] = set()
    for cid in ids:
        chunk = chunks[cid]
        level = FINENESS.get(chunk.granularity)
        turns = _turns(chunk)
        if level is None or not turns:
            kept.append(cid)
            continue
        finer: set[Turn] = set()
        for lower in range(level):
            finer |= above[lower]
        if turns <= finer:
            dropped.add(cid)
            continue
        kept.append(cid)
        above[level] |= turns
    return kept, dropped


class DropCovered(Stage):
    """`search.drop_covered`: a candidate whose turns finer candidates above it already
    point to leaves."""

    name = "covered"

    def enabled(self, query: Query) -> bool:
        return query.settings.drop_covered

    def reads_every_chunk(self, query: Query) -> bool:
        return query.settings.mmr  # else the candidates up to the `limit` it keeps

    async def run(self, query: Query, found: Candidates) -> None:
        if query.settings.mmr:  # MMR chooses among every candidate: look at them all
            found.order, dropped = drop_covered(found.order, found.chunks)
            found.summary["covered"] = len(dropped)
            return
        # Without MMR only the first `limit` are returned: read as far as it takes to keep
        # `limit`, as many more each time as were dropped; the rest keep their place after.
        keep, seen = query.limit, query.limit
        while True:
            await found.load(seen)
            head = found.order[:seen]
            kept, dropped = drop_covered(head, found.chunks)
            if len(kept) >= keep or seen >= len(found.order):
                break
            seen += keep - len(kept)
        found.order = kept + found.order[len(head) :]
        found.summary["covered"] = len(dropped)
