"""Use counters gathered and written together (storage/use_counts.py), on both backends."""

import asyncio

from recalld.storage.contract import Store
from recalld.storage.use_counts import UseCounts
from recalld.types import NO_FILTERS
from tests.storage.conftest import location, put, store  # noqa: F401 - the stores of tests/storage


async def _counts(store: Store, ids: list[int]) -> dict[int, tuple[int, int]]:  # noqa: F811
    found = await store.read(lambda c: c.chunks_by_id(ids))
    return {cid: (c.retrieval_count, c.access_count) for cid, c in found.items()}


async def _ids(store: Store) -> list[int]:  # noqa: F811
    hits = await store.read(lambda c: c.fts('"one" OR "two"', 5, NO_FILTERS))
    return sorted(cid for cid, _ in hits)


class Writes:
    """`store.write` wrapped: counts the writes that ended and lets a test wait for the next."""

    def __init__(self, store: Store) -> None:  # noqa: F811
        self.original = store.write
        self.done = 0
        self.ended = asyncio.Event()
        self.before = None  # called as each write starts
        store.write = self  # type: ignore[method-assign]

    async def __call__(self, fn, **kw):  # type: ignore[no-untyped-def]
        if self.before is not None:
            self.before()
        result = await self.original(fn, **kw)
        self.done += 1
        self.ended.set()
        return result

    async def next(self) -> None:
        async with asyncio.timeout(10):  # timers fire late on a loaded machine
            await self.ended.wait()
        self.ended.clear()


async def test_counts_noted_meanwhile_go_in_one_write_after_the_delay(store: Store):  # noqa: F811
    await put(store, "/a.md", ["one", "two"])
    first, second = await _ids(store)
    writes = Writes(store)
    counts = UseCounts(store, delay_s=0.5)
    for _ in range(3):
        counts.note([first, second], retrieval=True)
    counts.note([first], retrieval=True)
    counts.note([second], retrieval=False)
    assert writes.done == 0
    await writes.next()
    assert writes.done == 1
    assert await _counts(store, [first, second]) == {first: (4, 0), second: (3, 1)}
    # A later note starts a new wait.
    counts.note([second], retrieval=True)
    assert writes.done == 1
    await writes.next()
    assert (await _counts(store, [second]))[second] == (4, 1)
    await counts.close()
    assert writes.done == 2  # nothing left to write


async def test_notes_made_during_a_write_get_a_write_of_their_own(store: Store):  # noqa: F811
    await put(store, "/a.md", ["one", "two"])
    first, second = await _ids(store)
    counts = UseCounts(store, delay_s=0.05)
    writes = Writes(store)
    # A search answers while the first write runs.
    writes.before = lambda: counts.note([second], retrieval=True) if writes.done == 0 else None
    counts.note([first], retrieval=True)
    await writes.next()
    await writes.next()
    assert await _counts(store, [first, second]) == {first: (1, 0), second: (1, 0)}
    await counts.close()
    assert writes.done == 2


async def test_close_writes_what_is_noted_without_waiting(store: Store):  # noqa: F811
    await put(store, "/a.md", ["one", "two"])
    first, _ = await _ids(store)
    counts = UseCounts(store, delay_s=3600)
    counts.note([first], retrieval=True)
    counts.note([first], retrieval=False)
    async with asyncio.timeout(10):
        await counts.close()
    assert (await _counts(store, [first]))[first] == (1, 1)


async def test_a_failed_write_is_logged_and_the_next_notes_still_count(store: Store, caplog):  # noqa: F811
    await put(store, "/a.md", ["one", "two"])
    first, _ = await _ids(store)
    original = store.write
    failed = asyncio.Event()

    def flaky_write(fn, **kw):  # type: ignore[no-untyped-def]
        if not failed.is_set():
            failed.set()
            raise OSError("disk full")
        return original(fn, **kw)

    store.write = flaky_write  # type: ignore[method-assign]
    counts = UseCounts(store, delay_s=0.05)
    counts.note([first], retrieval=True)
    async with asyncio.timeout(10):
        await failed.wait()
    assert "could not write use counts: disk full" in caplog.text
    counts.note([first], retrieval=True)
    await counts.close()
    assert (await _counts(store, [first]))[first] == (1, 0)
