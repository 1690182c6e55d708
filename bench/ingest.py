"""Ingest throughput: files to searchable chunks, beside the embedding model alone.

The pipeline run goes through `AsyncMemory`'s `Ingestor.ingest_many` into a fresh store, the
way the daemon ingests (read, hash, chunk, embed in shared batches, one transaction per
document); its clock stops when the last document is committed, i.e. searchable. The model
run then embeds the very same chunk texts (chunked again with the same options, so nothing is
read from the store) in batches of the same size. Their ratio is the pipeline's overhead.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import bench_settings, load_model
from recalld.api import AsyncMemory
from recalld.chunkers import ChunkOptions, chunk_file
from recalld.embeddings.base import Embedder
from recalld.errors import RecalldError

FILES_PER_CALL = 32


def iter_files(folder: Path) -> Iterator[Path]:
    """Regular files under `folder`, in a stable order, skipping hidden ones."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not any(p.startswith(".") for p in path.relative_to(folder).parts):
            yield path


def _read(paths: list[Path]) -> list[tuple[str, str, bytes, float | None, int | None]]:
    items: list[tuple[str, str, bytes, float | None, int | None]] = []
    for path in paths:
        stat = path.stat()
        items.append(
            (str(path.resolve()), path.name, path.read_bytes(), stat.st_mtime, stat.st_size)
        )
    return items


def _model_only(
    paths: list[Path], options: ChunkOptions, embedder: Embedder, batch: int
) -> tuple[list[str], float]:
    """Chunk the files again and time the model alone on their texts (blocking)."""
    texts: list[str] = []
    for path in paths:
        try:
            parsed = chunk_file(path.name, path.read_bytes(), options)
        except RecalldError:
            continue
        texts.extend(draft.text for draft in parsed.chunks)
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embedder.embed(texts[start : start + batch])
    return texts, time.perf_counter() - started


async def run(folder: Path, workdir: Path, overrides: dict[str, str]) -> dict[str, Any]:
    """Ingest every file under `folder` into a fresh store in `workdir`, then time the model."""
    settings = bench_settings(workdir, overrides)
    embedder = load_model(settings)
    await asyncio.to_thread(embedder.embed, ["warm up"])
    paths = list(iter_files(folder))
    memory = await AsyncMemory.open(settings, embedder=embedder)
    total_bytes = 0
    failed = 0
    try:
        started = time.perf_counter()
        for start in range(0, len(paths), FILES_PER_CALL):
            items = await asyncio.to_thread(_read, paths[start : start + FILES_PER_CALL])
            total_bytes += sum(len(item[2]) for item in items)
            try:
                await memory.ingestor.ingest_many(items)
            except RecalldError:
                # ingest_many raises for the first bad file after ingesting the others.
                failed += 1
            done = min(start + FILES_PER_CALL, len(paths))
            print(f"\ringested {done}/{len(paths)} files", end="", file=sys.stderr)
        print(file=sys.stderr)
        pipeline_s = time.perf_counter() - started
        stored = (await memory.counts())["chunks"]
        options = memory.ingestor.options
    finally:
        await memory.close()

    texts, model_s = await asyncio.to_thread(
        _model_only, paths, options, embedder, settings.embed.batch_size
    )
    megabytes = total_bytes / 2**20
    return {
        "folder": str(folder),
        "model": embedder.model_id,
        "files": len(paths),
        "failed_batches": failed,
        "megabytes": round(megabytes, 2),
        "chunks": stored,
        "batch_size": settings.embed.batch_size,
        "pipeline": {
            "seconds": round(pipeline_s, 2),
            "chunks_per_s": round(stored / pipeline_s, 1) if pipeline_s else None,
            "mb_per_s": round(megabytes / pipeline_s, 3) if pipeline_s else None,
        },
        "model_only": {
            "texts": len(texts),
            "seconds": round(model_s, 2),
            "chunks_per_s": round(len(texts) / model_s, 1) if model_s else None,
        },
        "overhead_ratio": round(pipeline_s / model_s, 2) if model_s else None,
        "overrides": overrides,
    }
