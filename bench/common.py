"""What every benchmark shares: opening a store, the mode table, timing and the JSON report."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from recalld.api import AsyncMemory
from recalld.config import Settings, load_settings
from recalld.embeddings.base import Embedder, load_embedder

# The search overrides each mode stands for. `full` is the shipped defaults, every stage on.
# The routes alone return every hit they rank: no gate and no pruning of the result set (dedup,
# MMR, covered turns).
_ROUTE = {"gate": False, "mmr": False, "dedup": False, "drop_covered": False}
MODES: dict[str, dict[str, Any]] = {
    "bm25": {"mode": "bm25", **_ROUTE},
    "vector": {"mode": "vector", **_ROUTE},
    "hybrid": {"mode": "hybrid", **_ROUTE},
    "full": {},
}


@dataclass
class Bench:
    """An open benchmark store and the settings it was opened with."""

    memory: AsyncMemory
    settings: Settings


def bench_settings(workdir: Path, overrides: Mapping[str, str]) -> Settings:
    """Settings for a benchmark store in `workdir`, isolated from the user's own config."""
    return load_settings(Path(os.devnull), {"RECALLD_HOME": str(workdir)}, dict(overrides)).settings


def load_model(settings: Settings) -> Embedder:
    """Load the embedder once so several stores in one run can share it."""
    return load_embedder(
        settings.embed.model, settings.model_cache_dir, settings.embed, settings.tuned_model_dir
    )


def forget_query_vectors(memory: AsyncMemory) -> None:
    """Make the next searches embed their queries afresh, so every mode pays for its own query
    embeddings (a cache warmed by the mode before would make the later modes look faster).

    Re-adopting the searcher's own model does it: a model change drops the cached query vectors
    and changes nothing else, so recalld needs no method of its own for the benchmarks.
    """
    searcher = memory.searcher
    searcher.use_model(searcher.embedder, searcher.calibration)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    versions: dict[str, str | None] = {}
    for name in ("recalld", "onnxruntime", "sqlite-vec", "numpy", "tokenizers"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "versions": versions,
    }


def write_report(results_dir: Path, name: str, report: dict[str, Any]) -> Path:
    """Write the report as JSON under `results_dir` and return its path."""
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = results_dir / f"{name}-{stamp}.json"
    report = {"benchmark": name, "machine": machine(), **report}
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", "utf-8")
    return path
