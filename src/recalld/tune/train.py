"""MultipleNegativesRankingLoss with explicit hard negatives, on CPU, bounded and resumable.

Each step takes `batch_size` triples; every query is scored against every positive and every
hard negative of the batch (scaled cosine, as sentence-transformers does) and the loss is the
cross-entropy of picking its own positive. Another triple's text from the query's own document
is left out of its candidates: a sibling chunk (chunks overlap) is not a wrong answer, and
training it away would teach the model that a document disagrees with itself. A small learning
rate, warmed up linearly as sentence-transformers' fit does, and at most `max_epochs` passes over
the triples keep the model close to where it started: a few hundred triples seen over and over
are learnt by heart (vstash found TripletLoss destroys the model; MNRL does not).

Every `checkpoint_every` steps the weights, the optimiser and the step are written atomically;
a run started again with the same data and settings picks up at the last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from recalld.errors import RecalldError
from recalld.tune.encoder import Encoder
from recalld.tune.mining import Triple

CHECKPOINT = "checkpoint.pt"


class Interrupted(RecalldError):
    """Training was stopped from outside; the last checkpoint stays for the next run."""


@dataclass(frozen=True)
class TrainSettings:
    """How to train (recorded with the model it makes)."""

    # On SciFact 2e-5 made the model worse on held-back pseudo-queries and 5e-6 better (same
    # 395 triples; README). vstash trained at 3e-6.
    learning_rate: float = 5e-6
    batch_size: int = 16
    max_steps: int = 200
    max_seconds: float = 900.0
    max_epochs: float = 1.0  # passes over the triples; more learns them by heart
    warmup_share: float = 0.1  # of the steps, the learning rate rising linearly to its value
    checkpoint_every: int = 20
    scale: float = 20.0  # sentence-transformers' MNRL default
    seed: int = 0
    threads: int = 2
    # The embeddings and this many lowest encoder layers stay as they are: no backward runs
    # through them, so a step costs less (README: s/step by frozen layers).
    frozen_layers: int = 0
    # Texts encoded this many at a time in order of length, each group padded to its own
    # longest (0: the whole side of the batch at once); the same vectors, less padding.
    length_group: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainResult:
    """What a training run did."""

    steps: int
    resumed_from: int
    seconds: float
    first_loss: float | None
    last_loss: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_key(triples: Sequence[Triple], settings: TrainSettings, base_sha256: str) -> str:
    """What a checkpoint must have been made from to be resumed: the data, the settings that
    shape the trajectory and the base weights (the budgets may change between runs)."""
    shaping = {k: v for k, v in settings.as_dict().items() if k not in ("max_steps", "max_seconds")}
    blob = json.dumps([[asdict(t) for t in triples], shaping, base_sha256], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _batch(triples: Sequence[Triple], step: int, size: int, seed: int) -> list[Triple]:
    """The triples of `step`: epochs of a seeded shuffle, so a resumed run sees what an
    uninterrupted one would have."""
    per_epoch = max(1, len(triples) // size)
    epoch, index = divmod(step, per_epoch)
    order = list(range(len(triples)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return [triples[i] for i in order[index * size : (index + 1) * size]]


def planned_steps(settings: TrainSettings, triples: int) -> int:
    """The steps a run makes when no time budget stops it first: `max_steps`, or fewer when
    `max_epochs` passes over the triples take fewer."""
    size = min(settings.batch_size, triples)
    if size < 2:
        return 0
    per_epoch = max(1, triples // size)
    return min(settings.max_steps, max(1, math.ceil(settings.max_epochs * per_epoch)))


def learning_rate(settings: TrainSettings, step: int, planned: int) -> float:
    """The learning rate of `step` (0-based): linear warm-up over `warmup_share` of the
    planned steps, then constant (a function of the step alone, so a resumed run matches)."""
    warmup = max(1, round(settings.warmup_share * planned))
    return settings.learning_rate * min(1.0, (step + 1) / warmup)


def candidate_mask(batch: Sequence[Triple]) -> torch.Tensor:
    """`[batch, 2 * batch]`, True where a query may be scored against a candidate: its own
    positive, and any text from another document than its own."""
    own = torch.tensor([t.document_id for t in batch])
    candidates = torch.tensor(
        [t.document_id for t in batch] + [t.negative_document_id for t in batch]
    )
    allowed = own[:, None] != candidates[None, :]
    allowed[torch.arange(len(batch)), torch.arange(len(batch))] = True
    return allowed


def mnrl_loss(
    encoder: Encoder, batch: Sequence[Triple], scale: float, group: int = 0
) -> torch.Tensor:
    """MultipleNegativesRankingLoss: each query against all positives and hard negatives but
    those of its own document."""
    queries = encoder.encode([t.query for t in batch], group)
    documents = encoder.encode([t.positive for t in batch] + [t.negative for t in batch], group)
    scores = (queries @ documents.T * scale).masked_fill(~candidate_mask(batch), float("-inf"))
    return F.cross_entropy(scores, torch.arange(len(batch)))


def train(
    encoder: Encoder,
    triples: Sequence[Triple],
    settings: TrainSettings,
    checkpoint_dir: Path,
    key: str,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    stop: threading.Event | None = None,
) -> TrainResult:
    """Train `encoder` in place (blocking: run it in a worker thread).

    Raises:
        Interrupted: `stop` was set; the weights up to the last checkpoint are kept on disk.
    """
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    encoder.freeze_below(settings.frozen_layers)
    trained = [p for p in encoder.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=settings.learning_rate, fused=True)
    path = checkpoint_dir / CHECKPOINT
    step = 0
    if path.exists():
        saved = torch.load(path, weights_only=True)
        if saved.get("key") == key:
            encoder.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            step = int(saved["step"])
    resumed_from = step
    started = time.monotonic()
    first = last = None
    size = min(settings.batch_size, len(triples))
    planned = planned_steps(settings, len(triples))
    encoder.train()
    while step < planned:
        if time.monotonic() - started >= settings.max_seconds:
            break
        if stop is not None and stop.is_set():
            raise Interrupted(f"stopped at step {step}")
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(settings, step, planned)
        batch = _batch(triples, step, size, settings.seed)
        loss = mnrl_loss(encoder, batch, settings.scale, settings.length_group)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        step += 1
        last = float(loss.item())
        first = last if first is None else first
        if step % settings.checkpoint_every == 0 or step == planned:
            _save(
                path,
                {
                    "key": key,
                    "step": step,
                    "model": encoder.state_dict(),
                    "optimizer": optimizer.state_dict(),
                },
            )
        if progress is not None:
            progress(
                {
                    "phase": "training",
                    "step": step,
                    "max_steps": planned,
                    "loss": round(last, 4),
                    "seconds": round(time.monotonic() - started, 1),
                }
            )
    encoder.eval()
    return TrainResult(step, resumed_from, time.monotonic() - started, first, last)


def _save(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def discard(checkpoint_dir: Path) -> None:
    """Drop the checkpoint (after a run that finished, accepted or refused)."""
    (checkpoint_dir / CHECKPOINT).unlink(missing_ok=True)
