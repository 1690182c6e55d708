"""The cascade's SIMD kernels (storage/sqlite/kernels.py) against numpy."""

from __future__ import annotations

import numpy as np

from recalld.storage.sqlite import kernels


def test_hamming_and_int8_dot_match_numpy() -> None:
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 256, size=(300, 96), dtype=np.uint8)
    query = codes[3].copy()
    expected = np.unpackbits(codes ^ query, axis=1).sum(axis=1)
    np.testing.assert_array_equal(kernels.hamming(query, codes), expected)
    into = np.zeros(310, dtype=np.uint16)
    kernels.hamming(query, codes, into[5:305])
    np.testing.assert_array_equal(into[5:305], expected)
    assert not into[:5].any() and not into[305:].any()
    rows = rng.integers(-127, 128, size=(300, 384), dtype=np.int8)
    q = rng.integers(-127, 128, size=384, dtype=np.int8)
    exact = rows.astype(np.int32) @ q.astype(np.int32)
    np.testing.assert_array_equal(kernels.dot_int8(q, rows), exact)


def test_no_rows_give_empty_results() -> None:
    # simsimd itself refuses empty inputs.
    assert kernels.hamming(np.zeros(48, np.uint8), np.zeros((0, 48), np.uint8)).shape == (0,)
    assert kernels.dot_int8(np.zeros(8, np.int8), np.zeros((0, 8), np.int8)).dtype == np.int32
