"""Does a text's vector depend on the texts embedded alongside it? The packaged int8 model run
alone (the default) and in sub-batches of 32, against fp32, on SciFact chunks and queries.

    python -m bench.int8_batching ../shared/data/scifact [DOCS] [QUERIES] [ROUNDS]

For each way of running: texts per second (medians of alternating rounds), cosine to the fp32
vectors, and how far a text's vector in a call with all the others is from the text alone.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from recalld.chunkers.options import ChunkOptions
from recalld.chunkers.text import chunk_text
from recalld.embeddings.local import LocalEmbedder


def texts(folder: Path, docs: int, queries: int, count: Callable[[str], int]) -> list[str]:
    """The chunks of the first `docs` abstracts, cut as ingest cuts plain text, and the first
    `queries` claims."""
    out = []
    options = ChunkOptions(count_tokens=count)
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line, _ in zip(handle, range(docs), strict=False):
            doc = json.loads(line)
            text = f"{doc['title']}\n\n{doc['text']}" if doc.get("title") else doc["text"]
            out += [c.text for c in chunk_text(text, options, syntax="plain", fmt="text")]
    with (folder / "queries.jsonl").open(encoding="utf-8") as handle:
        out += [json.loads(line)["text"] for line, _ in zip(handle, range(queries), strict=False)]
    return out


def main(folder: Path, docs: int = 20, queries: int = 40, rounds: int = 3) -> None:
    cache = Path(tempfile.mkdtemp(prefix="int8-batching-"))
    runs = {
        "fp32, sub-batches of 32": LocalEmbedder(quantize=False, cache_dir=cache),
        "int8, sub-batches of 32": LocalEmbedder(cache_dir=cache, batch_size=32),
        "int8, alone (default)": LocalEmbedder(cache_dir=cache),
    }
    corpus = texts(folder, docs, queries, runs["int8, alone (default)"].count_tokens)
    reference = runs["fp32, sub-batches of 32"].embed(corpus)
    rows: dict[str, dict[str, object]] = {}
    for name, embedder in runs.items():
        together = embedder.embed(corpus)
        alone = np.stack([embedder.embed([t])[0] for t in corpus])
        to_fp32 = np.sum(together * reference, axis=1)
        rows[name] = {
            "cosine_to_fp32_mean": round(float(to_fp32.mean()), 5),
            "cosine_to_fp32_min": round(float(to_fp32.min()), 5),
            "vs_alone_max_abs": float(np.abs(together - alone).max()),
            "vs_alone_min_cosine": round(float(np.sum(together * alone, axis=1).min()), 7),
            "bit_identical_to_alone": int(np.all(together == alone, axis=1).sum()),
        }
    speeds: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(rounds):
        for name, embedder in runs.items() if i % 2 == 0 else reversed(runs.items()):
            started = time.perf_counter()
            embedder.embed(corpus)
            speeds[name].append(len(corpus) / (time.perf_counter() - started))
    base = statistics.median(speeds["int8, sub-batches of 32"])
    for name, values in speeds.items():
        median = statistics.median(values)
        rows[name].update(texts_per_s=round(median, 1), vs_int8_batched=round(median / base, 2))
    print(json.dumps({"texts": len(corpus), "rounds": rounds, "runs": rows}, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:]))
