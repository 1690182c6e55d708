"""`recalld tune` from start to end: mine, train, rebuild, gate, record.

Blocking work (torch, ONNX building, inference) runs in worker threads; the store is read
through its own async API. The work folder (`<tuned models>/.tune/`) keeps the mined data and the
training checkpoint, so an interrupted run started again resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from recalld import private
from recalld.embeddings import tuned
from recalld.embeddings.base import Embedder
from recalld.embeddings.local import WEIGHTS_SHA256, default_model_dir
from recalld.errors import ConfigError
from recalld.storage.contract import Store
from recalld.tune import export, gate, mining, train
from recalld.tune.encoder import Encoder

Progress = Callable[[dict[str, Any]], Awaitable[None]]
WORK = ".tune"
RUN = "run.json"
META_PREFIX = "tuned_model:"
HEARTBEAT_S = 5.0
T = TypeVar("T")


@dataclass(frozen=True)
class TuneOptions:
    """What to mine and how to train."""

    queries: int = 2000  # chunks drawn
    spans_per_chunk: int = 1  # pseudo-queries held out of each drawn chunk, at most
    eval_share: float = 0.2
    distractors: int = 1000
    train: train.TrainSettings = field(default_factory=train.TrainSettings)
    dry_run: bool = False


def base_of(spec: str, models_dir: Path) -> tuple[Path, str]:
    """The weights folder and sha256 of the store's current model, the one tuning starts from.

    Raises:
        ConfigError: The store uses a model tuning cannot start from.
    """
    if spec in ("local", "local:fp32"):
        return default_model_dir(), WEIGHTS_SHA256
    if tuned.is_tuned(spec):
        folder = tuned.folder_of(spec, models_dir)
        return folder, str(tuned.read_manifest(folder)["weights_sha256"])
    raise ConfigError(
        f"tune refines the local model; the store uses {spec!r} "
        "(`recalld reindex --model local` first)"
    )


async def tune(
    store: Store,
    embedder: Embedder,
    spec: str,
    models_dir: Path,
    options: TuneOptions,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """Tune the store's model on the store's own content.

    Args:
        store: The store (read; a recorded model is written into its `meta`).
        embedder: The store's current model, as it runs (mining and the gate's "before").
        spec: That model's spec (`local`, `local:fp32` or `local:tuned-...`).
        models_dir: Where tuned models are kept (`Settings.tuned_model_dir`).
        options: Budgets and settings.
        progress: Told each phase's progress.
        stop: Set it to interrupt training (the checkpoint stays for the next run).

    Returns:
        The mining counts, training figures, the gate's verdict and (when accepted) the new
        model's spec.
    """
    base_dir, base_sha = base_of(spec, models_dir)
    work = models_dir / WORK
    started = time.monotonic()
    mined = await _mined(store, embedder, spec, work, options, progress)
    summary: dict[str, Any] = {"base": spec, "mining": mined.summary()}
    if options.dry_run:
        seconds = await _estimate_step(embedder, mined, options.train.batch_size)
        steps = train.planned_steps(options.train, len(mined.triples))
        summary["estimate_seconds"] = round(min(options.train.max_seconds, steps * seconds), 1)
        summary["dry_run"] = True
        return summary
    settings = options.train
    key = train.run_key(mined.triples, settings, base_sha)
    loop = asyncio.get_running_loop()
    notes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def report(note: dict[str, Any]) -> None:  # from the training thread
        loop.call_soon_threadsafe(notes.put_nowait, note)

    def fit() -> tuple[Encoder, train.TrainResult]:
        encoder = Encoder(base_dir)
        return encoder, train.train(
            encoder, mined.triples, settings, work, key, progress=report, stop=stop
        )

    stop = stop or threading.Event()
    task = asyncio.ensure_future(asyncio.to_thread(fit))
    try:
        while not task.done():
            try:
                note = await asyncio.wait_for(notes.get(), 1.0)
            except TimeoutError:
                continue
            if progress is not None:
                await progress(note)
    except asyncio.CancelledError:
        stop.set()  # the thread stops before its next step; the checkpoint stays
        raise
    encoder, result = await task
    summary["training"] = result.as_dict()

    name = "tuned-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    manifest = {
        "base": spec,
        "base_weights_sha256": base_sha,
        "settings": settings.as_dict(),
        "mining": mined.summary(),
        "training": result.as_dict(),
        "created": time.time(),
    }
    folder, candidate = await _in_thread(
        progress, "building", export.build, encoder, base_dir, models_dir, name, manifest
    )
    try:
        distractors = await _distractors(store, mined, options)
        pairs = mined.eval_pairs
        before = await _in_thread(progress, "gate", gate.measure, embedder, pairs, distractors)
        after = await _in_thread(progress, "gate", gate.measure, candidate, pairs, distractors)
        verdict = gate.decide(before, after)
        summary["gate"] = verdict.as_dict()
        if verdict.accepted:
            record = {**manifest, "gate": verdict.as_dict()}
            meta = json.loads((folder / tuned.MANIFEST).read_text())
            meta["gate"] = verdict.as_dict()
            (folder / tuned.MANIFEST).write_text(json.dumps(meta, indent=2, sort_keys=True))
            await asyncio.to_thread(export.publish, folder, models_dir, name)
            record.update(spec=meta["spec"], model_id=meta["model_id"])
            value = json.dumps(record, sort_keys=True)
            await store.write(lambda c: c.set_meta(META_PREFIX + meta["spec"], value))
            summary["model"] = meta["spec"]
            summary["model_id"] = meta["model_id"]
    finally:
        if not summary.get("model"):
            await asyncio.to_thread(shutil.rmtree, folder, True)
    # The run is over, accepted or refused: the next one mines afresh.
    await asyncio.to_thread(shutil.rmtree, work, True)
    summary["seconds"] = round(time.monotonic() - started, 1)
    return summary


async def _in_thread(
    progress: Progress | None, phase: str, func: Callable[..., T], *args: Any
) -> T:
    """`func(*args)` in a worker thread, with a `phase` note every `HEARTBEAT_S` meanwhile (a
    client waiting on the socket keeps hearing from a long build or gate)."""
    task = asyncio.ensure_future(asyncio.to_thread(func, *args))
    began = time.monotonic()
    while True:
        if progress is not None:
            await progress({"phase": phase, "seconds": round(time.monotonic() - began, 1)})
        done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_S)
        if done:
            return task.result()


async def _mined(
    store: Store,
    embedder: Embedder,
    spec: str,
    work: Path,
    options: TuneOptions,
    progress: Progress | None,
) -> mining.Mined:
    """The data of an interrupted run of the same model and settings, or freshly mined."""
    shape = {
        "base": spec,
        "queries": options.queries,
        "spans_per_chunk": options.spans_per_chunk,
        "eval_share": options.eval_share,
        "seed": options.train.seed,
    }
    path = work / RUN
    if path.exists() and (work / train.CHECKPOINT).exists():
        try:
            saved = json.loads(path.read_text())
            if saved.get("shape") == shape:
                return mining.Mined.from_dict(saved["mined"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable: mine again
    mined = await mining.mine(
        store,
        embedder,
        queries=options.queries,
        eval_share=options.eval_share,
        seed=options.train.seed,
        per_chunk=options.spans_per_chunk,
        progress=progress,
    )
    if not options.dry_run:
        await asyncio.to_thread(_write_run, work, {"shape": shape, "mined": mined.as_dict()})
    return mined


def _write_run(work: Path, data: dict[str, Any]) -> None:
    private.private_dir(work)
    (work / train.CHECKPOINT).unlink(missing_ok=True)  # a checkpoint of other data
    tmp = work / f".{RUN}.tmp"
    tmp.write_text(json.dumps(data))
    private.private_file(tmp, warn=False)
    tmp.replace(work / RUN)


async def _distractors(store: Store, mined: mining.Mined, options: TuneOptions) -> list[str]:
    """Chunks from documents other than the held-back ones, to rank the positives among."""
    held = {p.document_id for p in mined.eval_pairs}
    by_kind = await store.read(lambda r: r.chunk_ids_by_kind())
    ids = sorted(cid for kind, v in by_kind.items() if kind != "memory" for cid in v)
    rng = random.Random(f"{options.train.seed}:distractors")
    picked = rng.sample(ids, min(len(ids), options.distractors * 2))
    chunks = await store.read(lambda c: c.chunks_by_id(picked))
    texts = [
        chunks[c].text for c in picked if c in chunks and mining.unit_of(chunks[c]) not in held
    ]
    return texts[: options.distractors]


async def _estimate_step(embedder: Embedder, mined: mining.Mined, batch: int) -> float:
    """A rough time per training step: the current model's int8 inference of one batch, times
    the ~8x that fp32 forward and backward cost over it on CPU."""
    sample = mined.triples[:batch]
    if not sample:
        return 0.0
    texts = [t.query for t in sample] + [t.positive for t in sample] + [t.negative for t in sample]
    began = time.monotonic()
    await asyncio.to_thread(embedder.embed, texts)
    return (time.monotonic() - began) * 8


def with_budget(options: TuneOptions, **changes: Any) -> TuneOptions:
    """`options` with some training settings changed."""
    return replace(options, train=replace(options.train, **changes))
