"""Ingest throughput: files to searchable chunks, beside the embedding model alone.

The pipeline run goes into a fresh store either through the API (`AsyncMemory`'s
`Ingestor.ingest_many`, a few calls of `FILES_PER_CALL` files in flight, as the daemon's
`ingest_now` runs its batches: read, hash, chunk, embed in shared batches, one transaction per
call) or through a real daemon (`--via daemon`: `recalld serve` on the work folder, timed
around the client's `ingest` of the folder); its clock stops when the last document is
committed, i.e. searchable. The model run embeds the very same chunk texts (chunked again
with the same options, so nothing is read from the store) in batches of the same size. Their
ratio is the pipeline's overhead. Both runs also report the CPU time they took (every thread
of the process; the daemon's read from /proc): the CPU ratio is the pipeline's own work,
whether or not it overlaps the model's. CPU time drifts with the machine's speed as wall time
does (42 and 52 CPU s for the same texts within minutes).

The machine's speed drifts: the model alone on the same 100 files took 2.4-3.1 s in one
minute of back-to-back runs, neighbours within ~5% of each other but the drift enough to move
a whole-folder pair's ratio by 0.15 (17.9-24.0 s for the model alone on one folder between
runs). So `--slices N` ingests the folder in N consecutive slices into the one store, each
slice paired at once with the model alone on its chunks: each pair sees the same machine, and
the ratio of the sums follows the drift out. Each slice starts and drains the pipeline (its
reads and chunking no longer overlap the previous slice's model calls), which costs the
pipeline, never the model. Every other pair times the model first (ABBA, `_model_first`),
so a steady drift costs both sides alike. `--rounds N` runs the whole thing N times, each into
a fresh store, round i starting with the model when i is odd, and reports the median of the
per-round ratios (`combine`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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


Pair = dict[str, Any]  # one slice: the pipeline's and the model's seconds and CPU seconds


def split(paths: list[Path], count: int) -> list[list[Path]]:
    """`paths` in `count` consecutive slices of near-equal size (fewer if there are fewer
    files)."""
    count = max(1, min(count, len(paths)))
    size, extra = divmod(len(paths), count)
    parts, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        parts.append(paths[start:end])
        start = end
    return parts


def _pair(pipeline: tuple[float, float | None], model: tuple[list[str], float, float]) -> Pair:
    return {
        "pipeline_s": pipeline[0],
        "pipeline_cpu": pipeline[1],
        "model_s": model[1],
        "model_cpu": model[2],
        "texts": len(model[0]),
    }


def _model_first(pair_index: int, flip: int) -> bool:
    """Whether a pair times the model before the pipeline: every other pair does (ABBA), so a
    steady drift in the machine's speed costs both sides alike."""
    return (pair_index + flip) % 2 == 1


async def _pairs_through_api(
    memory: AsyncMemory, parts: list[list[Path]], embedder: Embedder, batch: int, flip: int
) -> tuple[list[Pair], int, int]:
    """Each slice through the API and the model alone on its chunks, in turns
    (`_model_first`); (pairs, bytes, failed calls)."""
    pairs: list[Pair] = []
    total_bytes = failed = 0
    options = memory.ingestor.options
    for index, part in enumerate(parts):
        first = _model_first(index, flip)
        if first:
            model = await asyncio.to_thread(_model_only, part, options, embedder, batch)
        started, cpu = time.perf_counter(), time.process_time()
        size, bad = await _through_api(memory, part)
        pipeline = (time.perf_counter() - started, time.process_time() - cpu)
        if not first:
            model = await asyncio.to_thread(_model_only, part, options, embedder, batch)
        pairs.append(_pair(pipeline, model))
        total_bytes, failed = total_bytes + size, failed + bad
    return pairs, total_bytes, failed


def _slice_folders(folder: Path, parts: list[list[Path]], into: Path) -> list[Path]:
    """A folder per slice under `into`, holding links to (or copies of) its files, for the
    daemon to ingest one at a time; the whole `folder` when there is one slice."""
    if len(parts) == 1:
        return [folder]
    folders = []
    for index, part in enumerate(parts):
        target = into / f"{index:03d}"
        for path in part:
            copy = target / path.relative_to(folder)
            copy.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, copy)
            except OSError:  # another file system
                shutil.copy2(path, copy)
        folders.append(target)
    return folders


