"""The tuning method's own rules, without a model: which spans make queries, which candidates a
query is trained and judged against, and how fast the learning rate rises."""

from __future__ import annotations

import random
from typing import Any

import pytest

from recalld.embeddings.base import HashEmbedder
from recalld.tune import gate, train
from recalld.tune.mining import Pair, Triple, hold_outs, is_sentence_query, unit_of
from recalld.types import Chunk
from tests.helpers.records import stored_chunk


@pytest.mark.parametrize(
    "span",
    [
        "The p75 neurotrophin receptor has been implicated in multiple biological processes.",
        "Does the spare valve of the north rig drift when the pressure rises?",
    ],
)
def test_a_whole_sentence_of_words_is_a_query(span: str) -> None:
    assert is_sentence_query(span)


@pytest.mark.parametrize(
    "span",
    [
        # Cut by a chunk boundary: the start or the end of the sentence is missing.
        "and human RNAs using Pseudo-seq, a genome-wide, single-nucleotide-resolution method.",
        "RESULTS The protective alleles were more common in subjects with spontaneous clearance,",
        # Statistics: only an exact-token match can find their chunk.
        "95% CI, 1.40-3.93; p = 0.0100 and 0.0025 in 44 of 120 (36.7%) cases.",
        "90.00% (n=9/10) and 75.61% (n=31/41), respectively.",
        "Too short to say much.",
    ],
)
def test_fragments_and_statistics_are_not_queries(span: str) -> None:
    assert not is_sentence_query(span)


def _triple(document: int, negative_document: int) -> Triple:
    return Triple("q", "p", "n", document, negative_document)


def test_a_query_is_never_trained_against_its_own_documents_other_texts() -> None:
    batch = [_triple(1, 7), _triple(1, 8), _triple(2, 1)]
    allowed = train.candidate_mask(batch).tolist()
    # Candidates: positives of documents 1, 1, 2, then negatives of documents 7, 8, 1.
    assert allowed[0] == [True, False, True, True, True, False]
    assert allowed[1] == [False, True, True, True, True, False]
    assert allowed[2] == [True, True, True, True, True, True]


def test_training_makes_at_most_max_epochs_passes_with_a_warm_up() -> None:
    settings = train.TrainSettings(batch_size=16, max_steps=200, max_epochs=1.0)
    assert train.planned_steps(settings, 400) == 25
    assert train.planned_steps(settings, 10_000) == 200
    assert train.planned_steps(settings, 1) == 0
    rates = [train.learning_rate(settings, step, 30) for step in range(5)]  # 3 to warm up
    assert rates[0] < rates[1] < rates[2] == settings.learning_rate == rates[4]


def test_the_gate_does_not_count_a_sibling_chunk_as_a_miss() -> None:
    query = "alpha beta gamma delta epsilon zeta"
    pairs = [
        Pair(query, "alpha beta gamma lorem ipsum dolor", 10, 1),
        # The next chunk of the same document, overlapping: it holds the query verbatim.
        Pair("sit amet consectetur adipiscing elit sed", f"{query} sit amet", 11, 1),
    ]
    figures = gate.measure(HashEmbedder(256), pairs, ["unrelated words only here"])
    assert figures.recall == 1.0 and figures.mrr == 1.0
    # Another document holding the same words still outranks the positive.
    rival = Pair("sit amet consectetur adipiscing elit sed", f"{query} sit amet", 12, 2)
    figures = gate.measure(HashEmbedder(256), [pairs[0], rival], ["unrelated words only here"])
    assert figures.mrr < 1.0


def _chunk(text: str, position: int = 1, meta: dict[str, Any] | None = None) -> Chunk:
    return stored_chunk(
        id=5,
        document_id=2,
        source="note",
        position=position,
        kind="text",
        granularity="chunk",
        text=text,
        token_count=len(text.split()),
        meta=meta or {},
    )


SENTENCES = [
    "The spare valve of the north rig is kept in the storage room.",
    "Operators report that the valve drifts when the pressure rises.",
    "Training for the valve takes two afternoons with a supervisor.",
    "Nobody may open the valve of the north rig without a permit.",
]


def test_several_spans_of_a_chunk_each_make_a_query_without_them_in_its_positive() -> None:
    chunk = _chunk(" ".join(SENTENCES))
    pairs = hold_outs(chunk, random.Random(0), 3)
    assert len({p.query for p in pairs}) == 3
    for p in pairs:
        assert p.query in SENTENCES and p.query not in p.positive
        assert (p.chunk_id, p.document_id) == (5, 2)
    # One span per chunk draws as it did before there could be several.
    rng, again = random.Random(4), random.Random(4)
    assert hold_outs(chunk, rng, 1)[0].query == again.choice(SENTENCES)
    assert len(hold_outs(chunk, random.Random(0), 10)) == len(SENTENCES)


def test_a_conversations_sessions_are_units_as_documents_are() -> None:
    def unit(dia_ids: list[str] | None) -> int:
        return unit_of(_chunk("text", meta={} if dia_ids is None else {"dia_ids": dia_ids}))

    assert unit(None) == 2  # a document's chunk: its document
    assert unit(["D3:1", "D3:2"]) == unit(["D3:7"]) != unit(["D4:1"])  # a session's turns
    assert unit(["D3:9", "D4:1"]) == 2  # across sessions: the document
    assert unit(["D3:1"]) < 0  # apart from every document id
