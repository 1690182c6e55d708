"""LoCoMo evidence recall: each conversation in its own store, questions searched in theirs.

A returned chunk is a hit when the turns it covers (its `dia_ids`: a session's turns, a round's,
or the round a fact was extracted from) include an evidence turn. Recall@k rewards big units
(a returned session covers ~26 turns, a round ~2), so recall is also measured at an equal
budget of returned words (`words@150/300/600`): hits are taken best first while their texts
fit the budget, a hit that does not fit is skipped (as `budget_tokens` packing does), and the
evidence turns the kept hits cover are counted. Category 5 questions have no
answer in the conversation: for them the figure is the share the gate rejects, reported beside
the share of answerable questions (categories 1-4) it wrongly rejects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import metrics
from bench.common import MODES, bench_settings, forget_query_vectors, load_model
from recalld.api import AsyncMemory
from recalld.config import ChunkSettings
from recalld.embeddings.base import Embedder
from recalld.retrieval import answerability, answerability_tune, timeparse
from recalld.types import Filters

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TIME_SUBSET = "with-time-expression"
_ANY_ANCHOR = datetime(2000, 1, 1, tzinfo=UTC)  # whether a question has time words at all
Scores = defaultdict[str, defaultdict[str, list[float]]]
_DIA_ID = re.compile(r"D\d+:\d+")
WORD_BUDGETS = (150, 300, 600)
# Answerability, calibrated on the other conversations: the hits read and the thresholds tried
# (those a store tries on itself).
ANSWERABILITY_K = answerability_tune.KS
ANSWERABILITY_THRESHOLDS = answerability_tune.THRESHOLDS
MAX_FALSE_REJECTION = 0.04  # on the calibration conversations, leaving room under 5 %
SEARCH_LIMIT = 50  # enough hits to fill the largest word budget with turn-sized chunks
# The per-question figures compared between modes by the paired randomization test.
PAIRED_METRICS = ("recall@5", "recall@10", *(f"words@{b}" for b in WORD_BUDGETS))


def evidence_ids(qa: dict[str, Any]) -> set[str]:
    """The evidence turn ids of a question (some entries hold several, joined by `;`)."""
    found: set[str] = set()
    for entry in qa.get("evidence") or []:
        found.update(_DIA_ID.findall(str(entry)))
    return found


def _covered(hit_dia_ids: list[set[str]], evidence: set[str], k: int) -> float:
    covered: set[str] = set()
    for ids in hit_dia_ids[:k]:
        covered |= ids & evidence
    return len(covered) / len(evidence)


def budget_recall(hits: list[tuple[set[str], int]], evidence: set[str], budget: int) -> float:
    """Evidence recall of the hits (turn ids, words) kept best first within `budget` words."""
    covered: set[str] = set()
    used = 0
    for ids, words in hits:
        if used + words > budget:
            continue
        used += words
        covered |= ids & evidence
    return len(covered) / len(evidence)


def filters_of(granularity: str, sources: tuple[str, ...] = ()) -> Filters:
    """The filters a run at `granularity` searches with (`all`: none), within `sources` if
    given (a store holding several conversations)."""
    granularities = () if granularity == "all" else (granularity,)
    return Filters(sources=sources, granularities=granularities)


async def evaluate_conversation(
    memory: AsyncMemory,
    sample: dict[str, Any],
    mode: str,
    granularity: str,
    scores: Scores,
    latency: list[float],
    overrides: dict[str, Any] | None = None,
    paired: dict[str, list[float]] | None = None,
    signals: list[dict[str, Any]] | None = None,
    sources: tuple[str, ...] = (),
) -> None:
    """Search every question of one conversation in one mode and add up its scores.

    With `paired`, each answerable question's `PAIRED_METRICS` are appended to it in question
    order, for paired significance tests between modes. With `sources`, the search is kept
    within them (the conversation's own, in a store holding several).
    """
    filters = filters_of(granularity, sources)
    options = {**MODES[mode], **(overrides or {})}
    forget_query_vectors(memory)
    for qa in sample["qa"]:
        category = CATEGORIES.get(int(qa.get("category", 0)), "other")
        evidence = evidence_ids(qa)
        started = time.perf_counter()
        result = await memory.searcher.search(
            str(qa["question"]), limit=SEARCH_LIMIT, filters=filters, **options
        )
        latency.append((time.perf_counter() - started) * 1000)
        bucket = scores[category]
        bucket["rejected"].append(1.0 if result.rejected else 0.0)
        if signals is not None:
            signals.append(
                {
                    "conversation": str(sample["sample_id"]),
                    "category": int(qa.get("category", 0)),
                    **{
                        f"ownership@{k}": answerability.measure(
                            qa["question"], result.hits, k
                        ).ownership
                        for k in ANSWERABILITY_K
                    },
                }
            )
        if category == "adversarial" or not evidence:
            continue
        hit_ids = [set(h.chunk.meta.get("dia_ids") or []) for h in result.hits]
        # What a hit returns: its text and any context it carries (a fact's source turn).
        words = [len(h.chunk.text.split()) + len((h.context or "").split()) for h in result.hits]
        sized = list(zip(hit_ids, words, strict=True))
        first = next((r for r, ids in enumerate(hit_ids[:10], 1) if ids & evidence), None)
        # Questions whose wording the time parser reads (any category) are also scored on
        # their own, whether or not the stage is on: it can only move these.
        worded = not timeparse.parse(str(qa["question"]), _ANY_ANCHOR).is_empty()
        buckets = [bucket, scores[TIME_SUBSET]] if worded else [bucket]
        for b in buckets:
            for k in (1, 5, 10):
                b[f"recall@{k}"].append(_covered(hit_ids, evidence, k))
            for budget in WORD_BUDGETS:
                b[f"words@{budget}"].append(budget_recall(sized, evidence, budget))
            b["hit@5"].append(1.0 if first is not None and first <= 5 else 0.0)
            b["mrr"].append(1.0 / first if first else 0.0)
        if paired is not None:
            for key in PAIRED_METRICS:
                paired.setdefault(key, []).append(bucket[key][-1])


def _rejection(records: list[dict[str, Any]], k: int, threshold: float) -> tuple[float, float]:
    """(share of category 5 rejected, share of categories 1-4 rejected) at `k`, `threshold`."""

    def rejected(r: dict[str, Any]) -> bool:
        value = r[f"ownership@{k}"]
        return value is not None and value < threshold

    unanswerable = [rejected(r) for r in records if r["category"] == 5]
    answerable = [rejected(r) for r in records if r["category"] in (1, 2, 3, 4)]
    return metrics.mean([float(x) for x in unanswerable]), metrics.mean(
        [float(x) for x in answerable]
    )


def answerability_leave_one_out(records: list[dict[str, Any]]) -> dict[str, Any]:
    """For each conversation, the (k, threshold) that rejects most unanswerable questions of
    the *other* conversations with at most `MAX_FALSE_REJECTION` of their answerable ones
    rejected, applied to this one; the pooled shares over every conversation."""
    conversations = sorted({r["conversation"] for r in records})
    chosen: dict[str, dict[str, float]] = {}
    held_out: list[dict[str, Any]] = []
    for conv in conversations:
        train = [r for r in records if r["conversation"] != conv]
        options = [
            (_rejection(train, k, t), k, t)
            for k in ANSWERABILITY_K
            for t in ANSWERABILITY_THRESHOLDS
        ]
        allowed = [o for o in options if o[0][1] <= MAX_FALSE_REJECTION] or [
            min(options, key=lambda o: o[0][1])
        ]
        (_, _), k, t = max(allowed, key=lambda o: (o[0][0], -o[0][1]))
        chosen[conv] = {"k": k, "threshold": t}
        for r in records:
            if r["conversation"] == conv:
                value = r[f"ownership@{k}"]
                held_out.append({**r, "rejected": value is not None and value < t})
    return {**_pooled_rejection(held_out), "chosen": chosen}


def answerability_self_calibrated(
    records: list[dict[str, Any]], tunings: dict[str, Any], scope: str
) -> dict[str, Any]:
    """Each conversation's questions judged with the (k, threshold) its own store learned
    with no labels for the searched `scope` (`recalld calibrate`, else its `all`); the pooled
    shares over every conversation."""
    judged = []
    learned: dict[str, dict[str, float]] = {}
    for r in records:
        scopes = (tunings.get(r["conversation"]) or {}).get("answerability") or {}
        found = scopes.get(scope) or scopes.get(answerability_tune.ALL) or {}
        k, threshold = int(found.get("k", 1)), float(found.get("threshold", 0.0))
        learned[r["conversation"]] = {"k": k, "threshold": threshold}
        value = r[f"ownership@{k}"]
        judged.append({**r, "rejected": value is not None and value < threshold})
    return {**_pooled_rejection(judged), "learned": learned}


def _pooled_rejection(judged: list[dict[str, Any]]) -> dict[str, Any]:
    """The shares of unanswerable (category 5) and of answerable (1-4) questions `rejected`."""
    unanswerable = [float(r["rejected"]) for r in judged if r["category"] == 5]
    answerable = [float(r["rejected"]) for r in judged if r["category"] in (1, 2, 3, 4)]
    return {
        "rejected": round(metrics.mean(unanswerable), 4),
        "false_rejection": round(metrics.mean(answerable), 4),
        "unanswerable": len(unanswerable),
        "answerable": len(answerable),
    }


def _significance(paired: dict[str, dict[str, list[float]]], variants: list[str]) -> dict[str, Any]:
    """Every mode against bm25 and vector; each variant also against `full`, the defaults it
    changes."""
    out = metrics.significance(paired)
    if "full" in paired:
        against_full = metrics.significance(
            {n: paired[n] for n in [*variants, "full"] if n in paired}, ("full",)
        )
        for name, found in against_full.items():
            out.setdefault(name, {}).update(found)
    return out


def summarise(scores: Scores, latency: list[float]) -> dict[str, Any]:
    """Per-category means, the overall figures and latency percentiles."""
    out: dict[str, Any] = {}
    overall: dict[str, list[float]] = defaultdict(list)
    for category, bucket in sorted(scores.items()):
        if category == "adversarial":
            out[category] = {
                "rejected": round(metrics.mean(bucket["rejected"]), 4),
                "questions": len(bucket["rejected"]),
            }
            continue
        out[category] = {k: round(metrics.mean(v), 4) for k, v in bucket.items() if k != "rejected"}
        out[category]["questions"] = len(bucket["mrr"])
        if category == TIME_SUBSET:
            continue  # its questions are already counted in their own categories
        for key, values in bucket.items():
            overall[key].extend(values)
    out["overall"] = {k: round(metrics.mean(v), 4) for k, v in overall.items() if k != "rejected"}
    out["overall"]["false_rejection"] = round(metrics.mean(overall["rejected"]), 4)
    out["overall"]["questions"] = len(overall["mrr"])
    out["latency_ms_p50"] = round(metrics.percentile(latency, 50), 2)
    out["latency_ms_p95"] = round(metrics.percentile(latency, 95), 2)
    return out


async def run(
    file: Path,
    granularity: str,
    modes: list[str],
    overrides: dict[str, str],
    store_dir: Path | None = None,
    embedder: Embedder | None = None,
    variants: dict[str, dict[str, Any]] | None = None,
    calibrate: bool = False,
    calibration_seed: int = 0,
) -> dict[str, Any]:
    """Ingest each conversation into its own store and evaluate every mode.

    With `store_dir`, each conversation's store is kept in a subfolder and reused next time.
    `variants` are extra modes: the shipped defaults (`full`) with some search settings
    changed. Every mode and variant is compared with bm25 and vector on the answerable
    questions by a paired randomization test. With `calibrate`, each store calibrates its
    fusion after ingest (timed) and the `calibrated` mode searches with what it chose; its
    pseudo-queries are drawn with `calibration_seed` (another seed: another sample of them).
    """
    samples = json.loads(await asyncio.to_thread(file.read_text, "utf-8"))
    if isinstance(samples, dict):
        samples = [samples]
    runs: list[tuple[str, str, dict[str, Any]]] = [(m, m, {}) for m in modes] + [
        (n, "full", v) for n, v in (variants or {}).items()
    ]
    if calibrate:
        runs.append(("calibrated", "full", {"self_tune": True}))
    names = [name for name, _, _ in runs]
    tunings: dict[str, Any] = {}
    scores: dict[str, Scores] = {m: defaultdict(lambda: defaultdict(list)) for m in names}
    latency: dict[str, list[float]] = {m: [] for m in names}
    paired: dict[str, dict[str, list[float]]] = {m: {} for m in names}
    signals: list[dict[str, Any]] = []  # answerability, from the full mode's hits
    chunks = 0
    ingest_s = 0.0
    for sample in samples:
        with contextlib.ExitStack() as stack:
            if store_dir is None:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            else:
                workdir = store_dir / str(sample["sample_id"])
            settings = bench_settings(workdir, overrides)
            embedder = embedder or load_model(settings)
            memory = await AsyncMemory.open(settings, embedder=embedder)
            try:
                started = time.perf_counter()
                if settings.chunk != ChunkSettings():
                    # Another chunking must re-chunk a kept store, not be skipped as unchanged
                    # (chunks that come out the same keep their vectors).
                    sample = {**sample, "recalld_chunking": dataclasses.asdict(settings.chunk)}
                data = json.dumps(sample).encode()
                await memory.ingestor.ingest_bytes(
                    f"locomo:{sample['sample_id']}", "locomo.json", data
                )
                ingest_s += time.perf_counter() - started
                chunks += (await memory.counts())["chunks"]
                if calibrate:
                    tunings[str(sample["sample_id"])] = (
                        await memory.calibrate(seed=calibration_seed)
                    ).as_dict()
                for name, mode, changed in runs:
                    await evaluate_conversation(
                        memory,
                        sample,
                        mode,
                        granularity,
                        scores[name],
                        latency[name],
                        changed,
                        paired[name],
                        signals if name == "full" else None,
                    )
            finally:
                await memory.close()
        print(f"evaluated {sample['sample_id']}", file=sys.stderr)
    assert embedder is not None
    return {
        "dataset": str(file),
        "granularity": granularity,
        "model": embedder.model_id,
        "conversations": len(samples),
        "chunks": chunks,
        "ingest_seconds": round(ingest_s, 1),
        "overrides": overrides,
        "variants": variants or {},
        "calibration": tunings or None,
        "calibration_seed": calibration_seed if calibrate else None,
        "word_budgets": list(WORD_BUDGETS),
        "modes": {m: summarise(scores[m], latency[m]) for m in names},
        "significance": _significance(paired, list(variants or {})),
        "per_query": paired,
        "answerability": answerability_leave_one_out(signals)
        if signals
        else None,  # for paired tests across runs (`bench compare`)
        "answerability_self_calibrated": answerability_self_calibrated(
            signals, tunings, answerability_tune.scope_of(filters_of(granularity).granularities)
        )
        if signals and tunings
        else None,
    }
