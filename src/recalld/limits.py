"""The ranges a stored value must stay within, shared by every boundary that lets one in.

A value outside them cannot be read back everywhere it is used: JSON has no `Infinity` or
`NaN` (Python's `json` reads `1e400` as `inf`, and the daemon's strict encoder then cannot send
it), `datetime` knows the years 1 to 9999 only, and SQLite's integers are 64-bit. So the socket
(`daemon.params`), the import (`storage.import_plan`) and the writer refuse or drop such values,
and `check` reports any that an older recalld let in (issue 18).
"""

from __future__ import annotations

import math
from typing import Any

# 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z: what `datetime` can show.
TIME_MIN = -62_135_596_800.0
TIME_MAX = 253_402_300_799.0
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1


def is_number(value: Any) -> bool:
    """A finite int or float (not a bool: JSON has no such confusion)."""
    # A tuple, not `int | float`: the union was built anew on every call (row reads).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return INT_MIN <= value <= INT_MAX
    return math.isfinite(value)


def is_time(value: Any) -> bool:
    """Unix seconds that `datetime` can represent."""
    return is_number(value) and TIME_MIN <= value <= TIME_MAX


def time_or_none(value: Any) -> float | None:
    """`value` as unix seconds when it is a representable time, else None."""
    # A float in range (nearly every stored time) answers before the general checks: each
    # search reads ~50 chunk rows, each with three times.
    if type(value) is float and TIME_MIN <= value <= TIME_MAX:
        return value
    return float(value) if is_time(value) else None


def number_or(value: Any, default: float) -> float:
    """`value` as a float when it is a finite number, else `default`."""
    if type(value) is float and math.isfinite(value):
        return value  # the common case, before the general checks (row reads)
    return float(value) if is_number(value) else default
