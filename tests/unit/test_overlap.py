"""`ingest.overlap`: a few calls in flight with results in order, and writes in call order."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager

import pytest

from recalld.ingest.overlap import InFlight, Place, WriteOrder


async def test_in_flight_bounds_the_calls_and_keeps_their_order() -> None:
    running = 0
    most = 0

    async def call(n: int, delay: float) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(delay)
        running -= 1
        return n

    got: list[int] = []
    async with InFlight[int](depth=3) as flight:
        for n in range(10):
            # Later calls finish first: the results still come back in call order.
            got += await flight.add(call(n, 0.02 * (10 - n) / 10))
        got += await flight.drain()
    assert got == list(range(10))
    assert most == 3


async def test_in_flight_cancels_the_rest_when_a_call_fails() -> None:
    cancelled = []

    async def slow(n: int) -> int:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(n)
            raise
        return n

    async def bad() -> int:
        raise ValueError("bad file")

    with pytest.raises(ValueError, match="bad file"):
        async with InFlight[int](depth=3) as flight:
            await flight.add(bad())
            await flight.add(slow(1))
            await flight.add(slow(2))  # the third: waits for the first, which raises
    assert sorted(cancelled) == [1, 2]


async def test_writes_go_in_the_order_places_were_taken() -> None:
    order = WriteOrder()
    written: list[int] = []

    async def call(n: int, delay: float, place: Place) -> None:
        await asyncio.sleep(delay)  # embedding: later calls may finish it first
        async with place.turn():
            written.append(n)

    places = [order.place() for _ in range(4)]
    await asyncio.gather(*(call(n, 0.01 * (4 - n), places[n]) for n in range(4)))
    assert written == [0, 1, 2, 3]


async def test_a_place_left_without_writing_keeps_the_order() -> None:
    order = WriteOrder()
    first, second, third = order.place(), order.place(), order.place()
    written: list[str] = []

    async def write(name: str, turn: AbstractAsyncContextManager[None]) -> None:
        async with turn:
            written.append(name)

    second.leave()  # nothing to write (every file unchanged), before the first wrote
    late = asyncio.create_task(write("third", third.turn()))
    await asyncio.sleep(0.01)
    assert written == []  # the third still waits for the first
    await write("first", first.turn())
    await late
    assert written == ["first", "third"]
