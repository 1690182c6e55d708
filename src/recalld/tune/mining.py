"""Training data from the store itself, no labels: pseudo-queries and disagreement mining.

A pseudo-query is a span held out of a chunk: the title line of a document's first chunk, one of
a chunk's sentences, or a conversation turn (whose reply stays in the chunk). The chunk without
that span is its positive. Each pseudo-query runs through the store's own two routes, vector
(the current model) and BM25; where BM25 ranks the positive in its top k and the vector route
ranks it lower or misses it, the model has a blind spot: (query, positive, hard negative) is a
triple, the hard negative being the vector route's best hit that BM25 does not back (its
confident wrong answer). Pseudo-queries from a held-back share of documents (a conversation's
sessions count as documents: `unit_of`) are never mined: they are the eval gate's.

Both ends are kept clean, because a wrong label teaches the model the wrong thing: a sentence
span must read as a query (a whole sentence, mostly words: a chunk boundary's fragment or a
line of statistics names no topic, and only BM25's exact-token match finds its chunk), and a
hard negative must be a dense blind spot as the vstash paper defines it, a chunk the vector
route ranks high and BM25 leaves out of its top k. A chunk BM25 also ranks high is often as
relevant as the positive (another abstract on the same finding, a near duplicate), and a chunk
of the positive's own document or one holding the query's words (chunks overlap) is not wrong
at all.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from recalld.embeddings.base import Embedder
from recalld.storage.contract import Reader, Store
from recalld.storage.fts import match_expression, query_terms
from recalld.types import NO_FILTERS, Chunk

TOP_K = 10
EMBED_BATCH = 16
MIN_WORDS = 6  # a held-out span shorter than this says too little to be a query
MIN_POSITIVE_WORDS = 8  # what must remain of the chunk once the span is held out
MIN_WORD_SHARE = 0.6  # of a sentence span's tokens that must be words (not numbers, symbols)

# Also splits "end.Next" (sentences joined without a space, as in some abstracts).
_SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[a-z][.!?])(?=[A-Z])|\n+")
_TURN = re.compile(r"^[^:\n]{1,60}: (.+)$")

Progress = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Pair:
    """A pseudo-query and the chunk (without the held-out span) that answers it."""

    query: str
    positive: str
    chunk_id: int
    document_id: int  # the chunk's unit (`unit_of`): its document, or a conversation's session


@dataclass(frozen=True)
class Triple:
    """One training example: a pseudo-query, its positive and the vector route's wrong hit."""

    query: str
    positive: str
    negative: str
    document_id: int  # the query's and the positive's document
    negative_document_id: int


