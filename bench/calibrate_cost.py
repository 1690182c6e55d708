"""What a store's self-calibration costs (`recalld calibrate`, issue 14), on an existing store.

Opens the store kept in a benchmark folder (e.g. a copy of the whole-SciFact store `bench perf`
made), runs `memory.calibrate()` once and reports its wall seconds, the CPU seconds of the
process (every thread), the machine's load average before and after (the 2 cores are shared),
and what each content kind chose. The store's recorded calibration is replaced by the new one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common import bench_settings, load_model
from recalld.api import AsyncMemory


async def run(workdir: Path, sets: Mapping[str, str], queries: int = 200) -> dict[str, Any]:
    """Calibrate the store in `workdir` (opened with the settings `sets`) once, timed."""
    settings = bench_settings(workdir, sets)
    memory = await AsyncMemory.open(settings, embedder=load_model(settings))
    try:
        counts = await memory.counts()
        load_before = os.getloadavg()
        started, cpu = time.perf_counter(), time.process_time()
        tuning = await memory.calibrate(queries=queries)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        load_after = os.getloadavg()
    finally:
        await memory.close()
    return {
        "store": str(workdir),
        "documents": counts["documents"],
        "chunks": counts["chunks"],
        "pseudo_queries": queries,
        "seconds": round(wall, 1),
        "process_cpu_seconds": round(cpu, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "chosen": {k: v["family"] for k, v in tuning.as_dict()["kinds"].items()},
    }
