"""`call_with_timeout`'s reader threads: reused between calls, and a stuck call never holds up
the calls after it; `call_each_with_timeout`'s batches: one thread, a deadline per call."""

from __future__ import annotations

import asyncio
import threading
import time
from functools import partial

import pytest

from recalld.safe_io import _Readers, call_each_with_timeout, call_with_timeout


async def test_calls_one_after_another_share_one_thread() -> None:
    seen = [await call_with_timeout(threading.get_ident, 5) for _ in range(20)]
    assert len(set(seen)) == 1
    assert threading.get_ident() not in seen


async def test_a_stuck_call_times_out_and_the_next_call_runs_in_another_thread() -> None:
    release = threading.Event()
    try:
        with pytest.raises(TimeoutError):
            await call_with_timeout(lambda: release.wait(30), 0.2)
        # The thread is still stuck in the first call: the second goes elsewhere, at once.
        assert await call_with_timeout(lambda: 42, 5) == 42
    finally:
        release.set()


async def test_errors_reach_the_caller() -> None:
    def fail() -> None:
        raise OSError("no such thing")

    with pytest.raises(OSError, match="no such thing"):
        await call_with_timeout(fail, 5)


def test_idle_threads_end_and_calls_after_that_still_run() -> None:
    readers = _Readers(idle_s=0.05)
    done = threading.Semaphore(0)
    for _ in range(3):
        readers.run(lambda: None, lambda _: done.release())
        assert done.acquire(timeout=5)

    def living() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "recalld-read" and t.is_alive()]

    before = len(living())
    time.sleep(0.5)  # well past idle_s: this pool's thread has ended
    assert len(living()) < before
    readers.run(lambda: None, lambda _: done.release())
    assert done.acquire(timeout=5)


async def test_many_calls_at_once_all_run() -> None:
    results = await asyncio.gather(*(call_with_timeout(lambda i=i: i * i, 5) for i in range(50)))
    assert results == [i * i for i in range(50)]


async def test_a_batch_runs_in_one_thread_and_keeps_each_outcome_in_order() -> None:
    def fail() -> int:
        raise OSError("unreadable")

    threads: list[int] = []

    def record(value: int) -> int:
        threads.append(threading.get_ident())
        return value

    outcomes = await call_each_with_timeout([partial(record, 1), fail, partial(record, 3)], 5)
    assert outcomes[0] == 1 and outcomes[2] == 3
    assert isinstance(outcomes[1], OSError) and str(outcomes[1]) == "unreadable"
    assert len(set(threads)) == 1 and threading.get_ident() not in threads


async def test_each_call_in_a_batch_has_its_own_deadline() -> None:
    # Five calls of 0.1 s each against a 0.4 s deadline: the batch takes longer than the
    # deadline, but no call does.
    outcomes = await call_each_with_timeout([partial(time.sleep, 0.1)] * 5, 0.4)
    assert outcomes == [None] * 5


async def test_a_stuck_call_in_a_batch_times_out_alone_and_the_rest_still_run() -> None:
    release = threading.Event()
    try:
        outcomes = await call_each_with_timeout(
            [lambda: "before", lambda: release.wait(30), lambda: "after"], 0.3
        )
        assert outcomes[0] == "before" and outcomes[2] == "after"
        assert isinstance(outcomes[1], TimeoutError)
    finally:
        release.set()


async def test_a_cancelled_batch_runs_no_further_call() -> None:
    release = threading.Event()
    ran: list[str] = []
    task = asyncio.create_task(
        call_each_with_timeout([lambda: release.wait(30), lambda: ran.append("next")], 30)
    )
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.sleep(0.2)  # time for the thread to go on, were it going to
    assert ran == []
