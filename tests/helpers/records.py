"""Chunk records for tests that need one without a store."""

from __future__ import annotations

from typing import Any

from recalld.types import Chunk


def stored_chunk(**fields: Any) -> Chunk:
    """A `Chunk` as a store returns a fresh one: never retrieved or accessed, active, no tags,
    memory type, time or parent. `fields` gives the rest (id, document_id, source, position,
    kind, granularity, text, token_count) and may override any of these."""
    values: dict[str, Any] = {
        "key": "",
        "parent_id": None,
        "tags": (),
        "memory_type": None,
        "importance": 0.5,
        "event_time": None,
        "created_at": 0.0,
        "access_count": 0,
        "last_accessed_at": None,
        "retrieval_count": 0,
        "last_retrieved_at": None,
        "status": "active",
        "meta": {},
    }
    return Chunk(**(values | fields))
