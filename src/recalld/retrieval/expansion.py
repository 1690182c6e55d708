"""Expansion: each ranked hit gets its surrounding text as `context` (`search.expand`).

A document chunk gets its `window` neighbours on each side; a round or a fact gets its parent
chunk. Packing (`packing.py`) then counts that context against the token budget.
"""

from __future__ import annotations

from recalld.storage.contract import Store
from recalld.types import Hit


async def expand(store: Store, hits: list[Hit], window: int) -> None:
    """Attach neighbouring chunks (documents) or the parent chunk (rounds and facts)."""
    async with store.reading() as conn:
        for hit in hits:
            chunk = hit.chunk
            if chunk.parent_id is not None:
                parent = await conn.chunks_by_id([chunk.parent_id])
                if chunk.parent_id in parent:
                    hit.context = parent[chunk.parent_id].text
                    hit.explain["expanded"] = {"parent": chunk.parent_id}
                continue
            around = await conn.neighbours(chunk.document_id, chunk.position, window)
            hit.context = "\n\n".join(c.text for c in around)
            hit.explain["expanded"] = {"neighbours": [c.id for c in around if c.id != chunk.id]}
