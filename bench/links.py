"""What auto-linking costs at ingest: the same files into fresh stores, links on and off.

Both configurations run in one process, alternating, and the figure is the median of each.
The model's vectors are computed once and replayed: its time is the same for both and, on a
shared machine, would only add noise to a difference measured in seconds. The report gives
that model time too, so the overhead can be read against a whole ingest.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import bench_settings, load_model
from bench.ingest import _read, iter_files
from recalld.api import AsyncMemory
from recalld.embeddings.base import Embedder, Vectors


class _Replay:
    """An embedder that answers from vectors it computed before (computing misses)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.max_tokens = inner.max_tokens
        self.cache: dict[str, Vectors] = {}
        self.model_s = 0.0

    def embed(self, texts: Sequence[str]) -> Vectors:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            started = time.perf_counter()
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                self.cache[text] = vector
            self.model_s += time.perf_counter() - started
        return np.stack([self.cache[t] for t in texts])

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)


async def _once(
    folder_items: list[Any], workdir: Path, overrides: dict[str, str], replay: _Replay
) -> tuple[float, dict[str, int]]:
    settings = bench_settings(workdir, overrides)
    memory = await AsyncMemory.open(settings, embedder=replay)
    try:
        started = time.perf_counter()
        await memory.ingestor.ingest_many(folder_items)
        elapsed = time.perf_counter() - started
        counts = await memory.counts()
        counts.update(memory.ingestor.linker.counts)
        return elapsed, counts
    finally:
        await memory.close()


async def run(folder: Path, overrides: dict[str, str], rounds: int = 3) -> dict[str, Any]:
    """Ingest `folder` `rounds` times with links on and off (fresh stores) and compare."""
    embedder = load_model(bench_settings(Path(tempfile.mkdtemp()), overrides))
    replay = _Replay(embedder)
    items = await asyncio.to_thread(_read, list(iter_files(folder)))
    with tempfile.TemporaryDirectory() as scratch:
        # A first ingest computes every vector (and warms SQLite and the tokenizer).
        await _once(items, Path(scratch) / "warm", {**overrides, "links.auto": "false"}, replay)
    times: dict[str, list[float]] = {"on": [], "off": []}
    counts: dict[str, dict[str, int]] = {}
    for number in range(rounds):
        for label, auto in (("on", "true"), ("off", "false")):
            with tempfile.TemporaryDirectory() as workdir:
                elapsed, found = await _once(
                    items, Path(workdir), {**overrides, "links.auto": auto}, replay
                )
            times[label].append(elapsed)
            counts[label] = found
            print(f"round {number + 1}: links {label} {elapsed:.2f} s", file=sys.stderr)
    chunks = counts["on"]["chunks"]
    medians = {label: statistics.median(values) for label, values in times.items()}
    return {
        "folder": str(folder),
        "model": embedder.model_id,
        "files": len(items),
        "chunks": chunks,
        "rounds": rounds,
        "model_seconds": round(replay.model_s, 2),
        "links_on": {
            "seconds": round(medians["on"], 2),
            "chunks_per_s": round(chunks / medians["on"], 1),
            "links": counts["on"]["links"],
            "similar": counts["on"]["similar"],
            "supersedes": counts["on"]["supersedes"],
        },
        "links_off": {
            "seconds": round(medians["off"], 2),
            "chunks_per_s": round(chunks / medians["off"], 1),
            "links": counts["off"]["links"],
        },
        # What links add, against the store work alone and against a whole ingest.
        "store_ratio": round(medians["on"] / medians["off"], 3),
        "ingest_ratio": round(
            (medians["on"] + replay.model_s) / (medians["off"] + replay.model_s), 3
        ),
        "overrides": overrides,
    }
