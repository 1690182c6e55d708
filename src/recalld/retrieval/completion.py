"""Score completion: every candidate of the two routes gets its real score on both (issue 14).

Each route returns its top candidates only. A chunk that the keyword route ranked first but
the vector route did not return would otherwise score 0 on the vector side of the fusion, and
vector-only neighbours could bury it. Completion looks the missing scores up instead:

    keyword-only candidate ─▶ exact cosine of its stored vector with the query vector
    vector-only candidate  ─▶ its BM25 score, FTS5 bm25() restricted to the candidates
                              (0 when it contains none of the query's terms: its real BM25)

Both lookups are bounded by the candidate pool (at most 2 x `candidates` chunks).

Facts match for their unit (`search.match_facts`): a search whose granularity filter leaves
facts out (rounds only, say) would compare the query with a round's embedding alone, and a
round embeds two speakers' turns at once. Each candidate's similarity is then the higher of
its own and its best fact's (the facts whose `parent` link points at it, exact cosine): match
small, return big. Only the candidates' scores change; none is added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.storage.contract import Store


@dataclass(slots=True)
class Completed:
    """Both routes' scores over the union of their candidates.

    Attributes:
        similarity: Cosine similarity of every candidate (with a stored vector).
        keyword: The keyword score of every candidate (0 for those matching no term).
        filled: Route name to the ids whose score on that route was looked up here.
        by_fact: Candidate to (its best fact, that fact's similarity, its own similarity),
            where the fact matched better than the candidate itself (`match_facts`); its
            `similarity` is then the fact's.
    """

    similarity: dict[int, float]
    keyword: dict[int, float]
    filled: dict[str, set[int]] = field(default_factory=dict)
    by_fact: dict[int, tuple[int, float, float]] = field(default_factory=dict)


def cosines(
    query: npt.NDArray[np.float32], vectors: Mapping[int, npt.NDArray[np.float32]]
) -> dict[int, float]:
    """Exact cosine similarity of the query with each vector (0 for a zero vector)."""
    q = np.asarray(query, dtype=np.float32)
    q_norm = float(np.linalg.norm(q))
    out: dict[int, float] = {}
    for cid, vector in vectors.items():
        # np.linalg.norm of a 1-D float vector is sqrt(v.dot(v)), bit for bit, behind ~3 us
        # of checks a call (the keyword-only candidates: ~35 a search).
        norm = float(np.sqrt(vector.dot(vector))) * q_norm
        out[cid] = float(np.dot(vector, q)) / norm if norm > 0 else 0.0
    return out


async def best_facts(
    store: Store, query_vector: npt.NDArray[np.float32], candidates: Sequence[int]
) -> dict[int, tuple[int, float]]:
    """Each candidate's best-matching fact (a chunk of granularity `fact` with a `parent`
    link to it) and that fact's cosine similarity with the query; candidates without facts
    are left out."""
    rows = await store.read(lambda c: c.child_facts(candidates, store.dimension))
    # One parent per fact: the highest id, as when the links came sorted from one read.
    owner: dict[int, int] = {}
    vectors: dict[int, npt.NDArray[np.float32]] = {}
    for fact, parent, vector in rows:
        owner[fact] = max(parent, owner.get(fact, parent))
        vectors[fact] = vector
    best: dict[int, tuple[int, float]] = {}
    for fact, value in sorted(cosines(query_vector, vectors).items()):
        unit = owner[fact]
        if unit not in best or value > best[unit][1]:
            best[unit] = (fact, value)
    return best


async def complete(
    store: Store,
    query_vector: npt.NDArray[np.float32] | None,
    expression: str,
    similarity: Mapping[int, float],
    keyword: Mapping[int, float],
    looked_up: Mapping[int, float] | None = None,
    stored: Mapping[int, npt.NDArray[np.float32]] | None = None,
    match_facts: bool = False,
) -> Completed:
    """Fill in each route's score for the candidates only the other route returned.

    Args:
        store: The store the routes searched.
        query_vector: The query's embedding (None when the vector route was unavailable:
            then only keyword scores are completed).
        expression: The FTS5 expression the keyword route ran.
        similarity: The vector route's candidates and cosine similarities.
        keyword: The keyword route's candidates and scores.
        looked_up: `keyword_scores` of the vector route's candidates, when recall already
            looked them up (None: look them up here).
        stored: The stored vectors of (at least) the keyword route's candidates, when recall
            already read them (None: read them here).
        match_facts: Give each candidate the similarity of its best fact where that is
            higher than its own (the search's filter leaves facts out).
    """
    sim, kw = dict(similarity), dict(keyword)
    filled: dict[str, set[int]] = {"vector": set(), "bm25": set()}
    need_vector = [c for c in keyword if c not in similarity] if query_vector is not None else []
    need_keyword = [c for c in similarity if c not in keyword]
    if need_vector:
        vectors = (
            {c: stored[c] for c in need_vector if c in stored}
            if stored is not None
            else await store.read(lambda c: c.vectors_by_id(need_vector, store.dimension))
        )
        assert query_vector is not None
        found = cosines(query_vector, vectors)
        sim.update(found)
        filled["vector"] = set(found)
    if need_keyword and expression:
        scores = (
            looked_up
            if looked_up is not None
            else await store.read(lambda c: c.keyword_scores(expression, need_keyword))
        )
        for cid in need_keyword:
            kw[cid] = scores.get(cid, 0.0)
        filled["bm25"] = set(need_keyword)
    by_fact: dict[int, tuple[int, float, float]] = {}
    if match_facts and query_vector is not None and sim:
        for cid, (fact, value) in (await best_facts(store, query_vector, list(sim))).items():
            if value > sim[cid]:
                by_fact[cid] = (fact, value, sim[cid])
                sim[cid] = value
    return Completed(similarity=sim, keyword=kw, filled=filled, by_fact=by_fact)


def explain(routes: dict[str, Any], cid: int, completed: Completed) -> None:
    """Add the looked-up score of `cid` to its `explain` routes, marked `completed`."""
    if cid in completed.filled.get("vector", ()):
        own = completed.by_fact[cid][2] if cid in completed.by_fact else completed.similarity[cid]
        routes["vector"] = {"similarity": round(own, 4), "completed": True}
    if cid in completed.filled.get("bm25", ()):
        routes["bm25"] = {"score": round(completed.keyword[cid], 4), "completed": True}
    if cid in completed.by_fact:
        fact, value, _ = completed.by_fact[cid]
        routes.setdefault("vector", {})["fact"] = {"id": fact, "similarity": round(value, 4)}
