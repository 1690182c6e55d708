"""The int8 model's one-text runs one at a time, or `RUNS_IN_FLIGHT` at once, on SciFact chunks.

    python -m bench.runs_in_flight ../shared/data/scifact [DOCS] [BATCH]

Both ways embed the same batches of `BATCH` texts (what ingest hands the model), alternating
batch by batch in one process, so a shared machine's load falls on both alike. Prints their
wall and CPU seconds, the ratio of the walls, and whether every vector is the same bits.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.int8_batching import texts
from recalld.embeddings.local import RUNS_IN_FLIGHT, LocalEmbedder


def main(folder: Path, docs: int = 150, batch: int = 32) -> None:
    cache = Path(tempfile.mkdtemp(prefix="runs-in-flight-"))
    ways = {
        "one at a time": LocalEmbedder(cache_dir=cache, runs_in_flight=1),
        f"{RUNS_IN_FLIGHT} at once (default)": LocalEmbedder(cache_dir=cache),
    }
    corpus = texts(folder, docs, 0, next(iter(ways.values())).count_tokens)
    walls: dict[str, list[float]] = {name: [] for name in ways}
    cpus: dict[str, list[float]] = {name: [] for name in ways}
    same = True
    for i, start in enumerate(range(0, len(corpus), batch)):
        part = corpus[start : start + batch]
        found = []
        for name, embedder in ways.items() if i % 2 == 0 else reversed(ways.items()):
            wall, cpu = time.perf_counter(), time.process_time()
            found.append(embedder.embed(part))
            walls[name].append(time.perf_counter() - wall)
            cpus[name].append(time.process_time() - cpu)
        same = same and bool(np.array_equal(found[0], found[1]))
    first, second = ways
    ratios = [b / a for a, b in zip(walls[first], walls[second], strict=True)]
    report = {
        "texts": len(corpus),
        "batches": len(ratios),
        "wall_s": {name: round(sum(v), 2) for name, v in walls.items()},
        "cpu_s": {name: round(sum(v), 2) for name, v in cpus.items()},
        "wall_ratio": round(sum(walls[second]) / sum(walls[first]), 2),
        "median_batch_ratio": round(statistics.median(ratios), 2),
        "bit_identical": same,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:]))
