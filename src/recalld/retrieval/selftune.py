"""Self-tuning: each store picks its own fusion per content kind, with no labels (issue 14).

No fixed fusion wins on every collection, so the store measures the families it has on its own
content, with pseudo-queries whose answer it knows:

    documents (text, code)  a chunk's title line (or one of its sentences); the *other*
                            chunks of its document should come back (its own chunk, which
                            holds the words verbatim, is held out)
    conversations           a turn (questions first) of any round or window of a sampled
                            conversation; a chunk holding the turn that replies to it, but
                            not the turn itself (held out), should come back
    memories                none (one short statement has nothing to hold out): the prior

Each pseudo-query runs both routes once, filtered to its kind (vector KNN, FTS5, the keyword
signals and the completed scores), as if the held-out chunks were not in the store; every
family in `FAMILIES` is then applied in memory to the same candidates and scored by MRR@10 of
the targets. Per kind, the best family wins if its gain over the prior (the shipped settings,
used until a store has calibrated) is significant on the same pseudo-queries; otherwise, as on
a tie, the prior stays. The choice is
recorded in the store's `meta` (`fusion_calibration`) with the chunk count it was measured
at, and redone when the store has grown or shrunk by `STALE_SHARE`.

Sampling is seeded, so the same store calibrates to the same choice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.config import SearchSettings
from recalld.embeddings.base import Embedder
from recalld.retrieval import completion, fusion
from recalld.retrieval.answerability_tune import AnswerabilityTuning
from recalld.storage.contract import Reader, Store
from recalld.storage.fts import match_expression, query_terms, quote_term
from recalld.types import Chunk, Filters

logger = logging.getLogger(__name__)

META_KEY = "fusion_calibration"
# 2: the held-out chunks no longer feed the weights, so a choice recorded before is redone.
VERSION = 2
STALE_SHARE = 0.2  # recalibrate when the chunk count moved this much since the last run
MIN_CHUNKS = 50  # a kind with fewer chunks keeps the prior
MIN_QUERIES = 20  # fewer usable pseudo-queries than this: the prior
CUTOFF = 10  # MRR@10
EMBED_BATCH = 16
PROGRESS_EVERY = 20
SWITCH_P = 0.05  # the best family replaces the prior only when its gain is this significant
FLIPS = 2000  # sign flips of that paired randomization test

# The settings a calibration may choose; everything else stays as configured.
FUSION_FIELDS = (
    "fusion",
    "weighting",
    "vector_weight",
    "adaptive_midpoint",
    "adaptive_slope",
    "complete_scores",
)
_BASE: dict[str, dict[str, Any]] = {
    "score/coverage": {"fusion": "score", "weighting": "coverage"},
    "score/coverage-keyword": {
        "fusion": "score",
        "weighting": "coverage",
        "adaptive_midpoint": 0.3,
    },
    "score/coverage-vector": {"fusion": "score", "weighting": "coverage", "adaptive_midpoint": 0.7},
    "score/idf": {"fusion": "score", "weighting": "idf"},
    "score/fixed": {"fusion": "score", "weighting": "fixed", "vector_weight": 0.5},
    "rrf/coverage": {"fusion": "rrf", "weighting": "coverage"},
    "rrf/idf": {"fusion": "rrf", "weighting": "idf"},
    "rrf/fixed": {"fusion": "rrf", "weighting": "fixed", "vector_weight": 0.6},
    # The routes' endorsement of each other (fusion.route_agreement), alone and averaged with
    # the coverage curve. They trust a keyword route whose hits the vector route also ranks
    # high: a store whose questions share words with their answers may pick them, one whose
    # questions are paraphrases should not. Last, so a tie keeps the earlier families' choice.
    "score/agreement": {"fusion": "score", "weighting": "agreement"},
    "score/coverage-agreement": {"fusion": "score", "weighting": "coverage-agreement"},
}
# Each base family with and without score completion (retrieval/completion.py).
FAMILIES: dict[str, dict[str, Any]] = {
    **{n: {**v, "complete_scores": False} for n, v in _BASE.items()},
    **{f"{n}+complete": {**v, "complete_scores": True} for n, v in _BASE.items()},
}

_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[a-z][.!?])(?=[A-Z])|\n+")
_TURN_LINE = re.compile(r"^[^:\n]{1,60}: (.+)$")


@dataclass(frozen=True)
class PseudoQuery:
    """A query drawn from the store's content and the chunks that answer it."""

    kind: str
    text: str
    targets: frozenset[int]
    excluded: frozenset[int]