def _pairs_through_daemon(
    folder: Path,
    parts: list[list[Path]],
    workdir: Path,
    overrides: dict[str, str],
    model: tuple[ChunkOptions, Embedder, int],
    flip: int,
) -> tuple[list[Pair], int]:
    """Start `recalld serve` on `workdir`; for each slice, time the client's ingest of its
    folder and the model alone on its chunks, in turns (`_model_first`; blocking); (pairs,
    failed files)."""
    socket = workdir / "d.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith((ENV_PREFIX, "XDG_"))}
    env.update({"RECALLD_HOME": str(workdir), "RECALLD_DAEMON__SOCKET": str(socket)})
    for key, value in overrides.items():
        env[ENV_PREFIX + key.upper().replace(".", "__")] = value
    options, embedder, batch = model
    log = (workdir / "daemon.log").open("ab")
    links = Path(tempfile.mkdtemp(prefix="recalld-slices-"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "recalld", "serve"], env=env, stdout=log, stderr=log
    )
    client = Client(socket, timeout=600)
    try:
        folders = _slice_folders(folder, parts, links)
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
        pairs, failed = [], 0
        for index, (part, part_folder) in enumerate(zip(parts, folders, strict=True)):
            first = _model_first(index, flip)
            if first:
                alone = _model_only(part, options, embedder, batch)
            started, cpu = time.perf_counter(), _cpu_seconds(proc.pid)
            report = client.ingest(part_folder)
            seconds, cpu_after = time.perf_counter() - started, _cpu_seconds(proc.pid)
            cpu_s = cpu_after - cpu if cpu is not None and cpu_after is not None else None
            failed += int(report.get("failed", 0))
            if not first:
                alone = _model_only(part, options, embedder, batch)
            pairs.append(_pair((seconds, cpu_s), alone))
        return pairs, failed
    finally:
        client.close()
        proc.terminate()
        proc.wait(60)
        log.close()
        shutil.rmtree(links, ignore_errors=True)


async def run(
    folder: Path,
    workdir: Path,
    overrides: dict[str, str],
    via: str = "api",
    slices: int = 1,
    flip: int = 0,
) -> dict[str, Any]:
    """Ingest every file under `folder` into a fresh store in `workdir` through the API or a
    daemon (`via`), in `slices` consecutive slices, each paired with the model alone on its
    chunks; pair i times the model first when i + `flip` is odd (`_model_first`)."""
    settings = bench_settings(workdir, overrides)
    embedder = load_model(settings)
    await asyncio.to_thread(embedder.embed, ["warm up"])
    paths = list(iter_files(folder))
    parts = split(paths, slices)
    batch = settings.embed.batch_size
    total_bytes = sum(p.stat().st_size for p in paths)
    memory = await AsyncMemory.open(settings, embedder=embedder)
    if via == "daemon":
        model = (memory.ingestor.options, embedder, batch)
        await memory.close()  # the daemon opens the store itself
        pairs, failed = await asyncio.to_thread(
            _pairs_through_daemon, folder, parts, workdir, overrides, model, flip
        )
        memory = await AsyncMemory.open(settings, embedder=embedder)  # to count its chunks
    try:
        if via == "api":
            pairs, total_bytes, failed = await _pairs_through_api(
                memory, parts, embedder, batch, flip
            )
        stored = (await memory.counts())["chunks"]
    finally:
        await memory.close()

    def total(key: str) -> float | None:
        values = [pair[key] for pair in pairs]
        return None if None in values else sum(values)

    pipeline_s, pipeline_cpu = total("pipeline_s") or 0.0, total("pipeline_cpu")
    model_s, model_cpu = total("model_s") or 0.0, total("model_cpu")
    texts = sum(pair["texts"] for pair in pairs)
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
        "batch_size": batch,
        "slices": len(parts),
        "pipeline": {
            "seconds": round(pipeline_s, 2),
            "chunks_per_s": round(stored / pipeline_s, 1) if pipeline_s else None,
            "mb_per_s": round(megabytes / pipeline_s, 3) if pipeline_s else None,
            "cpu_seconds": round(pipeline_cpu, 2) if pipeline_cpu is not None else None,
        },
        "model_only": {
            "texts": texts,
            "seconds": round(model_s, 2),
            "chunks_per_s": round(texts / model_s, 1) if model_s else None,
            "cpu_seconds": round(model_cpu, 2) if model_cpu is not None else None,
        },
        "overhead_ratio": round(pipeline_s / model_s, 3) if model_s else None,
        "cpu_ratio": (
            round(pipeline_cpu / model_cpu, 3) if pipeline_cpu is not None and model_cpu else None
        ),
        # Each slice's pipeline / model ratio, in slice order.
        "slice_ratios": [
            round(pair["pipeline_s"] / pair["model_s"], 3) if pair["model_s"] else None
            for pair in pairs
        ],
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
