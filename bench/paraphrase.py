"""Hit@1 of each keyword weighting on the paraphrase test's corpus (16 notes, 16 questions that
share few words with their answers; tests/retrieval/corpus.py), with the packaged model.

    python -m bench.paraphrase [NAME:KEY=VALUE,...]...

Each spec is a set of search settings (as `--variant`); without any, the weightings measured
for issue 14. `tests/retrieval/test_paraphrase.py` requires the hybrid to match the better
route here; this shows which weightings would keep that.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import bench_settings, load_model
from bench.options import parse_variants
from recalld.api import AsyncMemory
from tests.retrieval.corpus import PASSAGES, QUESTIONS

MEASURED = (
    "vector:mode=vector",
    "bm25:mode=bm25",
    "coverage:weighting=coverage",
    "agreement:weighting=agreement",
    "coverage-agreement:weighting=coverage-agreement",
    "fixed-0.5:weighting=fixed,vector_weight=0.5",
    "slope-4:adaptive_slope=4",
    "slope-4-midpoint-0.6:adaptive_slope=4,adaptive_midpoint=0.6",
    "floor-0.3:keyword_weight_floor=0.3",
)


async def hit_at_1(memory: AsyncMemory, settings: dict[str, Any]) -> tuple[float, float]:
    """Hit@1 over the questions, and the median keyword weight (1 for a single route)."""
    hits, weights = 0, []
    for question, key in QUESTIONS.items():
        result = await memory.search(question, limit=5, gate=False, **settings)
        hits += bool(result.hits) and result.hits[0].chunk.source == f"note:{key}"
        weights.append(result.explain["weights"].get("bm25", 1.0))
    return hits / len(QUESTIONS), statistics.median(weights)


async def main(specs: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as home:
        settings = bench_settings(Path(home), {})
        async with await AsyncMemory.open(settings, embedder=load_model(settings)) as memory:
            for key, text in PASSAGES.items():
                await memory.add_text(text, source=f"note:{key}", name=f"{key}.txt")
            for name, changed in parse_variants(specs or MEASURED).items():
                found, weight = await hit_at_1(memory, changed)
                hybrid = changed.get("mode", "hybrid") == "hybrid"
                note = f" (median keyword weight {weight:.2f})" if hybrid else ""
                print(f"{name}: Hit@1 {found:.4f}{note}")


if __name__ == "__main__":
    asyncio.run(main(tuple(sys.argv[1:])))