@dataclass
class KindChoice:
    """What calibration chose for one content kind, and what every family scored."""

    family: str
    settings: dict[str, Any]
    queries: int
    scores: dict[str, float]
    prior: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class StoreTuning:
    """A store's calibration: a choice per content kind and the kind unscoped searches use."""

    kinds: dict[str, KindChoice]
    dominant: str | None
    chunks: int
    at: float
    seconds: float
    version: int = VERSION
    skipped: dict[str, str] = field(default_factory=dict)
    # The answerability thresholds learned beside the fusion, by scope (`all`, or the one
    # unit searched; retrieval/answerability_tune.py); None when none was learned.
    answerability: dict[str, AnswerabilityTuning] | None = None

    def settings_for(self, kind: str | None) -> tuple[str | None, dict[str, Any]]:
        """The kind searched (a single filtered kind, else the store's main one) and its
        chosen settings ({} for a kind that kept the prior)."""
        kind = kind or self.dominant
        choice = self.kinds.get(kind) if kind else None
        return kind, (dict(choice.settings) if choice else {})

    def summary(self) -> str:
        """One line: the family each kind chose, and the answerability threshold per scope."""
        chosen = [f"{k}: {v.family}" for k, v in sorted(self.kinds.items())]
        learned = [
            f"answerability {scope}: {found.threshold} at k = {found.k}"
            for scope, found in sorted((self.answerability or {}).items())
            if not found.skipped
        ]
        return ", ".join((chosen or ["every kind kept the defaults"]) + learned)

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "at": self.at,
            "chunks": self.chunks,
            "seconds": round(self.seconds, 2),
            "dominant": self.dominant,
            "kinds": {k: v.as_dict() for k, v in self.kinds.items()},
            "skipped": self.skipped,
            "answerability": {k: v.as_dict() for k, v in self.answerability.items()}
            if self.answerability is not None
            else None,
        }

    def status(self) -> dict[str, Any]:
        """`as_dict`, each learned answerability threshold marked `current` when searches may
        use it (one learned for an earlier ownership signal waits for the next calibration)."""
        out = self.as_dict()
        for scope, found in (self.answerability or {}).items():
            out["answerability"][scope]["current"] = found.current()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoreTuning:
        return cls(
            kinds={k: KindChoice(**v) for k, v in data["kinds"].items()},
            dominant=data.get("dominant"),
            chunks=int(data["chunks"]),
            at=float(data["at"]),
            seconds=float(data.get("seconds", 0.0)),
            version=int(data.get("version", VERSION)),
            skipped=dict(data.get("skipped", {})),
            answerability={k: AnswerabilityTuning(**v) for k, v in learned.items()}
            if (learned := data.get("answerability")) is not None
            else None,
        )


def family_of(settings: SearchSettings) -> str:
    """The family name the settings' fusion fields belong to ("custom" if none)."""
    values = {f: getattr(settings, f) for f in FUSION_FIELDS}
    for name, family in FAMILIES.items():
        merged = {**values, **family}
        if all(merged[f] == values[f] for f in FUSION_FIELDS if f in family) and all(
            values[f] == getattr(SearchSettings(), f)
            for f in FUSION_FIELDS
            if f not in family and f != "vector_weight"
        ):
            return name
    return "custom"


async def load(store: Store) -> StoreTuning | None:
    """The calibration recorded in the store, or None (none yet, or from another version)."""
    raw = await store.read(lambda c: c.meta_value(META_KEY))
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if int(data.get("version", 0)) != VERSION:
            return None
        return StoreTuning.from_dict(data)
    except (ValueError, KeyError, TypeError):
        logger.warning("the store's fusion calibration is unreadable; using the defaults")
        return None