@dataclass
class Mined:
    """What mining found: triples to train on, held-back pairs for the gate, and counts."""

    triples: list[Triple]
    eval_pairs: list[Pair]
    queries: int
    vector_missed: int  # BM25 found the positive in its top k, the vector route did not
    vector_lower: int  # both found it, the vector route ranked it lower
    keyword_missed: int  # the reverse blind spot (counted, not trained on)

    def summary(self) -> dict[str, Any]:
        return {
            "pseudo_queries": self.queries,
            "triples": len(self.triples),
            "eval_queries": len(self.eval_pairs),
            "vector_missed": self.vector_missed,
            "vector_lower": self.vector_lower,
            "keyword_missed": self.keyword_missed,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "triples": [asdict(t) for t in self.triples],
            "eval_pairs": [asdict(p) for p in self.eval_pairs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mined:
        return cls(
            triples=[Triple(**t) for t in data["triples"]],
            eval_pairs=[Pair(**p) for p in data["eval_pairs"]],
            queries=int(data["pseudo_queries"]),
            vector_missed=int(data["vector_missed"]),
            vector_lower=int(data["vector_lower"]),
            keyword_missed=int(data["keyword_missed"]),
        )


def unit_of(chunk: Chunk) -> int:
    """What the chunks that may overlap `chunk` share: its document, or for a conversation's
    chunk within one session (the turns in its `dia_ids`, `D<session>:<turn>`), that session
    (a negative id, apart from every document's). A session's, round's and fact's chunks
    share turns; another session's do not, any more than another document's: a conversation
    stored as one long document is not one unit that cannot disagree with itself."""
    sessions = {d.partition(":")[0] for d in chunk.meta.get("dia_ids") or ()}
    if len(sessions) != 1:
        return chunk.document_id
    session = sessions.pop().removeprefix("D")
    return -(chunk.document_id * 100_000 + int(session)) if session.isdigit() else chunk.document_id


def hold_outs(chunk: Chunk, rng: random.Random, count: int) -> list[Pair]:
    """Up to `count` different spans of `chunk`, each a query whose positive is the rest of the
    chunk (a small store has few chunks: several sentences each make more pseudo-queries)."""
    lines = [ln for ln in chunk.text.strip().split("\n") if ln.strip()]
    spans: list[str]
    if chunk.kind == "conversation":
        # A turn with a line after it: the reply stays in the positive.
        spans = [m.group(0) for ln in lines[:-1] if (m := _TURN.match(ln))]
        spans = [s for s in spans if len(s.split()) >= MIN_WORDS]
    elif chunk.position == 0 and len(lines) > 1 and 3 <= len(lines[0].split()) <= 25:
        spans = [lines[0]]  # a title
    else:
        spans = [s for p in _SENTENCE.split(chunk.text) if is_sentence_query(s := p.strip())]
    if not spans:
        return []
    # One span is drawn as it always was, so a run of one span per chunk stays the same.
    chosen = [rng.choice(spans)] if count == 1 else rng.sample(spans, min(count, len(spans)))
    pairs = []
    for span in chosen:
        rest = " ".join(chunk.text.replace(span, " ", 1).split())
        if len(rest.split()) < MIN_POSITIVE_WORDS:
            continue
        query = span.partition(": ")[2] if chunk.kind == "conversation" else span
        pairs.append(Pair(query.strip(), rest, chunk.id, unit_of(chunk)))
    return pairs


def is_sentence_query(span: str) -> bool:
    """Whether a sentence span reads as a query: a whole sentence (a capital first, an end
    mark last: a chunk boundary cuts sentences) of at least `MIN_WORDS` words, mostly words."""
    tokens = span.split()
    words = [t for t in tokens if sum(ch.isalpha() for ch in t) >= 3]
    return (
        span[:1].isupper()
        and span.rstrip("\"')]").endswith((".", "!", "?"))
        and len(words) >= MIN_WORDS
        and len(words) >= MIN_WORD_SHARE * len(tokens)
    )


async def pseudo_pairs(
    store: Store, count: int, eval_share: float, seed: int, per_chunk: int = 1
) -> tuple[list[Pair], list[Pair]]:
    """Pseudo-queries from up to `count` of the store's chunks, up to `per_chunk` from each
    (memories left out: a short statement has nothing to hold out), split by document into
    train and held-back eval."""
    rng = random.Random(seed)
    by_kind = await store.read(lambda r: r.chunk_ids_by_kind())
    ids = sorted(cid for kind, v in by_kind.items() if kind != "memory" for cid in v)
    picked = sorted(rng.sample(ids, min(len(ids), count)))
    chunks: dict[int, Chunk] = {}
    for start in range(0, len(picked), 500):
        part = picked[start : start + 500]
        async with store.reading() as reader:
            chunks.update(await reader.chunks_by_id(part))
    pairs = [p for cid in picked if cid in chunks for p in hold_outs(chunks[cid], rng, per_chunk)]
    documents = sorted({p.document_id for p in pairs})
    rng.shuffle(documents)
    held = set(documents[: max(1, round(len(documents) * eval_share))] if documents else [])
    train = [p for p in pairs if p.document_id not in held]
    held_back = [p for p in pairs if p.document_id in held]
    return train, held_back


async def mine(
    store: Store,
    embedder: Embedder,
    *,
    queries: int,
    eval_share: float,
    seed: int,
    per_chunk: int = 1,
    progress: Progress | None = None,
) -> Mined:
    """Draw pseudo-queries and keep the ones the two routes disagree on as triples."""
    train, held_back = await pseudo_pairs(store, queries, eval_share, seed, per_chunk)
    triples: list[Triple] = []
    missed = lower = keyword_missed = 0
    for start in range(0, len(train), EMBED_BATCH):
        batch = train[start : start + EMBED_BATCH]
        vectors = await asyncio.to_thread(embedder.embed, [p.query for p in batch])
        for pair, vector in zip(batch, vectors, strict=True):
            expression = match_expression(query_terms(pair.query))

            async def routes(
                conn: Reader, vector: np.ndarray = vector, expression: str = expression
            ) -> tuple[list[int], list[int]]:
                vec = await conn.knn(vector, TOP_K, NO_FILTERS)
                kw = await conn.fts(expression, TOP_K, NO_FILTERS)
                return [c for c, _ in vec], [c for c, _ in kw]

            vec_ids, kw_ids = await store.read(routes)
            in_vec = pair.chunk_id in vec_ids
            in_kw = pair.chunk_id in kw_ids
            if in_vec and not in_kw:
                keyword_missed += 1
                continue
            if not in_kw or (
                in_vec and vec_ids.index(pair.chunk_id) <= kw_ids.index(pair.chunk_id)
            ):
                continue
            negative = await _blind_spot(store, vec_ids, kw_ids, pair)
            if negative is None:
                continue
            missed += not in_vec
            lower += in_vec
            triples.append(
                Triple(
                    pair.query, pair.positive, negative.text, pair.document_id, unit_of(negative)
                )
            )
        if progress is not None:
            done = min(start + EMBED_BATCH, len(train))
            await progress({"phase": "mining", "done": done, "total": len(train)})
    return Mined(triples, held_back, len(train), missed, lower, keyword_missed)


async def _blind_spot(
    store: Store, vector_ranked: Sequence[int], keyword_ranked: Sequence[int], pair: Pair
) -> Chunk | None:
    """The vector route's best hit that BM25 leaves out of its top k, from another document
    than the positive's and without the query's words in it; None if it has none."""
    backed = set(keyword_ranked)
    hits = await store.read(lambda c: c.chunks_by_id(list(vector_ranked)))
    for cid in vector_ranked:
        chunk = hits.get(cid)
        if (
            chunk is not None
            and cid not in backed
            and unit_of(chunk) != pair.document_id
            and pair.query not in chunk.text
        ):
            return chunk
    return None
