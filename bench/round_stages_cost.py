"""What neighbour support and fact matching cost a round-filtered search (issue 14).

    python -m bench.round_stages_cost STORE_DIR ../shared/data/locomo/locomo_dev.json [N] [Q]

Opens the first `N` (2) LoCoMo stores a `bench locomo --store-dir STORE_DIR` run kept, and
searches each one's first `Q` (150) questions filtered to rounds, `limit` 10, with neither
setting, with neighbour support only, and with both (the defaults). The three alternate per
question, their order turning, over three passes after one warm-up search each (the query
vector is cached, so the embedding is not timed), so a shared machine's load falls on all
alike. Prints each setting's median search time and its median per-query ratio to neither.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from bench.settings_cost import Settings, print_ratios, time_settings
from recalld.types import Filters

ROUNDS = Filters(granularities=("round",))
SETTINGS: Settings = {
    "neither": {"match_facts": False, "neighbour_support": 0.0},
    "neighbour support": {"match_facts": False},
    "both (default)": {},
}


async def main(store_dir: Path, dataset: Path, stores: int = 2, questions: int = 150) -> None:
    times, _ = await time_settings(
        store_dir, dataset, SETTINGS, stores=stores, questions=questions, filters=ROUNDS
    )
    print_ratios(times, "neither")


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(Path(args[0]), Path(args[1]), *(int(a) for a in args[2:4])))
