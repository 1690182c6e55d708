"""`python -m bench tune`: does `recalld tune` help on data it never saw?

The BEIR corpus is ingested and tuned on alone (no queries, no qrels: pseudo-queries from the
corpus, as `recalld tune` draws them); the split's judged queries then score the vector route
and the full pipeline before and after the tuned model is switched in by the online reindex,
with paired randomization p-values per query.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from bench import metrics
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

        async def show(note: dict[str, Any]) -> None:
            if note.get("phase") == "training":
                print(
                    f"\rstep {note['step']}/{note['max_steps']} loss {note['loss']}",
                    end="",
                    file=sys.stderr,
                )

        spec = settings.embed.model
        tuned = await tune_run.tune(
            memory.store, memory.embedder, spec, settings.tuned_model_dir, options, show
        )
        print(file=sys.stderr)
        report["tune"] = tuned
        if not tuned.get("model"):
            print(f"refused: {tuned['gate']['reason']}", file=sys.stderr)
            return report

        async def quiet(note: dict[str, Any]) -> None:
            pass

        started = time.perf_counter()
        await memory.reindexer.start(tuned["model"])
        await memory.reindexer.wait(quiet)
        report["reindex_seconds"] = round(time.perf_counter() - started, 1)
        after: dict[str, dict[str, list[float]]] = {}
        report["after"] = {}
        for mode in MODES:
            after[mode] = {}
            report["after"][mode] = await evaluate(memory, queries, qrels, mode, None, after[mode])
        print(f"after: {report['after']}", file=sys.stderr)
        report["significance"] = {
            mode: {
                metric: {
                    "delta": round(metrics.mean(after[mode][metric]) - metrics.mean(values), 4),
                    "p": round(metrics.randomization_p(after[mode][metric], values), 4),
                }
                for metric, values in before[mode].items()
            }
            for mode in MODES
        }
    finally:
        await memory.close()
    return report
