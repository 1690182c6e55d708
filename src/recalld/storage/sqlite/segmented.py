"""Row-major int8 rows held in fixed-size segments, so the vector index grows without copying
them (storage/sqlite/vectors.py).

The int8 copies are ~75 % of the vector index at 384 dimensions (388 of 516 bytes a chunk).
As one array, every growth allocated a new one and copied every row while the old one was
still held: at a million chunks anonymous memory went from 631 MB to a peak of 1,123 MB
(1.78x). In segments of `SEGMENT_ROWS` rows, a grown index shares the full segments of the
old one (their rows are the same rows at the same slots) and copies at most one partial
segment (~25 MB at 384-d).

Sharing is safe because rows are written once a slot (appends go past the old generation's
`size`; the background fill writes a row's copy before its scale, and each generation has
its own scales, so a generation that did not see the scale never reads the copy).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from recalld.storage.sqlite import kernels

SEGMENT_ROWS = 65_536


class SegmentedRows:
    """`capacity` rows of `width` int8 values, in segments of `SEGMENT_ROWS` rows (the last
    may be shorter)."""

    __slots__ = ("segments", "width")

    def __init__(self, capacity: int, width: int, shared: list[npt.NDArray[np.int8]] | None = None):
        self.width = width
        self.segments: list[npt.NDArray[np.int8]] = list(shared or [])
        held = sum(len(s) for s in self.segments)
        while held < capacity:
            rows = min(SEGMENT_ROWS, capacity - held)
            self.segments.append(np.zeros((rows, width), dtype=np.int8))
            held += rows

    @property
    def capacity(self) -> int:
        return sum(len(s) for s in self.segments)

    @property
    def nbytes(self) -> int:
        return sum(int(s.nbytes) for s in self.segments)

    def grown(self, capacity: int) -> SegmentedRows:
        """Rows for `capacity` slots that share this object's full segments (a partial last
        segment is copied into a full one)."""
        full = [s for s in self.segments if len(s) == SEGMENT_ROWS]
        new = SegmentedRows(capacity, self.width, full)
        if len(full) < len(self.segments):
            tail = self.segments[-1]
            new.segments[len(full)][: len(tail)] = tail
        return new

    def take(self, slots: npt.NDArray[np.intp]) -> npt.NDArray[np.int8]:
        """The rows at `slots`, in that order."""
        out = np.empty((len(slots), self.width), dtype=np.int8)
        segment, offset = np.divmod(slots, SEGMENT_ROWS)
        for s in np.unique(segment):
            chosen = segment == s
            out[chosen] = self.segments[int(s)][offset[chosen]]
        return out

    def dot(
        self, slots: npt.NDArray[np.intp], vector: npt.NDArray[np.int8]
    ) -> npt.NDArray[np.int32]:
        """Each row at `slots` (ascending) dotted with the int8 `vector`, in that order, as
        exact int32 sums: one gather and one SIMD product per segment (each segment's slots
        are one run)."""
        edges = np.searchsorted(slots, np.arange(1, len(self.segments)) * SEGMENT_ROWS)
        parts = [
            kernels.dot_int8(vector, self.segments[s].take(run - s * SEGMENT_ROWS, axis=0))
            for s, run in enumerate(np.split(slots, edges))
            if len(run)
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def dot_first(self, count: int, vector: npt.NDArray[np.int8]) -> npt.NDArray[np.int32]:
        """The first `count` rows dotted with the int8 `vector`, as exact int32 sums: one SIMD
        pass per segment, no gather."""
        parts = [
            kernels.dot_int8(vector, segment[: count - s * SEGMENT_ROWS])
            for s, segment in enumerate(self.segments)
            if s * SEGMENT_ROWS < count
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def put(self, slots: npt.NDArray[np.intp], rows: npt.NDArray[np.int8]) -> None:
        """Write `rows` at `slots`."""
        segment, offset = np.divmod(slots, SEGMENT_ROWS)
        for s in np.unique(segment):
            chosen = segment == s
            self.segments[int(s)][offset[chosen]] = rows[chosen]

    def put_range(self, start: int, rows: npt.NDArray[np.int8]) -> None:
        """Write `rows` at slots `start`, `start + 1`, ..."""
        done = 0
        while done < len(rows):
            s, offset = divmod(start + done, SEGMENT_ROWS)
            count = min(len(rows) - done, len(self.segments[s]) - offset)
            self.segments[s][offset : offset + count] = rows[done : done + count]
            done += count
