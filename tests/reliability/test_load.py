"""Load (issue 6): 20 concurrent clients x 200 searches against `recalld serve` while it ingests
a folder; no search may fail. Latency is reported, not asserted: the figure depends on the
machine, and searches run on their own read connections (WAL), so the writer never blocks
them."""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.client import Client
from recalld.config import load_settings
from tests.integration.conftest import Daemon

CLIENTS = 20
SEARCHES = 200
SEED = 7
WORDS = (
    "harbour tide lantern keeper ledger copper willow basalt orchard falcon meadow quarry "
    "saffron glacier canyon ember thistle marrow cobalt juniper"
).split()


def note(rng: random.Random, index: int) -> str:
    paragraphs = []
    for p in range(3):
        words = " ".join(rng.choice(WORDS) for _ in range(40))
        paragraphs.append(f"Note {index} part {p}: {words}.")
    return "\n\n".join(paragraphs) + "\n"


@pytest.mark.integration
@pytest.mark.slow
# 4,000 searches and 600 files on two cores, with asyncio's debug mode in the daemon (make
# test sets PYTHONASYNCIODEBUG): about a minute alone, past the default 120 s beside other load.
@pytest.mark.timeout(360)
def test_20_clients_search_while_ingesting(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    seeded = tmp_path / "seeded"
    seeded.mkdir()
    for i in range(200):
        (seeded / f"s{i:03d}.md").write_text(note(rng, i))
    incoming = tmp_path / "incoming"
    daemon = make_daemon(RECALLD_DAEMON__WATCH=f"{seeded},{incoming}")
    incoming.mkdir()
    daemon.start("--log-level", "info")  # a debug line per search would be measured too
    daemon.wait_ready()
    daemon.wait_for(lambda s: s["counts"]["documents"] == 200, timeout=60)

    # The ingest that runs under the load: a folder of new notes, written as the clients start.
    def write_incoming() -> None:
        for i in range(600):
            (incoming / f"i{i:03d}.md").write_text(note(rng, 1000 + i))

    latencies: list[list[float]] = [[] for _ in range(CLIENTS)]
    errors: list[str] = []
    pending_seen: list[int] = []
    start = threading.Barrier(CLIENTS + 1)

    def client(n: int) -> None:
        queries = random.Random(SEED + n)
        with Client(daemon.socket, timeout=30) as c:
            start.wait()
            for _ in range(SEARCHES):
                query = " ".join(queries.sample(WORDS, 2))
                began = time.perf_counter()
                try:
                    result = c.search(query, limit=10)
                    assert result["hits"], query
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                latencies[n].append(time.perf_counter() - began)

    writer = threading.Thread(target=write_incoming)
    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    writer.start()
    start.wait()
    began = time.perf_counter()
    with Client(daemon.socket, timeout=30) as probe:
        while any(t.is_alive() for t in threads):
            status = probe.status()
            pending_seen.append(status["pending"])
            time.sleep(0.1)
        during = probe.status()["counts"]["documents"]
    elapsed = time.perf_counter() - began
    writer.join()
    for thread in threads:
        thread.join()

    flat = sorted(x for per in latencies for x in per)
    total = CLIENTS * SEARCHES
    p50 = statistics.median(flat) * 1000
    p99 = flat[int(len(flat) * 0.99) - 1] * 1000
    print(
        f"\n{CLIENTS} clients x {SEARCHES} searches = {total} in {elapsed:.1f} s "
        f"({total / elapsed:.0f}/s) while ingesting: {len(errors)} errors, p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms, max {flat[-1] * 1000:.1f} ms; {during - 200} of 600 new notes "
        f"ingested meanwhile, ingest queue up to {max(pending_seen)}"
    )
    assert not errors, errors[:5]
    assert len(flat) == total
    assert max(pending_seen) > 0, "the ingest was over before the load began"
    daemon.wait_for(lambda s: s["counts"]["documents"] == 800, timeout=60)
    assert daemon.client.check()["ok"]
    assert daemon.stop() == 0


async def test_concurrent_searches_while_the_store_changes(isolated_home: Path) -> None:
    """In process and fast: searches that overlap commits share the document-frequency cache
    that each commit invalidates; none may fail (under load, some used to: KeyError)."""
    settings = load_settings(
        None, {"RECALLD_HOME": str(isolated_home), "RECALLD_EMBED__MODEL": "hash:64"}
    ).settings
    rng = random.Random(SEED)
    async with await AsyncMemory.open(settings) as memory:
        for i in range(30):
            await memory.remember(note(rng, i))
        stop = asyncio.Event()

        async def keep_writing() -> int:
            written = 0
            while not stop.is_set():
                await memory.remember(note(rng, 100 + written))
                written += 1
            return written

        async def search(n: int) -> int:
            queries = random.Random(n)
            found = 0
            for _ in range(20):
                result = await memory.search(" ".join(queries.sample(WORDS, 3)), limit=5)
                found += len(result.hits)
            return found

        writer = asyncio.create_task(keep_writing())
        try:
            found = await asyncio.gather(*(search(n) for n in range(CLIENTS)))
        finally:
            stop.set()
            written = await writer
        assert written > 0 and all(found)