def is_stale(tuning: StoreTuning | None, chunks: int) -> bool:
    """Whether the store should calibrate (again): never did, or grew/shrank enough."""
    if tuning is None:
        return chunks >= MIN_CHUNKS
    return abs(chunks - tuning.chunks) > max(STALE_SHARE * tuning.chunks, MIN_CHUNKS)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if len(s.split()) >= 6]


def document_query(chunk: Chunk, siblings: Sequence[Chunk], rng: random.Random) -> PseudoQuery:
    """A title line (first chunk of a titled document) or a sentence of `chunk`; the other
    chunks of its document are the targets."""
    lines = chunk.text.strip().split("\n")
    title = lines[0].strip()
    titled = (
        chunk.position == 0
        and len(lines) > 1
        and 3 <= len(title.split()) <= 25
        and not title.endswith(".")
    )
    text = title if titled else rng.choice(_sentences(chunk.text) or [""])
    targets = frozenset(s.id for s in siblings if s.id != chunk.id)
    return PseudoQuery(chunk.kind, text, targets, frozenset({chunk.id}))


def conversation_queries(
    chunks: Sequence[Chunk], picked: Sequence[Chunk], rng: random.Random
) -> list[PseudoQuery]:
    """For each picked round or window: one of its turns (a question if it has one); the
    chunks holding the next turn of the conversation but not this one are the targets."""
    order: list[str] = []
    for chunk in sorted(chunks, key=lambda c: c.position):
        if chunk.granularity == "round":
            order.extend(str(t) for t in chunk.meta.get("turn_ids") or [])
    following = {turn: order[i + 1] for i, turn in enumerate(order[:-1])}
    holders: dict[str, set[int]] = {}
    for chunk in chunks:
        for turn in chunk.meta.get("turn_ids") or []:
            holders.setdefault(str(turn), set()).add(chunk.id)
    out = []
    for chunk in picked:
        body = [ln for ln in chunk.text.split("\n") if not ln.startswith("[")]
        ids = [str(t) for t in chunk.meta.get("turn_ids") or []]
        if len(body) != len(ids):
            continue  # a round split into parts: its lines no longer match its turns
        turns = [
            (turn, m.group(1))
            for turn, line in zip(ids, body, strict=True)
            if (m := _TURN_LINE.match(line)) and len(m.group(1).split()) >= 4
        ]
        questions = [t for t in turns if t[1].rstrip().endswith("?")]
        if not turns:
            continue
        turn, text = rng.choice(questions or turns)
        reply = following.get(turn)
        if reply is None:
            continue
        own = holders.get(turn, set())
        targets = holders.get(reply, set()) - own
        if targets:
            out.append(PseudoQuery(chunk.kind, text, frozenset(targets), frozenset(own)))
    return out


@dataclass
class _Candidates:
    """One pseudo-query's route results and signals, shared by every family."""

    query: PseudoQuery
    similarity: dict[int, float]
    keyword: dict[int, float]
    orders: tuple[list[int], list[int]]
    completed: completion.Completed
    coverage: float
    doc_freqs: list[int]
    total: int


