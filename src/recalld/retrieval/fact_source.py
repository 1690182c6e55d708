"""Facts with their source turn: match small, return big (issue 14, item 3).

A fact ("Caroline researched adoption agencies.") matches a question better than the dialogue
it was drawn from, but returned alone it loses its context: the words as said, and who said
them. With `search.fact_source` on, each fact hit carries its source turn as `context`
("Caroline: Researching adoption agencies — it's been a dream..."): the turn of the fact's
round, said by the fact's speaker when it has one, that shares most of the fact's words. The
fact keeps its rank; packing counts the turn against the budget like any context. A hit that
already has context (expansion) keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence

from recalld.retrieval.answerability import stem, turns_of, words_of
from recalld.storage.contract import Store
from recalld.types import Chunk, Hit


def source_turn(fact: Chunk, round_chunk: Chunk) -> tuple[str, str, str] | None:
    """(turn id, speaker, text) of the round's turn the fact was drawn from: among the turns
    of its speaker (every turn when it names none, or none of them are), the one sharing most
    of its words, the first on a tie; None when no turn shares a word."""
    turns = turns_of(round_chunk)
    speakers = [str(s) for s in fact.meta.get("speakers") or []]
    if len(speakers) == 1:
        own = [t for t in turns if stem(t[1]) == stem(speakers[0])]
        turns = own or turns
    words = words_of(fact.text)
    best, best_overlap = None, 0
    for turn in turns:
        overlap = len(words & words_of(turn[2]))
        if overlap > best_overlap:
            best, best_overlap = turn, overlap
    return best


async def attach(store: Store, hits: Sequence[Hit]) -> None:
    """Give every fact hit without context its source turn as context."""
    facts = [h for h in hits if h.chunk.granularity == "fact" and h.context is None]
    parent_ids = [h.chunk.parent_id for h in facts if h.chunk.parent_id is not None]
    if not parent_ids:
        return
    parents = await store.read(lambda c: c.chunks_by_id(parent_ids))
    for hit in facts:
        parent = parents.get(hit.chunk.parent_id) if hit.chunk.parent_id is not None else None
        found = source_turn(hit.chunk, parent) if parent is not None else None
        if found is None or parent is None:
            continue
        turn, speaker, text = found
        hit.context = f"{speaker}: {text}"
        hit.explain["source_turn"] = {"round": parent.id, "turn": turn}
