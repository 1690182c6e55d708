"""`python -m bench tune`: does `recalld tune` help on data it never saw?

BEIR: the corpus is ingested and tuned on alone (no queries, no qrels: pseudo-queries from the
corpus, as `recalld tune` draws them); the split's judged queries then score the vector route
and the full pipeline before and after the tuned model is switched in by the online reindex,
with paired randomization p-values per query.

LoCoMo: the conversations are ingested into one store and tuned on alone (their turns, no
questions); each conversation's questions are searched within its own source with the vector
route and the full pipeline, before and after the tuned model is switched in by the online
reindex (evidence Recall@5 and recall within 300 returned words, paired over the answerable
questions). One store, not `bench locomo`'s store per conversation: mining needs several
documents (it holds whole documents back and draws hard negatives from other ones), and one
ingest and one reindex cost a third less than three passes; BM25's statistics are the whole
store's, so the "before" figures are near but not equal to `bench locomo`'s.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import locomo, metrics
from bench.beir import evaluate, ingest_corpus, load_beir
from bench.common import bench_settings, load_model
from recalld.api import AsyncMemory
from recalld.tune import run as tune_run

MODES = ("vector", "full")


async def run(
    folder: Path,
    split: str,
    limit_queries: int | None,
    workdir: Path,
    overrides: dict[str, str],
    options: tune_run.TuneOptions,
    corpus_limit: int | None = None,
) -> dict[str, Any]:
    """Ingest, score, tune, reindex onto an accepted model, score again."""
    corpus, queries, qrels = load_beir(folder, split)
    if corpus_limit:
        # As `bench beir --corpus-limit`: the first N documents and the queries judged on them.
        corpus = dict(list(corpus.items())[:corpus_limit])
        qrels = {q: j for q, j in qrels.items() if all(d in corpus for d in j)}
    if limit_queries:
        qrels = dict(list(qrels.items())[:limit_queries])
    settings = bench_settings(workdir, overrides)
    memory = await AsyncMemory.open(settings, embedder=load_model(settings))
    report: dict[str, Any] = {
        "dataset": str(folder),
        "split": split,
        "documents": len(corpus),
        "queries": len(qrels),
    }
    try:
        report["ingest_seconds"] = round(await ingest_corpus(memory, corpus), 1)
        report["chunks"] = (await memory.counts())["chunks"]
        before: dict[str, dict[str, list[float]]] = {}
        report["before"] = {}
        for mode in MODES:
            before[mode] = {}
            report["before"][mode] = await evaluate(
                memory, queries, qrels, mode, None, before[mode]
            )
        print(f"before: {report['before']}", file=sys.stderr)

        report["tune"] = tuned = await _tune(memory, options)
        if not tuned.get("model"):
            return report
        report["reindex_seconds"] = await _switch(memory, tuned["model"])
        after: dict[str, dict[str, list[float]]] = {}
        report["after"] = {}
        for mode in MODES:
            after[mode] = {}
            report["after"][mode] = await evaluate(memory, queries, qrels, mode, None, after[mode])
        print(f"after: {report['after']}", file=sys.stderr)
        report["significance"] = _significance(before, after)
    finally:
        await memory.close()
    return report


async def run_locomo(
    file: Path,
    workdir: Path,
    overrides: dict[str, str],
    options: tune_run.TuneOptions,
    conversations: int | None = None,
) -> dict[str, Any]:
    """Tune on the conversations' content, then score each conversation's questions, searched
    within its own source, before and after the store's reindex onto the tuned model (when the
    gate accepts it). With `conversations`, only the first N."""
    samples = json.loads(await asyncio.to_thread(file.read_text, "utf-8"))
    if isinstance(samples, dict):
        samples = [samples]
    samples = samples[:conversations] if conversations else samples
    settings = bench_settings(workdir, overrides)
    report: dict[str, Any] = {
        "dataset": str(file),
        "conversations": [str(s["sample_id"]) for s in samples],
    }
    memory = await AsyncMemory.open(settings, embedder=load_model(settings))
    try:
        started = time.perf_counter()
        for sample in samples:
            data = json.dumps(sample).encode()
            await memory.ingestor.ingest_bytes(_source(sample), "locomo.json", data)
        report["ingest_seconds"] = round(time.perf_counter() - started, 1)
        report["chunks"] = (await memory.counts())["chunks"]
        paired: dict[str, dict[str, dict[str, list[float]]]] = {}
        report["before"] = await _score_locomo(memory, samples, paired.setdefault("before", {}))
        print(f"before: {report['before']}", file=sys.stderr)
        report["tune"] = tuned = await _tune(memory, options)
        if not tuned.get("model"):
            return report
        report["reindex_seconds"] = await _switch(memory, tuned["model"])
        report["after"] = await _score_locomo(memory, samples, paired.setdefault("after", {}))
        print(f"after: {report['after']}", file=sys.stderr)
        report["significance"] = _significance(paired["before"], paired["after"])
    finally:
        await memory.close()
    return report


def _source(sample: dict[str, Any]) -> str:
    return f"locomo:{sample['sample_id']}"


async def _score_locomo(
    memory: AsyncMemory, samples: list[dict[str, Any]], paired: dict[str, dict[str, list[float]]]
) -> dict[str, Any]:
    """Every conversation's questions in each mode, within its own source: the overall
    figures; the answerable questions' `PAIRED_METRICS` appended to `paired` in order."""
    out = {}
    for mode in MODES:
        scores = _scores()
        for sample in samples:
            await locomo.evaluate_conversation(
                memory,
                sample,
                mode,
                "all",
                scores,
                [],
                None,
                paired.setdefault(mode, {}),
                sources=(_source(sample),),
            )
        out[mode] = locomo.summarise(scores, [0.0])["overall"]
    return out


def _scores() -> locomo.Scores:
    return defaultdict(lambda: defaultdict(list))


async def _tune(memory: AsyncMemory, options: tune_run.TuneOptions) -> dict[str, Any]:
    """`recalld tune` on the store, its training progress on stderr."""

    async def show(note: dict[str, Any]) -> None:
        if note.get("phase") == "training":
            print(
                f"\rstep {note['step']}/{note['max_steps']} loss {note['loss']}",
                end="",
                file=sys.stderr,
            )

    settings = memory.settings
    tuned = await tune_run.tune(
        memory.store, memory.embedder, settings.embed.model, settings.tuned_model_dir, options, show
    )
    print(file=sys.stderr)
    if not tuned.get("model"):
        print(f"refused: {tuned['gate']['reason']}", file=sys.stderr)
    return tuned


async def _switch(memory: AsyncMemory, spec: str) -> float:
    """Reindex the store onto `spec` online; the seconds it took."""

    async def quiet(note: dict[str, Any]) -> None:
        pass

    started = time.perf_counter()
    await memory.reindexer.start(spec)
    await memory.reindexer.wait(quiet)
    return round(time.perf_counter() - started, 1)


def _significance(
    before: dict[str, dict[str, list[float]]], after: dict[str, dict[str, list[float]]]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per mode and metric: the mean change and its paired randomization p-value."""
    return {
        mode: {
            metric: {
                "delta": round(metrics.mean(after[mode][metric]) - metrics.mean(values), 4),
                "p": round(metrics.randomization_p(after[mode][metric], values), 4),
            }
            for metric, values in before[mode].items()
        }
        for mode in before
    }