async def _candidates(
    store: Store,
    query: PseudoQuery,
    vector: npt.NDArray[np.float32],
    pool: int,
    total: int,
    depth: int = 1,
) -> _Candidates:
    terms = query_terms(query.text)
    expression = match_expression(terms)
    scope = Filters(kinds=(query.kind,))
    # The held-out chunks hold the query's words verbatim: the routes see the store as if
    # they were not in it, or their coverage (1) and their mutual endorsement (both routes'
    # first hit) would decide every coverage and agreement weight.
    held_out = len(query.excluded)

    async def routes(conn: Reader) -> tuple[Any, Any, list[int], list[list[bool]]]:
        vec = await conn.knn(vector, pool + held_out, scope)
        # As a search reads it: the best matches and the terms the best `depth` hits hold.
        keyword = await conn.keyword_search(terms, pool + held_out, scope, depth + held_out)
        dfs = [await conn.document_frequency(quote_term(t)) for t in terms]
        return vec, keyword.hits, dfs, keyword.matched

    vec_found, kw_found, dfs, matched_found = await store.read(routes)
    vec_hits = [(c, d) for c, d in vec_found if c not in query.excluded][:pool]
    kw_hits = [(c, s) for c, s in kw_found if c not in query.excluded][:pool]
    matched = [
        m for (c, _), m in zip(kw_found, matched_found, strict=False) if c not in query.excluded
    ][:depth]
    similarity = {cid: 1.0 - dist for cid, dist in vec_hits}
    keyword = dict(kw_hits)
    coverage = max((fusion.idf_coverage(dfs, m, total) for m in matched), default=0.0)
    completed = await completion.complete(store, vector, expression, similarity, keyword)
    return _Candidates(
        query,
        similarity,
        keyword,
        ([c for c, _ in vec_hits], [c for c, _ in kw_hits]),
        completed,
        coverage,
        dfs,
        total,
    )


def reciprocal_rank(fused: Mapping[int, float], query: PseudoQuery) -> float:
    """1/rank of the first target among the fused candidates (excluded ones left out)."""
    ranked = [c for c in fusion.ranked(fused) if c not in query.excluded][:CUTOFF]
    for rank, cid in enumerate(ranked, start=1):
        if cid in query.targets:
            return 1.0 / rank
    return 0.0


def score_families(
    candidates: Sequence[_Candidates], base: SearchSettings
) -> dict[str, list[float]]:
    """Every family's reciprocal rank on every pseudo-query (pure CPU: run in a thread)."""
    out: dict[str, list[float]] = {}
    for name, family in FAMILIES.items():
        opts = dataclasses.replace(base, **family)
        ranks = []
        for cand in candidates:
            if opts.complete_scores:
                sim, kw, orders = cand.completed.similarity, cand.completed.keyword, None
            else:
                sim, kw, orders = cand.similarity, cand.keyword, cand.orders
            fused, _, _ = fusion.hybrid(
                opts, sim, kw, orders, cand.coverage, cand.doc_freqs, cand.total
            )
            ranks.append(reciprocal_rank(fused, cand.query))
        out[name] = ranks
    return out


def paired_p(a: Sequence[float], b: Sequence[float], flips: int = FLIPS) -> float:
    """Two-sided p-value of a paired randomization test of mean(a) - mean(b) (seeded)."""
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if not len(diff):
        return 1.0
    signs = np.random.default_rng(0).choice((-1.0, 1.0), size=(flips, len(diff)))
    null = np.abs((signs * diff).mean(axis=1))
    return float((np.sum(null >= abs(diff.mean()) - 1e-12) + 1) / (flips + 1))


def choose(scores: Mapping[str, Sequence[float]], prior: str) -> str:
    """The family with the best mean (the first in `FAMILIES` on a tie), if its gain over
    the prior on the same pseudo-queries is significant (`SWITCH_P`); else the prior.

    Twenty families measured on a few hundred pseudo-queries: the best mean is partly luck,
    and a family that won by luck moves real searches away from the shipped defaults.
    """
    means = {n: float(np.mean(v)) if len(v) else 0.0 for n, v in scores.items()}
    best = max(means.values())
    if prior in means and means[prior] >= best - 1e-12:
        return prior
    winner = next(n for n in FAMILIES if n in means and means[n] >= best - 1e-12)
    if prior in scores and paired_p(scores[winner], scores[prior]) >= SWITCH_P:
        return prior
    return winner


