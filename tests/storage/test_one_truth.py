"""One truth between processes (issue 16): two stores open on one file, as the daemon and the
in-process API are; what one writes, the other's in-memory vector index finds."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.storage.contract import Store
from recalld.storage.registry import open_store
from recalld.storage.sqlite import vectors
from tests.storage.test_vectors import DIM, TIGHT, clustered, knn, put, unit


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    daemon = await open_store(tmp_path / "v.db", model_id="test-384", dimension=DIM)
    other = await open_store(tmp_path / "v.db", model_id="test-384", dimension=DIM)
    daemon.vectors.tuning = TIGHT  # the cascade answers, from the mirror
    yield daemon, other
    await other.close()
    await daemon.close()


async def test_the_mirror_catches_up_with_another_writer(
    pair: tuple[Store, Store], caplog: pytest.LogCaptureFixture
) -> None:
    daemon, other = pair
    data = clustered(600)
    await put(daemon, "own.md", data[:500])
    probe = unit(data[550] + 0.01)
    await knn(daemon, probe)  # loads the mirror
    assert daemon.vectors.loaded and daemon.vectors.live == 500
    generation = daemon.generation

    await put(other, "foreign.md", data[500:600])
    assert (await daemon.check_vector_index()) == (100, 0)  # check sees what it misses
    assert not daemon.vectors.loaded  # ... and drops it
    await knn(daemon, probe)
    assert daemon.vectors.live == 600 and (await daemon.check_vector_index()) == (0, 0)

    # Without check, the next search catches up by itself: found through the cascade.
    caplog.set_level(logging.INFO, logger="recalld.storage.sqlite.vectors")
    await put(other, "late.md", probe[None, :])
    hits = await knn(daemon, probe, k=1)
    assert daemon.vectors.live == 601
    assert hits[0][1] == pytest.approx(0.0, abs=1e-5)
    assert "another process changed vectors (1 commits)" in caplog.text
    assert daemon.generation > generation  # caches that follow the store refresh too


async def test_own_commit_after_a_foreign_one_drops_the_mirror(pair: tuple[Store, Store]) -> None:
    daemon, other = pair
    data = clustered(300)
    await put(daemon, "a.md", data[:100])
    await knn(daemon, data[0])
    await put(other, "b.md", data[100:200])
    await put(daemon, "c.md", data[200:300])  # its counter step shows the foreign commit
    assert not daemon.vectors.loaded
    await knn(daemon, data[0])
    assert daemon.vectors.live == 300
    async with daemon.reading_conn() as conn:
        assert await vectors.read_changes(conn) == 3


async def test_writes_without_vectors_do_not_count(
    pair: tuple[Store, Store], caplog: pytest.LogCaptureFixture
) -> None:
    daemon, other = pair
    await put(daemon, "a.md", clustered(50))
    await knn(daemon, clustered(1)[0])
    caplog.set_level(logging.INFO, logger="recalld.storage.sqlite.vectors")
    await other.write(lambda c: c.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')"))
    await knn(daemon, clustered(1)[0])
    assert daemon.vectors.loaded and "reloads" not in caplog.text
