"""The vector index's int8 rows in segments (storage/sqlite/segmented.py): a grown index shares
the rows it had instead of copying them (the search across segments: tests/storage/test_vectors)."""

import numpy as np
import pytest

from recalld.storage.sqlite import segmented


@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setattr(segmented, "SEGMENT_ROWS", 4)


def test_rows_read_and_write_across_segments(small_segments):
    rng = np.random.default_rng(0)
    data = rng.integers(-127, 128, (10, 3), dtype=np.int8)
    rows = segmented.SegmentedRows(10, 3)
    assert [len(s) for s in rows.segments] == [4, 4, 2] and rows.capacity == 10
    rows.put_range(0, data[:7])
    rows.put_range(7, data[7:])
    slots = rng.permutation(10)
    assert np.array_equal(rows.take(slots), data[slots])
    rows.put(np.array([9, 1, 5]), -data[[9, 1, 5]])
    data[[9, 1, 5]] = -data[[9, 1, 5]]
    assert np.array_equal(rows.take(np.arange(10)), data)
    assert rows.take(np.array([], dtype=np.intp)).shape == (0, 3)


def test_grown_rows_share_the_full_segments(small_segments):
    data = np.arange(30, dtype=np.int8).reshape(10, 3)
    old = segmented.SegmentedRows(10, 3)
    old.put_range(0, data)
    new = old.grown(21)
    assert new.capacity >= 21
    assert new.segments[0] is old.segments[0] and new.segments[1] is old.segments[1]
    assert new.segments[2] is not old.segments[2]  # the partial one is copied
    assert np.array_equal(new.take(np.arange(10)), data)
    new.put_range(10, np.ones((11, 3), dtype=np.int8))  # past the old rows: old never reads
    assert np.array_equal(old.take(np.arange(10)), data)


def test_dot_reads_each_segment_in_one_run(small_segments):
    rng = np.random.default_rng(1)
    data = rng.integers(-127, 128, (10, 3), dtype=np.int8)
    rows = segmented.SegmentedRows(10, 3)
    rows.put_range(0, data)
    vector = rng.integers(-127, 128, 3, dtype=np.int8)
    for slots in (np.arange(10), np.array([0, 3, 4, 9]), np.array([5, 6]), np.array([8])):
        want = data[slots].astype(np.int32) @ vector.astype(np.int32)
        assert np.array_equal(rows.dot(slots, vector), want)
    assert rows.dot(np.array([], dtype=np.intp), vector).shape == (0,)
