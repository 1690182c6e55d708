"""What covered turns and neighbour support through parents cost an unfiltered conversation
search (issue 14).

    python -m bench.covered_cost STORE_DIR ../shared/data/locomo/locomo_dev.json [N] [Q]

Opens the first `N` (2) LoCoMo stores a `bench locomo --store-dir STORE_DIR` run kept, and
searches each one's first `Q` (150) questions over every granularity, `limit` 10, with
neither `search.drop_covered` nor `search.neighbour_through_parent`, with covered turns only,
and with both (the defaults). The three alternate per question, their order turning, over
three passes after one warm-up search each (the query vector is cached, so the embedding is
not timed), so a shared machine's load falls on all alike. Prints each setting's median
search time, its median per-query ratio to neither, and how many hits left a search on
average with both (a search that drops some reads as many more candidates to keep `limit`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from pathlib import Path

from bench.settings_cost import Settings, print_ratios, time_settings

SETTINGS: Settings = {
    "neither": {"drop_covered": False, "neighbour_through_parent": False},
    "covered turns": {"neighbour_through_parent": False},
    "both (default)": {},
}


async def main(store_dir: Path, dataset: Path, stores: int = 2, questions: int = 150) -> None:
    times, first = await time_settings(
        store_dir, dataset, SETTINGS, stores=stores, questions=questions
    )
    print_ratios(times, "neither")
    dropped = [int(found.explain["covered"]) for found in first["both (default)"]]
    print(f"hits dropped a search: mean {statistics.mean(dropped):.2f}, max {max(dropped)}")


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(Path(args[0]), Path(args[1]), *(int(a) for a in args[2:4])))