async def pseudo_queries(
    store: Store, kind: str, ids: Sequence[int], count: int, rng: random.Random
) -> list[PseudoQuery]:
    """Up to `count` pseudo-queries for one kind, from chunks sampled with `rng`."""
    if kind == "memory":
        return []
    picked_ids = sorted(rng.sample(list(ids), min(len(ids), count * 2)))
    picked = await store.read(lambda c: c.chunks_by_id(picked_ids))
    by_doc: dict[int, list[Chunk]] = {}
    for cid in picked_ids:
        if cid in picked:
            by_doc.setdefault(picked[cid].document_id, []).append(picked[cid])
    out: list[PseudoQuery] = []
    for doc_id, chunks in by_doc.items():
        async with store.reading() as reader:
            whole = await reader.neighbours(doc_id, 0, 10**9)
        if kind == "conversation":
            # Every round or window of a sampled conversation: only they make pseudo-queries,
            # and they are a fifth of its chunks, so the sampled ones alone made too few.
            units = [c for c in whole if c.granularity in ("round", "window")]
            out.extend(conversation_queries(whole, units, rng))
        else:
            for chunk in chunks:
                query = document_query(chunk, whole, rng)
                if query.text and query.targets:
                    out.append(query)
    rng.shuffle(out)
    return out[:count]


async def calibrate(
    store: Store,
    embedder: Embedder,
    base: SearchSettings,
    *,
    queries: int = 200,
    seed: int = 0,
    progress: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> StoreTuning:
    """Measure every family on the store's own pseudo-queries and pick one per kind.

    Args:
        store: The store to calibrate (read only; the result is not recorded here).
        embedder: The store's model, to embed the pseudo-queries.
        base: The configured search settings; their fusion family is the prior.
        queries: Pseudo-queries per kind (each costs one embedding and both routes).
        seed: Sampling seed (the same store and seed give the same choice).
        progress: Told `{"kind", "done", "total"}` every `PROGRESS_EVERY` pseudo-queries (the
            socket method forwards it, which keeps a waiting client's read alive).
    """
    started = time.perf_counter()
    by_kind = await store.read(lambda r: r.chunk_ids_by_kind())
    total = sum(len(v) for v in by_kind.values())
    prior = family_of(base)
    kinds: dict[str, KindChoice] = {}
    skipped: dict[str, str] = {}
    for kind in sorted(by_kind):
        ids = by_kind[kind]
        if len(ids) < MIN_CHUNKS:
            skipped[kind] = f"{len(ids)} chunks (fewer than {MIN_CHUNKS})"
            continue
        rng = random.Random(f"{seed}:{kind}")
        drawn = await pseudo_queries(store, kind, ids, queries, rng)
        if len(drawn) < MIN_QUERIES:
            skipped[kind] = f"{len(drawn)} pseudo-queries (fewer than {MIN_QUERIES})"
            continue
        # Small batches: a search waiting for the model gets its turn between them.
        vectors: list[npt.NDArray[np.float32]] = []
        for start in range(0, len(drawn), EMBED_BATCH):
            batch = [q.text for q in drawn[start : start + EMBED_BATCH]]
            vectors.extend(await asyncio.to_thread(embedder.embed, batch))
        pool = base.candidates
        candidates = []
        for i, query in enumerate(drawn):
            candidates.append(
                await _candidates(store, query, vectors[i], pool, total, base.coverage_depth)
            )
            if progress is not None and (i + 1) % PROGRESS_EVERY == 0:
                await progress({"kind": kind, "done": i + 1, "total": len(drawn)})
        scores = await asyncio.to_thread(score_families, candidates, base)
        chosen = choose(scores, prior)
        kinds[kind] = KindChoice(
            family=chosen,
            settings=dict(FAMILIES[chosen]),
            queries=len(drawn),
            scores={n: round(float(np.mean(v)), 4) for n, v in scores.items()},
            prior=prior,
        )
    dominant = max(by_kind, key=lambda k: (len(by_kind[k]), k)) if by_kind else None
    return StoreTuning(
        kinds=kinds,
        dominant=dominant,
        chunks=total,
        at=time.time(),
        seconds=time.perf_counter() - started,
        skipped=skipped,
    )


async def record(store: Store, tuning: StoreTuning) -> None:
    """Write the calibration into the store's `meta`."""
    value = json.dumps(tuning.as_dict(), sort_keys=True)
    await store.write(lambda c: c.set_meta(META_KEY, value))
