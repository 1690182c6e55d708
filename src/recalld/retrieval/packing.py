"""Token-budget packing: the best hits that fit a budget, then parent context where it still fits.

    pass 1: hits in score order; a hit whose text (plus any expanded context) does not fit is
            dropped, or kept without its context when the text alone fits;
    pass 2: fact hits, best first, get their parent (the round, or the session) when the
            parent is not already in the result and the remaining budget holds it.

Tokens are counted with the embedding model's own tokenizer (the one the chunker sized chunks
with), so "fits in 2,000 tokens" means what the model would see; when counting fails the
chunk's stored `token_count` (or characters / 4) stands in. The packed total never exceeds the
budget (OpenMem's stage 6, with a real tokenizer instead of len / 4).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from recalld.embeddings.base import Embedder
from recalld.types import Chunk, Hit

logger = logging.getLogger(__name__)

Counter = Callable[[str], int]


def token_counter(embedder: Embedder) -> Counter:
    """The embedder's tokenizer as a counting function."""
    return embedder.count_tokens


def _counted(count: Counter, text: str, stored: int = 0) -> int:
    try:
        return int(count(text))
    except Exception:  # a remote model's counter may fail; packing must not
        logger.debug("token counting failed; using the stored count", exc_info=True)
        return stored or (len(text) + 3) // 4


def pack(
    hits: Sequence[Hit], budget: int, count: Counter, parents: dict[int, Chunk]
) -> tuple[list[Hit], dict[str, Any]]:
    """Pack hits into `budget` tokens.

    Args:
        hits: Ranked hits (their `context` may hold expanded text already).
        budget: The most tokens the packed texts and contexts may hold together.
        count: Counts the model's tokens in a text.
        parents: Parent chunks of the hits, by id.

    Returns:
        The kept hits (in their order, each with `explain["tokens"]`) and the packing report:
        `budget_tokens`, `used_tokens`, `dropped` hits and `context_dropped` parents.
    """
    used = 0
    kept: list[Hit] = []
    dropped: list[dict[str, Any]] = []
    context_dropped: list[dict[str, Any]] = []
    for hit in hits:
        text = _counted(count, hit.chunk.text, hit.chunk.token_count)
        extra = _counted(count, hit.context) if hit.context else 0
        if used + text + extra <= budget:
            used += text + extra
        elif used + text <= budget:
            context_dropped.append({"id": hit.chunk.id, "tokens": extra, "reason": "expanded"})
            hit.context = None
            hit.explain.pop("expanded", None)
            extra = 0
            used += text
        else:
            dropped.append({"id": hit.chunk.id, "tokens": text + extra})
            continue
        hit.explain["tokens"] = {"text": text, "context": extra}
        kept.append(hit)

    present = {h.chunk.id for h in kept}
    attached: dict[int, int] = {}  # parent id -> the hit that carries it
    refused: set[int] = set()  # parents that did not fit (reported once)
    for hit in kept:
        parent_id = hit.chunk.parent_id
        if hit.chunk.granularity != "fact" or hit.context is not None or parent_id is None:
            continue
        parent = parents.get(parent_id)
        if parent is None or parent_id in present or parent_id in refused:
            continue
        if parent_id in attached:
            hit.explain["tokens"]["context_with"] = attached[parent_id]
            continue
        tokens = _counted(count, parent.text, parent.token_count)
        if used + tokens > budget:
            context_dropped.append({"id": hit.chunk.id, "parent": parent_id, "tokens": tokens})
            refused.add(parent_id)
            continue
        used += tokens
        hit.context = parent.text
        hit.explain["expanded"] = {"parent": parent_id}
        hit.explain["tokens"]["context"] = tokens
        attached[parent_id] = hit.chunk.id
    report = {
        "budget_tokens": budget,
        "used_tokens": used,
        "hits": len(kept),
        "dropped": dropped,
        "context_dropped": context_dropped,
    }
    return kept, report
