"""What one `recalld tune` training step costs: CPU seconds (and wall seconds) per step of
MultipleNegativesRankingLoss on SciFact-shaped triples, one torch thread, for each setting.

    python -m bench.tune_step ../shared/data/scifact [STEPS] [SETTINGS_JSON]

A triple is an abstract's first sentence (the query), the rest of it (the positive) and another
abstract (the negative), the shape and length of what mining draws from SciFact. The settings
(default: none, length groups, frozen layers) train side by side, a step of each in turn on the
same batch, so a busy machine slows them alike; CPU time, not wall time, is the cost measure (on
a shared machine the wall time of one step varied twofold). Run it with another tree's `src` on
PYTHONPATH and `'[{}]'` to measure that code's step.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from recalld.embeddings.local import default_model_dir
from recalld.tune import train
from recalld.tune.encoder import Encoder
from recalld.tune.mining import Triple

BATCH = 16
DOCS = 400  # abstracts read: the triples' queries and positives, and their negatives
SETTINGS: list[dict[str, int]] = [
    {},
    {"length_group": 8},
    {"frozen_layers": 3},
    {"frozen_layers": 3, "length_group": 8},
    {"frozen_layers": 4, "length_group": 8},
]
_SENTENCE = re.compile(r"(?<=[a-z][.!?])(?=[A-Z])|(?<=[.!?])\s+")


def triples(folder: Path, count: int) -> list[Triple]:
    """`count` triples from the first abstracts of at least three sentences."""
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        docs = [json.loads(line) for line, _ in zip(handle, range(DOCS), strict=False)]
    out = []
    for i, doc in enumerate(docs):
        parts = _SENTENCE.split(doc["text"])
        if len(parts) < 3:
            continue
        other = docs[(i + 7) % len(docs)]
        negative = f"{other['title']}\n{other['text']}"
        out.append(Triple(parts[0], " ".join(parts[1:]), negative, i, (i + 7) % len(docs)))
    return out[:count]


def measure(folder: Path, steps: int, settings: list[dict[str, int]]) -> list[dict[str, Any]]:
    """CPU and wall seconds of `steps` steps of each setting (after one step each to warm up)."""
    torch.set_num_threads(1)
    data = triples(folder, (steps + 1) * BATCH)
    runs: list[tuple[dict[str, int], Encoder, torch.optim.Optimizer, list[float], list[float]]]
    runs = []
    for setting in settings:
        encoder = Encoder(default_model_dir())
        if setting.get("frozen_layers"):
            encoder.freeze_below(setting["frozen_layers"])
        trained = [p for p in encoder.parameters() if p.requires_grad]
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(trained, lr=5e-6, fused=True)
        encoder.train()
        runs.append((setting, encoder, optimizer, [], []))
    for step in range(steps + 1):
        batch = data[step * BATCH : (step + 1) * BATCH]
        for setting, encoder, optimizer, cpu, wall in runs:
            began_cpu, began = time.process_time(), time.perf_counter()
            group = setting.get("length_group", 0)
            # The one-argument call also runs trees from before length groups existed.
            args = (group,) if group else ()
            loss = train.mnrl_loss(encoder, batch, 20.0, *args)
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            if step:
                cpu.append(time.process_time() - began_cpu)
                wall.append(time.perf_counter() - began)
    return [
        {
            "settings": setting,
            "cpu_s_per_step": round(statistics.median(cpu), 2),
            "cpu": [round(x, 2) for x in cpu],
            "wall_s_per_step": round(statistics.median(wall), 1),
        }
        for setting, _, _, cpu, wall in runs
    ]


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    chosen = json.loads(sys.argv[3]) if len(sys.argv) > 3 else SETTINGS
    for row in measure(folder, steps, chosen):
        print(json.dumps(row))
