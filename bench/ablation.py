"""Re-rank factor ablation: the baseline against each factor alone, on BEIR and LoCoMo, in one run.

A variant is a name and a set of search overrides, so any factor (MemX's recency, frequency and
importance here; a status penalty or anything else that is a `SearchSettings` field) can be
ablated without code: `--variant status:status_weight=0.3`.

On a static benchmark nobody has used the store, so retrieval counts and times are flat and the
factors can only tie. The run therefore simulates use first, the same way for every variant:

1. every chunk's counters are cleared and its creation back-dated `--age-days` (the corpus was
   ingested a while ago);
2. "history" queries are searched once with the shipped settings, and their top `--history-k`
   hits are counted as retrieved now (as `AsyncMemory.search` counts them);
3. every variant is measured on the measured queries, with the counters left as they are.

`--history split` (default) uses the odd-numbered queries as history and measures the even ones,
so no measured query has retrieved its own answers; `same` replays the measured queries as
their own history (a user asking again); `none` skips step 2.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import beir, locomo
from bench.common import bench_settings, load_model
from recalld.api import AsyncMemory
from recalld.embeddings.base import Embedder
from recalld.storage.contract import Store, Writer

# MemX's published weights (Table 1), one factor at a time.
VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "recency": {"recency_half_life_days": 30.0, "recency_weight": 0.25},
    "frequency": {"frequency_weight": 0.05},
    "importance": {"importance_weight": 0.10},
}
HISTORIES = ("split", "same", "none")

# `?` placeholders: both backends' write connections take aiosqlite's spelling (PostgreSQL's
# translates it); the CAST types a NULL date for PostgreSQL and is a no-op on SQLite.
_RESET_USAGE = (
    "UPDATE chunks SET retrieval_count = 0, last_retrieved_at = NULL, access_count = 0, "
    "last_accessed_at = NULL, created_at = coalesce(CAST(? AS DOUBLE PRECISION), created_at)"
)


def split(items: Sequence[Any], history: str) -> tuple[list[Any], list[Any]]:
    """(history, measured) items for a history mode."""
    if history == "split":
        return list(items[1::2]), list(items[0::2])
    return (list(items) if history == "same" else []), list(items)


async def reset_usage(store: Store, *, created_at: float | None = None) -> None:
    """Clear every chunk's use counters, and back-date creation when `created_at` is given.

    A re-used store must start each run from the same state, and a corpus "ingested a while ago"
    lets recency tell fresh retrievals from old chunks. Plain SQL on the store's writer
    connection: only the benchmark needs it, so recalld has no operation for it.
    """

    async def reset(conn: Writer) -> None:
        await conn.execute(_RESET_USAGE, (created_at,))

    await store.write(reset)


async def simulate_use(
    memory: AsyncMemory, queries: Sequence[str], k: int, age_days: float, **search: Any
) -> int:
    """Reset the counters, back-date the corpus and count the history queries' top hits.

    Returns:
        How many retrievals were counted.
    """
    await reset_usage(memory.store, created_at=time.time() - age_days * 86400)
    counted = 0
    for query in queries:
        result = await memory.searcher.search(query, limit=k, **search)
        ids = [h.chunk.id for h in result.hits]
        if ids:

            async def count(w: Writer, ids: list[int] = ids) -> None:
                await w.count_use(ids, retrieval=True)

            await memory.store.write(count)
            counted += len(ids)
    return counted


async def ablate_beir(
    folder: Path,
    split_name: str,
    workdir: Path,
    overrides: dict[str, str],
    embedder: Embedder | None,
    variants: dict[str, dict[str, Any]],
    history: str,
    history_k: int,
    age_days: float,
    limit_queries: int | None,
) -> dict[str, Any]:
    """Every variant's NDCG@10 / Recall@10 on a BEIR folder after simulated use."""
    corpus, queries, qrels = beir.load_beir(folder, split_name)
    judged = list(qrels.items())[:limit_queries] if limit_queries else list(qrels.items())
    past, measured = split(judged, history)
    settings = bench_settings(workdir, overrides)
    memory = await AsyncMemory.open(settings, embedder=embedder or load_model(settings))
    try:
        await beir.ingest_corpus(memory, corpus)
        counted = await simulate_use(memory, [queries[q] for q, _ in past], history_k, age_days)
        results = {}
        for name, variant in variants.items():
            results[name] = await beir.evaluate(
                memory, queries, dict(measured), "full", overrides=variant
            )
            print(f"beir {name}: {results[name]['ndcg@10']}", file=sys.stderr)
    finally:
        await memory.close()
    return {
        "dataset": str(folder),
        "history_queries": len(past),
        "measured_queries": len(measured),
        "retrievals_counted": counted,
        "variants": results,
    }


