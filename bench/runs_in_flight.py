"""The int8 model's one-text runs one at a time, or `RUNS_IN_FLIGHT` at once (each on its share
of the cores, the default, or each on all of them), on SciFact chunks.

    python -m bench.runs_in_flight ../shared/data/scifact [DOCS] [BATCH]

Every way embeds the same batches of `BATCH` texts (what ingest hands the model), in turn batch
by batch in one process (the order rotating), so a shared machine's load falls on all alike.
Prints their wall and CPU seconds, each way's median per-batch wall ratio to the first, and
whether every vector is the same bits.
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
    default = LocalEmbedder(cache_dir=cache)
    ways = {
        "one at a time": LocalEmbedder(cache_dir=cache, runs_in_flight=1),
        f"{RUNS_IN_FLIGHT} at once, each on every core": LocalEmbedder(
            cache_dir=cache, run_threads=default.threads
        ),
        f"{RUNS_IN_FLIGHT} at once, {default.run_threads} thread(s) each (default)": default,
    }
    corpus = texts(folder, docs, 0, default.count_tokens)
    walls: dict[str, list[float]] = {name: [] for name in ways}
    cpus: dict[str, list[float]] = {name: [] for name in ways}
    same = True
    names = list(ways)
    for i, start in enumerate(range(0, len(corpus), batch)):
        part = corpus[start : start + batch]
        found = []
        for name in names[i % len(names) :] + names[: i % len(names)]:
            wall, cpu = time.perf_counter(), time.process_time()
            found.append(ways[name].embed(part))
            walls[name].append(time.perf_counter() - wall)
            cpus[name].append(time.process_time() - cpu)
        same = same and all(np.array_equal(found[0], f) for f in found[1:])
    first = names[0]
    report = {
        "texts": len(corpus),
        "batches": len(walls[first]),
        "wall_s": {name: round(sum(v), 2) for name, v in walls.items()},
        "cpu_s": {name: round(sum(v), 2) for name, v in cpus.items()},
        "median_batch_wall_ratio_to_first": {
            name: round(statistics.median(b / a for a, b in zip(walls[first], v, strict=True)), 3)
            for name, v in walls.items()
        },
        "bit_identical": same,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:]))
