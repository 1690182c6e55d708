"""BEIR retrieval quality: NDCG@10, Recall@10/100, MRR@10 and latency for every mode in one run.

The corpus goes through the same ingest path as the daemon (documents chunked as usual); chunk
hits map back to documents by their first (best) chunk, i.e. max over a document's chunks.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import metrics
from bench.common import MODES, bench_settings, forget_query_vectors, load_model
from recalld.api import AsyncMemory

SOURCE_PREFIX = "beir:"


def load_beir(
    folder: Path, split: str
) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """Corpus texts, query texts and qrels of a BEIR folder."""
    corpus = {}
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            title = doc.get("title") or ""
            corpus[str(doc["_id"])] = f"{title}\n\n{doc['text']}" if title else doc["text"]
    queries = {}
    with (folder / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels" / f"{split}.tsv").open(encoding="utf-8") as handle:
        rows = csv.reader(handle, delimiter="\t")
        for row in rows:
            if row and row[0] != "query-id":
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return corpus, queries, qrels


async def ingest_corpus(memory: AsyncMemory, corpus: dict[str, str], batch: int = 256) -> float:
    """Ingest every document (unchanged ones are skipped by hash); returns seconds taken."""
    started = time.perf_counter()
    ids = list(corpus)
    for start in range(0, len(ids), batch):
        items = [
            (SOURCE_PREFIX + i, "doc.txt", corpus[i].encode(), None, None)
            for i in ids[start : start + batch]
        ]
        await memory.ingestor.ingest_many(items)
        print(f"\ringested {min(start + batch, len(ids))}/{len(ids)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    return time.perf_counter() - started


async def evaluate(
    memory: AsyncMemory,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    mode: str,
    overrides: dict[str, Any] | None = None,
    per_query: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """Run every judged query in one mode (plus any search `overrides`) and score it.

    With `per_query`, each query's NDCG@10, Recall@10 and MRR@10 are appended to it in qrels
    order, for paired significance tests between modes.
    """
    ndcg, r10, r100, mrr, latency = [], [], [], [], []
    options = {**MODES[mode], **(overrides or {})}
    forget_query_vectors(memory)
    for qid, judged in qrels.items():
        started = time.perf_counter()
        result = await memory.searcher.search(queries[qid], limit=100, candidates=100, **options)
        latency.append((time.perf_counter() - started) * 1000)
        ranked = list(dict.fromkeys(h.chunk.source[len(SOURCE_PREFIX) :] for h in result.hits))
        relevant = {d for d, r in judged.items() if r > 0}
        ndcg.append(metrics.ndcg_at(ranked, judged, 10))
        r10.append(metrics.recall_at(ranked, relevant, 10))
        r100.append(metrics.recall_at(ranked, relevant, 100))
        mrr.append(metrics.mrr_at(ranked, relevant, 10))
    if per_query is not None:
        for key, values in (("ndcg@10", ndcg), ("recall@10", r10), ("mrr@10", mrr)):
            per_query.setdefault(key, []).extend(values)
    return {
        "ndcg@10": round(metrics.mean(ndcg), 4),
        "recall@10": round(metrics.mean(r10), 4),
        "recall@100": round(metrics.mean(r100), 4),
        "mrr@10": round(metrics.mean(mrr), 4),
        "latency_ms_p50": round(metrics.percentile(latency, 50), 2),
        "latency_ms_p95": round(metrics.percentile(latency, 95), 2),
        "queries": len(qrels),
    }


async def run(
    folder: Path,
    split: str,
    modes: list[str],
    limit_queries: int | None,
    workdir: Path,
    overrides: dict[str, str],
    variants: dict[str, dict[str, Any]] | None = None,
    calibrate: bool = False,
    corpus_limit: int | None = None,
    calibration_seed: int = 0,
) -> dict[str, Any]:
    """Ingest a BEIR corpus into the store in `workdir` and evaluate every mode.

    `variants` are extra modes: the shipped defaults (`full`) with some search settings changed.
    Every mode and variant is compared with bm25 and vector by a paired randomization test.
    With `calibrate`, the store calibrates its fusion first (timed) and the `calibrated` mode
    searches with what it chose; its pseudo-queries are drawn with `calibration_seed`.
    """
    corpus, queries, qrels = load_beir(folder, split)
    if corpus_limit:
        # The first N documents only, and the queries whose judged documents are all among
        # them (a smaller collection: fewer distractors, so figures run higher than the whole).
        corpus = dict(list(corpus.items())[:corpus_limit])
        qrels = {q: j for q, j in qrels.items() if all(d in corpus for d in j)}
    if limit_queries:
        qrels = dict(list(qrels.items())[:limit_queries])
    settings = bench_settings(workdir, overrides)
    embedder = load_model(settings)
    memory = await AsyncMemory.open(settings, embedder=embedder)
    try:
        ingest_s = await ingest_corpus(memory, corpus)
        counts = await memory.counts()
        results = {}
        paired: dict[str, dict[str, list[float]]] = {}
        runs: list[tuple[str, str, dict[str, Any]]] = [(m, m, {}) for m in modes]
        runs += [(n, "full", v) for n, v in (variants or {}).items()]
        tuning = None
        if calibrate:
            tuning = (await memory.calibrate(seed=calibration_seed)).as_dict()
            print(f"calibrated in {tuning['seconds']} s: {tuning['kinds']}", file=sys.stderr)
            runs.append(("calibrated", "full", {"self_tune": True}))
        for name, mode, changed in runs:
            paired[name] = {}
            results[name] = await evaluate(memory, queries, qrels, mode, changed, paired[name])
            print(f"{name}: {results[name]}", file=sys.stderr)
    finally:
        await memory.close()
    return {
        "dataset": str(folder),
        "split": split,
        "model": embedder.model_id,
        "documents": len(corpus),
        "queries": len(qrels),
        "chunks": counts["chunks"],
        "ingest_seconds": round(ingest_s, 1),
        "overrides": overrides,
        "variants": variants or {},
        "calibration": tuning,
        "calibration_seed": calibration_seed if calibrate else None,
        "modes": results,
        "significance": metrics.significance(paired),
        "per_query": paired,  # for paired tests across runs (`bench compare`)
    }