async def ablate_locomo(
    file: Path,
    store_dir: Path,
    overrides: dict[str, str],
    embedder: Embedder | None,
    variants: dict[str, dict[str, Any]],
    history: str,
    history_k: int,
    age_days: float,
) -> dict[str, Any]:
    """Every variant's evidence Recall@5 per category on a LoCoMo file after simulated use."""
    samples = json.loads(await asyncio.to_thread(file.read_text, "utf-8"))
    samples = samples if isinstance(samples, list) else [samples]
    scores: dict[str, locomo.Scores] = {n: defaultdict(lambda: defaultdict(list)) for n in variants}
    latency: dict[str, list[float]] = {n: [] for n in variants}
    counted = measured_total = past_total = 0
    for sample in samples:
        settings = bench_settings(store_dir / str(sample["sample_id"]), overrides)
        embedder = embedder or load_model(settings)
        memory = await AsyncMemory.open(settings, embedder=embedder)
        try:
            data = json.dumps(sample).encode()
            await memory.ingestor.ingest_bytes(f"locomo:{sample['sample_id']}", "locomo.json", data)
            past, measured = split(sample["qa"], history)
            past_total += len(past)
            measured_total += len(measured)
            counted += await simulate_use(
                memory, [str(q["question"]) for q in past], history_k, age_days
            )
            for name, variant in variants.items():
                await locomo.evaluate_conversation(
                    memory,
                    {**sample, "qa": measured},
                    "full",
                    "all",
                    scores[name],
                    latency[name],
                    overrides=variant,
                )
        finally:
            await memory.close()
        print(f"locomo {sample['sample_id']}", file=sys.stderr)
    return {
        "dataset": str(file),
        "history_queries": past_total,
        "measured_queries": measured_total,
        "retrievals_counted": counted,
        "variants": {n: locomo.summarise(scores[n], latency[n]) for n in variants},
    }


async def run(
    beir_folder: Path | None,
    locomo_file: Path | None,
    workdir: Path,
    overrides: dict[str, str],
    variants: dict[str, dict[str, Any]],
    history: str,
    history_k: int,
    age_days: float,
    limit_queries: int | None = None,
) -> dict[str, Any]:
    """Run the ablation on whichever data sets are given, sharing one loaded model."""
    embedder = load_model(bench_settings(workdir / "beir", overrides))
    report: dict[str, Any] = {
        "model": embedder.model_id,
        "history": history,
        "history_k": history_k,
        "age_days": age_days,
        "overrides": overrides,
        "variant_settings": variants,
    }
    try:
        if beir_folder is not None:
            report["beir"] = await ablate_beir(
                beir_folder,
                "train",
                workdir / "beir",
                overrides,
                embedder,
                variants,
                history,
                history_k,
                age_days,
                limit_queries,
            )
        if locomo_file is not None:
            report["locomo"] = await ablate_locomo(
                locomo_file,
                workdir / "locomo",
                overrides,
                embedder,
                variants,
                history,
                history_k,
                age_days,
            )
    finally:
        close = getattr(embedder, "close", None)
        if close is not None:
            await asyncio.to_thread(close)
    return report


def table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The report as rows: each variant's figures and their change from the baseline."""
    header = ["variant"]
    if "beir" in report:
        header += ["ndcg@10", "delta", "recall@10"]
    if "locomo" in report:
        header += ["R@5 all", "delta", "R@5 temporal", "delta"]
    rows = []
    names = report["variant_settings"]
    for name in names:
        row = [name]
        if "beir" in report:
            figures = report["beir"]["variants"]
            base = figures["baseline"]["ndcg@10"] if "baseline" in figures else None
            ndcg = figures[name]["ndcg@10"]
            row += [f"{ndcg:.4f}", _delta(ndcg, base), f"{figures[name]['recall@10']:.4f}"]
        if "locomo" in report:
            figures = report["locomo"]["variants"]
            for key in ("overall", "temporal"):
                value = figures[name].get(key, {}).get("recall@5")
                base = figures.get("baseline", {}).get(key, {}).get("recall@5")
                row += ["" if value is None else f"{value:.4f}", _delta(value, base)]
        rows.append(row)
    return header, rows


def _delta(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return ""
    return f"{value - base:+.4f}"
