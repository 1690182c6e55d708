"""Which backend a store location names."""

from __future__ import annotations


def is_url(location: object) -> bool:
    """True when a store location names a PostgreSQL database rather than a SQLite file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))
