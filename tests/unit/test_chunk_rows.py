"""`records.row_to_chunk` reads every value as the rules of `limits` say (the fast paths of
`limits.number_or` and `time_or_none` for the common values give what those rules give)."""

import itertools
import math

from recalld import limits
from recalld.storage.records import json_column, row_to_chunk

ODD = [
    None,
    0,
    1,
    -1,
    True,
    False,
    2**63,
    -(2**63) - 1,
    1.5,
    -0.0,
    1.7e9,
    limits.TIME_MIN,
    limits.TIME_MAX,
    limits.TIME_MAX * 2,
    -1e300,
    math.inf,
    -math.inf,
    math.nan,
    "1.5",
    b"\x00",
]
JSON = [None, "[]", "{}", '["a", 1, "b"]', '{"k": 1e400}', "not json", '"text"', b"[]", "[1e400]"]


def row(importance, event, created, accessed, retrieved, tags, meta):
    return (
        7, 3, "s.md", 0, "text", "chunk", "k", None, "t", 2, tags, None,
        importance, event, created, 0, accessed, 0, retrieved, "active", meta,
    )  # fmt: skip


def test_numbers_and_times_follow_limits():
    for value in ODD:
        chunk = row_to_chunk(row(value, value, value, value, value, "[]", "{}"))
        # The rules themselves, not the functions that answer common values first.
        importance = float(value) if limits.is_number(value) else 0.5
        assert repr(chunk.importance) == repr(importance) and type(chunk.importance) is float
        created = float(value) if limits.is_number(value) else 0.0
        assert repr(chunk.created_at) == repr(created)
        for got in (chunk.event_time, chunk.last_accessed_at, chunk.last_retrieved_at):
            assert repr(got) == repr(float(value) if limits.is_time(value) else None)
            assert got is None or type(got) is float


def test_json_columns_follow_json_column():
    for tags, meta in itertools.product(JSON, JSON):
        chunk = row_to_chunk(row(0.5, None, 0.0, None, None, tags, meta))
        assert chunk.tags == tuple(t for t in json_column(tags, []) if isinstance(t, str))
        assert chunk.meta == json_column(meta, {})
