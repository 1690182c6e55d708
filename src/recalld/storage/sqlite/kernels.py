"""The vector cascade's two SIMD kernels, from simsimd: Hamming distance over bit codes and the
int8 dot product (storage/sqlite/vectors.py, segmented.py).

simsimd picks its kernels per CPU at run time (AVX-512 generations, AVX2 on Haswell and later,
NEON / SVE on ARM, portable C otherwise). Its `out=` argument is not used: in 6.5.16 a call
with it returns None without taking a reference, so every call drops one from None's count
(under Python 3.11, where None is not immortal, that ends in a fatal error). The results come
back as new buffers instead, one per call (blocks of at most 64k rows here).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import simsimd

# simsimd writes integer results too, but its type stub lists only float result types.
_INT32: Any = "int32"


def hamming(
    query: npt.NDArray[np.uint8],
    rows: npt.NDArray[np.uint8],
    out: npt.NDArray[np.uint16] | None = None,
) -> npt.NDArray[np.uint16]:
    """Bits that differ between `query` (bytes) and each of `rows` (rows of as many bytes),
    written into `out` (as many values as rows) when given."""
    if out is None:
        out = np.empty(len(rows), dtype=np.uint16)
    if len(rows) == 0:
        return out  # simsimd refuses empty inputs
    # As float64, simsimd's own result type: asking it for uint16 took ~10 % longer over a
    # million rows than converting its float64 results here (exact: small integers).
    found = simsimd.cdist(query.reshape(1, -1), rows, "hamming", dtype="bin8")
    out[:] = _row(found, np.float64, len(rows))
    return out


def dot_int8(query: npt.NDArray[np.int8], rows: npt.NDArray[np.int8]) -> npt.NDArray[np.int32]:
    """`query` . each of `rows`, exact int32 sums."""
    if len(rows) == 0:
        return np.zeros(0, dtype=np.int32)
    found = simsimd.cdist(query.reshape(1, -1), rows, "dot", out_dtype=_INT32)
    return _row(found, np.int32, len(rows))


def _row(found: object, dtype: type[Any], count: int) -> npt.NDArray[Any]:
    row: npt.NDArray[Any] = np.asarray(found).reshape(count)  # a (1, count) buffer, no copy
    assert row.dtype == dtype
    return row
