"""`Reader.child_facts`: the facts below some chunks, their parents and vectors in one read
(fact matching, issue 14), on real SQLite files and PostgreSQL databases."""

from __future__ import annotations

import numpy as np

from recalld.storage.contract import Store
from recalld.types import Filters
from tests.storage.conftest import put
from tests.storage.test_links import ids_of


async def test_child_facts_are_the_fact_children_with_their_vectors(store: Store) -> None:
    await put(store, "rounds", ["round one", "round two", "round three"], granularity="round")
    await put(store, "facts", ["fact a", "fact b", "fact c", "fact d"], granularity="fact")
    one, two, three = await ids_of(store, "rounds")
    a, b, c, d = await ids_of(store, "facts")
    links = [
        (a, one, "parent", 1.0),
        (b, one, "parent", 1.0),
        (c, two, "parent", 1.0),
        (d, one, "parent", 1.0),  # d is a candidate itself: not a child fact
        (three, one, "parent", 1.0),  # a round, not a fact
        (a, two, "temporal", 1.0),  # not a parent link
        (one, b, "parent", 1.0),  # the candidate is the child here
    ]
    await store.write(lambda w: w.add_links(links))
    candidates = [one, two, d]
    rows = await store.read(lambda r: r.child_facts(candidates, store.dimension))
    assert sorted((fact, parent) for fact, parent, _ in rows) == [(a, one), (b, one), (c, two)]
    stored = await store.read(lambda r: r.vectors_by_id([a, b, c], store.dimension))
    for fact, _, vector in rows:
        assert vector.dtype == np.float32
        assert np.array_equal(vector, stored[fact])

    # The same answer as the three reads it replaces (every link, the facts, their vectors).
    every = await store.read(lambda r: r.links_touching(candidates))
    inside = set(candidates)
    owner = {s: t for s, t, rel, _ in every if rel == "parent" and t in inside and s not in inside}
    facts = await store.read(
        lambda r: r.chunks_matching(sorted(owner), Filters(granularities=("fact",)))
    )
    assert {(f, owner[f]) for f in facts} == {(fact, parent) for fact, parent, _ in rows}
    assert await store.read(lambda r: r.child_facts([], store.dimension)) == []
