"""Ingest throughput: files to searchable chunks, beside the embedding model alone.

The pipeline run goes into a fresh store either through the API (`AsyncMemory`'s
`Ingestor.ingest_many`, a few calls of `FILES_PER_CALL` files in flight, as the daemon's
`ingest_now` runs its batches: read, hash, chunk, embed in shared batches, one transaction per
call) or through a real daemon (`--via daemon`: `recalld serve` on the work folder, timed
around the client's `ingest` of the folder); its clock stops when the last document is
committed, i.e. searchable. The model run then embeds the very same chunk texts (chunked again
with the same options, so nothing is read from the store) in batches of the same size. Their
ratio is the pipeline's overhead. Both runs also report the CPU time they took (every thread
of the process; the daemon's read from /proc), which a loaded machine disturbs far less than
wall time: the CPU ratio is the pipeline's own work, whether or not it overlaps the model's.

The model alone on the same texts took anywhere from 17.9 to 24.0 s between runs on one quiet
machine, enough to move the ratio by 0.15 either way, so `--rounds N` runs the pair N times
(each into a fresh store, pipeline then model) and reports the median of the per-round
ratios (`combine`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import bench_settings, load_model
from recalld.api import AsyncMemory
from recalld.chunkers import ChunkOptions, chunk_file
from recalld.client import Client
from recalld.config import ENV_PREFIX
from recalld.embeddings.base import Embedder
from recalld.errors import DaemonError, RecalldError
from recalld.ingest.overlap import InFlight, WriteOrder
from recalld.ingest.scheduler import FOLDER_FILES

# As the daemon's `ingest_now` makes its calls.
FILES_PER_CALL = FOLDER_FILES


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


def _cpu_seconds(pid: int | None = None) -> float | None:
    """CPU time (user + system, all threads) of this process or of `pid` (from /proc; None
    where there is no /proc)."""
    if pid is None:
        return time.process_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime and stime, fields 14 and 15 of stat(5), counted after the ")" from field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _model_only(
    paths: list[Path], options: ChunkOptions, embedder: Embedder, batch: int
) -> tuple[list[str], float, float]:
    """Chunk the files again and time the model alone on their texts (blocking); (texts,
    seconds, CPU seconds)."""
    texts: list[str] = []
    for path in paths:
        try:
            parsed = chunk_file(path.name, path.read_bytes(), options)
        except RecalldError:
            continue
        texts.extend(draft.text for draft in parsed.chunks)
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        embedder.embed(texts[start : start + batch])
    return texts, time.perf_counter() - started, time.process_time() - cpu


async def _through_api(memory: AsyncMemory, paths: list[Path]) -> tuple[int, int]:
    """Ingest `paths` in calls of `FILES_PER_CALL`, a few in flight; (bytes, failed calls)."""
    total_bytes = 0
    failed = 0
    done = 0
    order = WriteOrder()

    async def one(batch: list[Path]) -> int:
        nonlocal total_bytes, failed
        place = order.place()  # before any await: calls write in file order
        try:
            items = await asyncio.to_thread(_read, batch)
            total_bytes += sum(len(item[2]) for item in items)
            await memory.ingestor.ingest_many(items, place=place)
        except RecalldError:
            # ingest_many raises for the first bad file after ingesting the others.
            failed += 1
        finally:
            place.leave()
        return len(batch)

    async with InFlight[int]() as flight:
        for start in range(0, len(paths), FILES_PER_CALL):
            for count in await flight.add(one(paths[start : start + FILES_PER_CALL])):
                done += count
                print(f"\ringested {done}/{len(paths)} files", end="", file=sys.stderr)
        for count in await flight.drain():
            done += count
            print(f"\ringested {done}/{len(paths)} files", end="", file=sys.stderr)
    print(file=sys.stderr)
    return total_bytes, failed


def _through_daemon(
    folder: Path, workdir: Path, overrides: dict[str, str]
) -> tuple[float, float | None, int]:
    """Start `recalld serve` on `workdir`, time the client's ingest of `folder` (blocking);
    (seconds, the daemon's CPU seconds, failed files)."""
    socket = workdir / "d.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith((ENV_PREFIX, "XDG_"))}
    env.update({"RECALLD_HOME": str(workdir), "RECALLD_DAEMON__SOCKET": str(socket)})
    for key, value in overrides.items():
        env[ENV_PREFIX + key.upper().replace(".", "__")] = value
    log = (workdir / "daemon.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "recalld", "serve"], env=env, stdout=log, stderr=log
    )
    client = Client(socket, timeout=600)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.status()
                break
            except DaemonError:
                client.close()
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the daemon did not start; see {log.name}") from None
                time.sleep(0.1)
        client.search("warm up")  # loads the model
        started, cpu = time.perf_counter(), _cpu_seconds(proc.pid)
        report = client.ingest(folder)
        seconds, cpu_after = time.perf_counter() - started, _cpu_seconds(proc.pid)
        cpu_s = cpu_after - cpu if cpu is not None and cpu_after is not None else None
        return seconds, cpu_s, int(report.get("failed", 0))
    finally:
        client.close()
        proc.terminate()
        proc.wait(60)
        log.close()


async def run(
    folder: Path, workdir: Path, overrides: dict[str, str], via: str = "api"
) -> dict[str, Any]:
    """Ingest every file under `folder` into a fresh store in `workdir` through the API or a
    daemon (`via`), then time the model."""
    settings = bench_settings(workdir, overrides)
    embedder = load_model(settings)
    await asyncio.to_thread(embedder.embed, ["warm up"])
    paths = list(iter_files(folder))
    total_bytes = sum(p.stat().st_size for p in paths)
    failed = 0
    if via == "daemon":
        pipeline_s, pipeline_cpu, failed = await asyncio.to_thread(
            _through_daemon, folder, workdir, overrides
        )
    memory = await AsyncMemory.open(settings, embedder=embedder)
    try:
        if via == "api":
            started, cpu = time.perf_counter(), time.process_time()
            total_bytes, failed = await _through_api(memory, paths)
            pipeline_s = time.perf_counter() - started
            pipeline_cpu = time.process_time() - cpu
        stored = (await memory.counts())["chunks"]
        options = memory.ingestor.options
    finally:
        await memory.close()

    texts, model_s, model_cpu = await asyncio.to_thread(
        _model_only, paths, options, embedder, settings.embed.batch_size
    )
    megabytes = total_bytes / 2**20
    return {
        "folder": str(folder),
        "via": via,
        "model": embedder.model_id,
        "files": len(paths),
        # API: calls that raised (for their first bad file); daemon: files that failed.
        "failed_batches" if via == "api" else "failed_files": failed,
        "megabytes": round(megabytes, 2),
        "chunks": stored,
        "batch_size": settings.embed.batch_size,
        "pipeline": {
            "seconds": round(pipeline_s, 2),
            "chunks_per_s": round(stored / pipeline_s, 1) if pipeline_s else None,
            "mb_per_s": round(megabytes / pipeline_s, 3) if pipeline_s else None,
            "cpu_seconds": round(pipeline_cpu, 2) if pipeline_cpu is not None else None,
        },
        "model_only": {
            "texts": len(texts),
            "seconds": round(model_s, 2),
            "chunks_per_s": round(len(texts) / model_s, 1) if model_s else None,
            "cpu_seconds": round(model_cpu, 2),
        },
        "overhead_ratio": round(pipeline_s / model_s, 2) if model_s else None,
        "cpu_ratio": (
            round(pipeline_cpu / model_cpu, 2) if pipeline_cpu is not None and model_cpu else None
        ),
        "overrides": overrides,
    }


def combine(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several rounds of `run` as one report: the last round's counts, each round's times and
    ratios (`rounds`), and the medians of the per-round ratios as `overhead_ratio` and
    `cpu_ratio`."""
    if len(reports) == 1:
        return reports[0]
    rounds = [
        {
            "pipeline_s": r["pipeline"]["seconds"],
            "model_s": r["model_only"]["seconds"],
            "overhead_ratio": r["overhead_ratio"],
            "cpu_ratio": r["cpu_ratio"],
        }
        for r in reports
    ]

    def median(key: str) -> float | None:
        values = [r[key] for r in rounds if r[key] is not None]
        return round(statistics.median(values), 3) if values else None

    return {
        **reports[-1],
        "rounds": rounds,
        "overhead_ratio": median("overhead_ratio"),
        "cpu_ratio": median("cpu_ratio"),
    }
